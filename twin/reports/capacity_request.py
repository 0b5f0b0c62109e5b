"""What ``twin report capacity`` is asked, typed and grouped by concern.

:class:`CapacityRequest` holds the deployment every point runs
(:class:`Deployment`), the axes the sweep varies (:class:`SweepAxes`), the service
targets it is judged against (:class:`Targets`), where its points run
(:class:`Execution`) and what the report shows; :func:`twin.reports.capacity.capacity_report`
takes it whole. The CLI builds one from its flags; a library caller builds one with
only what differs from the defaults (``CapacityRequest("w.parquet",
Deployment(model="tiny-hybrid"), SweepAxes(cache_gb=(1.0,)))``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from twin.engine.modes import get_mode
from twin.presets import DEFAULT_MODEL

if TYPE_CHECKING:  # an annotation: ``twin report capacity --help`` reads the defaults here
    from twin.reports.analysis import Slo

# The policies swept when none are named: the paper's three; with --engine NAME, the
# engine mode itself (what `twin simulate --engine NAME` runs): default_policies.
DEFAULT_POLICIES = ("vllm+", "sglang+", "marconi")


def default_policies(engine: str | None) -> list[str]:
    """The policies a sweep runs when none are named: the engine mode itself under
    ``--engine`` (its canonical name; a bad name fails here), else :data:`DEFAULT_POLICIES`."""
    return [get_mode(engine).name] if engine is not None else list(DEFAULT_POLICIES)


@dataclass(frozen=True)
class Deployment:
    """What every point of the sweep runs: the model (``model_set``: ``FIELD=VALUE``
    overrides, ``--model-set``), the GPU or a measured ``profile``, the engine mode
    (``--engine``: its kernels, preemption and pool), and the fixed engine ``settings``
    (``replicas``, ``tp``, ``pp``, ``router``, ... any :class:`~twin.engine.EngineConfig`
    field)."""

    model: str = DEFAULT_MODEL
    model_set: Sequence[str] = ()
    gpu: str | None = None
    engine: str | None = None
    profile: str | Path | None = None
    settings: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class SweepAxes:
    """What the sweep varies: ``cache_gb`` (``"auto"``: the shared KV pool) x ``policies``
    (engine modes with flags allowed, ``"sglang[mamba_radix_cache_strategy=extra_buffer]"``;
    None: :data:`DEFAULT_POLICIES`, or the engine mode itself under ``--engine``) x
    ``session_rates`` x ``seeds``; ``replicas`` (``--replicas 1,2,4``) sweeps the replica
    count (so the GPU count) instead of fixing it; ``layouts`` (``--layouts agg,1p1d``) the
    serving layout; ``duration_s`` (``--duration``) runs every point for that simulated
    time (needs ``session_rates``)."""

    cache_gb: Sequence[float | str] = (10.0, 20.0, 40.0)
    policies: Sequence[str] | None = None
    session_rates: Sequence[float | None] = (None,)
    seeds: int = 1
    replicas: Sequence[int] | None = None
    layouts: Sequence[str] | None = None
    duration_s: float | None = None


@dataclass(frozen=True)
class Targets:
    """What the points are judged against: ``slo`` (``"p95_ttft<=500ms"`` or several)
    adds the smallest cache meeting every target per policy and rate, and the goodput;
    ``bisect_tol`` (``--bisect``) narrows each combination's sustainable rate between the
    swept rates to within that ratio."""

    slo: str | Slo | Sequence[str | Slo] | None = None
    bisect_tol: float | None = None


@dataclass(frozen=True)
class Execution:
    """Where the points run: ``jobs`` local processes, or Ray (``executor="ray"``, at
    ``ray_address``)."""

    jobs: int = 1
    executor: str = "local"
    ray_address: str | None = None


@dataclass(frozen=True)
class CapacityRequest:
    """One capacity report's inputs, passed whole (module docstring)."""

    workload: str | Path
    deployment: Deployment = field(default_factory=Deployment)
    axes: SweepAxes = field(default_factory=SweepAxes)
    targets: Targets = field(default_factory=Targets)
    execution: Execution = field(default_factory=Execution)
    cdf_cache_gb: float | None = None  # the cache size whose per-request CDFs are drawn
    command: str = "twin report capacity (invoked programmatically)"  # the report's header
