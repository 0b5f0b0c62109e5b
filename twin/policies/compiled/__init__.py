"""Marconi's grid replays compiled with numba: the hits of every alpha.

``marconi``'s and ``marconi-twin``'s alpha tuning and the ``oracle`` bound
replay the same requests once per alpha of a 21-point grid and keep only each
replay's hits (a score). This package runs that replay as compiled code over
flat arrays (:mod:`policies.compiled.kernel`), the one implementation of
Marconi's rules (the engine's live cache is the same kernel:
:mod:`policies.compiled.live`). Its Python transliteration, ``PrefixCache``
under the rules in ``tests/marconi_oracle.py``, is the tests' oracle
(``tests/test_marconi_compiled.py`` compares the two on random traces: hits,
victims in order, counters).
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from twin.cache import CacheSnapshot, PrefillFlops
from twin.cache.kinds import KindBytes
from twin.errors import TwinError
from twin.limits import MAX_SEQUENCE_TOKENS
from twin.model import ModelSpec

# Bytes the kernel counts in int64: a cache's bytes, an insert's cost. One sequence of the
# longest length a workload holds must stay below this, so sums of two never overflow.
_MAX_BYTES = 2**62


def rules_of(policy_cls: type) -> int:
    """The compiled rules of a Marconi policy class (its ``rules``: ``marconi`` and
    ``oracle`` the authors', ``marconi-twin`` the twin's)."""
    from twin.policies.compiled.kernel.state import REFERENCE, TWIN  # numba loads here

    rules: str = getattr(policy_cls, "rules")  # noqa: B009 (``MarconiPolicy.rules``)
    return {"reference": REFERENCE, "twin": TWIN}[rules]


class CompiledTrace:
    """Requests (and a snapshot to start from) laid out for the kernel: the snapshot's leaf
    paths first, then each request's input + output as it is added (:meth:`extend`), up
    to ``capacity`` requests. The token buffer is grown by doubling, so a window fed as
    it arrives is copied O(1) times a token; a grown buffer is a new array (the replays'
    states are rebound to it, :class:`GridStream`)."""

    def __init__(self, capacity: int, start: CacheSnapshot | None = None) -> None:
        self.count = 0
        self.starts = np.zeros(capacity, np.int64)
        self.plens = np.zeros(capacity, np.int64)
        self.flens = np.zeros(capacity, np.int64)
        self.snap = np.zeros((8, 0), np.int64)
        self.clock, self.next_nid = 0, 1
        paths: list[np.ndarray] = []
        if start is not None:
            paths, self.snap = _snapshot_columns(start, 0)
            self.clock, self.next_nid = int(start.clock), int(start.next_nid)
        self.buf = np.concatenate(paths) if paths else np.zeros(0, np.int32)
        self.end = len(self.buf)

    def extend(self, requests: Sequence[Any]) -> None:
        """Add ``requests`` ((input + output, input length) each) after those added."""
        # Token ids are int32 (``twin.workloads.schema``: a workload's ids are checked
        # against ``TOKEN_ID_MAX`` when read; output ids are negative int32).
        fulls = [_int32_ids(req[0]) for req in requests]
        need = self.end + sum(len(f) for f in fulls)
        if need > len(self.buf):
            grown = np.zeros(max(need, 2 * len(self.buf)), np.int32)
            grown[: self.end] = self.buf[: self.end]
            self.buf = grown
        i = self.count
        for full, req in zip(fulls, requests, strict=True):
            n = len(full)
            self.buf[self.end : self.end + n] = full
            self.starts[i], self.plens[i], self.flens[i] = self.end, int(req[1]), n
            self.end += n
            i += 1
        self.count = i


def _int32_ids(tokens: Any) -> np.ndarray:
    """``tokens`` as int32 token ids; ids past int32 are refused (no workload holds them)."""
    full = np.asarray(tokens)
    if full.dtype != np.int32 and len(full):
        lo, hi = int(full.min()), int(full.max())
        if lo < -(2**31) or hi >= 2**31:
            bad = hi if hi >= 2**31 else lo
            raise TwinError(f"token id {bad} is past int32: a workload holds int32 token ids")
    return full.astype(np.int32, copy=False)


def _snapshot_columns(snap: CacheSnapshot, offset: int) -> tuple[list[np.ndarray], np.ndarray]:
    """Every leaf's whole path (to append to the buffer at ``offset``) and the node columns.

    A node's tokens are read from a leaf under it (:mod:`policies.compiled.kernel`),
    whose path holds the node's at the same positions.
    """
    n = len(snap.parents)
    off = snap.offsets.tolist()
    depth = [0] * n
    leaf = [True] * n
    for i, p in enumerate(snap.parents):
        depth[i] = (depth[p] if p >= 0 else 0) + off[i + 1] - off[i]
        if p >= 0:
            leaf[p] = False
    base = [0] * n
    paths: list[np.ndarray] = []
    for i in reversed(range(n)):  # children (later in pre-order) before their parent
        if leaf[i]:
            parts, j = [], i
            while j >= 0:
                parts.append(snap.tokens[off[j] : off[j + 1]])
                j = snap.parents[j]
            base[i] = offset
            offset += depth[i]
            paths.append(np.concatenate(parts[::-1]))
        p = snap.parents[i]
        if p >= 0:
            base[p] = base[i]
    cols = np.array(
        [
            snap.parents,
            base,
            depth,
            [off[i + 1] - off[i] for i in range(n)],
            [int(c) for c in snap.ckpt],
            [int(t) for t in snap.t],
            snap.nid,
            [int(h) for h in snap.ckpt_hit],
        ],
        np.int64,
    ).reshape(8, n)
    return paths, cols


def constants(model: ModelSpec, capacity: int, rules: int) -> tuple[np.ndarray, np.ndarray]:
    """``mc`` and ``mf`` of :mod:`policies.compiled.kernel` (alpha set per replay).

    Refuses a model one of whose sequences (up to ``MAX_SEQUENCE_TOKENS``) would hold
    2**62 bytes or more: the kernel counts bytes in int64 (no GPU comes near)."""
    seq_bytes = model.ssm_checkpoint_bytes + model.kv_bytes_per_token * MAX_SEQUENCE_TOKENS
    if seq_bytes >= _MAX_BYTES:
        raise TwinError(
            f"model {model.name!r}: {model.kv_bytes_per_token:,} KV bytes a token and "
            f"{model.ssm_checkpoint_bytes:,} a state put a sequence of {MAX_SEQUENCE_TOKENS:,} "
            "tokens (twin.workloads.schema.MAX_SEQUENCE_TOKENS) past the 2**62 bytes "
            "the prefix cache counts"
        )
    flops = PrefillFlops(model)
    kinds = KindBytes(model)
    mc = np.array(
        [
            capacity,
            model.kv_bytes_per_token,
            kinds.full_kv_per_token,
            model.ssm_checkpoint_bytes if model.n_ssm_layers else 0,
            model.d_model,
            model.ssm_d_state,
            model.n_ssm_layers,
            model.n_attention_layers,
            model.n_mlp_layers + model.n_moe_layers,
            rules,
            0,  # M_LIVE: a replay (``policies.compiled.live`` sets 1)
            kinds.swa_kv_per_token,
            kinds.window or 0,
            0,  # M_HOOK: no write-back hook (``LiveCache.on_evict`` sets 1)
        ],
        np.int64,
    )
    return mc, np.array([0.0, flops.linear, flops.quad_full, flops.quad_window])


@dataclass
class GridRun:
    """One alpha's compiled replay: per request, the hit tokens and the hit node's creation
    id (-1 on a miss); the victims' creation ids in order; the cache's counters at the end
    (those of this replay: a snapshot's own are not added)."""

    alpha: float
    hits: list[int]
    hit_nids: list[int]
    victims: list[int]
    counters: dict[str, int]


# ``kernel.state.counters``' entries, in order.
_COUNTERS = (
    "evictions",
    "kv_tokens",
    "n_ckpts",
    "num_nodes",
    "peak_bytes",
    "peak_kv_bytes",
    "peak_ssm_bytes",
    "checkpoints_admitted",
    "checkpoints_hit",
    "first_eviction_clock",  # the cache clock of the request that first evicted (-1: none)
    "swa_tokens",
)


# Requests a stream gathers before its background replay serves them (one kernel call per
# alpha per batch): large enough that the calls' overhead is nothing beside the replays.
STREAM_BATCH = 128
# The process's thread pools, by use ("background": the streams' replays; "alphas": the
# alphas of one batch, side by side) and thread count, made on first use and kept.
_POOLS: dict[tuple[str, int], ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()  # a stream's thread and the caller may both make one


def _pool(use: str, threads: int) -> ThreadPoolExecutor:
    with _POOLS_LOCK:
        pool = _POOLS.get((use, threads))
        if pool is None:
            pool = ThreadPoolExecutor(threads, thread_name_prefix=f"twin-alpha-grid-{use}")
            _POOLS[use, threads] = pool
        return pool


def _forget_pools() -> None:
    """In a forked child (``twin.workers``' process pools fork): the parent's pools are
    copied without their threads, and a pool with idle threads on record starts none, so
    work sent to one would wait forever; the child makes its own."""
    global _POOLS_LOCK
    _POOLS.clear()
    _POOLS_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools)


class GridStream:
    """Every alpha's replay of a window of requests from a snapshot (or an empty cache),
    served as the window's requests arrive (:meth:`add`); :meth:`runs` serves what is
    left and returns each alpha's :class:`GridRun`, in grid order.

    Each replay is a function of its requests in order alone, so when a request is
    served (as it arrives, in batches, or all at the end) moves no hit, victim or
    counter: the runs are :func:`compiled_grid_runs`' of the whole window. Alpha only
    enters the victim's choice, so every replay is the same until its first eviction:
    the first alpha runs alone until it evicts, the requests before that eviction are
    served once more, and every other alpha goes on from a copy of that state.

    ``background``: batches of :data:`STREAM_BATCH` requests are replayed on a thread
    (the kernel runs without the GIL) while the caller goes on, so a run's grid is
    done by another core as the window fills rather than all at the tuning point; with
    one core (``cores()``) it only adds switches, and the caller leaves it off.
    """

    def __init__(
        self,
        model: ModelSpec,
        capacity: int,
        trace: CompiledTrace,
        grid: Sequence[float],
        policy_cls: type,
        background: bool = False,
    ) -> None:
        # numba loads the compiled code here
        from twin.policies.compiled.kernel import replay, state, tree

        self.k = replay  # the replay's entries
        self.state = state  # the state's layout and counters
        self.trace = trace
        self.grid = tuple(grid)
        self.mc, self.mf = constants(model, int(capacity), rules_of(policy_cls))
        self.mf[state.F_ALPHA] = self.grid[0]
        n = len(trace.starts)
        self.states = [self._start()]  # the first alpha's; the others' from its first eviction
        self.hits = [np.zeros(n, np.int64)]
        self.nids = [np.zeros(n, np.int64)]
        self.served = 0
        # Each request's agreements with the sequences that made its path's nodes
        # (``kernel.tree._agreement``): learned by the replays that run alone, read by all.
        self.known = np.zeros((n, 2 * tree.AGREEMENTS), np.int64)
        self.background = background
        self._pending: list[Any] = []
        self._lock = threading.Lock()
        self._job: Future[None] | None = None

    def _start(self) -> Any:
        t = self.trace
        return self.k.start(t.buf, len(t.starts), self.mc, self.mf, t.snap, t.clock, t.next_nid)

    def add(self, full: np.ndarray, prompt_len: int) -> None:
        """A window request arrives (input + output, input length)."""
        with self._lock:
            self._pending.append((full, prompt_len))
            if self.background and self._job is None and len(self._pending) >= STREAM_BATCH:
                self._job = _pool("background", max(cores() - 1, 1)).submit(self._drain)

    def _drain(self) -> None:
        """Serve what has arrived, until nothing is left (one drain at a time)."""
        while True:
            with self._lock:
                batch, self._pending = self._pending, []
                if not batch:
                    self._job = None
                    return
            self._serve(batch)

    def _serve(self, batch: list[Any]) -> None:
        t, k = self.trace, self.k
        buf = t.buf
        t.extend(batch)
        if t.buf is not buf:  # grown: the replays read the new buffer
            self.states = [(*st[:9], t.buf, *st[10:]) for st in self.states]
        i0, i1 = self.served, t.count
        self.served = i1
        requests_of = (t.starts, t.plens, t.flens)
        known = self.known
        if len(self.states) == 1:
            first = self.states[0]
            k.serve_range(first, *requests_of, i0, i1, self.hits[0], self.nids[0], known, True)
            evicted_at = int(first[1][self.state.S_FIRST_EVICTION])
            if evicted_at < 0 or len(self.grid) == 1:
                return
            shared = evicted_at - t.clock  # requests served before the first eviction
            common = self._start()
            scratch = np.zeros(len(t.starts), np.int64)
            k.serve_range(common, *requests_of, 0, shared, scratch, scratch.copy(), known, True)
            # ``common`` is only read (by ``kernel.replay.copy``); the others go on from it.
            self.states += [k.copy(common, float(a)) for a in self.grid[1:]]
            self.hits += [self.hits[0].copy() for _ in self.grid[1:]]
            self.nids += [self.nids[0].copy() for _ in self.grid[1:]]
            i0 = shared
        else:
            k.serve_range(
                self.states[0], *requests_of, i0, i1, self.hits[0], self.nids[0], known, True
            )

        # The other alphas' replays share nothing they write but what they learn, and the
        # kernel runs without the GIL: one thread per core replays them side by side,
        # learning nothing then (one at a time, each learns).
        others = range(1, len(self.states))
        threads = min(len(others), cores())

        def go_on(j: int) -> None:
            st, hits, nids = self.states[j], self.hits[j], self.nids[j]
            k.serve_range(st, *requests_of, i0, i1, hits, nids, known, threads <= 1)

        if threads > 1:
            list(_pool("alphas", threads).map(go_on, others))
        else:
            for j in others:
                go_on(j)

    def runs(self) -> list[GridRun]:
        """Every alpha's replay of the requests added, in grid order."""
        while True:  # a background drain finishes first (the requests in order)
            with self._lock:
                job = self._job
            if job is None:
                break
            job.result()
        self.background = False
        self._drain()
        k, n = self.k, self.served
        alphas = self.grid[: len(self.states)]  # the first alone until it evicts
        runs = [
            GridRun(
                alpha,
                hits[:n].tolist(),  # Python ints: the scores are exact integer sums
                nids[:n].tolist(),
                k.victims(st).tolist(),
                {name: int(v) for name, v in zip(_COUNTERS, self.state.counters(st), strict=True)},
            )
            for alpha, st, hits, nids in zip(alphas, self.states, self.hits, self.nids, strict=True)
        ]
        if len(runs) == 1:  # never evicted: alpha never mattered
            runs += [dataclasses.replace(runs[0], alpha=a) for a in self.grid[1:]]
        return runs


def cores() -> int:
    """The processors this process may run on (its affinity), for the grid's threads."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1


def compiled_grid_runs(
    model: ModelSpec,
    capacity: int,
    requests: Sequence[Any],
    grid: Sequence[float],
    policy_cls: type,
    start: CacheSnapshot | None = None,
) -> list[GridRun]:
    """Each alpha's replay of ``requests`` from ``start`` (or an empty cache), in grid
    order, under the rules of ``policy_cls`` (:func:`rules_of`); declared prompt
    modules are ignored, as ``PrefixCache`` ignores them.

    Alpha only enters the victim's choice, so every replay is the same until
    its first eviction: the first alpha runs
    in full, the requests before its first eviction are served once more, and
    every other alpha goes on from a copy of that state.
    """
    stream = GridStream(model, capacity, CompiledTrace(len(requests), start), grid, policy_cls)
    for req in requests:  # (input + output, input length, ...)
        stream.add(req[0], int(req[1]))
    return stream.runs()
