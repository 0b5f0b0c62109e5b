"""The run's cluster from its configuration: aggregated, attention-DP, pipelined or
disaggregated."""

from __future__ import annotations

from collections.abc import Callable

from twin.engine.cluster import Cluster
from twin.engine.config import EngineConfig
from twin.engine.cost import StepPricer
from twin.engine.disagg.cluster import DisaggCluster
from twin.engine.disagg.pools import WorkerPool
from twin.engine.dp_attention import DPCluster
from twin.engine.fabric import kv_link
from twin.engine.pipeline import PipelineCluster
from twin.metrics import RequestRecord
from twin.model import ModelSpec
from twin.workloads.reader import Workload


def make_cluster(
    model: ModelSpec,
    pricer: StepPricer,
    config: EngineConfig,
    workload: Workload,
    on_record: Callable[[RequestRecord], None],
    gpu: str | None = None,
    decode: WorkerPool | None = None,
) -> Cluster:
    """The run's cluster: aggregated, or disaggregated when the config names the pools
    (``decode``: the decode pool's own hardware, if it has any)."""
    if config.disagg.prefill_workers:  # each pool's workers may be attention-DP replicas
        link = kv_link(config.disagg.kv_link, gpu, config)
        return DisaggCluster(model, pricer, config, workload, on_record, link, decode, gpu)
    if config.cluster.dp_attention > 1:  # attention ranks in lockstep (twin.engine.dp_attention)
        return DPCluster(model, pricer, config, workload, on_record)
    if config.cluster.pp > 1:  # pipeline stages and micro-batches (twin.engine.pipeline)
        return PipelineCluster(model, pricer, config, workload, on_record)
    return Cluster(model, pricer, config, workload, on_record)
