"""One simulation end to end: cluster + streamed records + summary, written atomically;
and the one builder of a run from what a user names (:func:`build_run`)."""

from __future__ import annotations

import gc
import math
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from twin import __version__
from twin import precision as px
from twin.atomic import OutputSet, peek_manifest
from twin.cache import PrefillFlops
from twin.engine.cluster import expected_horizon
from twin.engine.cluster_kinds import make_cluster
from twin.engine.config import GROUP_OF, POOL_FLAG_OPTIONS, EngineConfig
from twin.engine.config_build import build_config
from twin.engine.cost import StepPricer
from twin.engine.disagg import (
    TIMELINE_FILE,
    DisaggCluster,
    RunSettings,
    WorkerPool,
    check_tp_pair,
    split_pools,
    write_timeline,
)
from twin.engine.fabric import kv_link
from twin.engine.mode_base import flag_name
from twin.engine.run_pricing import run_pricer
from twin.engine.settings import typed_settings
from twin.errors import TwinError
from twin.metrics import RecordWriter, RequestRecord, SummaryBuilder, to_json
from twin.model import ModelSpec
from twin.presets import DEFAULT_MODEL
from twin.slo import Slo
from twin.summary import (
    CacheOccupancy,
    ClusterState,
    Provenance,
    RunSummary,
    Utilisation,
    WorkloadInfo,
)
from twin.token_gaps import TokenGaps
from twin.workloads.reader import Workload

if TYPE_CHECKING:
    from typing_extensions import Unpack

REQUESTS_FILE = "requests.parquet"
SUMMARY_FILE = "summary.json"


class RunArgs(RunSettings, total=False):
    """:func:`build_run`'s keyword arguments as one typed value: the run's settings and
    build_run's own (the model, where the step prices come from, the engine mode and its
    flags, the cache size, a fixed duration). A caller holding them as loose (name, value)
    pairs (a sweep's points, a plan's, a measured row's) builds it through
    :func:`twin.engine.settings.typed_settings`."""

    model: str | ModelSpec
    gpu: str | None
    profile: str | Path | None
    engine: str | None
    cache_gb: float | str | None
    sets: dict[str, str] | None
    duration_s: float | None
    workload_cache: str | Path | None


# build_run's own arguments (the rest are the run's settings, for the config)
_OWN_ARGS = RunArgs.__optional_keys__ - RunSettings.__optional_keys__


# Net allocations between two runs of Python's cyclic garbage collector during a
# simulation (CPython's default: 700). A run allocates a dozen short-lived objects a
# request (events, records, admissions) that reference counting frees; the young
# generation's collections found nothing to free yet took 7-11% of a vanilla run's CPU
# (issue 16, session 7). Collections still run (memory stays flat: bench_engine's scale
# run), 30 times less often.
_GC_YOUNG_THRESHOLD = 20_000


@contextmanager
def _rare_collections() -> Iterator[None]:
    """Raise the collector's young threshold for the run; restore it after."""
    young, middle, old = gc.get_threshold()
    gc.set_threshold(max(young, _GC_YOUNG_THRESHOLD), middle, old)
    try:
        yield
    finally:
        gc.set_threshold(young, middle, old)


def simulate(
    workload: Workload,
    model: ModelSpec,
    pricer: StepPricer,
    config: EngineConfig,
    out_dir: str | Path | None = None,
    profile: dict[str, Any] | None = None,
    progress: Callable[[float], None] | None = None,
    on_record: Callable[[RequestRecord], None] | None = None,
    force: bool = True,
    slos: Sequence[Slo] = (),
    decode: WorkerPool | None = None,
) -> RunSummary:
    """Simulate ``workload``; return the summary (and write both files under ``out_dir``).

    ``profile`` describes where the step prices come from (its provenance
    label goes into the summary). ``on_record`` also sees every record (tests).
    ``slos`` add the summary's ``slo`` section: each target's measured value, whether
    it is met, and the goodput (:mod:`twin.slo`). ``decode``: a disaggregated run's decode
    pool on its own hardware (:func:`build_run` makes it).
    Nothing is left in ``out_dir`` if the run fails, and the two files are
    committed as one set with a manifest (``twin.atomic.OutputSet``); unless
    ``force``, outputs another run committed there meanwhile are kept and this
    run fails instead.
    """
    summary = SummaryBuilder(
        PrefillFlops(model), config.arrivals.warmup_s, config.memory.shared_pool
    )
    writer = outputs = None
    if out_dir is not None:
        before = peek_manifest(out_dir)
        files = [REQUESTS_FILE, SUMMARY_FILE]
        if config.disagg.prefill_workers:  # disaggregated: each request's prefill/transfer/decode
            files.append(TIMELINE_FILE)
        outputs = OutputSet(out_dir, files, kind="twin simulate")
        writer = RecordWriter(
            outputs.path(REQUESTS_FILE),
            config.arrivals.warmup_s,
            preemptive=config.memory.shared_pool,
        )

    add = summary.add
    write = writer.add if writer is not None else None

    def record(rec: RequestRecord) -> None:
        latencies = rec.latencies()  # derived once for the summary and the file
        add(rec, latencies)
        if write is not None:
            write(rec, latencies)
        if on_record is not None:
            on_record(rec)

    try:
        gpu = (profile or {}).get("gpu")
        cluster = make_cluster(model, pricer, config, workload, record, gpu, decode)
        with _rare_collections():
            stats = cluster.run(progress)
    except BaseException:
        if writer is not None and outputs is not None:
            writer.abort()
            outputs.abort()
        raise
    if writer is not None and outputs is not None:
        try:
            writer.close()
        except BaseException:  # a full disk at the last rows: nothing of this run is left
            outputs.abort()
            raise
    util = [r["utilisation"] for r in stats.replicas]
    result = summary.summary(
        ClusterState(
            stats.sim_end_s,
            stats.memory_budget_bytes,
            stats.peak_buffered_rows,
            Utilisation(sum(util) / len(util), min(util), max(util)),
            tuple(stats.replicas),
            CacheOccupancy(**stats.occupancy),
            stats.pools,
        ),
        config.to_dict(),
        Provenance(
            __version__,
            config.arrivals.seed,
            model.name,
            WorkloadInfo(
                str(workload.path),
                workload.num_rows,
                workload.num_sessions,
                workload.metadata.get("generator", ""),
            ),
            profile or {},
        ),
        # Inter-token latency: every gap between consecutive output tokens, of every request
        # (as ``vllm bench serve``'s ITL), exact from the step schedule (twin.token_gaps).
        TokenGaps.merged(stats.token_gaps),
        stats.horizon_s,
        slos,
    )
    if outputs is not None:
        try:
            if isinstance(cluster, DisaggCluster):
                write_timeline(cluster, outputs.path(TIMELINE_FILE))
            outputs.path(SUMMARY_FILE).write_text(to_json(result.to_dict()))
            outputs.commit(before, force)
        except BaseException:
            outputs.abort()
            raise
    return result


@dataclass(frozen=True)
class Run:
    """Everything one simulation needs, resolved and checked (:func:`build_run` makes it)."""

    workload: Workload
    model: ModelSpec
    profile: Any  # twin.costmodel.profile.Profile
    pricer: StepPricer
    config: EngineConfig
    decode: WorkerPool | None = None  # a disaggregated run's decode pool on its own hardware

    @property
    def profile_info(self) -> dict[str, Any]:
        """Where the step prices come from (the summary's ``profile``)."""
        from twin.costmodel.precision_kernels import provenance_label

        p = self.profile
        label = provenance_label(self.model, p)
        a2a = getattr(self.pricer, "a2a", None)  # attention DP's DeepEP fits, when used
        if a2a is not None:
            label = f"{label}; {a2a.provenance}"
        return {
            "gpu": p.gpu,
            "device": p.device,
            "source": p.source,
            "provenance": label,
            # Which precision was priced; absent for bf16, so bf16 summaries keep their bytes.
            **px.info(self.model),
            # Which engine release's kernel tables priced the steps, and per family whose
            # table differs by release the table read; absent without a release (newest).
            **_tables_info(p, self.config.mode.kernel_tables, self._unfused_allreduce()),
        }

    def _unfused_allreduce(self) -> bool:
        """Whether the run reads the un-fused all-reduce's tables (its kernel tables'
        picks: ``twin.engine.run_pricing.unfused_allreduce``, the prices' rule)."""
        from twin.engine.run_pricing import kernel_layout_of, unfused_allreduce

        layout = kernel_layout_of(self.model, self.config, self.profile.gpu)
        return unfused_allreduce(layout, self.config)

    def horizon_s(self) -> float:
        """Simulated seconds the run is expected to span (a progress bar's total)."""
        return expected_horizon(self.workload, self.config.arrivals)

    def simulate(
        self,
        out_dir: str | Path | None = None,
        progress: Callable[[float], None] | None = None,
        on_record: Callable[[RequestRecord], None] | None = None,
        force: bool = True,
        slos: Sequence[Slo] = (),
    ) -> RunSummary:
        """:func:`simulate` this run; return the summary (and write it under ``out_dir``)."""
        return simulate(
            self.workload,
            self.model,
            self.pricer,
            self.config,
            out_dir,
            self.profile_info,
            progress,
            on_record,
            force,
            slos,
            self.decode,
        )


def mode_fields(
    model: ModelSpec, engine: str | None, sets: dict[str, str] | None, settings: dict[str, Any]
) -> dict[str, Any]:
    """EngineConfig fields of engine mode ``engine`` with its flags ``sets``, under ``settings``.

    What the user set explicitly wins over the mode's choices; a policy given
    explicitly drops the options the mode derived for its own policy.
    """
    from twin.engine.modes import get_mode

    mode = get_mode(engine)
    fields = mode.settings(model, sets or {})
    for flag, value in (sets or {}).items():
        # An explicit option and an engine flag for the same setting must agree
        # (--max-running 64 with --set max_running_requests=32 is refused, not
        # silently resolved); alone, either one applies.
        name = flag_name(flag)
        wrote: dict[str, Any] = {}
        mode.apply_flag(name, value, model, wrote)
        for field, mine in wrote.items():
            if field in _OPTION_NAMES and field in settings and settings[field] != mine:
                raise TwinError(
                    f"{_OPTION_NAMES[field]} {settings[field]} conflicts with --set "
                    f"{name}={value} (both set {field}); give one of them"
                )
    if "policy" in settings and "policy_options" not in settings:
        fields.pop("policy_options", None)
    fields.update(settings)
    return fields


# A pool's engine flags may not set what describes the deployment rather than one pool's
# servers: its layout has the pool options (--prefill-tp/--decode-tp, ...), the engine
# and its release are the run's.
_DEPLOYMENT_FIELDS = frozenset(
    {"tp", "ep", "pp", "dp_attention", "replicas", "prefill_workers", "decode_workers",
     "kv_link", "engine", "engine_release", "kernel_tables"}
)  # fmt: skip


def pool_engine_flags(
    model: ModelSpec, engine: str | None, sets: dict[str, str], settings: dict[str, Any]
) -> tuple[dict[str, str], dict[str, str]]:
    """Each pool's own engine flags (``settings``' ``prefill_engine_flags`` and
    ``decode_engine_flags``: ``--prefill-set``/``--decode-set``), checked before any work,
    each refusal one line naming the option and the flag: a pool's flags without pools, a
    flag ``--set`` already gives both pools, a flag the engine does not take (or an
    invalid value), a flag that sets the deployment's layout or engine, a flag that
    disagrees with an explicit option (``--max-running``, ...). The names are normalised
    as ``--set``'s (dashes read as underscores) and written back into ``settings``."""
    from twin.engine.modes import get_mode

    mode = get_mode(engine)
    shared = {flag_name(k) for k in sets}
    found: list[dict[str, str]] = []
    for field, option in POOL_FLAG_OPTIONS.items():
        flags = {flag_name(k): str(v) for k, v in (settings.get(field) or {}).items()}
        if flags and not (settings.get("prefill_workers") or settings.get("decode_workers")):
            raise TwinError(
                f"{option}: only a disaggregated run has pools; give --prefill-workers and "
                "--decode-workers"
            )
        for name, value in sorted(flags.items()):
            given = f"{option} {name}={value}"
            if name in shared:
                raise TwinError(
                    f"{given}: --set {name} already sets it for both pools; give it in "
                    "--set, or per pool in --prefill-set and --decode-set"
                )
            wrote: dict[str, Any] = {}
            try:
                mode.apply_flag(name, value, model, wrote)
            except TwinError as err:
                text = str(err)
                raise TwinError(
                    f"{given}: {text.split(': ', 1)[1] if text.startswith('--set ') else text}"
                ) from None
            layout = sorted(set(wrote) & _DEPLOYMENT_FIELDS)
            if layout:
                raise TwinError(
                    f"{given}: sets the deployment's {layout[0]}, not one pool's; give the "
                    "pool options (--prefill-workers/--decode-workers, --prefill-tp/"
                    "--decode-tp, --prefill-ep/--decode-ep, ...)"
                )
            for name_, mine in wrote.items():
                if name_ in _OPTION_NAMES and name_ in settings and settings[name_] != mine:
                    raise TwinError(
                        f"{given} conflicts with {_OPTION_NAMES[name_]} {settings[name_]} "
                        f"(both set {name_}); give one of them"
                    )
        if flags:
            settings[field] = dict(sorted(flags.items()))
        else:
            settings.pop(field, None)
        found.append(flags)
    return found[0], found[1]


# The options of `twin simulate` that an engine flag can also set (mode_fields).
_OPTION_NAMES = {
    "policy": "--policy",
    "max_running": "--max-running",
    "max_batched_tokens": "--max-batched-tokens",
    "memory_utilization": "--gpu-mem-util",
    "prefill_workers": "--prefill-workers",
}


# The share of a --duration run whose arrivals are left out as warm-up (cold cache,
# sessions still accumulating) unless --warmup-s says otherwise. A judgement call: the
# usual rule of thumb for deleting a transient before batch means is 10-20% of the run
# (Law and Kelton, ch. 9.5.1); the larger end, as multi-turn sessions ramp up slowly.
DURATION_WARMUP_FRACTION = 0.2


def duration_settings(settings: dict[str, Any], duration_s: float) -> dict[str, Any]:
    """``settings`` for a run whose sessions start in [0, ``duration_s``): arrivals cut
    there (``until_s``), and a warm-up of :data:`DURATION_WARMUP_FRACTION` unless given."""
    if not (math.isfinite(duration_s) and duration_s > 0):
        raise TwinError(f"--duration: must be a positive number of seconds (got {duration_s!r})")
    if settings.get("until_s") is not None:
        raise TwinError("--duration and --until-s both end the arrivals: give one of them")
    out = {**settings, "until_s": float(duration_s)}
    if out.get("warmup_s") is None:
        out["warmup_s"] = DURATION_WARMUP_FRACTION * float(duration_s)
    elif out["warmup_s"] >= duration_s:
        raise TwinError(
            f"--warmup-s {out['warmup_s']:g}: must be shorter than --duration {duration_s:g}"
        )
    return out


def default_workload_cache() -> Path:
    """Where stretched workloads are kept between runs (``$XDG_CACHE_HOME/twin/workloads``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "twin" / "workloads"


def build_run(workload: str | Path | Workload, **args: Unpack[RunArgs]) -> Run:
    """The one builder of a simulation from what a user names (``twin simulate``, the sweeps).

    ``args`` (:class:`RunArgs`; each one not given is None, the model
    :data:`DEFAULT_MODEL`): ``model`` is a preset name or a ``config.json``; ``gpu`` a
    shipped profile or ``profile`` a profile file (h100 if neither); ``engine`` whose
    kernels price the steps (:mod:`twin.costmodel.kernel_sources`); ``cache_gb`` and the
    run's settings (any :class:`EngineConfig` field) go through
    :func:`~twin.engine.config_build.build_config`. Everything is checked here,
    the configuration before the workload is opened.

    ``duration_s`` (``--duration``) runs the load for that long: sessions start in
    [0, duration_s) (:func:`duration_settings`); at a ``session_rate`` a workload
    with too few sessions for it is stretched (a generated one regenerated with
    more sessions, kept under ``workload_cache``: :mod:`workloads.extend`), so
    every rate of a sweep runs the same simulated time.
    """
    from twin.costmodel.moe_layout import group_limited
    from twin.costmodel.profile_store import (
        resolve_profile,  # late: the engine needs no profile format
    )
    from twin.engine.modes import get_mode
    from twin.presets import resolve_model

    args = typed_settings(RunArgs, args.items())  # a misspelt name (a stored sweep's): one line
    model = args.get("model", DEFAULT_MODEL)
    gpu, profile, engine = args.get("gpu"), args.get("profile"), args.get("engine")
    cache_gb, sets, duration_s = args.get("cache_gb"), args.get("sets"), args.get("duration_s")
    # the run's settings, filled in below (the pools, the duration)
    named: dict[str, Any] = {k: v for k, v in args.items() if k not in _OWN_ARGS}

    spec = resolve_model(model) if isinstance(model, str) else model
    mode = get_mode(engine)
    kernels = mode.kernels if engine is not None else None
    gpu, decode_gpu, named = split_pools(gpu, profile, named)
    if mode.release is not None and kernels is not None and not named.get("kernel_tables"):
        # --engine NAME==VERSION: that release's kernel tables (a measured row may name its own).
        named["kernel_tables"] = mode.release.version
    tables = named.get("kernel_tables") or None
    prof = resolve_profile(gpu, None if profile is None else Path(profile), kernels)
    # a group-limited model's experts skip the tables timed at the collectors' group tie
    tied = group_limited(spec)
    prof = prof.at_release(tables, tied)
    dprof = prof
    if decode_gpu != gpu:
        dprof = resolve_profile(decode_gpu, None, kernels).at_release(tables, tied)
        if dprof.gpu != prof.gpu:
            named["decode_gpu"] = dprof.gpu
    if duration_s is not None:
        named = duration_settings(named, duration_s)
    named = {k: v for k, v in named.items() if not (k == "warmup_s" and v is None)}
    prefill_sets, decode_sets = pool_engine_flags(spec, engine, sets or {}, named)
    config = build_config(
        prof,
        cache_gb=cache_gb,
        model=spec,
        **mode_fields(spec, engine, {**(sets or {}), **prefill_sets}, named),
    )
    decode = None
    c, x, arrivals = config.cluster, config.disagg, config.arrivals
    if x.prefill_workers:
        kv_link(x.kv_link, prof.gpu, config)  # refused here, before any work
        d_dp = x.decode_dp_attention or c.dp_attention
        check_tp_pair(c.tp // c.dp_attention, (x.decode_tp or c.tp) // d_dp)
        if (
            x.decode_gpu
            or x.decode_tp
            or x.decode_ep
            or x.decode_dp_attention
            or prefill_sets
            or decode_sets
        ):
            decode_flags = {**(sets or {}), **decode_sets}
            decode = _decode_pool(spec, dprof, engine, decode_flags, named, cache_gb, config)
    if duration_s is not None and arrivals.session_rate is not None:
        from twin.workloads.extend import extended_workload, sessions_started

        path = workload.path if isinstance(workload, Workload) else Path(workload)
        needed = sessions_started(
            arrivals.session_rate, duration_s, arrivals.seed, arrivals.burstiness
        )
        cache = args.get("workload_cache")
        longer = extended_workload(
            Path(path),
            needed,
            Path(cache) if cache is not None else default_workload_cache(),
            f"{arrivals.session_rate:g} sessions/s for {duration_s:g} s",
        )
        if longer != Path(path):
            workload = longer
    wl = workload if isinstance(workload, Workload) else Workload.open(Path(workload))
    return Run(wl, spec, prof, run_pricer(spec, prof, config), config, decode)


def _tables_info(profile: Any, release: str, unfused_allreduce: bool = False) -> dict[str, Any]:
    """The summary's ``kernel_tables``: the engine release asked for and, per kernel family
    whose table differs by release, the release of the table that priced it (a layout
    running its all-reduces ``unfused_allreduce``: ``run_pricing.allreduce_profile``)."""
    if not release:
        return {}
    picks = profile.table_picks(release, unfused_allreduce=unfused_allreduce)
    return {"kernel_tables": {"release": release, "families": picks}}


def _decode_pool(
    model: ModelSpec,
    profile: Any,
    engine: str | None,
    sets: dict[str, str] | None,
    settings: dict[str, Any],
    cache_gb: float | str | None,
    config: EngineConfig,
) -> WorkerPool:
    """The decode pool on its own GPU, tp and ep: its configuration built as its servers
    would be (the same engine and settings, its flags ``sets``: ``--set`` and
    ``--decode-set``; the engine's GPU-dependent defaults and host times of its GPU), its
    step prices and memory budget; refused in one line where the pool cannot hold the
    model."""
    from twin.costmodel.precision_kernels import provenance_label
    from twin.engine.budget import memory_budget

    own = {
        **{k: v for k, v in settings.items() if k not in _POOL_FIELDS},
        "tp": config.disagg.decode_tp or config.cluster.tp,
        "ep": config.disagg.decode_ep or config.cluster.ep,
        "dp_attention": config.disagg.decode_dp_attention or config.cluster.dp_attention,
        "replicas": config.disagg.decode_workers,
    }
    where = (
        f"the decode pool ({profile.gpu}, tp {own['tp']}"
        + (f", ep {own['ep']}" if own["ep"] > 1 else "")
        + (f", dp attention {own['dp_attention']}" if own["dp_attention"] > 1 else "")
        + ")"
    )
    try:
        pool = build_config(
            profile, cache_gb=cache_gb, model=model, **mode_fields(model, engine, sets, own)
        )
        budget = memory_budget(model, pool)
        pricer = run_pricer(model, profile, pool)
    except TwinError as err:
        raise TwinError(f"{where}: {err}") from None
    return WorkerPool(pool, pricer, budget, profile.gpu, provenance_label(model, profile))


# The config fields that describe the disaggregated layout, not one pool's replicas (the
# ``disagg`` group's).
_POOL_FIELDS = frozenset(name for name, group in GROUP_OF.items() if group == "disagg")
