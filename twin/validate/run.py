"""One validation end to end: predict, measure, compare, write.

The executor is passed in (``run_reference`` and its config) rather than
imported here, so this module needs no torch: the CLI imports the real one
(``twin.reference.executor``) once it has checked that torch is there, and
the tests pass a fake with the same API.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twin import __version__
from twin.engine.cost import make_pricer
from twin.model import ModelSpec
from twin.replay import replay
from twin.validate.compare import join, judge, metrics, output_paths, write_outputs
from twin.validate.predict import predict
from twin.workloads.importers.base import sha256_file
from twin.workloads.reader import Workload

# Default cache: this share of what the workload would fill with no bound, so
# that the policy has to evict (a larger cache would validate no eviction).
DEFAULT_CACHE_FRACTION = 0.3
_UNBOUNDED = 2**62


@dataclass(frozen=True)
class CacheChoice:
    """The cache capacity used, and where it came from (shown in every output)."""

    bytes: int
    source: str  # "--cache-gb" or the footprint rule
    unbounded_footprint_bytes: int | None = None


def unbounded_footprint(workload: Workload, model: ModelSpec, policy: str) -> int:
    """Peak bytes ``policy`` caches on ``workload`` when nothing is ever evicted."""
    return int(replay(workload, model, _UNBOUNDED, policy).peak_bytes)


def default_cache(workload: Workload, model: ModelSpec, policy: str) -> CacheChoice:
    """:data:`DEFAULT_CACHE_FRACTION` of the unbounded footprint under ``policy``."""
    footprint = unbounded_footprint(workload, model, policy)
    return CacheChoice(
        int(DEFAULT_CACHE_FRACTION * footprint),
        f"{DEFAULT_CACHE_FRACTION:.0%} of the unbounded footprint under {policy}",
        footprint,
    )


def validate(
    workload: Workload,
    model: ModelSpec,
    profile: Any,
    *,
    run_reference: Callable[..., Any],
    executor_config: Any,
    cache: CacheChoice,
    out_dir: str | Path,
    shown_dir: str | Path | None = None,
    progress: Callable[[float], None] | None = None,
) -> dict[str, Any]:
    """Predict and measure ``workload`` on one server; write the outputs; return the report.

    ``workload`` must be open loop (see ``fix_arrivals``). ``executor_config``
    names the device, policy, cache bytes, seed and repeats; the twin is
    configured from it, so both sides run the same cache. ``progress`` gets
    the executor's progress (the fraction of requests served). ``shown_dir``:
    where the files of ``out_dir`` will live once published (the report names
    them there; :func:`twin.validate.entry.validate_model` stages its outputs).
    """

    def shown(path: str | Path) -> str:
        if shown_dir is None:
            return str(path)
        try:
            return str(Path(shown_dir) / Path(path).relative_to(out_dir))
        except ValueError:
            return str(path)

    config = executor_config
    records = predict(
        workload,
        model,
        make_pricer(model, profile, 1),
        cache_bytes=config.cache_bytes,
        policy=config.policy,
        policy_options=config.policy_options,
    )
    run = run_reference(workload, model, config, progress)
    cols = join(run.records, records)
    found = metrics(cols)
    report: dict[str, Any] = {
        "twin_version": __version__,
        "model": model.name,
        "device": config.device,
        "device_name": run.device_name,
        "dtype": run.dtype,
        "implementations": run.implementations,
        "profile": {
            "gpu": profile.gpu,
            "device": profile.device,
            "source": profile.source,
            "provenance": profile.provenance_label,
        },
        "policy": config.policy,
        "policy_options": config.policy_options,
        "cache": {
            "bytes": cache.bytes,
            "source": cache.source,
            "unbounded_footprint_bytes": cache.unbounded_footprint_bytes,
        },
        "workload": {
            "path": shown(workload.path),
            "sha256": sha256_file(Path(workload.path)),
            "rows": workload.num_rows,
            "sessions": workload.num_sessions,
            "fixed_arrivals": workload.metadata.get("fixed_arrivals"),
        },
        "seed": config.seed,
        "repeats": config.repeats,
        "executor": {
            "wall_s": run.wall_s,
            "token_hit_rate": run.token_hit_rate,
            "request_hit_rate": run.request_hit_rate,
        },
        "metrics": found,
        **judge(found, config.device),
        "outputs": {k: shown(p) for k, p in output_paths(out_dir).items()},
    }
    write_outputs(out_dir, cols, report)
    return report
