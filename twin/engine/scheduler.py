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
from twin.engine.sglang_batching import SGLangBatching
from twin.engine.sim import Environment, Event
from twin.engine.trtllm_batching import TRTLLMBatching
from twin.engine.vllm_batching import VLLMBatching
from twin.errors import TwinError
from twin.token_gaps import TokenGaps


class MemorySide(Protocol):
    """What a scheduler asks of its replica's memory (a
    :class:`twin.engine.memory_strategies.MemoryStrategy`): decode growth. Dedicated
    memory always grows (a request's whole footprint was reserved at admission)."""

    def grow(self, tokens: int) -> bool:
        """Take ``tokens`` tokens' memory for running requests; ``False``: no room."""
        ...

    def shrink(self, tokens: int) -> None:
        """Give back ``tokens`` tokens' memory taken by :meth:`grow` but not used."""
        ...

    def room_tokens(self) -> int:
        """Tokens' memory free now (after a failed :meth:`grow`: all it can free)."""
        ...

    def headroom_tokens(self) -> int:
        """Free + evictable tokens (SGLang's ``available_size + evictable_size``)."""
        ...


# An engine flag's value as a scheduler reads it from ``scheduler_options``.
OptionValue = str | int | float | bool


class ReplicaSide(Protocol):
    """What a scheduler asks of its replica (cache admissions and memory), and the
    engine mode's scheduler settings the replica carries."""

    @property
    def memory(self) -> MemorySide: ...

    @property
    def copy_s(self) -> float:
        """Seconds one checkpoint copy adds to the step that makes it."""
        ...

    @property
    def preemption(self) -> str:
        """``recompute`` (vLLM) or ``retract`` (SGLang)."""
        ...

    @property
    def schedule_policy(self) -> str:
        """``fcfs`` or ``lpm``."""
        ...

    @property
    def new_token_ratio(self) -> NewTokenRatio | None:
        """SGLang's admission control (``None``: admission by memory alone)."""
        ...

    @property
    def scheduler_options(self) -> Mapping[str, OptionValue]:
        """The scheduler's own settings (an engine mode's flags)."""
        ...

    def write_back_time(self) -> float:
        """Seconds of the host tier's write-back copies since the last call."""
        ...

    def fits(self, seq: Seq) -> bool:
        """Whether ``seq``'s memory can be reserved now."""
        ...

    def admit(self, seq: Seq) -> None:
        """Look ``seq`` up in the cache (sets ``seq.hit``, ``seq.hit_work_s``), reserve memory."""
        ...

    def step_end(self, prefilled: list[Seq], completed: list[Seq]) -> int:
        """Cache what the step's end makes visible, free what completed; return the copies."""
        ...

    def cached_prefix(self, seq: Seq) -> int:
        """Tokens of ``seq``'s prompt the cache would hit now."""
        ...

    def preempt(self, seq: Seq, decoded: int, kept: int) -> None:
        """Free ``seq``'s memory and cache hold; it starts again (a pool ran out)."""
        ...

    def unreserve(self, seq: Seq) -> None:
        """A waiting ``seq`` gives back the memory :meth:`fits` took."""
        ...

    def ratio_candidate(self, seq: Seq) -> int:
        """Tokens ``seq`` must find free to pass SGLang's ratio check."""
        ...


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
    cls.name: cls for cls in (ContinuousBatching, VLLMBatching, SGLangBatching, TRTLLMBatching)
}


def get_scheduler(name: str) -> SchedulerFactory:
    """The scheduler registered as ``name``; a ``TwinError`` listing the valid names otherwise."""
    try:
        return SCHEDULERS[name]
    except KeyError:
        raise TwinError(
            f"unknown scheduler {name!r}; valid schedulers: {', '.join(SCHEDULERS)}"
        ) from None
