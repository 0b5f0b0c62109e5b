"""Run the kernels over their shape grids and keep one row per shape (parquet).

Row columns: ``kernel``, the shape columns (null where a kernel has no such
axis), ``dtype``, ``device``, ``repeats``, ``n_buffers``, ``median_s``,
``p10_s``, ``p90_s``, and the model features ``flops``, ``bytes``,
``score_elems``, ``chunks`` so that fitting needs nothing but the file.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from twin.atomic import atomic_path
from twin.calibration.kernels import Kernel, Shape, SweepContext, registry
from twin.calibration.timing import (
    Timing,
    TimingBudget,
    summarize,
    time_cpu,
    time_cuda,
    time_cuda_graph,
)
from twin.costmodel.formulas import FORMULAS
from twin.errors import TwinError

SHAPE_COLUMNS = ("m", "k", "n", "c", "h", "d", "b", "l", "p", "g", "q", "rows", "width", "nbytes")
EXTRA_COLUMNS = tuple(sorted({x for f in FORMULAS.values() for x in f.extras}))

# Time spent per shape, by level (CPU); GPU calls are cheap, so one budget fits all.
BUDGETS: dict[str, TimingBudget] = {
    "tiny": TimingBudget(warmup_s=0.005, budget_s=0.02, min_repeats=3, max_repeats=40),
    "quick": TimingBudget(warmup_s=0.01, budget_s=0.03, min_repeats=3, max_repeats=100),
    "full": TimingBudget(warmup_s=0.02, budget_s=0.1, min_repeats=5, max_repeats=300),
}
GPU_BUDGET = TimingBudget(warmup_s=0.05, budget_s=0.05, min_repeats=10, max_repeats=500)
ROUNDS = {"tiny": 1, "quick": 2, "full": 3}  # CPU passes over the shapes (see run_sweep)


def plan(ctx: SweepContext, kernels: Sequence[str] | None = None) -> list[tuple[Kernel, Shape]]:
    """Every (kernel, shape) the sweep will time, in order."""
    reg = registry()
    names = list(kernels) if kernels else list(reg)
    unknown = [k for k in names if k not in reg]
    if unknown:
        raise TwinError(f"unknown kernel(s) {', '.join(unknown)}; known: {', '.join(reg)}")
    return [(reg[k], s) for k in names for s in reg[k].grid(ctx)]


def _time(
    ctx: SweepContext, fn: Callable[[int], Any], budget: TimingBudget, nbuf: int = 1
) -> Timing:
    if ctx.device == "cuda":
        return time_gpu_kernel(ctx, fn, nbuf)
    return time_cpu(fn, budget, nbuf)


def time_gpu_kernel(ctx: SweepContext, fn: Callable[[int], Any], nbuf: int = 1) -> Timing:
    """Kernel-only GPU time (CUDA graph replay); eager CUDA events if capture fails.

    ``ctx.eager`` keeps the eager timing (host launch gaps included), which is what
    ``twin validate``'s eager reference executor runs.
    """
    if ctx.eager:
        return time_cuda(fn, GPU_BUDGET, ctx.torch, nbuf)
    try:
        return time_cuda_graph(fn, GPU_BUDGET, ctx.torch, nbuf)
    except RuntimeError:  # not capturable (a host sync inside the call, say)
        ctx.torch.cuda.synchronize()
        return time_cuda(fn, GPU_BUDGET, ctx.torch, nbuf)


def n_rounds(ctx: SweepContext) -> int:
    """Passes over the shapes: a GPU is ours alone; a shared CPU is timed in rounds."""
    return 1 if ctx.device == "cuda" else ROUNDS[ctx.level]


def sweep_size(ctx: SweepContext, kernels: Sequence[str] | None = None) -> int:
    """Shape timings the sweep will do (what a progress bar counts)."""
    return len(plan(ctx, kernels)) * n_rounds(ctx)


def run_sweep(
    ctx: SweepContext,
    kernels: Sequence[str] | None = None,
    advance: Callable[[float], None] | None = None,
) -> tuple[list[dict], list[str]]:
    """Time every planned shape; returns (rows, notes on skipped shapes).

    On the CPU every shape is timed in several rounds, each over the shapes in a
    new seeded order, and a shape's samples from all rounds are pooled: a burst of
    load from other work on the machine then hits a few samples of many shapes,
    not all samples of a few, and the median shrugs it off.
    """
    budget = BUDGETS[ctx.level]
    planned = plan(ctx, kernels)
    samples: dict[int, list[float]] = {i: [] for i in range(len(planned))}
    how: dict[int, Timing] = {}
    buffers: dict[int, int] = {}
    failed: dict[int, str] = {}
    for r in range(n_rounds(ctx)):
        order = list(range(len(planned)))
        if r:
            random.Random(ctx.seed * 7919 + r).shuffle(order)
        for i in order:
            kernel, shape = planned[i]
            if i not in failed:
                try:
                    buffers[i] = kernel.n_buffers(shape, ctx)
                    fn = kernel.build(shape, ctx, buffers[i])
                    timing = _time(ctx, fn, budget, buffers[i])
                    samples[i].extend(timing.samples)
                    how[i] = timing
                except (RuntimeError, MemoryError) as err:  # e.g. out of device memory
                    failed[i] = f"{kernel.name} {shape}: {type(err).__name__}: {str(err)[:120]}"
                # Drop the buffers before the next shape allocates its own (reference
                # counting frees them; gc.collect() would cost ~0.1 s a shape).
                fn = None  # type: ignore[assignment]
                if ctx.device == "cuda":
                    ctx.torch.cuda.empty_cache()
            if advance is not None:
                advance(1)
    rows = [
        _row(k, s, ctx, summarize(samples[i]), buffers[i], how.get(i))
        for i, (k, s) in enumerate(planned)
        if i not in failed and samples[i]
    ]
    return rows, list(failed.values())


def _row(
    kernel: Kernel,
    shape: Shape,
    ctx: SweepContext,
    timing: Timing,
    nbuf: int,
    how: Timing | None = None,
) -> dict:
    flops, nbytes, extras = kernel.measured_features(shape, ctx)
    row: dict[str, Any] = {"kernel": kernel.name}
    row.update({c: shape.get(c) for c in SHAPE_COLUMNS})
    row.update(
        dtype=str(ctx.dtype).replace("torch.", ""),
        device=ctx.device,
        repeats=timing.repeats,
        n_buffers=nbuf,
        median_s=timing.median_s,
        p10_s=timing.p10_s,
        p90_s=timing.p90_s,
        flops=flops,
        bytes=nbytes,
    )
    row.update({x: float(extras.get(x, 0.0)) for x in EXTRA_COLUMNS})
    # How the GPU timed it, and the host's issue time kept apart (never in the fit).
    row["timing"] = how.mode if how is not None and how.mode else ctx.device
    row["host_issue_s"] = how.host_issue_s if how is not None else None
    return row


def measure_ceilings(ctx: SweepContext) -> dict[str, float]:
    """The device's own matmul FLOP/s and copy bandwidths (METHOD.md: measure both once)."""
    gpu = ctx.device == "cuda"
    n = 8192 if gpu else (512 if ctx.level == "tiny" else 1024)
    size = (1 << 30) if gpu else ((32 << 20) if ctx.level == "tiny" else (256 << 20))
    budget = TimingBudget(warmup_s=0.05, budget_s=0.1, min_repeats=3, max_repeats=20)
    mm = _time(ctx, _matmul_runner(ctx, n), budget)
    cp = _time(ctx, _copy_runner(ctx, size, host_src=False), budget)
    ceilings = {
        "matmul_flops": 2.0 * n**3 / mm.median_s,
        "copy_bw_read_plus_write": 2.0 * size / cp.median_s,
        "matmul_n": float(n),
        "copy_bytes": float(size),
    }
    if gpu:
        h2d = _time(ctx, _copy_runner(ctx, size // 4, host_src=True), budget)
        ceilings["h2d_bw"] = (size // 4) / h2d.median_s
    else:
        ceilings["h2d_bw"] = size / cp.median_s  # host and device are the same memory
    return ceilings


def _matmul_runner(ctx: SweepContext, n: int) -> Callable[[int], Any]:
    t, g = ctx.torch, ctx.generator(12345)
    a, b = ctx.randn(n, n, gen=g), ctx.randn(n, n, gen=g)
    out = t.empty(n, n, device=ctx.device, dtype=ctx.dtype)
    return lambda i: t.mm(a, b, out=out)


def _copy_runner(ctx: SweepContext, size: int, host_src: bool) -> Callable[[int], Any]:
    t, g = ctx.torch, ctx.generator(54321)
    noise = t.randint(1, 255, (size,), dtype=t.uint8, device=ctx.device, generator=g)
    if host_src:  # pinned host -> device
        src = t.empty(size, dtype=t.uint8, pin_memory=True)
        src.copy_(noise)
        dst = noise
        return lambda i: dst.copy_(src, non_blocking=True)
    dst = t.empty_like(noise)
    return lambda i: dst.copy_(noise)


def write_raw(rows: Sequence[dict], path: str | Path) -> Path:
    """Write the rows as parquet (atomically), shape columns as nullable int64."""
    fields = [pa.field("kernel", pa.string())]
    fields += [pa.field(c, pa.int64()) for c in SHAPE_COLUMNS]
    fields += [
        pa.field("dtype", pa.string()),
        pa.field("device", pa.string()),
        pa.field("repeats", pa.int64()),
        pa.field("n_buffers", pa.int64()),
        pa.field("timing", pa.string()),
    ]
    fields += [
        pa.field(c, pa.float64())
        for c in ("median_s", "p10_s", "p90_s", "flops", "bytes", *EXTRA_COLUMNS, "host_issue_s")
    ]
    schema = pa.schema(fields)
    table = pa.Table.from_pylist(
        [{f.name: r.get(f.name) for f in fields} for r in rows], schema=schema
    )
    path = Path(path)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")
    return path
