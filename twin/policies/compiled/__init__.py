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
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from twin.cache import CacheSnapshot, PrefillFlops
from twin.cache.kinds import KindBytes
from twin.errors import TwinError
from twin.model import ModelSpec
from twin.workloads.schema import MAX_SEQUENCE_TOKENS

# Bytes the kernel counts in int64: a cache's bytes, an insert's cost. One sequence of the
# longest length a workload holds must stay below this, so sums of two never overflow.
_MAX_BYTES = 2**62


def rules_of(policy_cls: type) -> int:
    """The compiled rules of a Marconi policy class (its ``rules``: ``marconi`` and
    ``oracle`` the authors', ``marconi-twin`` the twin's)."""
    from twin.policies.compiled.kernel import REFERENCE, TWIN  # numba loads here

    rules: str = getattr(policy_cls, "rules")  # noqa: B009 (``MarconiPolicy.rules``)
    return {"reference": REFERENCE, "twin": TWIN}[rules]


class CompiledTrace:
    """Requests (and a snapshot to start from) laid out for :func:`compiled_grid_runs`."""

    def __init__(self, requests: Sequence[Any], start: CacheSnapshot | None = None) -> None:
        # Token ids are int32 (``twin.workloads.schema``: a workload's ids are checked
        # against ``TOKEN_ID_MAX`` when read; output ids are negative int32).
        fulls = [_int32_ids(req[0]) for req in requests]
        self.flens = np.array([len(f) for f in fulls], np.int64)
        self.plens = np.array([int(req[1]) for req in requests], np.int64)
        self.starts = np.zeros(len(fulls), np.int64)
        if len(fulls) > 1:
            np.cumsum(self.flens[:-1], out=self.starts[1:])
        parts = fulls
        self.snap = np.zeros((8, 0), np.int64)
        self.clock, self.next_nid = 0, 1
        if start is not None:
            paths, self.snap = _snapshot_columns(start, int(self.flens.sum()))
            parts = [*fulls, *paths]
            self.clock, self.next_nid = int(start.clock), int(start.next_nid)
        self.buf = np.concatenate(parts) if parts else np.zeros(0, np.int32)


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
            KindBytes(model).full_kv_per_token,
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


# ``kernel.counters``' entries, in order.
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


def _grid_runs(
    trace: CompiledTrace, model: ModelSpec, capacity: int, grid: Sequence[float], policy_cls: type
) -> list[GridRun]:
    from twin.policies.compiled import kernel  # numba loads the compiled code here

    mc, mf = constants(model, int(capacity), rules_of(policy_cls))
    n = len(trace.starts)
    args = (trace.buf, n, mc, mf, trace.snap, trace.clock, trace.next_nid)
    requests_of = (trace.starts, trace.plens, trace.flens)

    def run(st: Any, alpha: float, i0: int, hits: np.ndarray, nids: np.ndarray) -> GridRun:
        kernel.serve_range(st, *requests_of, i0, n, hits, nids)
        return GridRun(
            alpha,
            hits.tolist(),  # Python ints: the scores are exact integer sums
            nids.tolist(),
            kernel.victims(st).tolist(),
            {k: int(v) for k, v in zip(_COUNTERS, kernel.counters(st), strict=True)},
        )

    mf[kernel.F_ALPHA] = grid[0]
    first = kernel.start(*args)
    hits, nids = np.zeros(n, np.int64), np.zeros(n, np.int64)
    runs = [run(first, grid[0], 0, hits, nids)]
    evicted_at = runs[0].counters["first_eviction_clock"]
    if evicted_at < 0:  # never evicted: alpha never mattered
        return runs + [dataclasses.replace(runs[0], alpha=a) for a in grid[1:]]
    shared = evicted_at - trace.clock  # requests served before the first eviction
    common = kernel.start(*args)
    kernel.serve_range(common, *requests_of, 0, shared, hits.copy(), nids.copy())

    def go_on(alpha: float) -> GridRun:
        return run(kernel.copy(common, float(alpha)), alpha, shared, hits.copy(), nids.copy())

    # The other alphas' replays share nothing they write (``common`` is only read, by
    # ``kernel.copy``), and the kernel runs without the GIL: one thread per core
    # replays them side by side, in grid order.
    threads = min(len(grid) - 1, cores())
    if threads > 1:
        with ThreadPoolExecutor(threads) as pool:
            return runs + list(pool.map(go_on, grid[1:]))
    return runs + [go_on(alpha) for alpha in grid[1:]]


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
    return _grid_runs(CompiledTrace(requests, start), model, capacity, grid, policy_cls)
