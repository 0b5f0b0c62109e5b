"""vLLM V1's batch formation: continuous batching, with its rule for a step that preempts.

vLLM V1's scheduler (``vllm/v1/core/sched/scheduler.py``, ``Scheduler.schedule``,
release 0.12.0) schedules the running requests first, one token each for those
decoding and the next chunk for those prefilling, then the waiting ones while the token
budget lasts: the twin's :class:`~twin.engine.batching.ContinuousBatching`. When
``allocate_slots`` fails for a running request, the request scheduled last is
preempted (``self.running.pop()``) and prepended to the waiting queue, and **no
waiting request is scheduled in that step** (``if not preempted_reqs:`` guards the
loop over ``self.waiting``): the victim is not taken back in the step that preempted
it. :class:`VLLMBatching` adds that rule.

With asynchronous scheduling (``--async-scheduling``, the twin's ``--set
async_scheduling=true``) the engine core schedules one step ahead: vLLM 0.19.0
``v1/engine/core.py`` ``EngineCore.step_with_batch_queue`` (the same loop in the 0.14.0,
0.16.0 and 0.17.0 wheels; a batch queue of 2: ``v1/executor/uniproc_executor.py`` and
``multiproc_executor.py`` ``max_concurrent_batches`` under async scheduling without
pipeline stages) schedules
step n+1 and hands it to the executor without blocking, then blocks on step n's result,
updates the scheduler from it and returns; the busy loop then reads its input queue and
schedules step n+2 while step n+1 runs. So step n+1's batch is fixed when step n ends
(when n+1 starts on the GPU), and a request that arrives while step n runs is scheduled
for step n+2 at the earliest; with nothing scheduled the loop blocks on its input queue
and takes a request at once. That is TensorRT-LLM's overlap scheduler's lag
(:meth:`~twin.engine.batching.ContinuousBatching._stamp_ready`, ``lag_option``).

What the victim's blocks become is the replica's (``scheduler_options``
``cache_preempted``, :meth:`twin.engine.replica.Replica.preempt`): with prefix caching
vLLM frees them to the free queue's tail still hashed (``KVCacheManager.free`` ->
``BlockPool.free_blocks``, the tail blocks first so they are evicted first), so when
the request is scheduled again ``get_computed_blocks`` finds what no allocation has
reused in between, and only the rest is computed again.
"""

from __future__ import annotations

from typing import ClassVar

from twin.engine.batching import ContinuousBatching
from twin.engine.seq import Seq


class VLLMBatching(ContinuousBatching):
    """Continuous batching; a step that preempts admits no one (module docstring)."""

    name: ClassVar[str] = "vllm"
    lag_option: ClassVar[str | None] = "async_scheduling"  # module docstring

    _preempted = False  # a preemption in the step being planned

    def _preempt_one(self) -> None:
        super()._preempt_one()
        self._preempted = True

    def _can_admit(self) -> bool:
        if self._preempted:
            self._ratio_blocked = False
            return False
        return super()._can_admit()

    def _end_empty_step(self) -> bool:
        # The step that preempted the last running request scheduled nothing; the next
        # one tries the waiting queue again.
        was, self._preempted = self._preempted, False
        return was

    def _complete_due(self) -> list[Seq]:
        self._preempted = False  # the step (or decode run) that preempted is over
        return super()._complete_due()
