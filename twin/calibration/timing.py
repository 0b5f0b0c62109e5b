"""Time one kernel call the way device/METHOD.md says.

Warm up first (module load, autotuning and handle creation stay out of the
numbers), then time each call on its own: CUDA events around the call on a GPU
(device work is asynchronous, events measure it on the stream), the host's
``perf_counter_ns`` on the CPU. The call cycles through several input buffers
so that repeated calls do not find their inputs in cache. The number of repeats
adapts to the kernel's length inside a time budget; the median and the 10th and
90th percentiles are kept.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TimingBudget:
    """How long to spend on one shape."""

    warmup_s: float = 0.02  # at least this long (and 2 calls) of warm-up
    budget_s: float = 0.1  # timed calls stop after about this long...
    min_repeats: int = 5  # ...but never fewer than this many
    max_repeats: int = 200


@dataclass(frozen=True)
class Timing:
    """Seconds per call over ``repeats`` timed calls."""

    median_s: float
    p10_s: float
    p90_s: float
    repeats: int
    samples: tuple[float, ...] = ()
    # GPU: how the kernel was timed ("cuda_graph" or "eager") and the median host time
    # to issue one eager call, kept apart from the kernel time (it describes an eager
    # executor, not a production engine replaying CUDA graphs).
    mode: str = ""
    host_issue_s: float | None = None


def _quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated quantile of an already sorted list."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(samples: list[float]) -> Timing:
    """Median and 10/90th percentiles of per-call seconds."""
    s = sorted(samples)
    return Timing(
        statistics.median(s), _quantile(s, 0.1), _quantile(s, 0.9), len(s), tuple(samples)
    )


def _warm_up(fn: Callable[[int], Any], budget: TimingBudget, n_buffers: int) -> int:
    """Warm-up over every buffer (first-touch page faults of outputs, slow on a virtual
    machine, stay out of the numbers) for ``budget.warmup_s``; the next buffer index."""
    start = time.perf_counter()
    i = 0
    while i < max(2, n_buffers) or time.perf_counter() - start < budget.warmup_s:
        fn(i)
        i += 1
    return i


def time_cpu(fn: Callable[[int], Any], budget: TimingBudget, n_buffers: int = 1) -> Timing:
    """Time ``fn(i)`` (i picks the input buffer) with the host clock, after :func:`_warm_up`."""
    i = _warm_up(fn, budget, n_buffers)
    samples: list[float] = []
    spent = 0.0
    while len(samples) < budget.max_repeats and (
        len(samples) < budget.min_repeats or spent < budget.budget_s
    ):
        t0 = time.perf_counter_ns()
        fn(i)
        dt = (time.perf_counter_ns() - t0) * 1e-9
        samples.append(dt)
        spent += dt
        i += 1
    return summarize(samples)


def time_cuda_graph(
    fn: Callable[[int], Any], budget: TimingBudget, torch: Any, n_buffers: int = 1
) -> Timing:
    """Kernel-only time of ``fn(i)``: each buffer's call captured in a CUDA graph and replayed.

    Production engines replay their steps as CUDA graphs (vLLM's and SGLang's CUDA
    graph runners), so the host launch path is not in their kernels' time. Warm-up
    runs eagerly on a side stream first, as ``torch.cuda.graphs`` requires (lazy
    initialisation, cuBLAS workspaces and Triton autotuning must not happen inside a
    capture); its per-call host issue time is kept as ``host_issue_s``. One graph
    per input buffer keeps the rotation that defeats the L2 cache. Raises
    ``RuntimeError`` if the call cannot be captured (the caller times it eagerly).
    """
    cuda = torch.cuda
    cuda.synchronize()
    side = cuda.Stream()
    side.wait_stream(cuda.current_stream())
    issue: list[float] = []
    with cuda.stream(side):
        for i in range(max(3, n_buffers)):
            t0 = time.perf_counter_ns()
            fn(i)
            issue.append((time.perf_counter_ns() - t0) * 1e-9)
    cuda.current_stream().wait_stream(side)
    cuda.synchronize()
    graphs = []
    for i in range(n_buffers):
        graph = cuda.CUDAGraph()
        with cuda.graph(graph):
            fn(i)
        graphs.append(graph)
    cuda.synchronize()
    timing = _time_events(lambda k: graphs[k % n_buffers].replay(), budget, torch, 0)
    return Timing(
        timing.median_s,
        timing.p10_s,
        timing.p90_s,
        timing.repeats,
        timing.samples,
        mode="cuda_graph",
        host_issue_s=statistics.median(issue[1:] or issue),
    )


def time_cuda(
    fn: Callable[[int], Any], budget: TimingBudget, torch: Any, n_buffers: int = 1
) -> Timing:
    """Time ``fn(i)`` with CUDA events on the current stream (warm-up visits every buffer)."""
    torch.cuda.synchronize()
    t = _time_events(fn, budget, torch, _warm_up(fn, budget, n_buffers))
    return Timing(t.median_s, t.p10_s, t.p90_s, t.repeats, t.samples, mode="eager")


def _time_events(fn: Callable[[int], Any], budget: TimingBudget, torch: Any, i: int) -> Timing:
    """CUDA events around ``fn(i), fn(i + 1), ...``; repeats sized to the budget."""
    torch.cuda.synchronize()
    # Estimate one call's length to size the repeats, then record all event pairs
    # and read them after a single synchronisation (reading each pair would stall).
    probe_start = time.perf_counter()
    fn(i)
    torch.cuda.synchronize()
    one = max(time.perf_counter() - probe_start, 1e-6)
    i += 1
    n = int(min(budget.max_repeats, max(budget.min_repeats, budget.budget_s / one)))
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(n)
    ]
    for k, (ev_start, ev_end) in enumerate(events):
        ev_start.record()
        fn(i + k)
        ev_end.record()
    torch.cuda.synchronize()
    return summarize([a.elapsed_time(b) * 1e-3 for a, b in events])
