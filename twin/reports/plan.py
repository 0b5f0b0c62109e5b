"""``twin plan``: the cheapest deployment meeting every SLO at a given load.

A *candidate* is a GPU type x engine mode x parallel layout of a replica (tensor
parallelism, with expert and attention data parallelism among its GPUs:
:mod:`reports.parallel_axes`) x cache setting x serving layout (aggregated, or
``xPyD`` prefill and decode workers: :mod:`reports.layouts`) x router
(:mod:`reports.plan_routers`); a *deployment* is a
candidate on some number of replicas (copies of its layout), costing replicas x tp (x
the layout's workers) x the GPU's on-demand price per hour (:mod:`reports.prices`):
expert and attention data parallelism split a replica's GPUs, they add none.
:func:`plan` finds, per candidate, the fewest replicas meeting every SLO with a
stable steady state (:func:`reports.verdicts.meets`), by a search over the
replica count (:mod:`reports.plan_search`), and the cheapest candidate wins.

Before any simulation each candidate gets a cheap analytic check
(:func:`analyse`): the weights must fit its GPUs next to its cache
(:func:`twin.engine.memory_budget`), a lone decode step must fit a TPOT or ITL
target, and its *lower bound* on replicas comes from the engine's own step
prices: a replica cannot process tokens faster than the cheapest price per token
of any step it can run, so the workload's tokens per second (prompt tokens an
unbounded prefix cache would not hit, plus decode tokens) need at least that
many replicas (whatever the router: the bound assumes an unbounded cache, the most any
routing realises). Candidates are searched cheapest lower bound first, at most
``jobs`` at once (their points run in parallel, one batch per step, through
:func:`reports.sweep.run_pairs`, kept in ``OUT/results.parquet``: a rerun
resumes); one whose lower bound already costs more than the best deployment
found is pruned unsimulated, and no search asks for a replica count costing
more than that. Every rule and constant is in docs/decisions.md, "twin plan
(issue 37)".
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from twin.costmodel.profile_store import resolve_profile
from twin.engine import memory_budget
from twin.engine.config import PipelineConflict
from twin.engine.modes import get_mode
from twin.engine.run import priced_profile
from twin.errors import TwinError
from twin.hardware import GPUS
from twin.limits import MAX_CACHE_GB, MAX_TP
from twin.policies import POLICIES
from twin.presets import resolve_model
from twin.reports.analysis import parse_slos
from twin.reports.layouts import AGG, parse_layouts
from twin.reports.parallel_axes import (
    PP_FLAG,
    bound_pricer,
    layout_settings,
    lone_decode_s,
    parallel_layouts,
    parse_degrees,
)
from twin.reports.plan_result import (
    _CENTS,
    COSTLIER,
    INFEASIBLE,
    MEETS,
    PRUNED,
    UNJUDGED,
    WINNER,
    Candidate,
    CandidateResult,
    Load,
    PlanResult,
    SeedRun,
    Trial,
)
from twin.reports.plan_routers import (
    DEFAULT_ROUTERS,
    MIN_REUSE_SHARE,
    auto_routers,
    resolve_routers,
    router_order,
    with_router,
)
from twin.reports.plan_search import (
    DEFAULT_SEARCH,
    FALLBACK,
    MAX_SEARCH_REPLICAS,
    ReplicaSearch,
    get_search,
    non_monotone,
)
from twin.reports.prices import load_prices
from twin.reports.ray_executor import import_ray
from twin.reports.sweep import (
    EXECUTORS,
    INFEASIBLE_COLUMN,
    Point,
    SweepSpec,
    resolve,
    run_pairs,
)
from twin.reports.verdicts import RUN_LENGTH, binding_resource, meets, verdict_of
from twin.slo import Slo
from twin.steady_state import OVERLOADED, STABLE
from twin.workload_stats import summarize
from twin.workloads.importers.base import sha256_file
from twin.workloads.reader import Workload

WORKLOAD_CACHE = "workloads"  # OUT/workloads: workloads stretched for --duration
# What a search asks for in one step (_Searcher._next).
PROBE, CONFIRM, HOLD = "probe", "confirm", "hold"

DEFAULT_GPUS = ("h100", "h200", "b200")
DEFAULT_ENGINES = ("vllm", "sglang")
DEFAULT_TP = (1, 2, 4, 8)
DEFAULT_CACHE = ("auto",)
DEFAULT_LAYOUTS = (AGG,)
DEFAULT_EP: tuple[int | str, ...] = (1,)  # --ep: no expert parallelism unless asked
DEFAULT_DP_ATTENTION: tuple[int | str, ...] = (1,)  # --dp-attention, likewise
DEFAULT_PP: tuple[int | str, ...] = (1,)  # --pp: one stage unless asked
# The share of the analytic work a replica must be able to do (see analyse): below 1
# because a stable verdict tolerates a window whose arrivals still rise by up to 25%
# (twin.steady_state.MAX_RAMP; 1/1.25 = 0.8) and a load a little past capacity can
# still read as stable over a short window; 0.75 leaves room for both (judgement call).
BOUND_SHARE = 0.75
# Prefill chunks and decode batches whose prices the bound compares: every halving of
# the step budget down to this many tokens (GEMM efficiency is not monotone in size).
SMALLEST_PRICED_STEP = 64
# Screening runs (successive halving's first rung): each replica count a search asks for
# is first simulated for SCREEN_FRACTION of --duration; only a count the short run does not
# rule out gets the full run. A short run rules a count out when its steady state is
# judged overloaded (a queue growing over a quarter of the run grows over all of it) or
# a target is missed by more than SCREEN_MARGIN times its threshold (a judgement call: the
# short window's P95 carries a colder cache and fewer samples, which move it by tens of
# percent, not by half). Runs shorter than SCREEN_MIN_S simulated seconds are not screened
# (too few requests to judge). benchmarks/bench_plan.py counts the full runs saved and
# checks, against every full run of the same space, that no count screened out would
# have met the SLOs.
SCREEN_FRACTION = 0.25
SCREEN_MARGIN = 1.5
SCREEN_MIN_S = 60.0
# Seeds (--seeds): every probe runs seed 0; a replica count that would decide the answer
# (a candidate's fewest found to meet the SLOs, costing no more than the best confirmed so
# far) is rerun with seeds 1 .. N-1 and meets only if it meets under every seed. 3 by
# default: a count that meets under each seed half of the time (a coin flip at the SLO's
# edge) passes one seed with probability 1/2 and three with 1/8, for two more full runs
# of the deciding count (a judgement call; the spread of three is also the least from
# which a t-interval is reported). The seed draws the Poisson session starts
# (--session-rate); without a rate every seed runs the same, so seed 0 alone decides.
DEFAULT_SEEDS = 3
# More than this many runs of one count says nothing a t-interval of them would not.
MAX_SEEDS = 100
# --- inputs ------------------------------------------------------------------------


def _gpus(names: Sequence[str]) -> list[str]:
    out = []
    for name in names:
        gpu = name.strip().lower()
        if gpu not in GPUS:
            raise TwinError(f"--gpus: unknown GPU {name!r}; choose from {', '.join(GPUS)}")
        out.append(gpu)
    if not out:
        raise TwinError("--gpus: give at least one GPU, e.g. h100,h200")
    return list(dict.fromkeys(out))


def cache_choices(
    cache: Sequence[str | float], policies: Sequence[str] = ()
) -> list[tuple[str, str]]:
    """(cache setting, policy) pairs searched: the shared pool with the engine mode's own
    policy (its pool is the mode's); each dedicated size with each of ``policies``, or with
    the mode's own (``""``) when none is given. A bad setting or policy fails in one line."""
    caches = _caches(cache)

    for name in policies:
        if name not in POLICIES:
            raise TwinError(
                f"--policies: unknown policy {name!r}; choose from {', '.join(POLICIES)}"
            )
        if POLICIES[name].hindsight:  # twin simulate refuses it too (one replay per alpha)
            raise TwinError(
                f"--policies: {name!r} is a hindsight bound, not an online policy a "
                "deployment can run"
            )
    if len(set(policies)) != len(policies):
        raise TwinError(f"--policies {','.join(policies)}: a policy is given twice")
    return [
        (c, p) for c in caches for p in ([""] if c == "auto" or not policies else list(policies))
    ]


def _engines(names: Sequence[str]) -> list[str]:
    """Engine modes, each optionally at a release (``vllm==0.19``: kept as the release's
    full version, ``vllm==0.19.0``, as ``twin simulate --engine`` takes it)."""
    out = []
    for name in names:
        mode = get_mode(name.strip(), "--engines")
        out.append(mode.name if mode.release is None else f"{mode.name}=={mode.release.version}")
    if not out:
        raise TwinError("--engines: give at least one engine mode, e.g. vllm,sglang")
    return list(dict.fromkeys(out))


def _tps(values: Sequence[int]) -> list[int]:
    out = [int(v) for v in values]
    if not out or any(not 1 <= v <= MAX_TP for v in out):
        raise TwinError(f"--tp: each must be a whole number from 1 to {MAX_TP} (got {values})")
    return list(dict.fromkeys(out))


def _caches(values: Sequence[str | float]) -> list[str]:
    out = []
    for value in values:
        text = str(value).strip().lower()
        if text == "auto":
            out.append("auto")
            continue
        try:
            gb = float(text)
        except ValueError:
            raise TwinError(f"--cache-gb {value!r}: expected auto or a number of GB") from None
        if not (math.isfinite(gb) and 0 <= gb <= MAX_CACHE_GB):
            raise TwinError(f"--cache-gb {value!r}: must be auto or 0 to {MAX_CACHE_GB:g} GB")
        out.append(f"{gb:g}")
    if not out:
        raise TwinError("--cache-gb: give at least one setting, e.g. auto")
    return list(dict.fromkeys(out))


def _seeds(seeds: int, load: Load) -> tuple[tuple[int, ...], list[str]]:
    """The seeds a deciding count must meet the SLOs under, and a note when the load makes
    the seed irrelevant (no session rate: nothing random left to draw)."""
    if isinstance(seeds, bool) or not isinstance(seeds, int) or not 1 <= seeds <= MAX_SEEDS:
        raise TwinError(f"--seeds {seeds!r}: must be a whole number from 1 to {MAX_SEEDS}")
    if seeds > 1 and load.session_rate is None:
        return (0,), [
            f"--seeds {seeds}: the seed only draws Poisson session starts (--session-rate); "
            "with the workload's own arrival times or closed-loop clients every seed runs "
            "the same, so seed 0 alone decided"
        ]
    return tuple(range(seeds)), []


def parse_load(
    session_rate: float | None,
    concurrency: int | None,
    duration_s: float | None,
    warmup_s: float | None = None,
    request_rate: float | None = None,
) -> Load:
    """The load every candidate is sized for, checked (one line naming the flag)."""
    given = [
        flag
        for flag, v in (
            ("--rate", request_rate),
            ("--session-rate", session_rate),
            ("--concurrency", concurrency),
        )
        if v is not None
    ]
    if len(given) > 1:
        raise TwinError(f"{' and '.join(given)} each set the load: give one of them")
    for flag, rate in (("--session-rate", session_rate), ("--rate", request_rate)):
        if rate is not None and not (math.isfinite(rate) and rate > 0):
            raise TwinError(f"{flag} {rate:g}: must be a positive number")
    if concurrency is not None and concurrency < 1:
        raise TwinError(f"--concurrency {concurrency}: must be at least 1")
    if duration_s is not None and not (math.isfinite(duration_s) and duration_s > 0):
        raise TwinError(f"--duration {duration_s:g}: must be a positive number of seconds")
    if warmup_s is not None and not (math.isfinite(warmup_s) and warmup_s >= 0):
        raise TwinError(f"--warmup-s {warmup_s:g}: must be a number of seconds >= 0")
    if warmup_s is not None and duration_s is not None and warmup_s >= duration_s:
        raise TwinError(f"--warmup-s {warmup_s:g}: must be shorter than --duration {duration_s:g}")
    # Floats, as reports.sweep.grid keeps rates: a point of 4 and one of 4.0 share a key.
    return Load(
        None if session_rate is None else float(session_rate),
        concurrency,
        None if duration_s is None else float(duration_s),
        None if warmup_s is None else float(warmup_s),
        None if request_rate is None else float(request_rate),
    )


def check_executor(executor: str, ray_address: str | None = None) -> None:
    """Refuse an unknown ``--executor``, or ``ray`` not installed or not answering at
    ``ray_address``, in one line before any work (:mod:`reports.ray_executor`)."""
    if executor not in EXECUTORS:
        raise TwinError(f"--executor {executor!r}: choose from {', '.join(EXECUTORS)}")
    if executor == "ray":
        import_ray(ray_address)


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


# --- the analytic bound -------------------------------------------------------------


def cheapest_token_s(
    pricer: Any, max_batched_tokens: int, max_running: int, ranks: int = 1
) -> float:
    """The lowest price per token of any step shape a replica runs: prefill chunks, decode
    batches (context 1 each) and mixed steps, at every halving of the step budget. With
    ``ranks`` attention data-parallel ranks (``pricer`` is their synchronised pricer,
    ``twin.engine.dp_attention.DPStepPricer``) every rank runs the shape at once, each
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


# --- the plan ------------------------------------------------------------------------


@dataclass
class PlanProgress:
    """Where a plan stands, for a progress bar."""

    total: int
    evaluated: int = 0  # candidates whose search finished (simulated)
    pruned: int = 0  # candidates settled without simulation
    points: int = 0  # points simulated or found so far

    @property
    def settled(self) -> int:
        return self.evaluated + self.pruned


def _rank(c: CandidateResult, slos: Sequence[Slo]) -> tuple[float, int, float, int, int, str]:
    """Winner order: cost, then GPUs, then the worst target's share of its threshold
    (more headroom first), then fewer parallel splits (expert parallelism priced at the
    same tp often ties its plain layout exactly: the simpler deployment wins), then the
    router's place in the registry (on one replica every router ties exactly:
    round-robin, which reads nothing of the replicas, wins), then the label (a fixed
    order)."""
    t = c.trial(c.replicas)
    shares = [
        math.inf if v is None else v / s.threshold_ms
        for s in slos
        for v in [t.worst(s.text) if t else None]
    ]
    cost = c.usd_per_hour if c.usd_per_hour is not None else math.inf
    worst = max(shares, default=0.0)
    cand = c.candidate
    return (round(cost, 9), c.gpus or 0, worst, cand.splits, router_order(cand.router), cand.label)


def plan(
    workload: str | Path,
    out: str | Path,
    *,
    model: str,
    slos: Sequence[str | Slo],
    model_set: Sequence[str] = (),
    session_rate: float | None = None,
    concurrency: int | None = None,
    rate: float | None = None,
    duration_s: float | None = None,
    warmup_s: float | None = None,
    gpus: Sequence[str] = DEFAULT_GPUS,
    engines: Sequence[str] = DEFAULT_ENGINES,
    tp: Sequence[int] = DEFAULT_TP,
    cache: Sequence[str | float] = DEFAULT_CACHE,
    layouts: Sequence[str] = DEFAULT_LAYOUTS,
    ep: Sequence[int | str] = DEFAULT_EP,
    dp_attention: Sequence[int | str] = DEFAULT_DP_ATTENTION,
    pp: Sequence[int | str] = DEFAULT_PP,
    prices: str | Path | None = None,
    budget_gpus: int | None = None,
    router: str | None = None,
    routers: Sequence[str] | None = None,
    policies: Sequence[str] = (),
    search: str = DEFAULT_SEARCH,
    jobs: int = 1,
    screen: bool = True,
    seeds: int = DEFAULT_SEEDS,
    executor: str = "local",
    ray_address: str | None = None,
    command: str = "twin plan (invoked programmatically)",
    progress: Callable[[PlanProgress], None] | None = None,
) -> PlanResult:
    """Find the cheapest deployment of ``model`` meeting every SLO in ``slos`` for
    ``workload`` at the load given (``session_rate``, ``concurrency`` closed-loop
    clients, or ``rate`` open-loop requests per second: the workload's arrival times
    scaled to it, as ``twin simulate --request-rate`` runs them; for ``duration_s``
    simulated seconds, the first ``warmup_s`` left out of the numbers); write
    ``OUT/plan.json``, ``OUT/report.md`` and ``OUT/report.html``; return what it found.

    Every input is checked before the first simulation (one-line ``TwinError``s).
    ``prices`` is a TOML price table replacing the shipped one; ``budget_gpus`` caps
    the GPUs (replicas x tp, x the workers of a disaggregated layout) of every
    deployment; ``layouts`` are the serving layouts searched (``agg``, ``1p1d``, ...:
    :mod:`reports.layouts`; each a candidate of its own, its replicas copies of it);
    ``ep`` and ``dp_attention`` the expert-parallel and attention data-parallel degrees
    searched with each ``tp`` (whole numbers, or ``("auto",)``: 1 and ``tp`` for a MoE
    model; only the layouts the model can take: :mod:`reports.parallel_axes`); ``pp``
    the pipeline stages (``("auto",)``: 1 and 2; a replica is then ``tp x pp`` GPUs);
    ``routers`` the routers searched (names of ``twin.engine.ROUTERS``, or ``("auto",)``:
    round-robin, and the prefix-placing routers when the workload reuses prefixes;
    ``router`` one router, the same as ``routers=(router,)``; neither: round-robin:
    :mod:`reports.plan_routers`); ``policies`` the prefix-cache policies searched for each
    dedicated cache size in ``cache`` (names of ``twin.policies.POLICIES``; none: the
    engine mode's own; the shared pool ``auto`` always runs the mode's); ``search`` names
    the replica search
    (:data:`reports.plan_search.SEARCHES`);
    ``seeds``: a count that decides the answer must meet the SLOs under seeds 0 to
    ``seeds - 1`` (:data:`DEFAULT_SEEDS`); ``executor`` ``"ray"`` runs each step's points
    as ray tasks (``ray_address``: the cluster; ``twin report capacity``'s executor,
    :mod:`reports.ray_executor`); ``progress`` sees the counts as they move.
    """
    slo_list = parse_slos(list(slos))
    if not slo_list:
        raise TwinError("--slo: give at least one target, e.g. --slo 'p95_ttft<=500ms'")
    load = parse_load(session_rate, concurrency, duration_s, warmup_s, rate)
    seed_list, seed_notes = _seeds(seeds, load)
    gpu_names, engine_names = _gpus(gpus), _engines(engines)
    tps, choices = _tps(tp), cache_choices(cache, policies)
    serving = [layout.name for layout in parse_layouts(layouts)]
    eps, dps = parse_degrees(ep, "--ep"), parse_degrees(dp_attention, "--dp-attention")
    pps = parse_degrees(pp, PP_FLAG)
    strategy = get_search(search)
    if budget_gpus is not None and budget_gpus < 1:
        raise TwinError(f"--budget-gpus {budget_gpus}: must be at least 1")
    if jobs < 1:
        raise TwinError(f"--jobs {jobs}: must be at least 1")
    check_executor(executor, ray_address)
    router_names = resolve_routers(routers, router)  # None: auto, once the workload is read
    table = load_prices(prices)
    for gpu in gpu_names:
        table.price(gpu)  # a GPU without a price fails before any work
    spec_model = resolve_model(model, model_set)  # a bad --model fails before any work
    # The replica layouts the model can take (a degree no --tp can take fails here).
    parallel, dropped = parallel_layouts(spec_model, tps, eps, dps, pps)
    path = Path(workload)
    if not path.is_file():
        raise TwinError(f"{path}: no such workload file")
    out_dir = Path(out)

    # Each candidate sets its own router (plan_routers.with_router), in this place.
    settings: list[tuple[str, object]] = [("router", DEFAULT_ROUTERS[0])]
    if load.concurrency is not None:
        settings.append(("concurrency", load.concurrency))
    if load.request_rate is not None:
        settings.append(("request_rate", load.request_rate))
    if load.warmup_s is not None:
        settings.append(("warmup_s", load.warmup_s))
    if load.duration_s is not None:
        settings += [
            ("duration_s", float(load.duration_s)),
            ("workload_cache", str(out_dir / WORKLOAD_CACHE)),
        ]
    base = SweepSpec(
        workload=str(workload),
        model=model,
        model_set=tuple(model_set),
        settings=tuple(settings),
        slos=tuple(s.text for s in slo_list),
    )
    stats = workload_stats(path)
    if load.request_rate is not None and not stats["file_arrival_span_s"]:
        raise TwinError(
            f"--rate: {path} has no open-loop arrival span to scale (fewer than two "
            "distinct arrival times); give --session-rate or --concurrency"
        )
    auto_notes: list[str] = []
    if router_names is None:
        hit = stats["infinite_cache_token_hit_rate"]
        router_names = auto_routers(hit)
        auto_notes.append(
            f"--routers auto: {', '.join(router_names)} (an unbounded prefix cache would hit "
            f"{hit:.1%} of the workload's prompt tokens; the prefix-placing routers are "
            f"searched from {MIN_REUSE_SHARE:.0%})"
        )
    screen_s = (load.duration_s or 0.0) * SCREEN_FRACTION
    screening = screen and load.duration_s is not None and screen_s >= SCREEN_MIN_S
    searcher = _Searcher(slo_list, load, out_dir, jobs, progress, screening, seed_list)
    searcher.shared_router = min(router_names, key=router_order)
    searcher.executor, searcher.ray_address = executor, ray_address
    axes = (gpu_names, engine_names, parallel, choices, serving, router_names)
    searcher.state.total = math.prod(len(axis) for axis in axes)
    searcher.tell()
    refused: dict[str, int] = {}  # pipelined candidates the engine does not model, by why
    for gpu, engine, par, (c, pol), layout, via in itertools.product(*axes):
        own = pol if pol != get_mode(engine).policy else ""  # the mode's own: no name
        cand = Candidate(gpu, engine, par.tp, c, layout, par.ep, par.dp, via, par.pp, own)
        res = CandidateResult(cand, table.price(gpu).usd_per_gpu_hour)
        res.search = strategy.name
        res.limit = MAX_SEARCH_REPLICAS
        if budget_gpus is not None:
            res.limit = min(res.limit, budget_gpus // cand.gpus_per_replica)
        spec = _check(res, base, load, slo_list, stats, budget_gpus)
        why = res.skipped if spec is None else None
        if why is not None:  # not a deployment the engines offer: skipped, counted
            refused[why] = refused.get(why, 0) + 1
            searcher.state.total -= 1
            continue
        searcher.add(res, spec, strategy)
    searcher.run()
    result = PlanResult(
        command=command,
        workload=str(workload),
        workload_sha256=sha256_file(path),
        model=model,
        model_set=tuple(model_set),
        slos=slo_list,
        load=load,
        routers=router_names,
        cache_policies=tuple(policies),
        prices=table,
        budget_gpus=budget_gpus,
        search=strategy.name,
        candidates=searcher.results,
        points_run=searcher.points_run,
        points_found=searcher.points_found,
        workload_stats=stats,
        screen_points_run=searcher.screen_points_run,
        screen_points_found=searcher.screen_points_found,
        screened_out=searcher.screened_out,
        seeds=seed_list,
        confirm_points_run=searcher.confirm_points_run,
        confirm_points_found=searcher.confirm_points_found,
        nodes=searcher.nodes,
        notes=_decide(searcher.results, slo_list)
        + seed_notes
        + auto_notes
        + (
            [
                f"{len(dropped)} combination(s) of --tp, --ep, --dp-attention and --pp the model "
                f"cannot take were not planned: {'; '.join(dropped)}"
            ]
            if dropped
            else []
        )
        + [
            f"{n} pipelined candidate(s) skipped: {why} is not modelled (twin simulate refuses it)"
            for why, n in refused.items()
        ]
        + (
            [
                f"screening was off: it needs --duration of at least "
                f"{SCREEN_MIN_S / SCREEN_FRACTION:g} s (a quarter of it, {SCREEN_MIN_S:g} s, "
                "to judge a short run); every replica count ran in full"
            ]
            if screen and not screening
            else []
        ),
    )
    from twin.reports.plan_render import write_plan

    write_plan(out_dir, result)
    return result


def _check(
    res: CandidateResult,
    base: SweepSpec,
    load: Load,
    slos: Sequence[Slo],
    stats: dict[str, Any],
    budget_gpus: int | None,
) -> SweepSpec | None:
    """The checks before simulation; the candidate's spec, or None (``res`` says why)."""
    cand = res.candidate
    if res.limit < 1:
        res.outcome = INFEASIBLE
        what = f"tp {cand.tp}" + ("" if cand.layout == AGG else f" {cand.layout}")
        what += f" ep {cand.ep}" * (cand.ep > 1)
        what += f" attention DP {cand.dp_attention}" * (cand.dp_attention > 1)
        what += f" pp {cand.pp}" * (cand.pp > 1)
        res.reason = (
            f"{what} ({cand.gpus_per_replica} GPUs) needs more GPUs than --budget-gpus "
            f"{budget_gpus} allows"
        )
        return None
    found = analyse(res.candidate, base, load, slos, stats)
    res.profile, res.lower_bound, res.bound = found.profile, found.lower_bound, found.bound
    if found.infeasible is not None:
        res.outcome, res.reason = INFEASIBLE, found.infeasible
        res.skipped = found.skipped
        return None
    if found.lower_bound > res.limit:
        res.outcome = INFEASIBLE
        res.reason = (
            f"needs at least {found.lower_bound} replicas (the analytic bound), more than "
            f"the {res.limit} allowed"
            + (f" by --budget-gpus {budget_gpus}" if budget_gpus is not None else "")
        )
        return None
    return found.spec


class _Searcher:
    """Runs the candidates' searches: cheapest lower bound first, at most ``jobs`` at once,
    one batch of points per step, pruning against the best deployment found."""

    def __init__(
        self,
        slos: Sequence[Slo],
        load: Load,
        out: Path,
        jobs: int,
        progress: Callable[[PlanProgress], None] | None,
        screen: bool = False,
        seeds: Sequence[int] = (0,),
    ) -> None:
        self.slos, self.load, self.out, self.jobs = slos, load, out, jobs
        # Where the points run (reports.sweep.EXECUTORS): local processes, or ray tasks;
        # the points each ray node ran.
        self.executor: str = "local"
        self.ray_address: str | None = None
        self.nodes: dict[str, int] = {}
        self.progress = progress
        self.screen = screen
        self.screen_points_run = self.screen_points_found = self.screened_out = 0
        # The confirmation seeds (seed 0 runs every probe); none: seed 0 alone decides.
        self.extra = tuple(seeds[1:])
        self.confirm_points_run = self.confirm_points_found = 0
        # The cheapest count of an active candidate that met the SLOs with seed 0 and is
        # not yet confirmed: dearer probes wait for its confirmation (inf: none).
        self.provisional = math.inf
        self.state = PlanProgress(total=0)
        self.results: list[CandidateResult] = []
        self.specs: dict[int, SweepSpec] = {}
        self.searches: dict[int, ReplicaSearch] = {}
        self.best = math.inf  # $/hour of the cheapest deployment found to meet the SLOs
        self.points_run = self.points_found = 0
        # The router whose run a count where the router has no choice shares (_spec).
        self.shared_router = DEFAULT_ROUTERS[0]

    def tell(self) -> None:
        if self.progress is not None:
            self.progress(self.state)

    def add(
        self, res: CandidateResult, spec: SweepSpec | None, strategy: type[ReplicaSearch]
    ) -> None:
        self.results.append(res)
        if spec is None:
            self.state.pruned += 1
            self.tell()
            return
        self.specs[id(res)] = res.spec = spec
        self.searches[id(res)] = strategy(res.lower_bound or 1, res.limit)

    def _point(self, r: CandidateResult, n: int, seed: int = 0) -> Point:
        return Point(r.candidate.cache_gb, r.candidate.policy, self.load.session_rate, seed, n)

    def run(self) -> None:
        queue = sorted(
            (r for r in self.results if id(r) in self.searches),
            key=lambda r: (r.cost(r.lower_bound or 1), r.candidate.label),
        )
        active: list[CandidateResult] = []
        while queue or active:
            while len(active) < self.jobs and queue:
                nxt = queue.pop(0)
                if nxt.cost(nxt.lower_bound or 1) > self.best + _CENTS:
                    # The queue is in lower-bound cost order: every one left is pruned too.
                    for r in [nxt, *queue]:
                        self._prune(r)
                    queue = []
                    break
                active.append(nxt)
            asked: list[tuple[CandidateResult, int]] = []
            confirm: list[tuple[CandidateResult, int]] = []
            self.provisional = min(
                (r.cost(n) for r in active if (n := self._unconfirmed(r)) is not None),
                default=math.inf,
            )
            held: list[tuple[CandidateResult, int]] = []
            for r in list(active):
                ask = self._next(r)
                if ask is None:
                    active.remove(r)
                    continue
                n, kind = ask
                {PROBE: asked, CONFIRM: confirm, HOLD: held}[kind].append((r, n))
            if held and not (asked or confirm):
                # Cannot happen (the candidate holding the cheapest unconfirmed count asks
                # below it or confirms it), but never stall: run what waited.
                asked = held
            if asked or confirm:
                self._step(asked, confirm)

    def _prune(self, r: CandidateResult) -> None:
        r.outcome = PRUNED
        r.reason = (
            f"not simulated: its lower bound of {r.lower_bound} replica(s) costs "
            f"${r.cost(r.lower_bound or 1):,.2f}/h, more than the best found (${self.best:,.2f}/h)"
        )
        self.state.pruned += 1
        self.tell()

    def _unconfirmed(self, r: CandidateResult) -> int | None:
        """``r``'s fewest count meeting the SLOs with seed 0 that the other seeds have yet
        to confirm (None: none, or the plan has one seed)."""
        fewest = self.searches[id(r)].fewest
        return fewest if self.extra and fewest is not None and fewest not in r.confirmed else None

    def _next(self, r: CandidateResult) -> tuple[int, str] | None:
        """The candidate's next replica count, under the cost of the best found, and what
        to do with it: ``PROBE`` (seed 0), ``CONFIRM`` (the other seeds of a count that
        met the SLOs with seed 0) or ``HOLD`` (not this step); None (and the candidate
        settled) when its search is done."""
        s = self.searches[id(r)]
        if r.outcome:  # settled by a point that cannot run
            self.state.evaluated += 1
            self.tell()
            return None
        if math.isfinite(self.best):
            per_replica = r.candidate.gpus_per_replica * r.usd_per_gpu_hour
            s.cap(math.floor(self.best / per_replica + 1e-9))
        n = s.next()
        if n is not None:
            if r.cost(n) > self.provisional + _CENTS:
                # Dearer than a count another candidate has yet to confirm: wait for it
                # (a best, which caps and prunes, is only ever a confirmed count).
                return n, HOLD
            return n, PROBE
        if not s.tried:  # the best found fell below its lower bound's cost before it ran
            self._prune(r)
            return None
        fewest = self._unconfirmed(r)
        if fewest is not None and s.pinned and r.cost(fewest) <= self.best + _CENTS:
            # Its fewest could win (or tie): it must meet the SLOs under every seed.
            return fewest, CONFIRM
        _settle(r, s, self.best)
        self.state.evaluated += 1
        self.tell()
        return None

    def _spec(self, r: CandidateResult, n: int) -> SweepSpec:
        """The sweep spec of ``n`` replicas of ``r``: its own, but where the router has no
        choice (one replica, or a disaggregated copy with one prefill worker: every
        request goes to the same place), the plan's first router's, so the candidates
        differing only in their router share that run (identical under every router:
        tests/test_plan_routers.py). With one router it is always the candidate's own."""
        spec = self.specs[id(r)]
        cand = r.candidate
        pools = cand.serving.pools(n)
        alone = pools["prefill_workers"] == 1 if pools else n == 1
        if not alone or cand.router == self.shared_router:
            return spec
        return replace(spec, settings=with_router(spec.settings, self.shared_router))

    def _run(self, batch: list[tuple[SweepSpec, Point]]) -> tuple[list[dict[str, Any]], int]:
        """Each pair's row (one run per distinct key: pairs sharing a run ask once) and how
        many were simulated (the others were found in results.parquet or shared)."""
        keys = [spec.key(point) for spec, point in batch]
        first: dict[str, int] = {}
        unique: list[tuple[SweepSpec, Point]] = []
        for key, pair in zip(keys, batch, strict=True):
            if key not in first:
                first[key] = len(unique)
                unique.append(pair)
        outcome = run_pairs(
            unique,
            self.out,
            jobs=self.jobs,
            executor=self.executor,
            ray_address=self.ray_address,
        )
        for node, n in outcome.nodes.items():
            self.nodes[node] = self.nodes.get(node, 0) + n
        return [outcome.rows[first[key]] for key in keys], outcome.computed

    def _step(
        self,
        asked: list[tuple[CandidateResult, int]],
        confirm: Sequence[tuple[CandidateResult, int]] = (),
    ) -> None:
        """Simulate one replica count per candidate in ``asked`` (in parallel; short
        screening runs first when screening) and the other seeds of each count in
        ``confirm`` (full runs, a batch of their own); record them."""
        if self.screen:
            batch = [(screen_spec(self._spec(r, n)), self._point(r, n)) for r, n in asked]
            rows, computed = self._run(batch)
            self.screen_points_run += computed
            self.screen_points_found += len(batch) - computed
            full = []
            for (r, n), row in zip(asked, rows, strict=True):
                if row.get(INFEASIBLE_COLUMN):  # cannot run short: cannot run in full either
                    self._record(r, n, row, screened=False)
                elif screened_out(row, self.slos):
                    self.screened_out += 1
                    self._record(r, n, row, screened=True)
                else:
                    full.append((r, n))
            asked = full
        if asked:
            batch = [(self._spec(r, n), self._point(r, n)) for r, n in asked]
            rows, computed = self._run(batch)
            self.points_run += computed
            self.points_found += len(batch) - computed
            self.state.points += len(batch)
            for (r, n), row in zip(asked, rows, strict=True):
                self._record(r, n, row, screened=False)
        if confirm:
            batch = [
                (self._spec(r, n), self._point(r, n, seed))
                for r, n in confirm
                for seed in self.extra
            ]
            rows, computed = self._run(batch)
            self.confirm_points_run += computed
            self.confirm_points_found += len(batch) - computed
            self.state.points += len(batch)
            k = len(self.extra)
            for i, (r, n) in enumerate(confirm):
                self._confirm(r, n, rows[i * k : (i + 1) * k])
        self.tell()

    def _confirm(self, r: CandidateResult, n: int, rows: list[dict[str, Any]]) -> None:
        """The other seeds' runs of ``n`` replicas of ``r``, which met every SLO with seed
        0: confirmed when it meets them under every seed; else it counts as failing and
        the search goes on."""
        t = r.trial(n)
        assert t is not None  # a confirmation follows the count's seed-0 run
        by_seed = tuple(
            SeedRun(
                seed,
                {slo.text: row.get(slo.column) for slo in self.slos},
                not row.get(INFEASIBLE_COLUMN) and meets(row, self.slos),
                str(row.get(INFEASIBLE_COLUMN) or row.get("verdict")),
            )
            for seed, row in zip(self.extra, rows, strict=True)
        )
        ok = all(run.meets for run in by_seed)
        r.trials[r.trials.index(t)] = replace(t, meets=ok, by_seed=by_seed)
        if ok:
            r.confirmed.add(n)
            self.best = min(self.best, r.cost(n))
        else:
            self.searches[id(r)].record(n, False)

    def _record(self, r: CandidateResult, n: int, row: dict[str, Any], screened: bool) -> None:
        """One run of ``n`` replicas of ``r`` (a full one, or a screening run that ruled
        the count out): its trial, the search's answer, the best found, the fallback."""
        s = self.searches[id(r)]
        if row.get(INFEASIBLE_COLUMN):
            r.outcome = INFEASIBLE
            r.reason = f"cannot run on {n} replica(s): {row[INFEASIBLE_COLUMN]}"
            s.cap(0)  # its search is over
            return
        ok = not screened and meets(row, self.slos)
        values = {slo.text: row.get(slo.column) for slo in self.slos}
        r.trials.append(
            Trial(
                n,
                ok,
                str(row.get("verdict")),
                values,
                row.get("ttft_p95_ms"),
                row["key"],
                row.get("verdict_reason"),
                not screened and binding_resource(row, self.slos) == RUN_LENGTH,
                screened,
                output_tokens_per_s=row.get("output_tokens_per_s"),
            )
        )
        s.record(n, ok)
        if row.get("requests_rejected") and not row.get("requests_measured"):
            # Every request was too big for a replica's memory (the engine rejects one that
            # can never fit): each replica has the same memory, so no count serves any.
            r.outcome = INFEASIBLE
            r.reason = (
                f"does not fit: on {n} replica(s) all {row['requests_rejected']:,} requests "
                "were rejected, each too big for a replica's memory (a rank's, under "
                "attention DP); more replicas add none to one"
            )
            s.cap(0)  # its search is over
            return
        if ok and not self.extra:  # with more seeds, only a confirmed count sets the best
            self.best = min(self.best, r.cost(n))
        if len(r.trials) >= 2 and all(t.run_length for t in r.trials[-2:]):
            a, b = sorted(t.replicas for t in r.trials[-2:])
            r.outcome = UNJUDGED
            r.reason = (
                f"meets every target on {a} and on {b} replica(s), but neither run is long "
                f"enough to judge its steady state ({r.trials[-1].verdict_reason}); more "
                "replicas do not change that"
            )
            s.cap(0)  # its search is over
            return
        if r.fallback is None and s.name != FALLBACK:
            # A screening run's values are the short window's: only its verdict compares.
            why = non_monotone(
                [(t.replicas, t.meets, {} if t.screened else t.values_ms) for t in r.trials],
                self.slos,
            )
            if why is not None:
                r.fallback = why
                r.search = f"{s.name}, then {FALLBACK}"
                self.searches[id(r)] = get_search(FALLBACK)(s.lo, s.hi, s.tried)


def screen_spec(spec: SweepSpec) -> SweepSpec:
    """``spec`` run for :data:`SCREEN_FRACTION` of its duration (and of an explicit
    warm-up): the screening run of successive halving's first rung."""
    named = spec.run_settings()
    given = {"duration_s": named.get("duration_s"), "warmup_s": named.get("warmup_s")}
    scaled = {k: float(v) * SCREEN_FRACTION for k, v in given.items() if v is not None}
    return replace(spec, settings=tuple((k, scaled.get(k, v)) for k, v in spec.settings))


def screened_out(row: dict[str, Any], slos: Sequence[Slo]) -> bool:
    """Whether a screening run rules its replica count out: the steady state judged
    overloaded, or a target missed by more than :data:`SCREEN_MARGIN` times its threshold
    (a null value, nothing measured, rules nothing out)."""
    if verdict_of(row) == OVERLOADED:
        return True
    for slo in slos:
        value = row.get(slo.column)
        if value is not None and value > SCREEN_MARGIN * slo.threshold_ms:
            return True
    return False


def _decide(results: list[CandidateResult], slos: Sequence[Slo]) -> list[str]:
    """Pick the winner among the candidates meeting the SLOs, say why each other one lost;
    return the plan's notes (searches that fell back to a linear scan)."""
    ranked = sorted((r for r in results if r.outcome == MEETS), key=lambda r: _rank(r, slos))
    if ranked:
        ranked[0].outcome = WINNER
        for r in ranked[1:]:
            r.reason = _lost(r, ranked[0], slos)
    notes = [
        f"{r.candidate.label}: the P95s were not monotone in the replica count "
        f"({r.fallback}); its search fell back to a linear scan"
        for r in results
        if r.fallback
    ]
    for r in results:
        for t in sorted(r.trials, key=lambda t: t.replicas):
            failed = [run for run in t.by_seed if not run.meets]
            if failed:
                why = "; ".join(
                    f"seed {run.seed}: "
                    + ", ".join(
                        [
                            f"{slo} {_ms_text(v)}"
                            for slo in slos
                            if (v := run.values_ms.get(slo.text)) is not None
                            and v > slo.threshold_ms
                        ]
                        + [f"steady state {run.verdict}"] * (run.verdict != STABLE)
                    )
                    for run in failed
                )
                notes.append(
                    f"{r.candidate.label}: {t.replicas} replica(s) met every SLO with seed 0 "
                    f"but not under every seed ({why}); counted as failing, its search went on"
                )
    unjudged = [r for r in results if r.outcome == UNJUDGED]
    if unjudged:
        notes.append(
            f"{len(unjudged)} candidate(s) met every target but their runs were too short to "
            "judge a steady state (a run that is not stable meets no SLO): run longer "
            "(--duration)"
        )
    return notes


def _settle(r: CandidateResult, s: ReplicaSearch, best: float) -> None:
    """A candidate whose search is done: what it found."""
    if r.outcome:  # settled already (a point that cannot run)
        return
    fewest = s.fewest
    if fewest is not None and s.pinned:
        r.outcome, r.replicas = MEETS, fewest
        return
    if fewest is not None:
        below = [n for n, ok in s.tried.items() if not ok and n < fewest]
        low = (max(below) if below else s.lo - 1) + 1
        r.outcome = COSTLIER
        r.reason = (
            f"meets every SLO on {fewest} replica(s) (${r.cost(fewest):,.2f}/h); its fewest "
            f"lies in {low}-{fewest}, and {s.hi + 1} or more cost more than the best found "
            f"(${best:,.2f}/h)"
        )
        return
    tried = max(s.tried)
    if s.hi < r.limit and tried >= s.hi:
        r.outcome = COSTLIER
        r.reason = (
            f"fails on {tried} replica(s); {tried + 1} would cost ${r.cost(tried + 1):,.2f}/h, "
            f"more than the best found (${best:,.2f}/h)"
        )
        return
    t = r.trial(tried)
    r.outcome = INFEASIBLE
    cap = (
        "the most --budget-gpus allows"
        if r.limit < MAX_SEARCH_REPLICAS
        else f"the search's cap of {MAX_SEARCH_REPLICAS}"
    )
    r.reason = f"fails the SLOs even on {tried} replica(s), {cap}" + (
        f" ({_values(t)})" if t else ""
    )


def _ms_text(v: float | None) -> str:
    return "-" if v is None else f"{v:,.3g} ms"


def _values(t: Trial) -> str:
    shown = ", ".join(
        f"{k}: {'-' if v is None else f'{v:,.3g} ms'}" for k, v in t.values_ms.items()
    )
    return f"{shown}; steady state {t.verdict}"


def _gpus_each(c: Candidate) -> str:
    """How a replica's GPUs are counted: ``tp 2``, ``tp 2 x pp 2``, or ``1P2D x tp 2``."""
    each = f"tp {c.tp}" + (f" x pp {c.pp}" if c.pp > 1 else "")
    return each if c.layout == AGG else f"{c.layout} x {each}"


def _lost(r: CandidateResult, win: CandidateResult, slos: Sequence[Slo]) -> str:
    """Why a candidate meeting the SLOs is not the winner."""
    mine, theirs = r.usd_per_hour or math.inf, win.usd_per_hour or math.inf
    if mine > theirs + _CENTS:
        return (
            f"needs {r.replicas} replica(s) x {_gpus_each(r.candidate)} = {r.gpus} GPU(s) at "
            f"${mine:,.2f}/h, ${mine - theirs:,.2f}/h more than the winner"
        )
    if (r.gpus or 0) > (win.gpus or 0):
        return f"the same ${mine:,.2f}/h on more GPUs ({r.gpus} against {win.gpus})"
    same_headroom = _rank(r, slos)[2] == _rank(win, slos)[2]
    if same_headroom and r.candidate.splits > win.candidate.splits:
        return (
            f"the same ${mine:,.2f}/h on {r.gpus} GPU(s) with the same headroom, with more "
            "parallel splits (expert or attention data parallelism) to configure"
        )
    if same_headroom and router_order(r.candidate.router) > router_order(win.candidate.router):
        return (
            f"the same ${mine:,.2f}/h on {r.gpus} GPU(s) with the same headroom under the "
            f"{r.candidate.router} router; the tie goes to {win.candidate.router}, earlier "
            "in the router registry (round-robin first: it reads nothing of the replicas)"
        )
    return f"the same ${mine:,.2f}/h on {r.gpus} GPU(s), with less headroom under the SLOs"


__all__ = [
    "DEFAULT_CACHE",
    "DEFAULT_DP_ATTENTION",
    "DEFAULT_ENGINES",
    "DEFAULT_EP",
    "DEFAULT_GPUS",
    "DEFAULT_LAYOUTS",
    "DEFAULT_PP",
    "DEFAULT_SEEDS",
    "DEFAULT_TP",
    "MAX_SEEDS",
    "SCREEN_FRACTION",
    "SCREEN_MARGIN",
    "SCREEN_MIN_S",
    "PlanProgress",
    "analyse",
    "check_executor",
    "parse_load",
    "plan",
    "screen_spec",
    "screened_out",
]
