"""Marconi's rules in Python over the radix tree: the oracle the compiled cache is held to.

Production runs Marconi's rules once, compiled (``twin.policies.compiled``: the
kernel's tree, its ``reference_efficiency`` / ``twin_efficiency`` and the victim rows
``reference_victim_row`` / ``twin_victim_row``, for ``marconi``, ``marconi-twin`` and
``oracle`` in every memory mode, in replays and in the reference executor). This module
is the Python transliteration the kernel was written from, on ``twin.cache.PrefixCache``
(the radix tree the other policies run on): the rules as hooks of the tree
(:class:`ReferenceFlopAwareEviction`, the authors' score, module docstring of
``twin.policies.reference_score``; :class:`FlopAwareEviction`, the twin's, each over a
:class:`CandidateTable` whose victim rows are the kernel's own), the policies over them
(:class:`MarconiOracle`, :class:`MarconiTwinOracle`; the production policies'
bootstrap, with the alpha grid replayed here in Python), the grid shared up to its first
eviction (:func:`replay_grid`), and a replay (:func:`python_replay`) giving what
``twin.replay.replay`` gives. The victim rows themselves are the kernel's (one rule),
held to numpy passes in ``tests/test_replay_fast_paths.py``.

The one arithmetic choice: the reference efficiency is float64 counts in the kernel's
order, then one division (``kernel.scores.reference_efficiency``'s definition), equal to the
authors' exact integers while every count stays below 2**53
(``tests/test_marconi_compiled.py`` checks both).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from twin.cache import CacheSnapshot, PrefillFlops, PrefixCache, RequestCache, serve
from twin.cache.base import COUNTERS
from twin.cache.radix import Node
from twin.model import ModelSpec
from twin.policies import POLICIES, get_policy
from twin.policies.admissions import JUDICIOUS
from twin.policies.alpha_tuning import ALPHA_GRID, score_hits
from twin.policies.base import RadixPolicy
from twin.policies.compiled.kernel import victims as rules
from twin.policies.marconi import MarconiPolicy
from twin.policies.marconi_twin import MarconiTwinPolicy
from twin.policies.reference_score import ReferenceFlops
from twin.policies.structures import STRUCTURES, Structure, make_cache
from twin.replay import Trace, _best_of_grid, _requests, _result

# (input + output, input length[, declared modules]) per request
Request = tuple[np.ndarray, int] | tuple[np.ndarray, int, np.ndarray | None]
# (hit tokens, the hit node's nid or -1, hit tokens recomputed) per request
Served = tuple[int, int, int]


class OracleTree(PrefixCache):
    """The radix tree the oracle's policies run on, with the copies their bootstrap takes
    (:meth:`snapshot`, the live cache's layout) and replays restore (:func:`restore`)."""

    def snapshot(self) -> CacheSnapshot:
        """Every node in pre-order, children in insertion order, pins dropped."""
        nodes = _preorder(self.root)
        index = {id(n): i for i, n in enumerate(nodes)}
        lengths = np.fromiter((len(n.tokens) for n in nodes), np.int64, len(nodes))
        offsets = np.zeros(len(nodes) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        tokens = np.concatenate([n.tokens for n in nodes]) if nodes else np.zeros(0, np.int32)
        return CacheSnapshot(
            capacity=self.capacity,
            clock=self.clock,
            next_nid=self.tree.next_nid,
            parents=[index.get(id(n.parent), -1) for n in nodes],
            offsets=offsets,
            tokens=tokens.astype(np.int32, copy=False),
            ckpt=[n.ckpt for n in nodes],
            t=[n.t for n in nodes],
            nid=[n.nid for n in nodes],
            ckpt_hit=[n.ckpt_hit for n in nodes],
            counters={k: getattr(self, k) for k in COUNTERS},
        )


# The oracles' structure, by name beside the production ones (the engine and a replay build
# it through ``twin.policies.structures``) only while :func:`oracle_structure` holds it:
# importing this module leaves the registry as it is.
ORACLE_TREE = "oracle-radix"


@contextmanager
def oracle_structure() -> Iterator[None]:
    """``STRUCTURES`` holding :data:`ORACLE_TREE` inside the block, as it was after it (the
    ``oracle_structure`` fixture of ``tests/conftest.py``, for the modules that use it)."""
    if ORACLE_TREE in STRUCTURES:  # an enclosing block holds it and removes it
        yield
        return
    # a radix tree: ``PrefixCache.on_evict`` hands its evictions to a host tier
    STRUCTURES[ORACLE_TREE] = Structure(OracleTree, evicts_to_host=True)
    try:
        yield
    finally:
        del STRUCTURES[ORACLE_TREE]


def _preorder(root: Node) -> list[Node]:
    """Every node but ``root`` in pre-order, children in insertion order (no recursion).

    Restoring in this order rebuilds every ``children`` dict in its original
    order, which ``marconi``'s tie-break (first in pre-order) reads.
    """
    out: list[Node] = []
    stack = list(reversed(root.children.values()))
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(reversed(node.children.values()))
    return out


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
        self.slots: dict[Any, int] = {}  # node -> its row (kept here, not on the node)

    def set(self, node: Any, r: float, f: float, held: bool = False) -> None:
        """Add ``node`` (if new) and write its row."""
        i = self.slots.get(node, -1)
        if i < 0:
            i = self.slots[node] = self.n
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
        i, last = self.slots.pop(node, -1), self.n - 1
        if i < 0:
            return
        self.n_held -= int(self.held[i])
        if i != last:
            moved = self.nodes[last]
            self.nodes[i] = moved
            self.slots[moved] = i
            self.r[i], self.f[i], self.nid[i] = self.r[last], self.f[last], self.nid[last]
            self.held[i] = self.held[last]
        self.nodes.pop()
        self.n = last

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


class ReferenceFlopAwareEviction(RadixPolicy):
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
    def on_request(self, prompt: np.ndarray, full: np.ndarray) -> None:
        self.now += 1  # the lookup's tick (``match_prefix``)

    def on_hit(self, node: Any) -> None:
        self._stamp[id(node)] = self.now
        self.cache.touch(node)  # keeps node.t for reports; our hook re-reads the stamp

    def refresh_insert_path(self, full: np.ndarray) -> None:
        """``insert``: two ticks, and its ``match_prefix`` stamps the deepest fully matched node."""
        self.now += 2
        self._evict_ticked = False
        cache = self.cache
        node = cache.tree.match(np.asarray(full, dtype=np.int32)).node
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

    def choose_victim(self) -> Any | None:
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


class FlopAwareEviction(RadixPolicy):
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

    # ----- copies: nothing beyond the tree (its rows come back as a restore adds nodes)
    def export_state(self) -> Any:
        return None

    def import_state(self, state: Any, nodes: dict[int, Any]) -> None:
        pass

    def choose_victim(self) -> Any | None:
        t = self.table
        row = rules.twin_victim_row(t.r, t.f, t.rows, t.nid, t.n, self.alpha)
        return None if row < 0 else t.nodes[row]


def python_grid(policy: Any) -> None:
    """Give ``policy``'s tuner the grid replayed in Python (on oracles of its class)."""
    tuner, cls = policy.tuner, type(policy)

    def grid(model: ModelSpec) -> dict[float, float]:
        return python_grid_scores(tuner.snapshot, model, tuner.window, cls, tuner.metric)

    tuner.grid = grid


class MarconiOracle(MarconiPolicy, ReferenceFlopAwareEviction):
    """``marconi`` on the radix tree: the production bootstrap over the rules above, the
    grid replayed in Python."""

    structure = ORACLE_TREE

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        python_grid(self)

    def admit(self, prompt: np.ndarray, full: np.ndarray) -> list[int]:
        self.refresh_insert_path(full)
        self.tuner.tune_if_due(self.cache.model)
        return JUDICIOUS(self.cache, prompt, full)

    def choose_victim(self) -> Any | None:
        self.tuner.end_warmup()  # the first victim fixes the window (``LiveCache.chosen``)
        return super().choose_victim()


class MarconiTwinOracle(MarconiTwinPolicy, FlopAwareEviction):
    """``marconi-twin`` on the radix tree (as :class:`MarconiOracle`)."""

    structure = ORACLE_TREE

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        python_grid(self)

    def admit(self, prompt: np.ndarray, full: np.ndarray) -> list[int]:
        return JUDICIOUS(self.cache, prompt, full)


ORACLES: dict[str, type] = {"marconi": MarconiOracle, "marconi-twin": MarconiTwinOracle}


def window_score(
    snapshot: CacheSnapshot, model: ModelSpec, window: Any, alpha: float, cls: type, metric: str
) -> float:
    """``metric`` of replaying ``window`` from ``snapshot`` under ``cls(alpha=alpha)``,
    alone (no requests shared with another alpha)."""
    cache = restore(snapshot, model, cls(alpha=alpha))
    return score_hits([serve(cache, full[:n], full).length for full, n in window], model, metric)


def python_grid_scores(
    snapshot: CacheSnapshot,
    model: ModelSpec,
    window: Any,
    cls: type,
    metric: str,
    grid: Sequence[float] = ALPHA_GRID,
) -> dict[float, float]:
    """``twin.policies.alpha_tuning.grid_scores`` in Python (``cls``: an oracle class)."""
    runs = replay_grid(grid, lambda a: cls(alpha=a), model, window, start=snapshot)
    return {a: score_hits([h for h, *_ in served], model, metric) for a, _, served in runs}


def python_replay(
    trace: Trace,
    model: ModelSpec,
    capacity: int,
    name: str,
    options: dict[str, Any] | None = None,
    per_request: bool = False,
) -> Any:
    """``twin.replay.replay`` of ``marconi``, ``marconi-twin`` or ``oracle`` on the radix tree."""
    options = dict(options or {})
    start = time.perf_counter()
    if name == "oracle":  # every alpha of the grid, the best kept
        metric = options.pop("alpha_metric", "hit-rate")
        options.pop("jobs", None)
        runs = [
            _result(trace, model, name, cache, served, per_request, start)
            for _, cache, served in replay_grid(
                ALPHA_GRID,
                lambda a: MarconiOracle(alpha=a, **options),
                model,
                _requests(trace),
                capacity=capacity,
            )
        ]
        scores = [r.flops_saved if metric == "flops" else r.hit_tokens for r in runs]
        best_i = max(range(len(ALPHA_GRID)), key=lambda i: (scores[i], -ALPHA_GRID[i]))
        return _best_of_grid(runs[best_i], ALPHA_GRID, best_i, scores, start)
    cache = make_cache(ORACLES[name](**options), model, capacity)
    protocol = RequestCache(cache)
    served = [_serve(protocol, *request) for request in _requests(trace)]
    return _result(trace, model, name, cache, served, per_request, start)


def replay_grid(
    grid: Sequence[float],
    make_policy: Callable[[float], Any],
    model: ModelSpec,
    requests: Sequence[Request],
    start: CacheSnapshot | None = None,
    capacity: int = 0,
    on_request: Callable[[], None] | None = None,
) -> Iterator[tuple[float, Any, list[Served]]]:
    """``(alpha, cache, served)`` for each alpha of ``grid``, in order.

    A grid that never evicts yields the first alpha's cache for every alpha
    (the same object: only its contents, not its policy's alpha, apply).

    Each cache is what serving ``requests`` (``twin.cache.serve``) under
    ``make_policy(alpha)`` leaves, starting from ``start`` (restored) or,
    without one, from an empty cache of ``capacity`` bytes. ``on_request``
    is called once per request per alpha, shared ones included.
    """
    tick = on_request or _nothing

    def fresh(alpha: float) -> Any:
        return _start(make_policy(alpha), model, start, capacity)

    first = fresh(grid[0])
    before = first.evictions
    served: list[Served] = []
    shared = None  # requests served before the first eviction
    protocol = RequestCache(first)
    for request in requests:
        served.append(_serve(protocol, *request))
        if shared is None and first.evictions != before:
            shared = len(served) - 1
        tick()
    yield grid[0], first, served
    if shared is None:  # never evicted: alpha never mattered
        for alpha in grid[1:]:
            for _ in requests:
                tick()
            yield alpha, first, list(served)
        return
    fork = None
    if shared > 0:
        common = fresh(grid[0])
        protocol = RequestCache(common)
        for request in requests[:shared]:
            _serve(protocol, *request)
        fork = (common.snapshot(), common.policy.export_state())
    for alpha in grid[1:]:
        if fork is None:
            cache = fresh(alpha)
        else:
            policy = make_policy(alpha)
            cache = restore(fork[0], model, policy)
            policy.import_state(fork[1], {node.nid: node for node in cache.tree.nodes()})
        own = served[:shared]
        for _ in range(shared):
            tick()
        protocol = RequestCache(cache)
        for request in requests[shared:]:
            own.append(_serve(protocol, *request))
            tick()
        yield alpha, cache, own


def restore(snap: CacheSnapshot, model: ModelSpec, policy: Any) -> OracleTree:
    """A radix-tree cache rebuilt from ``snap`` (:meth:`OracleTree.snapshot`'s, or the
    live cache's) under ``policy``, which hears every node."""
    cache = OracleTree(model, snap.capacity, policy)
    _fill(cache, snap)
    return cache


def _fill(cache: OracleTree, snap: CacheSnapshot) -> None:
    """Rebuild ``snap``'s tree into an empty ``cache``; its policy hears about every node.

    Restored edges are views of the snapshot's token buffer: the tree never
    writes into token arrays, so several restores may share one snapshot.
    """
    cache.set_clock(snap.clock)
    tree = cache.tree
    tree.next_nid = snap.next_nid
    nodes: list[Node] = []
    off = snap.offsets.tolist()
    for i, p in enumerate(snap.parents):
        parent = cache.root if p < 0 else nodes[p]
        toks = snap.tokens[off[i] : off[i + 1]]
        node = Node(toks, parent, parent.depth + len(toks), snap.nid[i])
        node.ckpt, node.t, node.ckpt_hit = snap.ckpt[i], snap.t[i], snap.ckpt_hit[i]
        parent.children[int(toks[0])] = node
        nodes.append(node)
        cache.kv_tokens += len(toks)
        cache.swa_tokens += cache.kinds.tail(len(toks))
        cache.n_ckpts += node.ckpt
    tree.num_nodes += len(nodes)
    tree.num_tokens = cache.kv_tokens
    for k, v in snap.counters.items():
        setattr(cache, k, v)
    for node in nodes:
        cache.policy.on_node_added(node)


def _start(policy: Any, model: ModelSpec, start: CacheSnapshot | None, capacity: int) -> Any:
    if start is None:
        return make_cache(policy, model, capacity)
    return restore(start, model, policy)


def _serve(
    protocol: RequestCache, full: np.ndarray, n: int, modules: np.ndarray | None = None
) -> Served:
    hit = protocol.serve(full[:n], full, modules)
    return hit.length, getattr(hit.node, "nid", -1), hit.recompute


def _nothing() -> None:
    return None


def python_policies(monkeypatch: Any) -> None:
    """``marconi`` and ``marconi-twin`` from the registry are the oracles from here on (the
    engine's and a replay's caches, the radix tree; their grids, Python)."""
    for name, cls in ORACLES.items():
        # The registry imports an entry on lookup and keeps it in ``loaded``: the oracle
        # is put there, so every lookup of the name finds it.
        monkeypatch.setitem(POLICIES.loaded, name, cls)


def tree_policy(name: str, **options: Any) -> Any:
    """``get_policy(name, **options)``, ``marconi`` and ``marconi-twin`` as their oracles
    (whose structure is the radix tree, :class:`OracleTree`)."""
    cls = ORACLES.get(name)
    return get_policy(name, **options) if cls is None else cls(**options)
