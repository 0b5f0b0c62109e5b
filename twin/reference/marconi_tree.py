"""Marconi's rules as hooks of the radix tree, for the reference executor.

The reference executor (:mod:`twin.reference.executor`) mirrors real tensors per radix
node (:class:`twin.reference.store.StateMirror`), so it needs the cache's decisions as
hooks on ``PrefixCache``'s nodes, which the compiled cache (``twin.policies.compiled``,
what ``marconi`` and ``marconi-twin`` run on everywhere else) does not give. These are
the Python transliteration of the kernel's rules, held to it by the tests (whose oracle,
``tests/marconi_oracle.py``, is these classes with their alpha grid replayed in Python):
:class:`ReferenceFlopAwareEviction` (the authors' score, module docstring of
``twin.policies.reference_score``) and :class:`FlopAwareEviction` (the twin's), over a
:class:`CandidateTable` whose victim rows are the kernel's own. The reference efficiency
is the kernel's definition: float64 counts in its order, then one division.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from twin.cache import PrefillFlops
from twin.policies import get_policy
from twin.policies.base import Policy, judicious_admission
from twin.policies.compiled import kernel as rules
from twin.policies.marconi import MarconiPolicy
from twin.policies.marconi_twin import MarconiTwinPolicy
from twin.policies.reference_score import ReferenceFlops


def _attn(n: float, d: float) -> float:
    return 8.0 * n * d * d + 4.0 * n * n * d  # utils.get_attn_flops


class OracleFlops(ReferenceFlops):
    """The reference's FLOP efficiency (``evict_v2``): float64 counts, one division."""

    def efficiency(self, depth: int, own: int) -> float:
        """FLOP efficiency of a node ending at ``depth`` holding ``own`` tokens."""
        d, n, parent, t = float(self.d), float(own), float(depth - own), float(depth)
        mamba = 12.0 * n * d * d + 16.0 * n * d * float(self.n) + 10.0 * n * d
        saved = (
            float(self.ssm) * mamba
            + float(self.attn) * (_attn(t, d) - _attn(parent, d))
            + float(self.mlp) * (16.0 * t * d * d - _attn(parent, d))
        )
        held = float(self.ckpt_bytes if self.ssm else 0) + float(self.kv_per_token) * t
        return saved / held if held else 0.0


class CandidateTable:
    """Rows ``(r, f, nid, held)`` for the nodes in ``nodes``; ``n`` rows are live."""

    def __init__(self, size: int = 256) -> None:
        self.n = 0
        self.r = np.zeros(size)
        self.f = np.zeros(size)
        self.nid = np.zeros(size, np.int64)
        self.held = np.zeros(size, bool)
        self.score = np.zeros(size)  # the victim pass's scratch
        self.rows = np.arange(size)  # row -> row (``twin_victim_row`` reads ``nid[rows[i]]``)
        self.n_held = 0
        self.nodes: list[Any] = []

    def set(self, node: Any, r: float, f: float, held: bool = False) -> None:
        """Add ``node`` (if new) and write its row."""
        i = node.slot
        if i < 0:
            i = node.slot = self.n
            if i == len(self.r):
                self._grow()
            self.nodes.append(node)
            self.nid[i] = node.nid
            self.held[i] = False
            self.n += 1
        self.r[i] = r
        self.f[i] = f
        self.n_held += int(held) - int(self.held[i])
        self.held[i] = held

    def drop(self, node: Any) -> None:
        """Swap-remove ``node``'s row (a no-op if it has none)."""
        i, last = node.slot, self.n - 1
        if i < 0:
            return
        self.n_held -= int(self.held[i])
        if i != last:
            moved = self.nodes[last]
            self.nodes[i] = moved
            moved.slot = i
            self.r[i], self.f[i], self.nid[i] = self.r[last], self.f[last], self.nid[last]
            self.held[i] = self.held[last]
        self.nodes.pop()
        self.n = last
        node.slot = -1

    def _grow(self) -> None:
        for name in ("r", "f", "nid", "held"):
            old = getattr(self, name)
            new = np.zeros(2 * len(old), old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)
        self.score = np.zeros(len(self.r))
        self.rows = np.arange(len(self.r))


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

    flops: OracleFlops  # set by bind, from the cache's model
    alpha: float

    def __init__(self) -> None:
        super().__init__()
        self.now = 0  # the logical clock
        self._evict_ticked = False
        self._stamp: dict[int, int] = {}  # id(node) -> last access on the logical clock
        self.table = CandidateTable()

    def bind(self, cache: Any) -> None:
        super().bind(cache)
        self.flops = OracleFlops(cache.model)

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
        row, tied, now = rules.reference_victim_row(
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
        row, tied, _ = rules.reference_victim_row(
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


class FlopAwareEviction(Policy):
    """Evicts the candidate with the lowest ``recency + alpha x FLOP efficiency``."""

    flops: PrefillFlops  # set by bind, from the cache's model

    alpha: float

    def __init__(self) -> None:
        super().__init__()
        self.table = CandidateTable()

    def bind(self, cache: Any) -> None:
        super().bind(cache)
        self.flops = PrefillFlops(cache.model)

    # ----- hooks ----------------------------------------------------------------
    def on_node_changed(self, node: Any) -> None:
        cache = self.cache
        if not cache.evictable(node):
            self.table.drop(node)
            return
        n_tok = len(node.tokens)
        held = cache.node_bytes(node)
        saved = self.flops.total(n_tok, node.depth - n_tok)  # beyond its parent
        eff = saved / held if held else 0.0
        self.table.set(node, node.t, eff)

    def on_node_removed(self, node: Any, into: Any | None = None) -> None:
        self.table.drop(node)

    def choose_victim(self, cache: Any) -> Any | None:
        t = self.table
        row = rules.twin_victim_row(t.r, t.f, t.rows, t.nid, t.n, self.alpha)
        return None if row < 0 else t.nodes[row]


class MarconiTree(MarconiPolicy, ReferenceFlopAwareEviction):
    """``marconi`` on the radix tree: the production bootstrap over the rules above (its
    alpha grid the compiled one, from the tree's snapshot)."""

    def admit(self, cache: Any, prompt: np.ndarray, full: np.ndarray) -> list[int]:
        self.refresh_insert_path(cache, full)
        self.tune_if_due(cache)
        return judicious_admission(cache, prompt, full)

    def choose_victim(self, cache: Any) -> Any | None:
        self.end_warmup()  # the first victim fixes the window (``live.LiveCache.chosen``)
        return super().choose_victim(cache)


class MarconiTwinTree(MarconiTwinPolicy, FlopAwareEviction):
    """``marconi-twin`` on the radix tree (as :class:`MarconiTree`)."""

    def admit(self, cache: Any, prompt: np.ndarray, full: np.ndarray) -> list[int]:
        return judicious_admission(cache, prompt, full)


TREES: dict[str, type[Policy]] = {"marconi": MarconiTree, "marconi-twin": MarconiTwinTree}


def tree_policy(name: str, **options: Any) -> Policy:
    """``get_policy(name, **options)`` (which checks the options), ``marconi`` and
    ``marconi-twin`` as their radix-tree rules."""
    policy = get_policy(name, **options)
    cls = TREES.get(name)
    return policy if cls is None else cls(**{k: v for k, v in options.items() if v is not None})
