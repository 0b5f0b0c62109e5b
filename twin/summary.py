"""The run summary, typed: what ``summary.json`` holds, one frozen dataclass per concern.

:class:`RunSummary` is built in one place (``twin.metrics.SummaryBuilder.summary``,
from the run's records and the engine's state) and serialised by one
:meth:`RunSummary.to_dict`; :func:`twin.metrics.to_json` of that dict is
``summary.json`` byte for byte (sorted keys, 9 significant digits, NaN as null).
Readers in-process take the object; a stored file comes back through
:meth:`RunSummary.from_dict`, which tolerates files from before the schema keys
(``schema``, ``schema_version``) and before ``itl_s`` or ``p90``.

Left as mappings, typed in a later step: the engine configuration
(``EngineConfig.to_dict()``), the cost profile's description, and each replica's
statistics (their keys depend on the memory mode and the policy).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from twin.errors import TwinError
from twin.steady_state import SteadyState

SCHEMA = "twin.summary"
# 1: the first typed summary (the keys of summary.json before it, plus the two schema keys).
SCHEMA_VERSION = 1

PERCENTILES = (5, 50, 90, 95, 99)
# The columns of every latency summary (and of the tables that show one).
STAT_COLUMNS = ("mean", *(f"p{p}" for p in PERCENTILES))


def _plain(obj: Any, omit_none: tuple[str, ...] = ()) -> dict[str, Any]:
    """A flat dataclass's fields as a dict; the fields in ``omit_none`` left out when None."""
    return {
        f.name: getattr(obj, f.name)
        for f in fields(obj)
        if not (f.name in omit_none and getattr(obj, f.name) is None)
    }


def _of(cls: Any, d: Mapping[str, Any]) -> Any:
    """A flat dataclass from a dict; a missing optional field takes its default."""
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in d.items() if k in names})


@dataclass(frozen=True)
class LatencyStats:
    """One latency over the measured requests, seconds; None where nothing has a value."""

    mean: float | None = None
    p5: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None

    @classmethod
    def of(cls, values: np.ndarray) -> LatencyStats:
        """Mean and percentiles of ``values``, NaNs left out."""
        x = values.astype(np.float64)
        x = x[~np.isnan(x)]
        if not x.size:
            return cls()
        q = np.percentile(x, PERCENTILES)
        return cls(float(x.mean()), *(float(v) for v in q))

    def get(self, column: str) -> float | None:
        """One of :data:`STAT_COLUMNS`."""
        return getattr(self, column, None)  # type: ignore[no-any-return]

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LatencyStats:
        return _of(cls, d)


@dataclass(frozen=True)
class Latencies:
    """Every latency the summary reports (each a top-level key of ``summary.json``)."""

    ttft_s: LatencyStats
    tpot_s: LatencyStats
    itl_s: LatencyStats  # every gap between output tokens (twin.token_gaps)
    e2e_s: LatencyStats
    queue_s: LatencyStats
    prefill_s: LatencyStats

    def get(self, key: str) -> LatencyStats | None:
        """``ttft_s``, ``tpot_s``, ...; None for another name."""
        return getattr(self, key, None) if key in _LATENCY_KEYS else None

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k).to_dict() for k in _LATENCY_KEYS}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Latencies:
        return cls(**{k: LatencyStats.from_dict(d.get(k) or {}) for k in _LATENCY_KEYS})


_LATENCY_KEYS = ("ttft_s", "tpot_s", "itl_s", "e2e_s", "queue_s", "prefill_s")


@dataclass(frozen=True)
class Requests:
    total: int
    measured: int
    warmup_excluded: int
    rejected: int


@dataclass(frozen=True)
class Preemption:
    """A shared pool's preemptions (absent for a dedicated cache)."""

    preempted_requests: int
    preemptions: int
    recomputed_tokens: int


@dataclass(frozen=True)
class Hits:
    """The prefix cache's hits over the measured requests."""

    token_hit_rate: float
    request_hit_rate: float
    input_tokens: int
    hit_tokens: int
    checkpoints_admitted: int


@dataclass(frozen=True)
class Flops:
    """Prefill FLOPs and what the hits saved. The last three only when hit tokens were
    recomputed by recurrent layers (prompt modules out of prefix position)."""

    prefill_total: float
    saved: float
    saved_fraction: float
    saved_attention_only: float | None = None
    recomputed_recurrent: float | None = None
    saving_kept: float | None = None


@dataclass(frozen=True)
class Throughput:
    """Rates over the measurement window (None when the window is empty)."""

    window_s: float
    requests_per_s: float | None
    output_tokens_per_s: float | None
    input_tokens_per_s: float | None


@dataclass(frozen=True)
class SloTarget:
    slo: str  # as given, e.g. "p95_ttft<=500ms"
    label: str
    value_ms: float | None
    met: bool


@dataclass(frozen=True)
class SloResult:
    """Each target's value and verdict, all met only at steady state, and the goodput."""

    attainment: float | None  # share of requests within every per-request target
    goodput_rps: float | None
    targets: tuple[SloTarget, ...]
    targets_met: bool
    met: bool

    def to_dict(self) -> dict[str, Any]:
        return {**_plain(self), "targets": [_plain(t) for t in self.targets]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SloResult:
        return cls(
            d.get("attainment"),
            d.get("goodput_rps"),
            tuple(_of(SloTarget, t) for t in d.get("targets", ())),
            d["targets_met"],
            d["met"],
        )


@dataclass(frozen=True)
class Utilisation:
    mean: float
    min: float
    max: float


@dataclass(frozen=True)
class WorkloadInfo:
    path: str
    rows: int
    sessions: int
    producer: str  # the generator that wrote it, "" for an imported trace


@dataclass(frozen=True)
class CacheOccupancy:
    """Cache bytes by kind per replica over simulated time (``twin.metrics.Occupancy``)."""

    interval_s: float
    t_s: Sequence[float]
    kv_bytes: Sequence[Sequence[int]]  # per replica
    ssm_bytes: Sequence[Sequence[int]]


@dataclass(frozen=True)
class ClusterState:
    """The engine's state at the end of the run."""

    sim_end_s: float
    memory_budget_bytes: float
    peak_buffered_rows: int
    utilisation: Utilisation
    replicas: tuple[Mapping[str, Any], ...]  # each replica's statistics (keys vary by mode)
    cache_occupancy: CacheOccupancy
    # Disaggregated runs only (twin.engine.disagg): each pool's and the transfers' numbers.
    pools: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Provenance:
    """What ran: the twin's version, the model, the workload, the cost profile, the seed."""

    twin_version: str
    seed: int
    model: str
    workload: WorkloadInfo
    profile: Mapping[str, Any]  # where the step prices come from (Run.profile_info)


@dataclass(frozen=True)
class RunSummary:
    """One run's summary (module docstring). Field names follow ``summary.json``'s keys."""

    requests: Requests
    latency: Latencies
    hit: Hits
    flops: Flops
    throughput: Throughput
    cluster: ClusterState
    config: Mapping[str, Any]  # EngineConfig.to_dict()
    provenance: Provenance
    preemption: Preemption | None = None  # shared pool only
    steady_state: SteadyState | None = None  # when the end of the arrivals is known
    slo: SloResult | None = None  # when SLOs were given

    def to_dict(self, schema: bool = True) -> dict[str, Any]:
        """``summary.json``'s content (:func:`twin.metrics.to_json` writes it);
        ``schema=False`` leaves out the two schema keys (the bytes before them)."""
        c, p = self.cluster, self.provenance
        out: dict[str, Any] = {
            **({"schema": SCHEMA, "schema_version": SCHEMA_VERSION} if schema else {}),
            **self.latency.to_dict(),
            "requests": _plain(self.requests),
            "hit": _plain(self.hit),
            "flops": _plain(self.flops, _FLOPS_OPTIONAL),
            "throughput": _plain(self.throughput),
            "twin_version": p.twin_version,
            "seed": p.seed,
            "config": self.config,
            "model": p.model,
            "profile": p.profile,
            "workload": _plain(p.workload),
            "sim_end_s": c.sim_end_s,
            "peak_buffered_rows": c.peak_buffered_rows,
            "memory_budget_bytes": c.memory_budget_bytes,
            "utilisation": _plain(c.utilisation),
            "replicas": list(c.replicas),
            "cache_occupancy": _plain(c.cache_occupancy),
        }
        if c.pools is not None:
            out["pools"] = c.pools
        if self.preemption is not None:
            out["preemption"] = _plain(self.preemption)
        if self.steady_state is not None:
            out["steady_state"] = self.steady_state.to_dict()
        if self.slo is not None:
            out["slo"] = self.slo.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunSummary:
        """A stored summary (``json.loads`` of ``summary.json``), with or without the schema
        keys; a newer schema version than this code knows is refused."""
        version = d.get("schema_version", SCHEMA_VERSION)
        if d.get("schema", SCHEMA) != SCHEMA or version > SCHEMA_VERSION:
            raise TwinError(
                f"not a {SCHEMA} summary of version <= {SCHEMA_VERSION}: "
                f"{d.get('schema')!r} {version!r}"
            )
        occ = d.get("cache_occupancy") or {}
        return cls(
            requests=_of(Requests, d["requests"]),
            latency=Latencies.from_dict(d),
            hit=_of(Hits, d["hit"]),
            flops=_of(Flops, d["flops"]),
            throughput=_of(Throughput, d["throughput"]),
            cluster=ClusterState(
                d["sim_end_s"],
                d["memory_budget_bytes"],
                d.get("peak_buffered_rows", 0),
                _of(Utilisation, d["utilisation"]),
                tuple(d.get("replicas", ())),
                CacheOccupancy(
                    occ.get("interval_s", 0.0),
                    occ.get("t_s", []),
                    occ.get("kv_bytes", []),
                    occ.get("ssm_bytes", []),
                ),
                d.get("pools"),
            ),
            config=d.get("config") or {},
            provenance=Provenance(
                d.get("twin_version", ""),
                d.get("seed", 0),
                d.get("model", ""),
                _of(WorkloadInfo, d["workload"]),
                d.get("profile") or {},
            ),
            preemption=_of(Preemption, d["preemption"]) if "preemption" in d else None,
            steady_state=SteadyState.from_dict(d["steady_state"]) if "steady_state" in d else None,
            slo=SloResult.from_dict(d["slo"]) if "slo" in d else None,
        )


_FLOPS_OPTIONAL = ("saved_attention_only", "recomputed_recurrent", "saving_kept")
