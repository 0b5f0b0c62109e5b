"""Running a row's plan through ``twin.engine.run.build_run`` and reading its means."""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from twin.costmodel.table_release import version_key
from twin.engine.modes import measured_mode
from twin.engine.run import Run, RunArgs, build_run
from twin.errors import TwinError
from twin.metrics import RequestRecord
from twin.validate.silicon.deployment import engine_build
from twin.validate.silicon.harness import TOKEN_RANGE, check_dispatch_spread
from twin.validate.silicon.plan import RowPlan
from twin.workloads.schema import WorkloadRow
from twin.workloads.writer import WorkloadWriter

# The seed stream of the dispatch delays, beside the row's seed (any fixed number).
_DISPATCH_STREAM = 1


def write_workload(
    path: Path,
    isl: int,
    osl: int,
    requests: int,
    seed: int,
    range_ratio: float = 1.0,
    prompt_scale: float = 1.0,
    dispatch_spread_s: float = 0.0,
) -> Path:
    """``requests`` single-turn sessions of random prompt tokens (a closed-loop client
    starts each when its previous one completes): ``isl`` prompt tokens and exactly
    ``osl`` output tokens, or, with ``range_ratio < 1``, lengths drawn uniformly from
    ``[int(isl x range_ratio), isl]`` and ``[int(osl x range_ratio), osl]`` as vLLM's
    ``benchmark_serving.py`` random dataset draws them; each prompt then holds
    ``prompt_scale`` times its drawn length (the server's tokens where the client's
    tokenizer was another: ``inferencemax_prompt_scale``). With ``dispatch_spread_s > 0``
    each session's ``think_s`` is drawn uniformly from ``[0, dispatch_spread_s)``: the
    client sends it that long after its slot frees (``Harness.dispatch_spread_s``;
    ``twin.engine.source``), from a stream of its own (the prompts and lengths are the
    same at every spread)."""
    check_dispatch_spread(dispatch_spread_s)
    rng = np.random.default_rng(seed)
    meta = {"generator": "silicon", "isl": isl, "osl": osl, "requests": requests, "seed": seed}
    if prompt_scale != 1.0:
        meta["prompt_scale"] = prompt_scale
    if range_ratio < 1.0:
        meta["range_ratio"] = range_ratio
        isls = rng.integers(int(isl * range_ratio), isl + 1, requests)
        osls = rng.integers(max(int(osl * range_ratio), 1), osl + 1, requests)
    else:
        isls, osls = np.full(requests, isl), np.full(requests, osl)
    delays: list[float | None] = [None] * requests
    if dispatch_spread_s > 0:
        meta["dispatch_spread_s"] = dispatch_spread_s
        spread = np.random.default_rng((seed, _DISPATCH_STREAM))
        delays = (spread.random(requests) * dispatch_spread_s).tolist()
    with WorkloadWriter(path, meta) as w:
        for i in range(requests):
            prompt = rng.integers(0, TOKEN_RANGE, round(isls[i] * prompt_scale), dtype=np.int32)
            w.write(WorkloadRow(i, 0, None, delays[i], prompt, False, None, int(osls[i])))
    return path


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else math.nan


def _median(values: Sequence[float]) -> float:
    return float(np.median(values)) if len(values) else math.nan


def plan_run(plan: RowPlan, folder: Path) -> Run:
    """The twin's run of ``plan``: its workload (:func:`write_workload`) written in
    ``folder``, which must outlive the run's simulation, and the engine the row ran."""
    row = plan.row
    assert row.isl is not None and row.osl is not None
    path = write_workload(
        folder / "workload.parquet",
        row.isl,
        row.osl,
        plan.requests,
        plan.seed,
        plan.range_ratio,
        plan.prompt_scale,
        plan.dispatch_spread_s,
    )
    args: RunArgs = {
        "model": plan.model,
        "gpu": plan.gpu,
        # The modelled release standing for the measured one (vLLM 0.11-0.19 -> 0.19.0,
        # SGLang 0.5.1-0.5.10.post1 -> 0.5.10.post1): its defaults.
        "engine": measured_mode(plan.engine, row.backend_version),
        # The kernel tables of the row's own release (twin.costmodel.table_release); a
        # release that is no version number: the modelled one's above.
        "kernel_tables": kernel_tables(row.backend_version),
        # The build that ran, whose kernel layout the engine mode's rule reads
        # (twin.engine.kernel_layouts): the release, or a nightly image's tag.
        "engine_build": engine_build(row),
        "cache_gb": "auto",
        "tp": plan.tp,
        "ep": plan.ep,
        "concurrency": plan.concurrency,
        "dp_attention": plan.dp,
    }
    args.update(plan.deployment)  # typed where the plan was made
    return build_run(path, **args)


def predict(plan: RowPlan) -> dict[str, Any]:
    """Run ``plan`` in the twin; the means (and medians) over the measured requests, in ms.

    A run the twin refuses (a TwinError: the weights do not fit, say) returns its
    message under ``twin_error``.
    """
    records: list[RequestRecord] = []
    started = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="twin-silicon-") as tmp:
            run = plan_run(plan, Path(tmp))
            summary = run.simulate(on_record=records.append)
    except TwinError as err:
        return {"twin_error": str(err).splitlines()[0]}
    wall = time.perf_counter() - started
    measured = [r for r in records if r.session_id >= plan.warmup]
    rejected = sum(r.rejected for r in measured)
    if rejected or not measured:
        return {"twin_error": f"{rejected} request(s) larger than the replica's KV pool"}
    ttft = [r.ttft_s * 1e3 for r in measured]
    tpot = [r.tpot_s * 1e3 for r in measured if r.output_tokens >= 2]
    queue = [r.queue_s * 1e3 for r in measured]
    pool = (summary.cluster.replicas or ({},))[0].get("pool", {})
    return {
        "twin_ttft_ms": _mean(ttft),
        "twin_tpot_ms": _mean(tpot),
        "twin_ttft_p50_ms": _median(ttft),
        "twin_tpot_p50_ms": _median(tpot),
        "twin_queue_ms": _mean(queue),
        "twin_preemptions": int(sum(r.preemptions for r in measured)),
        "twin_peak_running": pool.get("peak_running_requests"),
        "twin_pool_gb": (pool.get("bytes") or 0) / 1e9,
        "twin_steady_state": None if summary.steady_state is None else summary.steady_state.verdict,
        "twin_sim_s": float(summary.cluster.sim_end_s or math.nan),
        "twin_wall_s": wall,
    }


def kernel_tables(version: str) -> str:
    """``build_run``'s ``kernel_tables`` for a row run at engine ``version``: that release
    when it is a version number, else "" (``--engine NAME==VERSION``'s release then)."""
    return version if version_key(version) is not None else ""
