"""The sweep: one engine simulation per grid point, kept in a resumable results table.

A point is (cache size, policy, session rate, seed, replicas); everything else
(model, profile, tp, workload) is fixed by the :class:`SweepSpec`. The policy
axis may also name an engine mode with its flags (``sglang``,
``sglang[mamba_radix_cache_strategy=extra_buffer;max_running_requests=64]``,
:func:`engine_variant`): such a point runs that engine in its shared KV pool,
and its cache size is the pool's (``AUTO_GB`` in the point, the pool's GB in
the row); ``--cache-gb auto`` runs a policy in the shared pool the same way. Finished
points are merged into ``DIR/results.parquet`` (:mod:`reports.results_table`:
rewritten atomically, under a lock, in batches about a second apart), so a
sweep stopped by an error or Ctrl-C keeps every finished point, one killed
outright loses at most the points still running and its last batch, and a
rerun with the same DIR computes only what is missing.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
from collections.abc import Callable, Hashable, Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from twin.costmodel.profile_store import resolve_profile
from twin.engine import build_run, memory_budget
from twin.engine.config import EngineConfig
from twin.engine.config_build import build_config
from twin.engine.modes import ENGINE_MODES, get_mode
from twin.engine.releases import split_engine
from twin.engine.run import RunArgs, mode_fields
from twin.engine.settings import NamedSettings, typed_settings
from twin.errors import TwinError
from twin.hardware import GB
from twin.policies import options_for
from twin.presets import resolve_model
from twin.reports.layouts import parse_layout
from twin.reports.perrequest import RequestDigest
from twin.reports.ray_executor import import_ray, run_points_on_ray
from twin.reports.results_table import (  # noqa: F401 (RESULTS_FILE, SCHEMA: the sweep's names)
    INFEASIBLE_COLUMN,
    LATENCY_PERCENTILES,
    RESULTS_FILE,
    SCHEMA,
    ResultsWriter,
    merge_results,
    stored_row,
)
from twin.reports.verdicts import NOT_JUDGED, TOO_SHORT, binding_resource
from twin.slo import parse_slos
from twin.summary import CacheOccupancy, RunSummary
from twin.workers import Batched, run_in_pool
from twin.workloads.importers.base import sha256_file

AUTO_GB = -1.0  # a point's cache size when it runs the shared KV pool (--cache-gb auto)
EXECUTORS = ("local", "ray")
# Settings of a sweep that go to twin.engine.build_run, not to build_config: --duration
# (build_run cuts the arrivals there and stretches the workload) and where stretched
# workloads are kept. The duration is in a point's key; the cache folder is not.
RUN_ONLY = ("duration_s", "workload_cache")


@dataclass(frozen=True)
class Point:
    """One grid point: the parameters that vary across the sweep."""

    cache_gb: float
    policy: str
    session_rate: float | None
    seed: int
    # Replicas of this point (the GPU count is replicas x tp, issue 18); None: the
    # spec's ``settings`` (or the engine's default) decide.
    replicas: int | None = None


@dataclass(frozen=True)
class SweepSpec:
    """What stays fixed across the sweep. Plain values only: it is pickled to workers.

    ``engine`` is the engine mode every point runs (``--engine``, as
    ``twin simulate --engine NAME`` runs it: its kernels, preemption and flags'
    defaults; a point's policy, given explicitly, replaces the mode's, and an
    engine-mode entry on the policy axis runs its own mode). ``settings``
    holds the :class:`~twin.engine.EngineConfig` fields fixed across
    the sweep, as the user gave them (replicas, tp, router, ...); the engine's
    own defaults fill in the rest, through the one builder
    (:func:`twin.engine.build_config`), so nothing here repeats a default.
    ``policy_options`` in it are shared by the swept policies: each takes its own.
    ``settings`` may also hold :data:`RUN_ONLY` entries (``duration_s``,
    ``workload_cache``), handed to :func:`twin.engine.build_run` and left out of
    :meth:`base_config` and :meth:`config` (the arrival cut and warm-up a duration
    implies are build_run's); the key holds the duration, not the cache folder.
    ``slos`` (canonical SLO texts) say which requests count as good for the
    goodput column and which targets the ``binding`` column judges; they are not
    part of a point's key (a changed target recomputes nothing).
    """

    workload: str
    model: str
    model_set: tuple[str, ...] = ()  # --model-set FIELD=VALUE overrides of ``model``
    gpu: str | None = None
    engine: str | None = None  # the engine mode (twin.engine.modes); None: the default
    profile: str | None = None
    settings: tuple[tuple[str, object], ...] = ()
    workload_sha256: str = ""
    profile_label: str = ""
    # The label alone is not enough: every datasheet profile has the same one.
    profile_gpu: str = ""
    slos: tuple[str, ...] = ()
    # The serving layout a point's replica count scales (reports.layouts): "" aggregated
    # (replicas), "1P2D" disaggregated (that many copies of 1 prefill + 2 decode workers).
    layout: str = ""

    def engine_settings(self) -> NamedSettings:
        """``settings`` without the :data:`RUN_ONLY` entries: the EngineConfig fields."""
        named = ((k, v) for k, v in self.settings if k not in RUN_ONLY)
        return typed_settings(NamedSettings, named)

    def run_settings(self) -> RunArgs:
        """``settings`` whole, as :func:`twin.engine.build_run` takes them."""
        return typed_settings(RunArgs, self.settings)

    def base_config(self) -> EngineConfig:
        """The fixed part of every point's configuration (validates ``settings`` early)."""
        return build_config(**self.engine_settings())

    def fields(self, point: Point) -> RunArgs:
        """The settings of ``point`` for :func:`twin.engine.build_run` (the model, GPU and
        profile aside), the :data:`RUN_ONLY` entries last.

        An engine-mode point gives ``engine`` and ``sets`` (its flags) instead
        of a policy; the mode chooses the policy. A policy point runs the
        sweep's engine mode (``engine``) with its policy given explicitly.
        """
        named = self.engine_settings()
        shared = dict(named.get("policy_options") or {})
        fixed: dict[str, object] = {k: v for k, v in named.items() if k != "policy_options"}
        if self.layout:  # the pools of that many copies of the layout
            units = point.replicas if point.replicas is not None else named.get("replicas", 1)
            fixed.pop("replicas", None)
            fixed.update(parse_layout(self.layout).pools(units))
        elif point.replicas is not None:
            fixed["replicas"] = point.replicas
        common = {"session_rate": point.session_rate, "seed": point.seed}
        only = [(k, v) for k, v in self.settings if k in RUN_ONLY]
        variant = engine_variant(point.policy)
        if variant is not None:
            mode, sets = variant
            out = {**fixed, "cache_gb": "auto", "engine": mode, "sets": sets, **common}
        else:
            out = {
                **fixed,
                **({"engine": self.engine, "sets": {}} if self.engine is not None else {}),
                "cache_gb": "auto" if point.cache_gb == AUTO_GB else point.cache_gb,
                "policy": point.policy,
                "policy_options": options_for(point.policy, shared),
                **common,
            }
        return typed_settings(RunArgs, [*out.items(), *only])

    def config(self, point: Point, profile: Any = None) -> EngineConfig:
        """The engine configuration of ``point`` (``profile`` gives the device memory; the
        arrival cut and warm-up a duration implies are build_run's, not here)."""
        fields = self.fields(point)
        engine, sets = fields.pop("engine", None), fields.pop("sets", None)
        cache_gb = fields.pop("cache_gb", None)
        fields.pop("duration_s", None)
        fields.pop("workload_cache", None)
        model = resolve_model(self.model, self.model_set)
        return build_config(
            profile, cache_gb=cache_gb, model=model, **mode_fields(model, engine, sets, {**fields})
        )

    def replicas(self, point: Point) -> int:
        """The replicas ``point`` runs on (its own, else the fixed setting); with a
        disaggregated layout, the workers of both pools."""
        n = point.replicas if point.replicas is not None else self.base_config().cluster.replicas
        return n * parse_layout(self.layout).workers if self.layout else n

    @property
    def tp(self) -> int:
        return self.base_config().cluster.tp

    def key(self, point: Point) -> str:
        """Resume key: the point, the workload's bytes, the model, the profile and every
        fixed engine setting (defaults included, so a changed default is a new point).

        Hashing canonical JSON makes the key stable across processes and
        Python versions (``hash()`` is salted per process).
        """
        varying = {f.name for f in fields(Point)} | {"cache_bytes", "policy_options"}
        engine = {k: v for k, v in self.base_config().to_dict().items() if k not in varying}
        shared = dict(self.engine_settings().get("policy_options") or {})
        variant = engine_variant(point.policy)
        engine["policy_options"] = {} if variant else options_for(point.policy, shared)
        fixed: dict[str, Any] = {
            "model": self.model,
            "model_set": list(self.model_set),
            "workload_sha256": self.workload_sha256,
            "profile_label": self.profile_label,
            "profile_gpu": self.profile_gpu,
            "engine": engine,
        }
        # Keys of sweeps without --engine or --duration stay as they were.
        if self.engine is not None:
            fixed["engine_mode"] = self.engine.lower()
        duration = self.run_settings().get("duration_s")
        if duration is not None:
            fixed["duration_s"] = float(duration)
        if self.layout:  # keys of aggregated sweeps stay as they were
            fixed["layout"] = self.layout
        # The replica count always comes from the point (resolved), never the engine part.
        engine.pop("replicas", None)
        where = {**asdict(point), "replicas": self.replicas(point)}
        blob = json.dumps({"point": where, "fixed": fixed}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:24]


def engine_variant(name: str) -> tuple[str, dict[str, str]] | None:
    """``NAME[flag=value;...]`` on the policy axis as (engine mode, flags); None for a policy.
    ``NAME`` may pick a release (``sglang==0.5.10.post1[...]``), checked here."""
    mode, bracket, rest = name.partition("[")
    # an unknown release is one line here, before any point runs
    base, release = split_engine(mode, "--policies")
    if base not in ENGINE_MODES:
        return None
    if release is not None:
        get_mode(mode, "--policies")
    body = rest[:-1]
    if bracket and (not rest.endswith("]") or "[" in body or "]" in body):
        raise TwinError(f"--policies {name!r}: expected ENGINE[flag=value;flag=value]")
    sets: dict[str, str] = {}
    for item in (t.strip() for t in body.split(";")) if bracket else ():
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise TwinError(f"--policies {name!r}: expected flag=value, got {item!r}")
        if key in sets:
            raise TwinError(f"--policies {name!r}: flag {key!r} given twice")
        sets[key] = value.strip()
    return mode, sets


def grid(
    cache_gb: Iterable[float],
    policies: Iterable[str],
    session_rates: Iterable[float | None],
    seeds: int,
    replicas: Iterable[int | None] = (None,),
) -> list[Point]:
    """Every combination, in a stable order (replicas, cache, policy, rate, seed).

    An engine mode runs its shared pool: one cache point (``AUTO_GB``), not one per size.
    """
    caches = [float(c) for c in cache_gb]
    points = []
    for n, c, p, r, s in itertools.product(replicas, caches, policies, session_rates, range(seeds)):
        if engine_variant(p) is not None:
            if c != caches[0]:
                continue
            c = AUTO_GB
        points.append(Point(c, p, None if r is None else float(r), s, n))
    return points


def resolve(spec: SweepSpec) -> SweepSpec:
    """Fill in the workload fingerprint and profile label (done once, in the parent)."""
    spec.base_config()  # a bad engine setting fails before any work
    path = Path(spec.workload)
    if not path.is_file():
        raise TwinError(f"{path}: no such workload file")

    kernels = get_mode(spec.engine).kernels if spec.engine is not None else None
    prof = resolve_profile(spec.gpu, Path(spec.profile) if spec.profile else None, kernels)
    return replace(
        spec,
        workload_sha256=sha256_file(path),
        profile_label=prof.provenance_label,
        profile_gpu=prof.gpu,
    )


def _mean_occupancy(occupancy: CacheOccupancy, name: str) -> float | None:
    """Mean over replicas and samples of the sampled cache occupancy, bytes per replica."""
    values = [v for per_replica in getattr(occupancy, name) for v in per_replica]
    return sum(values) / len(values) if values else None


def _ms(x: float | None) -> float | None:
    return None if x is None else 1e3 * x


def point_fields(spec: SweepSpec, point: Point) -> dict[str, Any]:
    """The columns that say which point a row is (its key, parameters and fixed setup)."""
    return {
        "key": spec.key(point),
        **asdict(point),
        "model": spec.model + (f"[{','.join(spec.model_set)}]" if spec.model_set else ""),
        "profile_label": spec.profile_label,
        "profile_gpu": spec.profile_gpu,
        "workload_sha256": spec.workload_sha256,
        "replicas": spec.replicas(point),
        "tp": spec.tp,
        "layout": spec.layout or None,
    }


def _pct(s: RunSummary, key: str, p: str) -> float | None:
    """One percentile of a summary latency, ms; None where the summary lacks it."""
    stats = s.latency.get(key)
    return None if stats is None else _ms(stats.get(p))


def _pool_columns(s: RunSummary) -> dict[str, Any]:
    """The shared pool's pressure: preempted requests, the running batch's peak (requests,
    and running bytes as a share of the pool) across replicas; None without a pool."""
    pools = [r["pool"] for r in s.cluster.replicas if isinstance(r.get("pool"), dict)]
    peak = max((p.get("peak_running_requests") for p in pools), default=None, key=lambda x: x or 0)
    full = [
        p["peak_running_bytes"] / p["bytes"]
        for p in pools
        if p.get("bytes") and p.get("peak_running_bytes") is not None
    ]
    return {
        "preempted_requests": None if s.preemption is None else s.preemption.preempted_requests,
        "peak_running": peak,
        "running_pool_peak": max(full) if full else None,
        "max_running": s.config.get("max_running"),
    }


def summary_row(spec: SweepSpec, point: Point, s: RunSummary) -> dict[str, Any]:
    """Flatten an engine summary into one results row (a shared pool's cache: the pool's GB).

    A percentile the summary has no value for (``itl_s``, ``p90`` of a stored summary
    from engines before them) is a null column, and a null metric never meets a target;
    a summary without a steady-state judgement is too short to tell. The ``binding``
    column judges the row against ``spec.slos`` (:func:`reports.verdicts.binding_resource`).
    """
    thr = s.throughput
    where = point_fields(spec, point)
    if point.cache_gb == AUTO_GB:
        where["cache_gb"] = round(s.cluster.memory_budget_bytes / GB, 1)
    state = s.steady_state if s.steady_state is not None and s.steady_state.verdict else None
    row = {
        **where,
        "requests_measured": s.requests.measured,
        "requests_rejected": s.requests.rejected,
        **{
            f"{name}_{p}_ms": _pct(s, f"{name}_s", p)
            for name, ps in LATENCY_PERCENTILES.items()
            for p in ps
        },
        "queue_mean_ms": _pct(s, "queue_s", "mean"),
        "queue_p95_ms": _pct(s, "queue_s", "p95"),
        "prefill_mean_ms": _pct(s, "prefill_s", "mean"),
        "token_hit_rate": s.hit.token_hit_rate,
        "request_hit_rate": s.hit.request_hit_rate,
        "flops_saved_frac": s.flops.saved_fraction,
        "kv_bytes_mean": _mean_occupancy(s.cluster.cache_occupancy, "kv_bytes"),
        "ssm_bytes_mean": _mean_occupancy(s.cluster.cache_occupancy, "ssm_bytes"),
        "throughput_rps": thr.requests_per_s,
        "output_tokens_per_s": thr.output_tokens_per_s,
        "utilisation": s.cluster.utilisation.mean,
        **_pool_columns(s),
        "verdict": TOO_SHORT if state is None else state.verdict,
        "verdict_reason": NOT_JUDGED if state is None else state.reason,
        "arrival_rate_rps": None if state is None else state.arrival_rate_rps,
        "completion_rate_rps": None if state is None else state.completion_rate_rps,
    }
    row["binding"] = binding_resource(row, parse_slos(spec.slos))
    return row


def infeasible_row(spec: SweepSpec, point: Point, reason: str) -> dict[str, Any]:
    """The row of a point that cannot run: its parameters and why, every metric null."""
    return {**point_fields(spec, point), INFEASIBLE_COLUMN: reason}


def run_point(
    spec: SweepSpec, point: Point, progress: Callable[[float], None] | None = None
) -> dict[str, Any]:
    """Simulate one point and return its row. Top-level so worker processes can pickle it.

    ``progress(x)`` is told the fraction of the point's arrival horizon just
    simulated (the increments add up to at most 1).
    """
    args = spec.fields(point)
    args["model"] = resolve_model(spec.model, spec.model_set)
    args["gpu"] = spec.gpu
    args["profile"] = spec.profile
    run = build_run(spec.workload, **args)
    try:
        memory_budget(run.model, run.config)
    except TwinError as err:
        # A point that cannot run is a finding of the sweep, not a reason to stop it.
        return infeasible_row(spec, point, str(err))
    slos = parse_slos(spec.slos)
    digest = RequestDigest(run.config.arrivals.warmup_s, slos)
    horizon = run.horizon_s()
    summary = run.simulate(
        progress=None if progress is None or horizon <= 0 else lambda dt: progress(dt / horizon),
        on_record=digest.add,
    )
    window = summary.throughput.window_s or 0.0
    return {**summary_row(spec, point, summary), **digest.columns(), **digest.goodput(window)}


class PointProgress:
    """A sweep's progress in points, moved within each point as it runs.

    A running point shows up to ``RUNNING_SHARE`` of itself; its stored row adds
    the rest, so each point adds exactly 1 in all. Progress that arrives after the
    point's row (a worker's last message, relayed through a queue, can land after
    its result) is dropped: counted, it pushed the bar past the points stored
    (``5/6`` shown at 100%).
    """

    RUNNING_SHARE = 0.95

    def __init__(self, progress: Callable[[float], None] | None) -> None:
        self.progress = progress
        # By point, or by a point's key (run_pairs: points of several specs).
        self.shown: dict[Hashable, float] = {}
        self.stored: set[Hashable] = set()

    def partial(self, point: Hashable, x: float) -> None:
        """``x`` more of ``point`` simulated (ignored once its row is stored)."""
        if self.progress is None or point in self.stored:
            return
        step = min(x, self.RUNNING_SHARE - self.shown.get(point, 0.0))
        if step > 0:
            self.shown[point] = self.shown.get(point, 0.0) + step
            self.progress(step)

    def done(self, point: Hashable) -> None:
        """``point``'s row is stored: the rest of its share."""
        self.stored.add(point)
        if self.progress is not None:
            self.progress(1 - self.shown.pop(point, 0.0))


@dataclass
class SweepOutcome:
    """The rows of this sweep's points, and how many were computed now vs found on disk."""

    rows: list[dict[str, Any]]
    computed: int
    skipped: int
    # Points computed per ray node (node id: count); empty when they ran here.
    nodes: dict[str, int] = field(default_factory=dict)


def run_sweep(
    spec: SweepSpec,
    points: list[Point],
    out_dir: str | Path,
    jobs: int = 1,
    progress: Callable[[float], None] | None = None,
    on_point: Callable[[Point, dict[str, Any]], None] | None = None,
    executor: str = "local",
    ray_address: str | None = None,
) -> SweepOutcome:
    """Run the points missing from ``out_dir/results.parquet``; return this sweep's rows.

    ``spec`` must be :func:`resolve`-d (its key needs the fingerprint and
    label). ``jobs == 1`` runs in-process, in grid order (deterministic, and
    tracebacks stay readable); more uses a local process pool. ``on_point``
    sees each newly computed point (tests count them). ``executor="ray"`` runs
    the missing points as ray tasks instead (``jobs`` is then ray's business);
    their rows are stored exactly like local ones, and the outcome counts the
    points each ray node computed. Rows are merged into the file in batches
    (:class:`~reports.results_table.ResultsWriter`), and once more at the end,
    also when the sweep stops on an error or Ctrl-C.
    """
    return run_pairs(
        [(spec, p) for p in points], out_dir, jobs, progress, on_point, executor, ray_address
    )


def run_pairs(
    pairs: list[tuple[SweepSpec, Point]],
    out_dir: str | Path,
    jobs: int = 1,
    progress: Callable[[float], None] | None = None,
    on_point: Callable[[Point, dict[str, Any]], None] | None = None,
    executor: str = "local",
    ray_address: str | None = None,
) -> SweepOutcome:
    """:func:`run_sweep` for points of several specs in one batch (``twin plan``: one spec
    per candidate deployment), all in one pool, or all as ray tasks (``executor="ray"``)."""
    specs = {id(spec): spec for spec, _ in pairs}
    if any(not spec.workload_sha256 for spec in specs.values()):
        raise ValueError("run_sweep needs a resolved SweepSpec (call reports.sweep.resolve)")
    if jobs < 1:
        raise TwinError(f"--jobs: must be at least 1 (got {jobs})")
    if executor not in EXECUTORS:
        raise TwinError(f"--executor {executor!r}: choose from {', '.join(EXECUTORS)}")
    # Fail on a missing ray, or a cluster that does not answer, before touching the folder.
    ray = import_ray(ray_address) if executor == "ray" else None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # Rows of other sweeps sharing the DIR are kept in the file, but only this
    # sweep's keys are returned for the report.
    rows = merge_results(out, [])
    keyed = [(spec.key(p), spec, p) for spec, p in pairs]
    todo = [(k, spec, p) for k, spec, p in keyed if k not in rows]
    skipped = len(pairs) - len(todo)
    if progress is not None and skipped:
        progress(skipped)

    shares = PointProgress(progress)
    writer = ResultsWriter(out)

    def done(item: tuple[str, SweepSpec, Point], row: dict[str, Any]) -> None:
        rows[row["key"]] = stored_row(row)
        writer.add(row)
        if on_point is not None:
            on_point(item[2], row)
        shares.done(item[0])

    def partial(item: tuple[str, SweepSpec, Point], x: float) -> None:
        shares.partial(item[0], x)

    nodes: dict[str, int] = {}
    try:
        if ray is not None:
            if todo:
                pairs_todo = [(spec, p) for _, spec, p in todo]
                by_pair = {id(pair): item for pair, item in zip(pairs_todo, todo, strict=True)}
                nodes = run_points_on_ray(
                    ray,
                    ray_address,
                    pairs_todo,
                    lambda pair, row: done(by_pair[id(pair)], row),
                )
        elif jobs == 1 or len(todo) <= 1:
            for item in todo:
                _, spec, point = item
                done(item, run_point(spec, point, Batched(functools.partial(partial, item))))
        else:
            run_in_pool(
                run_point,
                todo,
                lambda item: item[1:],
                min(jobs, len(todo)),
                done,
                on_progress=partial if progress is not None else None,
            )
    finally:
        writer.flush()  # what finished is kept, also on an error or Ctrl-C
    return SweepOutcome([rows[k] for k, _, _ in keyed], len(todo), skipped, nodes)
