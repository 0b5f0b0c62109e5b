"""``twin report capacity`` as a library call: sweep, aggregate, recommend, render.

:func:`capacity_report` does what the command does (the CLI only parses its
comma-separated flags and prints the tables): every input is checked before
the first simulation, finished points are kept in ``OUT/results.parquet``
(a rerun computes only what is missing), and ``OUT/report.html`` and
``OUT/report.md`` are written from the rows.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twin import __version__
from twin.costmodel.precision_kernels import sweep_label
from twin.engine.modes import get_mode
from twin.engine.router import RoundRobin
from twin.errors import TwinError
from twin.presets import resolve_model
from twin.reports.analysis import (
    Recommendation,
    Slo,
    aggregate,
    by_gpu_count,
    parse_slos,
    recommend,
    verdict,
    with_binding,
    with_goodput_of,
)
from twin.reports.bisect import RateBracket, bisect_rates
from twin.reports.capacity_request import CapacityRequest, default_policies
from twin.reports.layouts import ServingLayout, parse_layouts
from twin.reports.load import Sustainable, load_verdict, sustainable
from twin.reports.perrequest import BIN_HIT_COLUMN, BIN_INPUT_COLUMN, CDF_COLUMN
from twin.reports.ray_executor import import_ray
from twin.reports.render import Header, render_report
from twin.reports.sweep import (
    AUTO_GB,
    EXECUTORS,
    INFEASIBLE_COLUMN,
    SweepOutcome,
    SweepSpec,
    engine_variant,
    grid,
    resolve,
    run_sweep,
)
from twin.reports.verdicts import advice

WORKLOAD_CACHE = "workloads"  # OUT/workloads: stretched workloads of --duration


@dataclass
class CapacityReport:
    """What a capacity sweep found: its rows, their aggregate, the recommendations."""

    spec: SweepSpec
    rows: list[dict[str, Any]]
    computed: int  # points simulated by this call
    skipped: int  # points found in OUT/results.parquet
    aggregate: list[dict[str, Any]]
    slos: tuple[Slo, ...]
    recommendations: list[Recommendation]  # one per policy, rate and GPU count
    # reports.load.sustainable(aggregate, slos); None without SLOs.
    sustainable: list[Sustainable] | None
    # "<cache> GB cache: <why>" per swept cache size whose points cannot run (issue 18).
    infeasible: list[str]
    # Points computed per ray node (node id: count); empty when they ran here.
    nodes: dict[str, int] = field(default_factory=dict)
    # One-line notes on reading the results (the CLI prints them; the report lists them).
    notes: list[str] = field(default_factory=list)
    header: Header | None = None
    # --bisect: where each (replicas, cache, policy)'s sustainable rate lies.
    brackets: list[RateBracket] = field(default_factory=list)

    @property
    def target(self) -> Slo | None:
        """The first SLO (None without any)."""
        return self.slos[0] if self.slos else None


def split_infeasible(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows that ran, and one line per cache size whose points cannot run.

    Whether a point fits depends on its cache size (with the fixed model,
    GPU and tp), not on its policy or rate: one line per size says it all.
    """
    reasons: dict[float, str] = {}
    for r in rows:
        if r.get(INFEASIBLE_COLUMN):
            reasons.setdefault(r["cache_gb"], r[INFEASIBLE_COLUMN])
    ran = [r for r in rows if not r.get(INFEASIBLE_COLUMN)]
    return ran, [f"{c:g} GB cache: {why}" for c, why in sorted(reasons.items())]


def capacity_report(
    request: CapacityRequest,
    out: str | Path,
    *,
    progress: Callable[[float], None] | None = None,
) -> CapacityReport:
    """Run the sweep ``request`` asks for (:mod:`twin.reports.capacity_request`); write the
    report under ``out``; return what it found.

    Every input is checked before the first point runs. ``progress(points)`` is called as
    points finish (of ``len(replicas) x len(cache_gb) x len(policies) x
    len(session_rates) x seeds``, times the layouts). With ``bisect_tol`` the points the
    bisection adds are in the rows and the report (:mod:`reports.bisect`). A layout's
    replica count counts copies of the layout (``1p1d`` on 2 replicas is 2 prefill and 2
    decode workers, 4 x tp GPUs, :mod:`reports.layouts`); rows carry their ``layout``, and
    the tables name a disaggregated layout after the policy (``vllm 1P1D``) so each is
    compared with the aggregated runs on as many GPUs.
    """
    dep, axes, execution = request.deployment, request.axes, request.execution
    workload, model, gpu, engine = request.workload, dep.model, dep.gpu, dep.engine
    policies, session_rates, layouts = axes.policies, axes.session_rates, axes.layouts
    slo, bisect_tol = request.targets.slo, request.targets.bisect_tol
    jobs, executor, ray_address = execution.jobs, execution.executor, execution.ray_address
    cdf_cache_gb, duration_s = request.cdf_cache_gb, axes.duration_s
    serving = parse_layouts(layouts) if layouts else [ServingLayout()]
    slos = parse_slos([] if slo is None else [slo] if isinstance(slo, str | Slo) else slo)
    if bisect_tol is not None:
        if not slos:
            raise TwinError("--bisect: needs --slo (the rate is bisected against the SLOs)")
        if all(r is None for r in session_rates):
            raise TwinError("--bisect: needs --session-rates (the rates to bisect between)")
        if not (math.isfinite(bisect_tol) and 0 < bisect_tol < 1):
            raise TwinError(f"--bisect {bisect_tol:g}: give a fraction in (0, 1), e.g. 0.05")
    if policies is None:
        policies = default_policies(engine)
    if engine is not None:
        engine = get_mode(engine).name  # a bad --engine fails before any work
    caches = [AUTO_GB if str(c).lower() == "auto" else float(c) for c in axes.cache_gb]
    if cdf_cache_gb is not None and float(cdf_cache_gb) not in caches:
        raise TwinError(
            f"--cdf-cache-gb {cdf_cache_gb:g}: not one of the swept --cache-gb "
            f"({', '.join(f'{c:g}' for c in caches)})"
        )
    if executor not in EXECUTORS:
        raise TwinError(f"--executor {executor!r}: choose from {', '.join(EXECUTORS)}")
    if ray_address and executor != "ray":
        raise TwinError("--ray-address: needs --executor ray")
    if executor == "ray":
        import_ray(ray_address)  # a missing extra or a silent cluster fails before any work
    spec_model = resolve_model(model, dep.model_set)  # fail on a bad --model before any work
    label = spec_model.name
    for name in policies:  # an engine mode's flag values, before any work
        variant = engine_variant(name)
        if variant is not None:
            try:
                get_mode(variant[0]).settings(spec_model, variant[1])
            except TwinError as err:
                raise TwinError(f"--policies {name!r}: {str(err).removeprefix('--set ')}") from None
    fixed = dict(dep.settings)
    if duration_s is not None:
        fixed.update(_duration_settings(duration_s, session_rates, Path(out)))
    counts: list[int | None] = [None]
    if axes.replicas is not None:
        wanted = list(dict.fromkeys(int(n) for n in axes.replicas))  # in order, once each
        if not wanted or any(n < 1 for n in wanted):
            raise TwinError(f"--replicas {list(axes.replicas)}: each must be at least 1")
        counts = list(wanted)
        fixed.pop("replicas", None)  # the points carry it
    spec = resolve(
        SweepSpec(
            workload=str(workload),
            model=model,
            model_set=tuple(dep.model_set),
            gpu=gpu,
            engine=engine,
            profile=None if dep.profile is None else str(dep.profile),
            settings=tuple(fixed.items()),
            slos=tuple(s.text for s in slos),
        )
    )
    points = grid(caches, policies, session_rates, axes.seeds, counts)
    specs = [dataclasses.replace(spec, layout="" if s.aggregated else s.name) for s in serving]
    result = SweepOutcome([], 0, 0)
    brackets: list[RateBracket] = []
    for one in specs:  # a layout at a time (the ray executor runs one spec at a time)
        found = run_sweep(
            one,
            points,
            out,
            jobs=jobs,
            progress=progress,
            executor=executor,
            ray_address=ray_address,
        )
        result.rows += found.rows
        result.computed += found.computed
        result.skipped += found.skipped
        for node, n in found.nodes.items():
            result.nodes[node] = result.nodes.get(node, 0) + n
        if bisect_tol is not None:
            bracketed, added = bisect_rates(
                one,
                points,
                found.rows,
                slos,
                out,
                bisect_tol,
                jobs=jobs,
                executor=executor,
                ray_address=ray_address,
            )
            if one.layout:  # named as the tables name the layout's rows
                bracketed = [
                    dataclasses.replace(x, policy=f"{x.policy} {one.layout}") for x in bracketed
                ]
            brackets += bracketed
            result.rows += added
            result.computed += len(added)
    config = spec.base_config()
    if config.cluster.pp > 1:  # results.parquet has no pp column: the run's stages, on its rows
        result.rows = [{**r, "pp": config.cluster.pp} for r in result.rows]
    ran, infeasible = split_infeasible(result.rows)
    if not ran:
        raise TwinError(
            "no point of the sweep can run: "
            + "; ".join(infeasible)
            + " (lower --cache-gb, or use more GPUs per replica with --tp)"
        )
    rows, stale = with_goodput_of(ran, slos)
    rows = with_binding(rows, slos)
    judged = {r["key"]: r for r in rows}
    rows = [_layout_label(r) for r in rows]  # what the tables and figures group by
    agg = aggregate(rows, slos)
    recs = (
        recommend(agg, slos, config.cluster.replicas, config.cluster.tp, config.cluster.pp)
        if slos
        else []
    )
    notes = _notes(rows, stale, config.cluster.router)
    header = Header(
        command=request.command,
        workload=str(workload),
        workload_sha256=spec.workload_sha256,
        twin_version=__version__,
        model=label,
        gpu=spec.profile_gpu,
        provenance=sweep_label(
            spec_model,
            spec.profile_label,
            gpu,
            spec.profile,
            get_mode(engine).kernels if engine is not None else None,
        ),
        replicas=config.cluster.replicas,
        tp=config.cluster.tp,
        pp=config.cluster.pp,
        replica_counts=tuple(sorted({one.replicas(p) for one in specs for p in points})),
        infeasible=tuple(infeasible),
        notes=tuple(notes),
    )
    render_report(Path(out), header, slos, agg, recs, rows=rows, cdf_cache_gb=cdf_cache_gb)
    return CapacityReport(
        spec=spec,
        rows=[judged.get(r["key"], r) for r in result.rows],  # grid order, infeasible too
        computed=result.computed,
        skipped=result.skipped,
        aggregate=agg,
        slos=slos,
        recommendations=recs,
        sustainable=sustainable(by_gpu_count(agg), slos) if slos else None,
        infeasible=infeasible,
        nodes=result.nodes,
        notes=notes,
        header=header,
        brackets=brackets,
    )


def _layout_label(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with a disaggregated layout named after its policy (``vllm 1P1D``): the
    report's tables, figures and verdicts group by policy, and a layout is another way to
    serve it on the row's GPUs."""
    if not row.get("layout"):
        return row
    return {**row, "policy": f"{row['policy']} {row['layout']}"}


def _duration_settings(
    duration_s: float, session_rates: Sequence[float | None], out: Path
) -> dict[str, object]:
    """The settings of ``--duration D``: build_run's ``duration_s`` and where it keeps
    the stretched workloads (``OUT/workloads``)."""
    if not (duration_s > 0 and duration_s != float("inf")):
        raise TwinError(f"--duration {duration_s:g}: must be a positive number of seconds")
    if any(r is None for r in session_rates):
        raise TwinError(
            "--duration: needs --session-rates (sessions start at each rate in [0, D); "
            "the workload's own arrival times have their own length)"
        )
    return {"duration_s": float(duration_s), "workload_cache": str(out / WORKLOAD_CACHE)}


def _notes(rows: list[dict[str, Any]], stale: int, router: str) -> list[str]:
    """The goodput note (rows counted under another SLO list) and the routing hint."""
    notes = []
    if stale:
        notes.append(
            f"goodput unknown for {stale} point(s) found in the folder: they were counted "
            "under another SLO list, and the key of a point leaves SLOs out (nothing is "
            "re-simulated); a new --out counts them under these SLOs"
        )
    many = [r for r in rows if (r.get("replicas") or 1) > 1]
    if many and router == RoundRobin.name:
        hit = max((r.get("token_hit_rate") or 0.0) for r in many)
        notes.append(
            "hint: round-robin routing sends each turn to the next replica, so a replica's "
            "cache rarely holds the earlier turns of a session (token hit rate at most "
            f"{hit:.0%} here on more than one replica); --router session-affinity or "
            "prefix-aware sends them where they are cached"
        )
    return notes


# Columns left out of --json's per-point rows: the per-request digests (figures' data).
_DIGESTS = (CDF_COLUMN, BIN_INPUT_COLUMN, BIN_HIT_COLUMN)


def _recommendation(r: Recommendation) -> dict[str, Any]:
    return {
        "policy": r.policy,
        "session_rate": r.session_rate,
        "gpus": r.gpus,
        "tp": r.tp,
        **({"pp": r.pp} if r.pp > 1 else {}),
        "meets": r.meets,
        "cache_gb": r.cache_gb,
        "cache_gb_per_gpu": r.cache_gb_per_gpu,
        "binding_target": None if r.target is None else r.target.text,
        "value_ms": r.value_ms,
        "headroom": r.headroom,
        "values_ms": {s.text: v for s, v in r.values},
        "verdict": r.verdict,
        "binding_resource": r.resource,
        "advice": advice(r.resource) or None,
        "largest_gb": r.largest_gb,
    }


def report_document(found: CapacityReport) -> dict[str, Any]:
    """``twin report capacity --json``: one JSON-able document of what the sweep found
    (print it with :func:`twin.metrics.to_json` for deterministic text)."""
    h = found.header
    load = found.sustainable or []
    return {
        "command": h.command if h else None,
        "workload": {"path": found.spec.workload, "sha256": found.spec.workload_sha256},
        "model": h.model if h else found.spec.model,
        "gpu": found.spec.profile_gpu,
        "profile": found.spec.profile_label,
        "engine": found.spec.engine,
        "slos": [s.text for s in found.slos],
        "points": {"computed": found.computed, "found": found.skipped},
        "recommendations": [_recommendation(r) for r in found.recommendations],
        "verdicts": verdict(found.recommendations, found.slos) if found.slos else [],
        "sustainable": [{**dataclasses.asdict(s), "label": s.label()} for s in load],
        "load_verdicts": load_verdict(load, found.slos) if found.slos else [],
        "bisected": [{**dataclasses.asdict(b), "label": b.label()} for b in found.brackets],
        "aggregate": found.aggregate,
        "rows": [
            {k: v for k, v in r.items() if k not in _DIGESTS}
            for r in found.rows
            if not r.get(INFEASIBLE_COLUMN)
        ],
        "infeasible": [
            {
                k: r.get(k)
                for k in ("key", "policy", "cache_gb", "session_rate", "seed", "replicas", "tp")
            }
            | {"reason": r[INFEASIBLE_COLUMN]}
            for r in found.rows
            if r.get(INFEASIBLE_COLUMN)
        ],
        "notes": found.notes,
    }
