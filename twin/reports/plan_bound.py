"""``twin plan``'s analytic check of a candidate before any simulation (see
:mod:`reports.plan`): its weights fit next to its cache, a lone decode step fits a TPOT or
ITL target, and its lower bound on replicas from the cheapest price per token of any step
it can run and the workload's tokens per second."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from twin.costmodel.profile_store import resolve_profile
from twin.engine import memory_budget
from twin.engine.config import PipelineConflict
from twin.engine.modes import get_mode
from twin.engine.run_pricing import priced_profile
from twin.errors import TwinError
from twin.presets import resolve_model
from twin.reports.parallel_axes import PP_FLAG, bound_pricer, layout_settings, lone_decode_s
from twin.reports.plan_result import Candidate, Load
from twin.reports.plan_routers import with_router
from twin.reports.sweep import Point, SweepSpec, resolve
from twin.slo import Slo
from twin.workload_stats import summarize
from twin.workloads.reader import Workload

# The share of the analytic work a replica must be able to do (see analyse): below 1
# because a stable verdict tolerates a window whose arrivals still rise by up to 25%
# (twin.steady_state.MAX_RAMP; 1/1.25 = 0.8) and a load a little past capacity can
# still read as stable over a short window; 0.75 leaves room for both (judgement call).
BOUND_SHARE = 0.75
# Prefill chunks and decode batches whose prices the bound compares: every halving of
# the step budget down to this many tokens (GEMM efficiency is not monotone in size).
SMALLEST_PRICED_STEP = 64


def workload_stats(path: str | Path) -> dict[str, Any]:
    """What the analytic bound needs from the workload, per request and per session: prompt
    tokens an unbounded prefix cache would not hit, decode tokens, turns, the file's rate."""
    s = summarize(Workload.open(Path(path)))
    requests, sessions = s["requests"], s["sessions"]
    tokens = s["tokens"]
    return {
        "requests": requests,
        "sessions": sessions,
        "mean_prompt_tokens": tokens["prompt_total"] / requests,
        "mean_output_tokens": tokens["output_total"] / requests,
        "infinite_cache_token_hit_rate": s["infinite_cache"]["token_hit_rate"],
        "uncached_prompt_tokens_per_request": (
            tokens["prompt_total"] - s["infinite_cache"]["hit_tokens"]
        )
        / requests,
        # The first output token comes with the prefill; the others are decode steps.
        "decode_tokens_per_request": (tokens["output_total"] - requests) / requests,
        "requests_per_session": requests / sessions,
        "file_session_rate": s["arrivals"]["session_rate_per_s"],
        "file_request_rate": s["arrivals"]["request_rate_per_s"],
        "file_arrival_span_s": s["arrivals"]["span_s"],
    }


def cheapest_token_s(
    pricer: Any, max_batched_tokens: int, max_running: int, ranks: int = 1
) -> float:
    """The lowest price per token of any step shape a replica runs: prefill chunks, decode
    batches (context 1 each) and mixed steps, at every halving of the step budget. With
    ``ranks`` attention data-parallel ranks (``pricer`` is their synchronised pricer,
    ``twin.engine.dp_pricing.DPStepPricer``) every rank runs the shape at once, each
    with its own step budget, and the step's tokens are all of theirs."""

    def per_token(prefills: list[tuple[int, int]], batch: int, tokens: int) -> float:
        if ranks == 1:
            return float(pricer.step_time(prefills, batch, batch)) / tokens
        step = (prefills, batch, batch)
        return float(pricer.sync_time([step] * ranks)) / (ranks * tokens)

    prices = []
    t = max_batched_tokens
    while t >= min(SMALLEST_PRICED_STEP, max_batched_tokens):
        prices.append(per_token([(t, 0)], 0, t))
        b = min(max_running, t)
        prices.append(per_token([], b, b))
        if t > b:
            prices.append(per_token([(t - b, 0)], b, t))
        t //= 2
    return min(prices)


@dataclass(frozen=True)
class Analysis:
    """A candidate's checks before simulation: why it cannot run, or its lower bound."""

    spec: SweepSpec | None
    profile: str
    infeasible: str | None
    lower_bound: int
    bound: str
    # Pipeline stages with what the engine does not model (``PipelineConflict``): the
    # counted reason the plan skips the candidate.
    skipped: str | None = None


def analyse(
    cand: Candidate,
    base: SweepSpec,
    load: Load,
    slos: Sequence[Slo],
    stats: dict[str, Any],
) -> Analysis:
    """Resolve ``cand``'s sweep spec and check it before any simulation (see the module).

    Nothing here depends on the candidate's router but the spec's ``router`` setting: the
    checks and the lower bound (unbounded-cache misses, the cheapest step price) are the
    same for every router (:mod:`reports.plan_routers`)."""
    layout = cand.serving
    spec = replace(
        base,
        gpu=cand.gpu,
        engine=cand.engine,
        settings=(*layout_settings(cand.parallel), *with_router(base.settings, cand.router)),
        layout="" if layout.aggregated else layout.name,
    )
    mode = get_mode(cand.engine)
    try:
        profile = resolve_profile(cand.gpu, None, mode.kernels)
        spec = resolve(spec)
    except TwinError as err:
        return Analysis(None, "", f"no step prices: {err}", 1, "")
    model = resolve_model(spec.model, spec.model_set)
    point = Point(cand.cache_gb, cand.policy, load.session_rate, 0, 1)
    try:
        # A tp that does not divide the model's heads, a mode refusing this model, or a
        # parallel layout the engine configuration refuses (twin simulate's own checks).
        config = spec.config(point, profile)
        # the experts as the run prices them
        priced = priced_profile(model, profile, config.mode.engine, config.mode.engine_flags)
        pricer = bound_pricer(model, priced, cand.parallel, cand.engine)
    except TwinError as err:
        skipped = f"{PP_FLAG} with {err.conflict}" if isinstance(err, PipelineConflict) else None
        return Analysis(spec, spec.profile_label, f"cannot run: {err}", 1, "", skipped)
    try:
        memory_budget(model, config)
    except TwinError as err:
        return Analysis(spec, spec.profile_label, f"does not fit: {err}", 1, "")
    lone = lone_decode_s(pricer) * 1e3
    for slo in slos:
        if slo.metric in ("tpot", "itl") and lone > slo.threshold_ms:
            return Analysis(
                spec,
                spec.profile_label,
                f"one decode step alone takes {lone:.3g} ms, over {slo} at any replica count",
                1,
                "",
            )
    rate = load.session_rate if load.concurrency is None else None
    if rate is None and load.concurrency is None:
        rate = stats.get("file_session_rate")
    if load.request_rate is not None:
        # The file's timed arrivals come at this many a second (twin simulate
        # --request-rate scales them; closed-loop turns, if any, follow their answers on
        # top): at least this many requests a second, a lower bound on the work.
        rate = load.request_rate / stats["requests_per_session"]
    if rate is None:
        how = (
            "1: closed-loop clients set their own rate"
            if load.concurrency is not None
            else "1: the workload's arrival rate is unknown"
        )
        return Analysis(spec, spec.profile_label, None, 1, how)
    ranks = cand.dp_attention
    per_token = cheapest_token_s(
        pricer, config.scheduling.max_batched_tokens, config.scheduling.max_running, ranks
    )
    tokens = stats["uncached_prompt_tokens_per_request"] + stats["decode_tokens_per_request"]
    requests_per_s = rate * stats["requests_per_session"]
    work = requests_per_s * tokens * per_token  # replica-seconds per second
    # A disaggregated copy's workers split the same tokens between them (prefill and
    # decode): no worker is faster than the cheapest price, so a copy does at most its
    # workers' share of the work.
    bound = max(1, math.ceil(BOUND_SHARE * work / layout.workers - 1e-9))
    how = (
        f"{bound}: {requests_per_s:,.4g} requests/s x {tokens:,.0f} tokens (uncached prompt + "
        f"decode) x {per_token * 1e9:,.4g} ns/token (cheapest step price) = {work:,.3g} "
        f"replicas busy, x {BOUND_SHARE:g}"
        + ("" if layout.aggregated else f", / {layout.workers} workers a copy")
        + ("" if ranks == 1 else f"; a step of {ranks} attention ranks in lockstep")
    )
    return Analysis(spec, spec.profile_label, None, bound, how)
