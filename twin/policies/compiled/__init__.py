"""Marconi's grid replays compiled with numba: the hits of every alpha, exactly the Python path's.

``marconi``'s and ``marconi-twin``'s alpha tuning and the ``oracle`` bound replay
the same requests once per alpha of a 21-point grid and keep only each
replay's hits (a score). This package runs that replay as compiled code over
flat arrays (:mod:`policies.compiled.kernel`): the same tree operations as the
Python path in the same order, so every hit is the same. The Python path
(``PrefixCache`` under the policy) stays the definition; the kernel is its
transliteration, function by function, and ``tests/test_marconi_compiled.py``
compares the two on random traces (hits, victims in order, counters).

Where it does not apply (another policy, token ids past int32, counts past exact
float range),
:func:`compiled_grid_runs` says so (``None``) and the caller replays in Python.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from twin.cache import CacheSnapshot, PrefillFlops
from twin.cache.kinds import KindBytes
from twin.model import ModelSpec

_EXACT = 2**53  # floats hold every integer below this: a division of two is then exact-rounded


def rules_of(policy_cls: type) -> int | None:
    """The compiled rules ``policy_cls`` runs unchanged, or ``None``."""
    from twin.policies.compiled.kernel import REFERENCE, TWIN  # numba loads here
    from twin.policies.marconi import MarconiPolicy
    from twin.policies.marconi_twin import MarconiTwinPolicy
    from twin.policies.oracle import OraclePolicy

    if policy_cls in (MarconiPolicy, OraclePolicy):
        return REFERENCE
    if policy_cls is MarconiTwinPolicy:
        return TWIN
    return None


def _supported_model(model: ModelSpec, policy_cls: type) -> bool:
    """One of the two Marconi rules, on a model whose states (if it has SSM layers) cost
    bytes: a hybrid, a pure SSM model, or a Transformer (no states: any matched prefix
    hits), with sliding-window layers or without, whose prefill FLOPs the kernel's
    formula gives exactly."""
    if rules_of(policy_cls) is None:
        return False
    if model.n_ssm_layers and model.ssm_checkpoint_bytes <= 0:
        return False
    flops = PrefillFlops(model)
    # One window for the bytes and the FLOPs (the kernel's ``M_WINDOW``).
    same_window = not flops.quad_window or KindBytes(model).window == model.sliding_window
    return flops.exact and same_window


class CompiledTrace:
    """Requests (and a snapshot to start from) laid out for :func:`compiled_grid_runs`."""

    def __init__(self, requests: Sequence[Any], start: CacheSnapshot | None = None) -> None:
        # Token ids must fit int32 (the children's keys); others are checked before the
        # cast and make the trace unfit.
        self.ids_fit = True
        fulls = []
        for req in requests:
            full = np.asarray(req[0])
            if full.dtype != np.int32 and len(full):
                self.ids_fit &= int(full.min()) >= -(2**31) and int(full.max()) < 2**31
            fulls.append(full.astype(np.int32, copy=False))
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
        # The deepest node: a request's end, or a restored node's (the snapshot's depth row).
        self.max_depth = int(self.flens.max()) if len(fulls) else 0
        if self.snap.shape[1]:
            self.max_depth = max(self.max_depth, int(self.snap[2].max()))

    def fits(self, model: ModelSpec) -> bool:
        """Token ids fit the keys, and every count of ``model`` up to the deepest node is
        below 2**53."""
        return self.ids_fit and exact_up_to(model, self.max_depth)


def exact_up_to(model: ModelSpec, depth: int) -> bool:
    """Is every FLOP and byte count of ``model``'s efficiencies, for nodes up to ``depth``
    tokens deep, below 2**53 (each efficiency then the same division as Python's)?"""
    from twin.policies.reference_score import attn_flops, mamba1_flops, mlp_flops

    d = model.d_model
    attn = attn_flops(depth, d)
    layers = model.n_mlp_layers + model.n_moe_layers
    # The reference's saved FLOPs: its positive terms, or its one negative term (the
    # MLP layers less the parent's attention FLOPs), bound its magnitude.
    gained = model.n_ssm_layers * mamba1_flops(depth, d, model.ssm_d_state)
    gained += model.n_attention_layers * attn + layers * mlp_flops(depth, d)
    saved = max(gained, layers * attn)
    held = model.ssm_checkpoint_bytes + model.kv_bytes_per_token * depth
    return saved < _EXACT and held < _EXACT and PrefillFlops(model).total(depth, 0) < _EXACT


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
    """``mc`` and ``mf`` of :mod:`policies.compiled.kernel` (alpha set per replay)."""
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

    rules = rules_of(policy_cls)
    assert rules is not None
    mc, mf = constants(model, int(capacity), rules)
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
    for alpha in grid[1:]:
        runs.append(run(kernel.copy(common, float(alpha)), alpha, shared, hits.copy(), nids.copy()))
    return runs


def compiled_grid_runs(
    model: ModelSpec,
    capacity: int,
    requests: Sequence[Any],
    grid: Sequence[float],
    policy_cls: type,
    start: CacheSnapshot | None = None,
) -> list[GridRun] | None:
    """Each alpha's replay of ``requests`` from ``start`` (or an empty cache), in grid
    order; ``None`` where the compiled replay would not give exactly the Python path's
    hits (replay in Python): ``policy_cls`` must run one of the two Marconi scores
    unchanged (:func:`rules_of`), on a model the compiled tree runs exactly
    (:func:`_supported_model`: a hybrid, a pure SSM model or a Transformer,
    sliding-window layers or not), with token ids that fit the children's keys
    (declared prompt modules are ignored, as ``PrefixCache`` ignores them), and with
    every FLOP and byte count below 2**53 (each efficiency then the same correctly
    rounded division as Python's).

    Alpha only enters the victim's choice, so every replay is the same until
    its first eviction (``policies.shared_prefix``'s rule): the first alpha runs
    in full, the requests before its first eviction are served once more, and
    every other alpha goes on from a copy of that state.
    """
    if not _supported_model(model, policy_cls):
        return None
    trace = CompiledTrace(requests, start)
    if not trace.fits(model):
        return None
    return _grid_runs(trace, model, capacity, grid, policy_cls)
