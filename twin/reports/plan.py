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
(:func:`reports.plan_bound.analyse`): the weights must fit its GPUs next to its cache
(:func:`twin.engine.memory_budget`), a lone decode step must fit a TPOT or ITL
target, and its *lower bound* on replicas comes from the engine's own step
prices: a replica cannot process tokens faster than the cheapest price per token
of any step it can run, so the workload's tokens per second (prompt tokens an
unbounded prefix cache would not hit, plus decode tokens) need at least that
many replicas (whatever the router: the bound assumes an unbounded cache, the most any
routing realises). Candidates are searched (:mod:`reports.plan_runner`) cheapest
lower bound first, at most ``jobs`` at once (their points run in parallel, one batch
per step, through :func:`reports.sweep.run_pairs`, kept in ``OUT/results.parquet``: a
rerun resumes); one whose lower bound already costs more than the best deployment
found is pruned unsimulated, and no search asks for a replica count costing
more than that. Every rule and constant is in docs/decisions.md, "twin plan
(issue 37)".
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from twin.engine.modes import get_mode
from twin.errors import TwinError
from twin.presets import resolve_model
from twin.reports.analysis import parse_slos
from twin.reports.layouts import AGG, parse_layouts
from twin.reports.parallel_axes import PP_FLAG, parallel_layouts, parse_degrees
from twin.reports.plan_bound import analyse, workload_stats
from twin.reports.plan_decide import decide
from twin.reports.plan_inputs import (
    DEFAULT_CACHE,
    DEFAULT_DP_ATTENTION,
    DEFAULT_ENGINES,
    DEFAULT_EP,
    DEFAULT_GPUS,
    DEFAULT_LAYOUTS,
    DEFAULT_PP,
    DEFAULT_SEEDS,
    DEFAULT_TP,
    cache_choices,
    check_executor,
    parse_engines,
    parse_gpus,
    parse_load,
    parse_seeds,
    parse_tps,
)
from twin.reports.plan_result import (
    INFEASIBLE,
    Candidate,
    CandidateResult,
    Load,
    PlanResult,
)
from twin.reports.plan_routers import (
    DEFAULT_ROUTERS,
    MIN_REUSE_SHARE,
    auto_routers,
    resolve_routers,
    router_order,
)
from twin.reports.plan_runner import PlanProgress, Searcher
from twin.reports.plan_screen import SCREEN_FRACTION, SCREEN_MIN_S
from twin.reports.plan_search import DEFAULT_SEARCH, MAX_SEARCH_REPLICAS, get_search
from twin.reports.prices import load_prices
from twin.reports.sweep import SweepSpec
from twin.slo import Slo
from twin.workloads.importers.base import sha256_file

WORKLOAD_CACHE = "workloads"  # OUT/workloads: workloads stretched for --duration


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
    seed_list, seed_notes = parse_seeds(seeds, load)
    gpu_names, engine_names = parse_gpus(gpus), parse_engines(engines)
    tps, choices = parse_tps(tp), cache_choices(cache, policies)
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
    searcher = Searcher(slo_list, load, out_dir, jobs, progress, screening, seed_list)
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
        notes=decide(searcher.results, slo_list)
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


__all__ = ["plan"]
