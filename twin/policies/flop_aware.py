"""FLOP-aware eviction as the twin first built it (Marconi sec. 4.2): ``marconi-twin``.

``marconi`` and ``oracle`` use the authors' score instead
(:mod:`policies.reference_score`); docs/decisions.md compares the two.

Candidates are the unpinned nodes with at most one child (evicting a
one-child node drops its checkpoint and hands its KV to the child). Each has
a recency ``r`` (its last access) and a FLOP efficiency ``f``: the FLOPs a hit
on it saves beyond its parent (attention, SSM and MLP layers) over the bytes
it holds. Both are min-max normalised over the candidates; the victim
minimises ``r_norm + alpha * f_norm``, ties to the older, then the first
created. A hit refreshes only the node it used.

The candidates live in a dense table of ``(r, f, nid)`` kept current by the
cache's hooks (O(1) per change: slot update or swap-remove). A victim is one
vectorised pass over the table, never a walk of the tree. Why not a heap
keyed by the score: the normalisation ranges move with every change, so the
order of ``r_norm + alpha * f_norm`` is not stable. We tried the exact
threshold algorithm over recency and efficiency heaps instead: on the chat
benchmark at alpha = 1 it visited about a quarter of the candidates per
eviction and was 40x slower than this pass. For hybrid models the table is
small anyway: every candidate holds a checkpoint, so there are at most
``capacity / checkpoint bytes`` of them (2,200 for 60 GB of the 7B hybrid).
"""

from __future__ import annotations

import functools
from typing import Any

from twin.cache import PrefillFlops
from twin.model import ModelSpec
from twin.policies.base import Policy
from twin.policies.candidate_table import CandidateTable, rules

_MEMO_SIZE = 1 << 16  # efficiencies remembered per model


@functools.lru_cache(maxsize=16)
def _efficiencies(model: ModelSpec) -> dict[tuple[int, int, bool], float]:
    return {}


class FlopAwareEviction(Policy):
    """Evicts the candidate with the lowest ``recency + alpha x FLOP efficiency``."""

    flops: PrefillFlops  # set by bind, from the cache's model

    def __init__(self, alpha: float = 0.0) -> None:
        super().__init__()
        self.alpha = float(alpha)
        self.table = CandidateTable()

    def bind(self, cache: Any) -> None:
        super().bind(cache)
        self.flops = PrefillFlops(cache.model)
        # (depth, own tokens, checkpoint) -> efficiency; one per model, shared by
        # every replay of a grid (a node's efficiency depends on nothing else).
        self._eff = _efficiencies(cache.model)

    # ----- hooks ----------------------------------------------------------------
    def on_node_changed(self, node: Any) -> None:
        cache = self.cache
        if not cache.evictable(node):
            self.table.drop(node)
            return
        key = (node.depth, len(node.tokens), node.ckpt)
        eff = self._eff.get(key)
        if eff is None:
            if len(self._eff) >= _MEMO_SIZE:  # flat memory on long runs
                self._eff.clear()
            n_tok = len(node.tokens)
            held = cache.node_bytes(node)
            saved = self.flops.total(n_tok, node.depth - n_tok)  # beyond its parent
            eff = self._eff[key] = saved / held if held else 0.0
        self.table.set(node, node.t, eff)

    def on_node_removed(self, node: Any, into: Any | None = None) -> None:
        self.table.drop(node)

    def choose_victim(self, cache: Any) -> Any | None:
        t = self.table
        row = rules().twin_victim_row(t.r, t.f, t.rows, t.nid, t.n, self.alpha)
        return None if row < 0 else t.nodes[row]
