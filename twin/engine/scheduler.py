"""The replica's scheduler, found by name: what it asks of its replica, and the registry.

A scheduler decides *when* each running request computes what; the replica
(:mod:`twin.engine.replica`) owns *what it holds*: its cache admissions and
its memory. The two meet through :class:`ReplicaSide`, so a new scheduler
(the engine modes' own, issue "The engines people run") plugs in by name in
:data:`SCHEDULERS` without touching the replica's cache or memory code:

- :class:`twin.engine.batching.ContinuousBatching` (``continuous``): mixed steps with
  chunked prefill;
- :class:`twin.engine.vllm_batching.VLLMBatching` (``vllm``): the same, with vLLM V1's
  rule that a step which preempts admits no one;
- :class:`twin.engine.sglang_batching.SGLangBatching` (``sglang``): SGLang's prefill
  batches ahead of decodes;
- :class:`twin.engine.trtllm_batching.TRTLLMBatching` (``trtllm``): TensorRT-LLM's
  in-flight batching of whole contexts.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from typing import Any, Protocol

from twin.engine.admission import NewTokenRatio
from twin.engine.batching import ContinuousBatching
from twin.engine.cost import StepPricer
from twin.engine.seq import Seq
from twin.engine.sglang_batching import SGLangBatching, SGLangMixedBatching
from twin.engine.sim import Environment, Event
from twin.engine.trtllm_batching import TRTLLMBatching
from twin.engine.vllm_batching import VLLMBatching
from twin.errors import lookup
from twin.token_gaps import TokenGaps


class MemorySide(Protocol):
    """What a scheduler asks of its replica's memory (decode growth and giving back);
    :class:`twin.engine.memory_strategies.MemoryStrategy` documents each."""

    def grow(self, tokens: int) -> bool: ...
    def shrink(self, tokens: int) -> None: ...
    def room_tokens(self) -> int: ...
    def headroom_tokens(self) -> int: ...
    def state_tokens(self) -> int: ...
    def unreserve(self, seq: Seq) -> None: ...


class ReplicaSide(Protocol):
    """What a scheduler asks of its replica (cache admissions, memory, the engine mode's
    scheduler settings); :class:`twin.engine.replica.Replica` documents each."""

    copy_s: float  # seconds one checkpoint copy adds to the step that makes it
    preemption: str  # "recompute" (vLLM) or "retract" (SGLang)
    schedule_policy: str  # "fcfs" or "lpm"
    new_token_ratio: NewTokenRatio | None  # SGLang's admission control (None: memory alone)

    @property
    def memory(self) -> MemorySide: ...
    @property
    def scheduler_options(self) -> Mapping[str, str | int | float | bool]: ...

    def write_back_time(self) -> float: ...
    def fits(self, seq: Seq) -> bool: ...
    def admit(self, seq: Seq) -> None: ...
    def step_end(self, prefilled: list[Seq], completed: list[Seq]) -> int: ...
    def cached_prefix(self, seq: Seq) -> int: ...
    def preempt(self, seq: Seq, decoded: int, kept: int) -> None: ...


class Scheduler(Protocol):
    """A replica's step loop: what the replica and the cluster call."""

    step_no: int
    busy_s: float  # seconds of finished steps
    busy_since: float | None  # when the step (or decode run) in flight began; None: idle
    warmup_s: float  # inter-token gaps count from steps starting then (set before run)

    def submit(self, seq: Seq) -> None: ...
    def run(self) -> Generator[Event, Any, None]: ...
    def token_gaps(self) -> TokenGaps: ...


# A scheduler is built as ``factory(env, replica, pricer, max_batched_tokens, max_running)``;
# a new one (an engine mode's) only needs to satisfy :class:`Scheduler`.
SchedulerFactory = Callable[[Environment, ReplicaSide, StepPricer, int, int], Scheduler]
SCHEDULERS: dict[str, SchedulerFactory] = {
    cls.name: cls
    for cls in (
        ContinuousBatching,
        VLLMBatching,
        SGLangBatching,
        SGLangMixedBatching,
        TRTLLMBatching,
    )
}


def get_scheduler(name: str) -> SchedulerFactory:
    """The scheduler registered as ``name``; a ``TwinError`` listing the valid names otherwise."""
    return lookup(SCHEDULERS, name, "scheduler", "valid schedulers")
