"""Trace replay of a prefix-cache policy, without timing (the Marconi artifact's simulator).

Requests are served in row order (the workload's replay order): each is looked
up, then its input + output inserted (``twin.cache.serve``). The result counts
hits, FLOPs saved, bytes by kind, checkpoints and evictions.

A workload is materialised once as a :class:`Trace` (every request's prompt +
output as one int32 array) and may be replayed under several policies.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from twin.cache import HeldCache, PrefillFlops, cache_stats
from twin.cache.base import COUNTERS
from twin.cache.kinds import KindBytes
from twin.model import ModelSpec
from twin.policies import get_policy, policy_class
from twin.policies.grid import map_alphas
from twin.policies.structures import make_cache
from twin.presets import get_model
from twin.workloads.reader import Workload

OnRequest = Callable[[], None]


def _nothing() -> None:
    return None


@dataclass
class Trace:
    """Requests in replay order: ``fulls[i]`` = prompt + output; ``prompt_lens[i]``: its prompt."""

    fulls: list[np.ndarray]
    prompt_lens: list[int]
    source: str = ""
    # Per request, its declared prompt modules (workload ``modules`` column) or None.
    modules: list[np.ndarray | None] = field(default_factory=list)

    @property
    def num_requests(self) -> int:
        return len(self.fulls)

    @property
    def prompt_tokens(self) -> int:
        return int(sum(self.prompt_lens))

    @classmethod
    def load(cls, workload: Workload | str | Path, on_request: OnRequest = _nothing) -> Trace:
        """Read every request of ``workload`` (a path or an open :class:`Workload`)."""
        if not isinstance(workload, Workload):
            workload = Workload.open(workload)
        fulls, lens, modules = [], [], []
        for req in workload.requests():
            fulls.append(req.full)
            lens.append(len(req.prompt))
            modules.append(req.modules)
            on_request()
        return cls(fulls, lens, str(workload.path), modules if workload.has_modules else [])

    @classmethod
    def from_pairs(cls, pairs: list[tuple[Any, Any]], source: str = "") -> Trace:
        """Build from ``(prompt, output)`` token sequences (tests, benchmarks)."""
        fulls = [
            np.concatenate((np.asarray(p, np.int32), np.asarray(o, np.int32))) for p, o in pairs
        ]
        return cls(fulls, [len(p) for p, _ in pairs], source)


@dataclass
class ReplayResult:
    """What one policy achieved on one trace (bytes at the end unless named ``peak``)."""

    policy: str
    model: str
    capacity_bytes: int
    requests: int
    prompt_tokens: int
    hit_tokens: int
    token_hit_rate: float
    request_hit_rate: float
    flops_saved: float
    flops_total: float
    kv_bytes: int
    ssm_bytes: int
    peak_bytes: int
    peak_kv_bytes: int
    peak_ssm_bytes: int
    checkpoints_admitted: int
    checkpoints_hit: int
    evictions: int
    nodes: int
    alpha: float | None
    wall_s: float
    details: dict[str, Any] = field(default_factory=dict)
    # Per request, when asked for: input_tokens, hit_tokens, hit_node (the radix
    # node a hit resumed from, by creation id; -1 on a miss or a block cache's hit).
    per_request: dict[str, np.ndarray] | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out.pop("per_request")
        return out


def replay(
    workload: Trace | Workload | str | Path,
    model: ModelSpec | str,
    capacity_bytes: int,
    policy_name: str,
    options: dict[str, Any] | None = None,
    on_request: OnRequest = _nothing,
    per_request: bool = False,
) -> ReplayResult:
    """Replay ``workload`` through a ``capacity_bytes`` cache run by policy ``policy_name``.

    ``options`` go to :func:`policies.get_policy` (``block_size``,
    ``bootstrap_multiplier``, ``alpha_metric``, ``jobs``, ...). ``on_request``
    is called after every request served (``oracle`` serves the trace once
    per alpha of its grid). ``per_request`` fills ``ReplayResult.per_request``.
    """
    trace = workload if isinstance(workload, Trace) else Trace.load(workload)
    spec = get_model(model) if isinstance(model, str) else model
    options = dict(options or {})
    policy = get_policy(policy_name, **options)  # validates the name and options first
    if not policy.hindsight:
        return _run(trace, spec, capacity_bytes, policy_name, options, on_request, per_request)
    return _hindsight(trace, spec, capacity_bytes, policy_name, options, on_request, per_request)


def replay_work(trace: Trace, policy_name: str) -> int:
    """How many requests a replay of ``policy_name`` serves (for progress bars)."""
    cls = policy_class(policy_name)
    runs = len(cls.alpha_grid) if cls.hindsight else 1
    return trace.num_requests * runs


def _run(
    trace: Trace,
    model: ModelSpec,
    capacity: int,
    policy_name: str,
    options: dict[str, Any],
    on_request: OnRequest = _nothing,
    per_request: bool = False,
) -> ReplayResult:
    start = time.perf_counter()
    policy = get_policy(policy_name, **options)
    # The engine's cache, the policy's fastest exact one (``vanilla``: the empty cache).
    cache = make_cache(policy, model, capacity, fast=True)
    protocol = cache.request_cache()
    served = []
    for full, n, mods in _requests(trace):
        hit = protocol.serve(full[:n], full, mods)
        served.append((hit.length, getattr(hit.node, "nid", -1), hit.recompute))
        on_request()
    return _result(trace, model, policy_name, cache, served, per_request, start)


def _requests(trace: Trace) -> list[tuple[np.ndarray, int, np.ndarray | None]]:
    """(input + output, input length, declared modules or None) per request."""
    modules = trace.modules or [None] * trace.num_requests
    return list(zip(trace.fulls, trace.prompt_lens, modules, strict=True))


def _result(
    trace: Trace,
    model: ModelSpec,
    policy_name: str,
    cache: HeldCache,
    served: list[tuple[int, int, int]],
    per_request: bool,
    start: float,
) -> ReplayResult:
    """What ``cache`` holds after serving ``trace``, each request hitting ``served[i]``
    (hit tokens, the hit node's nid, hit tokens the recurrent layers recompute)."""
    return _assemble(
        trace,
        model,
        policy_name,
        int(cache.capacity),
        cache_stats(cache),
        cache.policy.stats(),
        served,
        per_request,
        start,
    )


def _assemble(
    trace: Trace,
    model: ModelSpec,
    policy_name: str,
    capacity: int,
    held: dict[str, int],
    stats: dict[str, Any],
    served: list[tuple[int, int, int]],
    per_request: bool,
    start: float,
) -> ReplayResult:
    """The result of a replay whose cache ends with ``held`` (``cache_stats``) and whose
    policy reports ``stats``."""
    hit_tokens, hits, saved, total, recomputed = _totals(trace, model, served)
    prompt = trace.prompt_tokens
    if recomputed:
        # How much of the reuse survives the recurrent layers' recompute.
        stats["flops_saved_attention_only"] = saved
        stats["flops_recomputed_recurrent"] = recomputed
        stats["saving_kept"] = (saved - recomputed) / saved if saved else 0.0
        saved -= recomputed
    return ReplayResult(
        policy=policy_name,
        model=model.name,
        capacity_bytes=capacity,
        requests=trace.num_requests,
        prompt_tokens=prompt,
        hit_tokens=hit_tokens,
        token_hit_rate=hit_tokens / prompt if prompt else 0.0,
        request_hit_rate=hits / trace.num_requests if trace.num_requests else 0.0,
        flops_saved=saved,
        flops_total=total,
        **held,
        alpha=stats.get("alpha"),
        wall_s=time.perf_counter() - start,
        details=stats,
        per_request=None
        if not per_request
        else {
            "input_tokens": np.asarray(trace.prompt_lens, np.int64),
            "hit_tokens": np.asarray([h for h, _, _ in served], np.int64),
            "hit_node": np.asarray([nid for _, nid, _ in served], np.int64),
        },
    )


def _totals(
    trace: Trace, model: ModelSpec, served: list[tuple[int, int, int]]
) -> tuple[int, int, float, float, float]:
    """(hit tokens, requests hit, FLOPs saved, FLOPs of every prompt, FLOPs recomputed)."""
    flops = PrefillFlops(model)
    total = 0.0
    for n in trace.prompt_lens:
        total += flops.total(n, 0)
    hit_tokens, hits, saved, recomputed = _hit_sums(flops, served)
    return hit_tokens, hits, saved, total, recomputed


def _hit_sums(
    flops: PrefillFlops, served: list[tuple[int, int, int]]
) -> tuple[int, int, float, float]:
    """(hit tokens, requests hit, FLOPs saved, FLOPs recomputed) of the requests ``served``."""
    hit_tokens = hits = 0
    saved = recomputed = 0.0  # recomputed: the recurrent layers' FLOPs on reused modules
    for h, _, recompute in served:
        if h:
            hit_tokens += h
            hits += 1
            saved += flops.total(h, 0)
            if recompute:
                recomputed += flops.recurrent(recompute)
    return hit_tokens, hits, saved, recomputed


# ----- hindsight (oracle): one full replay per alpha ---------------------------------
def _run_at(
    trace: Trace,
    model: ModelSpec,
    capacity: int,
    name: str,
    per_request: bool,
    alpha: float,
) -> ReplayResult:
    """One replay at a fixed ``alpha`` (a worker's task in the grid's process pool),
    compiled (:mod:`policies.compiled`)."""
    from twin.policies.compiled import compiled_grid_runs

    start = time.perf_counter()
    runs = compiled_grid_runs(model, capacity, _requests(trace), (alpha,), policy_class(name))
    return _compiled_result(trace, model, name, capacity, runs[0], per_request, start)


def _hindsight(
    trace: Trace,
    model: ModelSpec,
    capacity: int,
    policy_name: str,
    options: dict[str, Any],
    on_request: OnRequest,
    per_request: bool = False,
) -> ReplayResult:
    start = time.perf_counter()
    policy = get_policy(policy_name, **options)
    grid = policy.alpha_grid
    jobs = int(options.get("jobs") or 1)
    by_flops = options.get("alpha_metric") == "flops"
    from twin.policies.compiled import compiled_grid_runs

    if jobs > 1:  # each alpha its own compiled replay (``_run_at``), in a process pool
        runs = []
        for r in map_alphas(
            _run_at, (trace, model, capacity, policy_name, per_request), grid, jobs
        ):
            runs.append(r)
            for _ in range(trace.num_requests):
                on_request()
        scores = [r.flops_saved if by_flops else r.hit_tokens for r in runs]
        best_i = max(range(len(grid)), key=lambda i: (scores[i], -grid[i]))
        return _best_of_grid(runs[best_i], grid, best_i, scores, start)
    # The compiled grid in one process, sharing the requests before the first eviction;
    # scores first (hit tokens, or FLOPs saved), the full result only for the best alpha.
    compiled = compiled_grid_runs(model, capacity, _requests(trace), grid, type(policy))
    for _ in range(trace.num_requests * len(grid)):
        on_request()
    flops = PrefillFlops(model)
    hits_of = [run.hits for run in compiled]
    scores = [
        _hit_sums(flops, [(h, -1, 0) for h in hits])[2] if by_flops else sum(hits)
        for hits in hits_of
    ]
    best_i = max(range(len(grid)), key=lambda i: (scores[i], -grid[i]))
    best = _compiled_result(
        trace, model, policy_name, capacity, compiled[best_i], per_request, start
    )
    return _best_of_grid(best, grid, best_i, scores, start)


def _best_of_grid(
    best: ReplayResult, grid: tuple[float, ...], best_i: int, scores: list[float], start: float
) -> ReplayResult:
    """``best``, the run at ``grid[best_i]``, labelled with its alpha and every alpha's score."""
    best.alpha = grid[best_i]
    best.details = {
        "alpha": grid[best_i],
        "alpha_source": "hindsight",
        "grid": {str(a): s for a, s in zip(grid, scores, strict=True)},
    }
    best.wall_s = time.perf_counter() - start
    return best


def _compiled_result(
    trace: Trace,
    model: ModelSpec,
    policy_name: str,
    capacity: int,
    run: Any,
    per_request: bool,
    start: float,
) -> ReplayResult:
    """The result of a compiled replay (:class:`policies.compiled.GridRun`) from an empty
    cache: its counters are the whole cache's."""
    c = run.counters
    swa = KindBytes(model).swa_kv_per_token  # a node holds its window's tail of it
    held = {
        "kv_bytes": c["kv_tokens"] * (model.kv_bytes_per_token - swa) + c["swa_tokens"] * swa,
        "ssm_bytes": c["n_ckpts"] * model.ssm_checkpoint_bytes,
        **{k: c[k] for k in COUNTERS},
        "nodes": c["num_nodes"] + 1,  # the root
    }
    served = [(h, nid, 0) for h, nid in zip(run.hits, run.hit_nids, strict=True)]
    return _assemble(trace, model, policy_name, capacity, held, {}, served, per_request, start)
