"""The state a continuous-batching scheduler keeps, declared once for the parts that share it.

:class:`twin.engine.batching.ContinuousBatching` sets these in its constructor;
its parts in other modules (:class:`twin.engine.preemption.Preemption`,
:class:`twin.engine.ratio_admission.RatioAdmission`) read and change them.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from twin.engine.admission import NewTokenRatio
from twin.engine.seq import Seq

if TYPE_CHECKING:
    from twin.engine.scheduler import MemorySide, ReplicaSide


class BatchState:
    """The queues, the decode heap and the counters of one replica's batch."""

    replica: ReplicaSide
    memory: MemorySide  # the replica's
    waiting: deque[Seq]  # not yet admitted, the head first
    prefilling: deque[Seq]  # admitted, prompt not fully computed, in admission order
    decoding: list[tuple[int, int, Seq]]  # heap of (finish step, order, seq)
    ctx_base: int  # decode context sum at step n = ctx_base + len(decoding) * n
    step_no: int
    ratio: NewTokenRatio | None  # SGLang's new_token_ratio (None: admission by memory)
    # The tokens this step's admissions reserved under the ratio, and how many they were.
    _step_reserved: int
    _step_admitted: int
