"""One simulation end to end: cluster + streamed records + summary, written atomically."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from twin import __version__
from twin.atomic import OutputSet, peek_manifest
from twin.cache import PrefillFlops
from twin.engine.cluster import Cluster
from twin.engine.config import EngineConfig
from twin.engine.cost import StepPricer
from twin.metrics import RecordWriter, RequestRecord, SummaryBuilder, to_json
from twin.model import ModelSpec
from workloads.reader import Workload

REQUESTS_FILE = "requests.parquet"
SUMMARY_FILE = "summary.json"


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
) -> dict[str, Any]:
    """Simulate ``workload``; return the summary (and write both files under ``out_dir``).

    ``profile`` describes where the step prices come from (its provenance
    label goes into the summary). ``on_record`` also sees every record (tests).
    Nothing is left in ``out_dir`` if the run fails, and the two files are
    committed as one set with a manifest (``twin.atomic.OutputSet``); unless
    ``force``, outputs another run committed there meanwhile are kept and this
    run fails instead.
    """
    summary = SummaryBuilder(PrefillFlops(model), config.warmup_s)
    writer = outputs = None
    if out_dir is not None:
        before = peek_manifest(out_dir)
        outputs = OutputSet(out_dir, [REQUESTS_FILE, SUMMARY_FILE], kind="twin simulate")
        writer = RecordWriter(outputs.path(REQUESTS_FILE), config.warmup_s)

    def record(rec: RequestRecord) -> None:
        summary.add(rec)
        if writer is not None:
            writer.add(rec)
        if on_record is not None:
            on_record(rec)

    try:
        cluster = Cluster(model, pricer, config, workload, record)
        stats = cluster.run(progress)
    except BaseException:
        if writer is not None and outputs is not None:
            writer.abort()
            outputs.abort()
        raise
    if writer is not None:
        writer.close()
    result = summary.result()
    util = [r["utilisation"] for r in stats.replicas]
    result.update(
        twin_version=__version__,
        seed=config.seed,
        config=config.to_dict(),
        model=model.name,
        profile=profile or {},
        workload={
            "path": str(workload.path),
            "rows": workload.num_rows,
            "sessions": workload.num_sessions,
            "producer": workload.metadata.get("generator", ""),
        },
        sim_end_s=stats.sim_end_s,
        peak_buffered_rows=stats.peak_buffered_rows,
        memory_budget_bytes=stats.memory_budget_bytes,
        utilisation={"mean": sum(util) / len(util), "min": min(util), "max": max(util)},
        replicas=stats.replicas,
        cache_occupancy=stats.occupancy,
    )
    if outputs is not None:
        try:
            outputs.path(SUMMARY_FILE).write_text(to_json(result))
            outputs.commit(before, force)
        except BaseException:
            outputs.abort()
            raise
    return result
