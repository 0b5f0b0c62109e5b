"""Marconi's eviction score exactly as the authors' code computes it (``marconi``, ``oracle``).

Every rule below follows github.com/ruipeterpan/marconi (``radix_cache_hybrid.py``
and ``utils.py``); each cites the function it follows. The twin's earlier
score, kept as ``marconi-twin``, is :mod:`policies.flop_aware`.

- Clock (``RadixCache.match_prefix``, ``insert``, ``evict``): a logical clock
  ticks once per lookup, twice per insert (``insert`` and the ``match_prefix``
  it calls) and once per ``evict`` call (one per insert that must make room).
  New nodes (leaves, split points) are stamped with the clock when created.
- Refresh (``match_prefix``, policy versions 2 and 3): a lookup stamps only the
  deepest fully matched node; so does the insert's own ``match_prefix`` of
  input + output, before any eviction. A folded node's child keeps the later
  of the two stamps (``_evict_intermediate_node``).
- Candidates (``_collect_leaf_and_single_child_nodes``): nodes with at most
  one child (``PrefixCache.candidate``). The reference has no pins; the twin
  pins a running request's hit node and an insert's attach point. A pinned
  candidate is still scored, so it counts in both normalisations as in the
  reference (the attach point, stamped by the insert's own match, is usually
  the most recent node and sets recency's maximum), but it is never the
  victim: the least utility among the unpinned goes (docs/decisions.md).
- Score (``evict_v2``): recency ``1 / (now - stamp)`` and FLOP efficiency, each
  min-max normalised over every candidate (``utils._normalize``: all equal,
  or one value, gives 1), utility ``alpha x eff + recency``; the victim is the
  first minimum in the tree's pre-order (children in insertion order), as
  ``list.index(min(...))``.
- FLOP efficiency (``evict_v2``): for a node ending at depth ``T`` holding
  ``C`` tokens under a parent at depth ``P = T - C``: SSM layers save
  ``mamba1(C)``, attention layers ``attn(T) - attn(P)`` and MLP layers
  ``mlp(T) - attn(P)`` (the reference subtracts the parent's *attention*
  FLOPs from the MLP term; kept as written), over the bytes of the whole
  sequence up to the node: one checkpoint plus the KV of all ``T`` tokens.
- FLOP formulas (``utils.get_attn_flops``, ``get_mlp_flops``,
  ``get_mamba1_flops``): per layer, ``8 L D^2 + 4 L^2 D``, ``16 L D^2`` and
  ``12 L D^2 + 16 L D N + 10 L D``, with ``D = d_model``, ``N = ssm_d_state``.
  MoE layers count as MLP layers (the reference has no MoE). Bytes are the
  model's own (equal to ``utils.get_model_state_size`` on the paper's 7B
  hybrid, and right for GQA models too).

Integers are exact Python ints and ``saved / bytes`` one true division, as in
the reference, so scores match it to the last bit.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from twin.model import ModelSpec
from twin.policies.base import Policy
from twin.policies.candidate_table import CandidateTable, rules

_MEMO_SIZE = 1 << 16  # efficiencies remembered per model (about 10 MB at most)


def attn_flops(n: int, d: int) -> int:
    """One attention layer over ``n`` tokens (``utils.get_attn_flops``)."""
    return 8 * n * d * d + 4 * n * n * d


def mlp_flops(n: int, d: int) -> int:
    """One MLP layer over ``n`` tokens (``utils.get_mlp_flops``)."""
    return 16 * n * d * d


def mamba1_flops(n: int, d: int, d_state: int) -> int:
    """One SSM layer over ``n`` tokens (``utils.get_mamba1_flops``, the corrected version)."""
    return 12 * n * d * d + 16 * n * d * d_state + 10 * n * d


class ReferenceFlops:
    """The reference code's FLOP counts for one model (layer counts and D, N)."""

    def __init__(self, model: ModelSpec) -> None:
        self.d, self.n = model.d_model, model.ssm_d_state
        self.ssm, self.attn = model.n_ssm_layers, model.n_attention_layers
        self.mlp = model.n_mlp_layers + model.n_moe_layers
        self.ckpt_bytes = model.ssm_checkpoint_bytes
        self.kv_per_token = model.kv_bytes_per_token
        # A replay asks for the same (depth, own) pairs again and again (every
        # touch re-reads a node's efficiency), and a grid once more per alpha.
        self._eff: dict[tuple[int, int], float] = {}

    def saved_by_hit(self, hit: int) -> int:
        """FLOPs a hit of ``hit`` tokens saves (``RadixCache.get_cache_stats``)."""
        d = self.d
        return (
            self.ssm * mamba1_flops(hit, d, self.n)
            + self.attn * attn_flops(hit, d)
            + self.mlp * mlp_flops(hit, d)
        )

    def efficiency(self, depth: int, own: int) -> float:
        """FLOP efficiency of a node ending at ``depth`` holding ``own`` tokens (``evict_v2``)."""
        eff = self._eff.get((depth, own))
        if eff is None:
            if len(self._eff) >= _MEMO_SIZE:  # flat memory on long runs
                self._eff.clear()
            eff = self._eff[(depth, own)] = self._efficiency(depth, own)
        return eff

    def _efficiency(self, depth: int, own: int) -> float:
        d, parent = self.d, depth - own
        saved = (
            self.ssm * mamba1_flops(own, d, self.n)
            + self.attn * (attn_flops(depth, d) - attn_flops(parent, d))
            + self.mlp * (mlp_flops(depth, d) - attn_flops(parent, d))
        )
        held = (self.ckpt_bytes if self.ssm else 0) + self.kv_per_token * depth
        return saved / held if held else 0.0


@functools.lru_cache(maxsize=16)
def reference_flops(model: ModelSpec) -> ReferenceFlops:
    """The one :class:`ReferenceFlops` of ``model`` (its memos shared by every replay)."""
    return ReferenceFlops(model)


def preorder_key(node: Any) -> list[int]:
    """Position of ``node`` in the tree's pre-order walk (children in insertion order)."""
    key = []
    while node.parent is not None:
        parent = node.parent
        key.append(next(i for i, c in enumerate(parent.children.values()) if c is node))
        node = parent
    key.reverse()
    return key


class ReferenceFlopAwareEviction(Policy):
    """Evicts the node with the lowest ``alpha x eff + recency`` (module docstring)."""

    flops: ReferenceFlops  # set by bind, from the cache's model

    def __init__(self, alpha: float = 0.0) -> None:
        super().__init__()
        self.alpha = float(alpha)
        self.now = 0  # the logical clock
        self._evict_ticked = False
        self._stamp: dict[int, int] = {}  # id(node) -> last access on the logical clock
        self.table = CandidateTable()

    def bind(self, cache: Any) -> None:
        super().bind(cache)
        self.flops = reference_flops(cache.model)

    # ----- the clock and refreshes -------------------------------------------------
    def on_request(self, cache: Any, prompt: np.ndarray, full: np.ndarray) -> None:
        self.now += 1  # the lookup's tick (``match_prefix``)

    def on_hit(self, cache: Any, node: Any) -> None:
        self._stamp[id(node)] = self.now
        cache.touch(node)  # keeps node.t for reports; our hook re-reads the stamp

    def refresh_insert_path(self, cache: Any, full: np.ndarray) -> None:
        """``insert``: two ticks, and its ``match_prefix`` stamps the deepest fully matched node."""
        self.now += 2
        self._evict_ticked = False
        node = cache.matched_node(full)
        if node is not cache.root:
            self._stamp[id(node)] = self.now
            self.on_node_changed(node)

    # ----- copies (the stamps live here, not in the tree's snapshot) ----------------
    def export_state(self) -> Any:
        cache: Any = self.cache  # a PrefixCache: the reference rules run on the radix tree
        stamps = {node.nid: self._stamp[id(node)] for node in cache.tree.nodes()}
        return self.now, self._evict_ticked, stamps

    def import_state(self, state: Any, nodes: dict[int, Any]) -> None:
        self.now, self._evict_ticked, stamps = state
        self._stamp = {id(nodes[nid]): stamp for nid, stamp in stamps.items()}
        for node in nodes.values():
            self.on_node_changed(node)

    # ----- hooks ------------------------------------------------------------------
    def on_node_added(self, node: Any) -> None:
        self._stamp[id(node)] = self.now
        self.on_node_changed(node)

    def on_node_changed(self, node: Any) -> None:
        cache: Any = self.cache  # a PrefixCache (``candidate``: evictable, pins aside)
        if not cache.candidate(node):
            self.table.drop(node)
            return
        eff = self.flops.efficiency(node.depth, len(node.tokens))
        # A pinned candidate is scored but held back (module docstring, "Candidates").
        self.table.set(node, self._stamp[id(node)], eff, held=node.lock > 0)

    def on_node_removed(self, node: Any, into: Any | None = None) -> None:
        stamp = self._stamp.pop(id(node), 0)
        if into is not None:  # ``_evict_intermediate_node``: the later of the two stamps
            self._stamp[id(into)] = max(stamp, self._stamp.get(id(into), 0))
        self.table.drop(node)

    def choose_victim(self, cache: Any) -> Any | None:
        t = self.table
        row, tied, now = rules().reference_victim_row(
            t.r, t.f, t.held, t.n, t.n_held, self.now, int(self._evict_ticked), self.alpha, t.score
        )
        if row < 0:
            return None
        self.now = now  # ``evict``'s tick (once per insert that makes room)
        self._evict_ticked = True
        return self._first_in_preorder(row, tied)

    def victim_at(self, now: int) -> Any | None:
        """The node ``evict_v2`` would pick at logical time ``now`` (changes nothing).

        Every candidate is scored (``evict_v2`` normalises over all of them);
        the pinned ones are then left out of the minimum.
        """
        t = self.table
        row, tied, _ = rules().reference_victim_row(
            t.r, t.f, t.held, t.n, t.n_held, now, -1, self.alpha, t.score
        )
        return None if row < 0 else self._first_in_preorder(row, tied)

    def _first_in_preorder(self, row: int, tied: bool) -> Any:
        """The node of ``row``, or if other rows score the same, the first of them in
        the tree's pre-order (the reference's ``list.index(min(...))``)."""
        t = self.table
        if tied:
            score = t.score[: t.n]
            rows = np.flatnonzero(score == score[row]).tolist()
            row = min(rows, key=lambda j: preorder_key(t.nodes[j]))
        return t.nodes[row]
