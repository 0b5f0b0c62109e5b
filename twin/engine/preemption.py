"""Preemption on a shared KV pool: who gives pages back when running requests need them.

When the pool cannot give the running requests their next tokens' pages,
the queue's head gives back any it took while waiting, else one running
request is preempted by the engine's rule (vLLM's ``recompute`` or SGLang's
``retract``) and goes back to the head of the queue, to be recomputed.
:class:`Preemption` is a part of :class:`twin.engine.batching.ContinuousBatching`
(its batch state is :class:`twin.engine.batch_state.BatchState`).
"""

from __future__ import annotations

import heapq

from twin.engine.batch_state import BatchState
from twin.engine.seq import Seq


class Preemption(BatchState):
    """Making room in the shared pool: :meth:`_make_room`, :meth:`_preempt_one`."""

    def _make_room(self) -> None:
        """Running requests need pages: the queue's head gives back any it took, else preempt.

        (Running requests are served before waiting ones, as in vLLM's and
        SGLang's schedulers.)
        """
        if self.waiting and self.waiting[0].alloc:
            self.memory.unreserve(self.waiting[0])
        else:
            self._preempt_one()

    def _preempt_one(self) -> None:
        """The shared pool ran out: preempt one running request as the engine does.

        ``recompute`` (vLLM V1 ``vllm/v1/core/sched/scheduler.py``
        ``Scheduler.schedule``: when ``allocate_slots`` fails, ``self.running.pop()``,
        the request scheduled last, is preempted and later recomputed, its
        output tokens included); ``retract`` (SGLang
        ``python/sglang/srt/managers/schedule_batch.py`` ``ScheduleBatch.retract_decode``:
        decode requests sorted by output length, then longest input, the one with
        the fewest output tokens retracted first). Either way the request goes
        back to the head of the queue and its lost KV is computed again (priced
        as prefill when it is admitted again).
        """
        n = self.step_no
        victim: Seq | None = None
        if self.replica.preemption == "retract" and self.decoding:
            victim = min(
                (e[2] for e in self.decoding),
                key=lambda q: (q.generated + n - q.start_step, -q.prompt_len, -q.order),
            )
        else:
            running = [e[2] for e in self.decoding] + list(self.prefilling)
            victim = max(running, key=lambda q: q.order)
        if victim in self.prefilling:
            self.prefilling.remove(victim)
            decoded = 0
            kept = victim.ctx
        else:
            i = next(i for i, e in enumerate(self.decoding) if e[2] is victim)
            self.decoding[i] = self.decoding[-1]
            self.decoding.pop()
            heapq.heapify(self.decoding)
            decoded = n - victim.start_step
            self.ctx_base -= victim.prompt_len + victim.generated - victim.start_step
            victim.generated += 1 + decoded  # the prefill's token and the decoded ones
            kept = victim.prompt_len + victim.generated
        self.replica.preempt(victim, decoded, kept)
        if self.ratio is not None and self.replica.preemption == "retract":
            # retract_decode's estimate over the decode batch it kept: (tokens out,
            # max_new_tokens) each; the output so far is out_len - what is left.
            self.ratio.retracted((e[2].out_len - (e[0] - n), e[2].out_len) for e in self.decoding)
        victim.start_step = victim.finish_step = 0
        victim.prefill_left = victim.ctx = 0
        if self.waiting and self.waiting[0].alloc:
            # The old head's pages were taken while it waited for the token budget;
            # it is no longer first, so it gives them back (no one waits holding pages).
            self.memory.unreserve(self.waiting[0])
        self.waiting.appendleft(victim)
