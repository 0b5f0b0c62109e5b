"""The twin's prediction of a reference run: the engine configured as the executor's server.

The reference executor (``twin.reference.executor``) serves a fixed-arrival
workload on one device, one request at a time, FCFS, timing prefills only.
:func:`predict` simulates exactly that server: one replica, ``max_running=1``,
a token budget of the longest prompt (so every prefill is one step, as the
executor runs it), no memory bound, the same cache capacity and policy, and a
:class:`PrefillOnlyPricer` so that decode takes no server time (the executor
does not decode). The engine then looks the cache up and inserts in the same
order as the executor, so hits must match token for token, and the only
difference left between prediction and measurement is the cost model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from twin.engine.config import (
    CacheConfig,
    ClusterConfig,
    EngineConfig,
    MemoryConfig,
    SchedulerConfig,
)
from twin.engine.cost import Chunk, StepPricer, WrappingPricer
from twin.engine.run import simulate
from twin.metrics import RequestRecord
from twin.model import ModelSpec
from twin.workloads.reader import Workload


class PrefillOnlyPricer(WrappingPricer):
    """Prices steps with prefill chunks as ``inner`` does, without their decodes; decode-only steps
    cost nothing.

    The executor times prefills and never decodes, so a request holds the
    simulated server from its admission to its first token only. Checkpoint
    copies are the inner pricer's: the executor copies states as the cache asks.
    """

    def step_time(self, prefills: Sequence[Chunk], decode_batch: int, decode_context: int) -> float:
        return self.inner.step_time(prefills, 0, 0) if prefills else 0.0

    def decode_run(self, batch: int, context: int, steps: int) -> np.ndarray:
        return np.zeros(steps)

    def decode_affine(self, batch: int) -> tuple[float, float] | None:
        return (0.0, 0.0)

    def tokens_per_iteration(self) -> float:
        return 1.0  # prefills only: no decode iterations


def longest_prompt(workload: Workload) -> int:
    """Tokens in the workload's longest prompt (history included)."""
    return max(len(req.prompt) for req in workload.requests())


def server_config(
    workload: Workload, cache_bytes: int, policy: str, policy_options: dict[str, Any] | None = None
) -> EngineConfig:
    """The engine configuration of the executor's server (module docstring)."""
    return EngineConfig(
        cluster=ClusterConfig(replicas=1, tp=1),
        memory=MemoryConfig(cache_bytes=int(cache_bytes), gpu_memory_bytes=None),
        cache=CacheConfig(policy=policy, policy_options=dict(policy_options or {})),
        scheduling=SchedulerConfig(max_running=1, max_batched_tokens=longest_prompt(workload)),
    )


def predict(
    workload: Workload,
    model: ModelSpec,
    pricer: StepPricer,
    *,
    cache_bytes: int,
    policy: str,
    policy_options: dict[str, Any] | None = None,
    progress: Callable[[float], None] | None = None,
) -> list[RequestRecord]:
    """The twin's records of ``workload`` on the executor's server, in row order.

    ``workload`` must be open loop (every row with an arrival, as
    :func:`twin.validate.arrivals.fix_arrivals` writes it); ``pricer`` is the
    calibrated one, wrapped here in :class:`PrefillOnlyPricer`. A record's
    ``first_token_s - admitted_s`` is the predicted service time.
    """
    config = server_config(workload, cache_bytes, policy, policy_options)
    records: list[RequestRecord] = []
    simulate(
        workload,
        model,
        PrefillOnlyPricer(pricer),
        config,
        progress=progress,
        on_record=records.append,
    )
    records.sort(key=lambda rec: rec.row)
    return records
