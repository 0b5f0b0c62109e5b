"""``twin report capacity`` as a library call: sweep, aggregate, recommend, render.

:func:`capacity_report` does what the command does (the CLI only parses its
comma-separated flags and prints the tables): every input is checked before
the first simulation, finished points are kept in ``OUT/results.parquet``
(a rerun computes only what is missing), and ``OUT/report.html`` and
``OUT/report.md`` are written from the rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reports.analysis import Slo, aggregate, by_gpu_count, parse_slo, recommend
from reports.load import sustainable
from reports.ray_executor import import_ray
from reports.render import Header, render_report
from reports.sweep import (
    AUTO_GB,
    EXECUTORS,
    INFEASIBLE_COLUMN,
    SweepSpec,
    engine_variant,
    grid,
    resolve,
    run_sweep,
)
from twin import __version__
from twin.engine.modes import get_mode
from twin.errors import TwinError
from twin.presets import resolve_model


@dataclass
class CapacityReport:
    """What a capacity sweep found: its rows, their aggregate, the recommendations."""

    spec: SweepSpec
    rows: list[dict[str, Any]]
    computed: int  # points simulated by this call
    skipped: int  # points found in OUT/results.parquet
    aggregate: list[dict[str, Any]]
    target: Slo | None
    recommendations: list[Any]  # reports.analysis.Recommendation, one per policy and rate
    sustainable: Any  # reports.load.sustainable(aggregate, target), or None without a target
    # "<cache> GB cache: <why>" per swept cache size whose points cannot run (issue 18).
    infeasible: list[str]
    # Points computed per ray node (node id: count); empty when they ran here.
    nodes: dict[str, int] = field(default_factory=dict)


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
    workload: str | Path,
    out: str | Path,
    *,
    model: str = "marconi-hybrid-7b",
    model_set: Sequence[str] = (),
    gpu: str | None = None,
    engine: str | None = None,
    profile: str | Path | None = None,
    cache_gb: Sequence[float | str] = (10.0, 20.0, 40.0),
    policies: Sequence[str] = ("vllm+", "sglang+", "marconi"),
    session_rates: Sequence[float | None] = (None,),
    slo: str | Slo | None = None,
    seeds: int = 1,
    replicas: Sequence[int] | None = None,
    settings: dict[str, Any] | None = None,
    jobs: int = 1,
    cdf_cache_gb: float | None = None,
    executor: str = "local",
    ray_address: str | None = None,
    command: str = "twin report capacity (invoked programmatically)",
    progress: Callable[[float], None] | None = None,
) -> CapacityReport:
    """Run the sweep of ``cache_gb`` x ``policies`` x ``session_rates`` x ``seeds``; write
    the report under ``out``; return what it found.

    ``cache_gb`` may hold ``"auto"`` (the shared KV pool); ``policies`` may name
    engine modes with flags (``"sglang[mamba_scheduler_strategy=extra_buffer]"``,
    :func:`reports.sweep.engine_variant`), each run in its shared pool.
    ``model_set`` holds ``FIELD=VALUE`` overrides of ``model`` (``--model-set``);
    ``engine`` names whose kernels price the steps (``--engine``);
    ``settings`` holds the fixed engine settings (``replicas``, ``tp``,
    ``router``, ... any :class:`~twin.engine.EngineConfig` field); ``replicas``
    (``--replicas 1,2,4``) sweeps the replica count, and so the GPU count
    (replicas x tp), instead of fixing it in ``settings``; ``slo``
    (e.g. ``"p95_ttft<=500ms"``) adds the smallest cache meeting it per policy
    and rate. ``progress(points)`` is called as points finish (of
    ``len(replicas) x len(cache_gb) x len(policies) x len(session_rates) x seeds``).
    """
    target = parse_slo(slo) if isinstance(slo, str) else slo
    caches = [AUTO_GB if str(c).lower() == "auto" else float(c) for c in cache_gb]
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
    spec_model = resolve_model(model, model_set)  # fail on a bad --model before any work
    label = spec_model.name
    for name in policies:  # an engine mode's flag values, before any work
        variant = engine_variant(name)
        if variant is not None:
            try:
                get_mode(variant[0]).settings(spec_model, variant[1])
            except TwinError as err:
                raise TwinError(f"--policies {name!r}: {str(err).removeprefix('--set ')}") from None
    fixed = dict(settings or {})
    counts: list[int | None] = [None]
    if replicas is not None:
        wanted = list(dict.fromkeys(int(n) for n in replicas))  # in order, once each
        if not wanted or any(n < 1 for n in wanted):
            raise TwinError(f"--replicas {list(replicas)}: each must be at least 1")
        counts = list(wanted)
        fixed.pop("replicas", None)  # the points carry it
    spec = resolve(
        SweepSpec(
            workload=str(workload),
            model=model,
            model_set=tuple(model_set),
            gpu=gpu,
            engine=engine,
            profile=None if profile is None else str(profile),
            settings=tuple(fixed.items()),
        )
    )
    points = grid(caches, policies, session_rates, seeds, counts)
    result = run_sweep(
        spec,
        points,
        out,
        jobs=jobs,
        progress=progress,
        executor=executor,
        ray_address=ray_address,
    )
    config = spec.base_config()
    rows, infeasible = split_infeasible(result.rows)
    if not rows:
        raise TwinError(
            "no point of the sweep can run: "
            + "; ".join(infeasible)
            + " (lower --cache-gb, or use more GPUs per replica with --tp)"
        )
    agg = aggregate(rows)
    recs = recommend(agg, target, config.replicas, config.tp) if target is not None else []
    header = Header(
        command=command,
        workload=str(workload),
        workload_sha256=spec.workload_sha256,
        twin_version=__version__,
        model=label,
        gpu=spec.profile_gpu,
        provenance=spec.profile_label,
        replicas=config.replicas,
        tp=config.tp,
        replica_counts=tuple(sorted({spec.replicas(p) for p in points})),
        infeasible=tuple(infeasible),
    )
    render_report(Path(out), header, target, agg, recs, rows=rows, cdf_cache_gb=cdf_cache_gb)
    return CapacityReport(
        spec=spec,
        rows=result.rows,
        computed=result.computed,
        skipped=result.skipped,
        aggregate=agg,
        target=target,
        recommendations=recs,
        sustainable=sustainable(by_gpu_count(agg), target) if target is not None else None,
        infeasible=infeasible,
        nodes=result.nodes,
    )
