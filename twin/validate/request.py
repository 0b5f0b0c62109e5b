"""What ``twin validate`` is asked, typed and grouped by concern.

:class:`ValidationRequest` holds the model, the requests both sides serve
(:class:`RequestSource`), the cache they serve them from (:class:`CacheSetup`) and
how the reference is measured (:class:`Measurement`);
:func:`twin.validate.entry.validate_model` takes it whole, with the executor and the
progress display injected beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from twin.model import ModelSpec


@dataclass(frozen=True)
class RequestSource:
    """The requests: exactly one of ``workload`` (a parquet file) and ``generate`` (a
    generator name, ``sessions`` of them, at ``session_rate``); the first ``requests`` in
    arrival order are kept; ``seed`` fixes the generation and the arrivals."""

    workload: str | Path | None = None
    generate: str | None = None
    sessions: int | None = None
    requests: int = 100
    session_rate: float | None = None
    seed: int = 0


@dataclass(frozen=True)
class CacheSetup:
    """The prefix cache both sides serve from: the policy and its size (None: the
    default size for the workload, ``twin.validate.run.default_cache``)."""

    policy: str = "marconi"
    cache_gb: float | None = None


@dataclass(frozen=True)
class Measurement:
    """How the reference is measured: on ``device`` (cpu or cuda), each prefill timed
    ``repeats`` times, priced from ``profile`` (None: the device calibrated first)."""

    device: str = "cpu"
    repeats: int = 3
    profile: str | Path | None = None


@dataclass(frozen=True)
class ValidationRequest:
    """One validation's inputs (module docstring); ``model`` a preset name or a spec."""

    model: str | ModelSpec
    source: RequestSource = field(default_factory=RequestSource)
    cache: CacheSetup = field(default_factory=CacheSetup)
    measurement: Measurement = field(default_factory=Measurement)
