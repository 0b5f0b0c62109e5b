"""The replica's scheduler: batch formation and decode runs (a SimPy process), found by name.

A scheduler decides *when* each running request computes what; the replica
(:mod:`twin.engine.replica`) owns *what it holds*: its cache admissions and
its memory. The two meet through :class:`ReplicaSide`, so a new scheduler
(the engine modes' own, issue "The engines people run") plugs in by name in
:data:`SCHEDULERS` without touching the replica's cache or memory code.

:class:`ContinuousBatching` is iteration-level continuous batching (vLLM V1 /
SGLang style):

- every step, each decoding sequence contributes one token; the rest of the
  ``max_batched_tokens`` budget goes to prefill chunks, first to sequences
  already prefilling (in admission order), then to newly admitted ones;
- admission is FCFS from the waiting queue, while the budget, the
  ``max_running`` cap and the replica's memory allow; the head of the queue
  blocks those behind it (no skipping);
- the last prompt token is always computed, even on a full hit, since its
  logits give the first output token; each checkpoint copy the cache makes
  at a step's end lengthens that step by the pricer's copy time.

With the shared KV pool (``--cache-gb auto``) each step first takes one
token's pages per decoding sequence (a decode run: for all its steps, cut to
what fits); when the pool cannot give them, the queue's head gives back pages
it took while waiting, else one running request is preempted by the replica's
rule (:meth:`ContinuousBatching._preempt_one`) and goes back to the head of
the queue, to be recomputed.

Decode runs are fast-forwarded: while no sequence prefills and none can be
admitted, nothing can change the batch before the next completion, so the
next k steps are timed in one go (in closed form when the pricer is affine in
the context, see :class:`DecodeRun`) and waited for with one timeout,
interrupted early only by a new arrival (which can then be admitted at the
next step boundary). The result is the same step-by-step schedule, computed
in bulk. Decoding sequences are kept in a heap by the step at which they
finish, and the batch's context sum is kept incrementally, so an event costs
O(log batch) rather than O(batch).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Generator
from typing import Any, ClassVar, Protocol

import numpy as np
import simpy

from twin.engine.admission import NewTokenRatio
from twin.engine.cost import StepPricer
from twin.engine.seq import Seq
from twin.errors import TwinError

# Steps priced per decode run: an interrupted run wastes the pricing of its
# remaining steps, an uninterrupted long decode costs one event per run; the
# cap doubles while runs go uninterrupted and falls back after an interruption.
MIN_RUN_STEPS = 256
MAX_RUN_STEPS = 4096
# SGLang's lpm falls back to FCFS past this many waiting requests (schedule_policy.py).
LPM_MAX_WAITING = 128
# SGLang's in-batch prefix caching thresholds (schedule_policy.py, both 32 by default).
IN_BATCH_PREFIX = 32


class ReplicaSide(Protocol):
    """What a scheduler asks of its replica (cache admissions and memory)."""

    copy_s: float  # seconds one checkpoint copy adds to the step that makes it

    def fits(self, seq: Seq) -> bool:
        """Whether ``seq``'s memory can be reserved now."""
        ...

    def admit(self, seq: Seq) -> None:
        """Look ``seq`` up in the cache (sets ``seq.hit``, ``seq.hit_work_s``), reserve memory."""
        ...

    def step_end(self, prefilled: list[Seq], completed: list[Seq]) -> int:
        """Cache what the step's end makes visible, free what completed; return the copies."""
        ...

    # Shared KV pool only (``pool`` is not None): decode growth and preemption.
    pool: Any
    preemption: str
    schedule_policy: str  # "fcfs" or "lpm"

    def cached_prefix(self, seq: Seq) -> int: ...

    def grow(self, tokens: int) -> bool: ...
    def room_tokens(self) -> int: ...
    def shrink(self, tokens: int) -> None: ...
    def preempt(self, seq: Seq, decoded: int, kept: int) -> None: ...
    def unreserve(self, seq: Seq) -> None: ...

    # SGLang's new_token_ratio admission control (None: admission by memory alone).
    new_token_ratio: NewTokenRatio | None

    def headroom_tokens(self) -> int: ...
    def ratio_candidate(self, seq: Seq) -> int: ...


class Scheduler(Protocol):
    """A replica's step loop: what the replica and the cluster call."""

    step_no: int
    busy_s: float  # seconds of finished steps
    busy_since: float | None  # when the step (or decode run) in flight began; None: idle

    def submit(self, seq: Seq) -> None: ...
    def run(self) -> Generator[simpy.Event, Any, None]: ...


class DecodeRun:
    """When each of ``k`` pure-decode steps ends, counted from the run's start.

    Affine pricers give step i (0-based) ``alpha + beta i`` seconds, so the
    end of step m is ``m alpha + beta m (m-1) / 2`` and the step in flight at
    any moment solves a quadratic: no per-step work at all. Other pricers give
    the cumulative ``ends`` array.
    """

    __slots__ = ("alpha", "beta", "capped", "ends", "k")

    def __init__(
        self,
        k: int,
        alpha: float = 0.0,
        beta: float = 0.0,
        ends: np.ndarray | None = None,
        capped: bool = False,
    ) -> None:
        self.k, self.alpha, self.beta, self.ends, self.capped = k, alpha, beta, ends, capped

    def end(self, m: int) -> float:
        """Seconds from the run's start to the end of its m-th step."""
        if self.ends is not None:
            return float(self.ends[m - 1]) if m else 0.0
        return m * self.alpha + self.beta * (m * (m - 1) // 2)

    def steps_to_reach(self, elapsed: float) -> int:
        """Steps that end by the first step boundary at or after ``elapsed`` (at least 1)."""
        if self.ends is not None:
            m = int(np.searchsorted(self.ends, elapsed, side="left")) + 1
            return min(max(m, 1), self.k)
        a, b = self.alpha, self.beta
        if b > 0:
            h = a - b / 2
            m = math.ceil((-h + math.sqrt(h * h + 2 * b * elapsed)) / b)
        else:
            m = math.ceil(elapsed / a) if a > 0 else 1
        m = min(max(m, 1), self.k)
        # The root is exact up to rounding; settle it against end() itself.
        while m > 1 and self.end(m - 1) >= elapsed:
            m -= 1
        while m < self.k and self.end(m) < elapsed:
            m += 1
        return m


def _waker(wake: simpy.Event) -> Callable[[simpy.Event], None]:
    """A timer callback that triggers ``wake`` unless something else did first."""

    def fire(_: simpy.Event) -> None:
        if not wake.triggered:
            wake.succeed()

    return fire


class ContinuousBatching:
    """Continuous batching with chunked prefill (module docstring); :meth:`run` is the loop."""

    name: ClassVar[str] = "continuous"

    def __init__(
        self,
        env: simpy.Environment,
        replica: ReplicaSide,
        pricer: StepPricer,
        max_batched_tokens: int,
        max_running: int,
    ) -> None:
        self.env = env
        self.replica = replica
        self.pricer = pricer
        self.max_batched = max_batched_tokens
        self.max_running = max_running
        self.waiting: deque[Seq] = deque()
        self.prefilling: deque[Seq] = deque()
        self.decoding: list[tuple[int, int, Seq]] = []  # heap of (finish step, order, seq)
        self.ctx_base = 0  # decode context sum at step n = ctx_base + len(decoding) * n
        self.step_no = 0
        self.busy_s = 0.0
        self.busy_since: float | None = None
        self._wake: simpy.Event | None = None
        self._run_cap = MIN_RUN_STEPS
        self.shared = getattr(replica, "pool", None) is not None
        self.lpm = getattr(replica, "schedule_policy", "fcfs") == "lpm"
        # SGLang's PrefillAdder reservation (twin.engine.admission); the tokens this
        # step's admissions reserved and how many they were.
        self.ratio: NewTokenRatio | None = getattr(replica, "new_token_ratio", None)
        self._step_reserved = self._step_admitted = 0
        self._ratio_blocked = False

    def submit(self, seq: Seq) -> None:
        """Queue ``seq`` (FCFS) and wake the loop if it idles."""
        self.waiting.append(seq)
        wake = self._wake
        if wake is not None and not wake.triggered:
            wake.succeed()

    def run(self) -> Generator[simpy.Event, Any, None]:
        """The scheduler: plan a step, wait its price in seconds, apply its end; forever.

        Plain methods plan and apply; only this loop yields, so a step costs one
        generator resume rather than a nest of sub-generators.
        """
        env = self.env
        while True:
            if not self.waiting and not self.prefilling and not self.decoding:
                self._wake = env.event()
                yield self._wake  # idle until a request is submitted
                continue
            if self.lpm and len(self.waiting) > 1:
                self._order_by_prefix()
            if self.prefilling or self._can_admit():
                chunked, seconds = self._plan_step()
                self.busy_since = env.now
                yield env.timeout(seconds)
                self.busy_s += seconds
                self.step_no += 1
                prefilled = self._apply_chunks(chunked)
            else:
                # A decode run (module docstring): the next k steps in one wait.
                run = self._plan_run()
                if run is None:
                    continue  # the pool ran out: a request was preempted, plan again
                t0, m = env.now, run.k
                self.busy_since = t0
                total = run.end(m)
                if self.waiting:
                    # The head is blocked (memory or max_running) until a
                    # completion: an arrival cannot change this run.
                    yield env.timeout(total)
                else:
                    # Wait for the run's end or a submission, whichever comes
                    # first; the timer wakes us through the same event (cheaper
                    # than a Condition).
                    self._wake = wake = env.event()
                    timer = env.timeout(total)
                    timer.callbacks.append(_waker(wake))
                    yield wake
                    self._wake = None
                    elapsed = env.now - t0
                    if not timer.processed and elapsed < total:
                        # Finish the step in flight; the newcomer joins at its boundary.
                        m = run.steps_to_reach(elapsed)
                        left = t0 + run.end(m) - env.now
                        if left > 0:
                            yield env.timeout(left)
                        run.capped = False
                # Long uninterrupted decodes price longer runs next time (fewer
                # events); an interruption goes back to short runs.
                if run.capped:
                    self._run_cap = min(self._run_cap * 2, MAX_RUN_STEPS)
                else:
                    self._run_cap = MIN_RUN_STEPS
                self.busy_s += run.end(m)
                self.step_no += m
                if self.ratio is not None:
                    self.ratio.decayed(m)
                if self.shared and m < run.k:
                    self.replica.shrink((run.k - m) * len(self.decoding))
                prefilled = []
            completed = self._complete_due()
            # A request whose prefill yields its last token completes at once (one
            # output token, or a preempted one whose recompute brought it there).
            completed.extend(seq for seq in prefilled if seq.out_len - seq.generated == 1)
            copies = self.replica.step_end(prefilled, completed)
            copy_s = self.replica.copy_s
            if copies and copy_s:
                extra = copies * copy_s  # the checkpoint copies lengthen the step
                self.busy_since = env.now
                yield env.timeout(extra)
                self.busy_s += extra
            self.busy_since = None
            now = env.now
            for seq in prefilled:
                if not seq.generated:  # a recompute after preemption emits no first token
                    seq.first_token_s = now
                    seq.first_token.succeed()
            for seq in completed:
                seq.done_s = now
                seq.done.succeed()

    def _can_admit(self) -> bool:
        self._ratio_blocked = False
        if not self.waiting or len(self.prefilling) + len(self.decoding) >= self.max_running:
            return False
        head = self.waiting[0]
        if self.ratio is not None and not head.alloc and not self._ratio_admits(head):
            self._ratio_blocked = True
            return False
        return self.replica.fits(head)

    def _running_left(self) -> list[int]:
        """Output tokens each running request (admitted before this step) has still to come."""
        n = self.step_no
        left = [e[0] - n for e in self.decoding]  # finish step - now
        earlier = len(self.prefilling) - self._step_admitted
        left.extend(q.out_len - q.generated for q in list(self.prefilling)[:earlier])
        return left

    def _ratio_admits(self, seq: Seq) -> bool:
        """SGLang ``PrefillAdder.add_one_req``: the candidate fits under the room left.

        Room = free + evictable tokens - running requests' remaining outputs x
        ``new_token_ratio`` - what this step's admissions reserved
        (:mod:`twin.engine.admission`). With nothing running the pool's own
        allocation decides (no reservation can be owed to anyone).
        """
        if not self.decoding and not self.prefilling:
            return True
        ratio = self.ratio
        assert ratio is not None
        room = (
            self.replica.headroom_tokens()
            - ratio.reserved(self._running_left())
            - self._step_reserved
        )
        return self.replica.ratio_candidate(seq) < room

    def _plan_step(self) -> tuple[list[tuple[Seq, int]], float]:
        """A mixed step: decodes, prefill chunks of running sequences, then admissions."""
        if self.shared:
            # Each decode takes one token's pages; preempt until they fit.
            while self.decoding and not self.replica.grow(len(self.decoding)):
                self._make_room()
        batch = len(self.decoding)
        ratio = self.ratio
        if ratio is not None:
            ratio.decayed(1 if batch else 0)  # a step with decodes (update_running_batch)
            self._step_reserved = self._step_admitted = 0
        budget = self.max_batched - batch
        chunked: list[tuple[Seq, int]] = []
        for seq in self.prefilling:
            if budget <= 0:
                break
            c = min(seq.prefill_left, budget)
            chunked.append((seq, c))
            budget -= c
        extra = 0.0  # a hit's own work (non-prefix or host-loaded) lengthens its first step
        while budget > 0 and self._can_admit():
            seq = self.waiting.popleft()
            self._admit(seq)
            if ratio is not None:
                # The admitted request reserves its whole clipped output this step
                # (its extend pages are taken already: _update_prefill_budget).
                self._step_reserved += min(seq.out_len - seq.generated, ratio.clip) + 1
                self._step_admitted += 1
            extra += seq.hit_work_s
            seq.hit_work_s = 0.0
            self.prefilling.append(seq)
            c = min(seq.prefill_left, budget)
            chunked.append((seq, c))
            budget -= c
        self._step_reserved = self._step_admitted = 0  # the next step starts afresh
        n = self.step_no + 1
        seconds = self.pricer.step_time(
            [(c, seq.ctx) for seq, c in chunked], batch, self.ctx_base + batch * n
        )
        return chunked, seconds + extra

    def _apply_chunks(self, chunked: list[tuple[Seq, int]]) -> list[Seq]:
        """Advance the chunks' sequences; return those whose prefill ended (first token out)."""
        n = self.step_no
        prefilled: list[Seq] = []
        for seq, c in chunked:
            seq.ctx += c
            seq.prefill_left -= c
            if seq.prefill_left:
                continue
            prefilled.append(seq)
            self.prefilling.popleft()  # chunks go to the front first: finished ones lead
            left = seq.out_len - seq.generated - 1  # decode steps still to run
            if left > 0:
                seq.start_step = n
                seq.finish_step = n + left
                heapq.heappush(self.decoding, (seq.finish_step, seq.order, seq))
                self.ctx_base += seq.prompt_len + seq.generated - n
        return prefilled

    def _plan_run(self) -> DecodeRun | None:
        """The next pure-decode steps, up to the next completion (or the cap, when priced).

        With a shared pool the run also stops where the pool runs out (its pages
        are taken now; those of steps not run are given back); ``None`` when not
        even one step fits: a request was preempted instead.
        """
        heap = self.decoding
        batch = len(heap)
        n0 = self.step_no
        k = heap[0][0] - n0
        context = self.ctx_base + batch * (n0 + 1)  # the first step's context sum
        fit = self.pricer.decode_affine(batch)
        capped = fit is None and k > self._run_cap
        if capped:
            k = self._run_cap
        if self._ratio_blocked and self.waiting:
            k = self._ratio_cut(k)
        if self.shared:
            replica = self.replica
            if not replica.grow(k * batch):
                k = min(k, replica.room_tokens() // batch)
                if k == 0:
                    self._make_room()
                    return None
                replica.grow(k * batch)
                capped = False
        if fit is not None:
            a, b = fit
            return DecodeRun(k, a + b * context, b * batch)
        return DecodeRun(
            k, ends=np.cumsum(self.pricer.decode_run(batch, context, k)), capped=capped
        )

    def _ratio_cut(self, k: int) -> int:
        """Steps of a decode run after which the queue's head passes the ratio check.

        SGLang checks every step; while the run decodes, the ratio decays, the
        running requests' remaining outputs shrink and their pages grow, so the
        run stops at the first step where the check (:meth:`_ratio_admits`) would
        pass, and the loop admits there. Remaining outputs past the clip stay
        clipped (``CLIP_MAX_NEW_TOKENS``).
        """
        ratio = self.ratio
        assert ratio is not None
        left = self._running_left()
        batch = len(self.decoding)
        j = np.arange(1, k + 1, dtype=np.float64)
        shrinking = sum(1 for t in left if t <= ratio.clip)
        reserved = np.maximum(ratio.ratio - j * ratio.decay, ratio.min) * (
            sum(min(t, ratio.clip) for t in left) - j * shrinking
        )
        room = self.replica.headroom_tokens() - j * batch - reserved
        ok = np.flatnonzero(room > self.replica.ratio_candidate(self.waiting[0]))
        return int(ok[0]) + 1 if ok.size else k

    def _complete_due(self) -> list[Seq]:
        """Sequences whose last token came out in the step just ended."""
        n = self.step_no
        heap = self.decoding
        done: list[Seq] = []
        while heap and heap[0][0] <= n:
            seq = heapq.heappop(heap)[2]
            self.ctx_base -= seq.prompt_len + seq.generated - seq.start_step
            done.append(seq)
        return done

    def _order_by_prefix(self) -> None:
        """SGLang's ``lpm``: the waiting queue by longest cached prefix, sorted in place.

        ``python/sglang/srt/managers/schedule_policy.py`` ``SchedulePolicy``:
        prefixes are matched for every waiting request each time a batch is
        formed (``_compute_prefix_matches``), past 128 waiting requests it falls
        back to FCFS (``_determine_active_policy``), and ``_sort_by_longest_prefix``
        sorts the queue in place with Python's stable sort, so ties keep the
        queue's current order, itself the previous sort's: ties depend on
        history, in SGLang as here. In-batch prefix caching: a request whose
        cached match is at most 32 tokens while 32 or more of its prompt match
        an earlier such waiting request's goes last (``temporary_deprioritized``;
        ``IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD`` and ``..._DEPRIORITIZE_THRESHOLD``,
        both 32), so one request of a group sharing an uncached prefix computes
        it for the others. A head holding pages keeps its place (it was already
        being admitted; SGLang allocates only once a batch is formed).
        """
        waiting = self.waiting
        if len(waiting) > LPM_MAX_WAITING or waiting[0].alloc:
            return
        match = self.replica.cached_prefix
        seen: set[bytes] = set()  # the waiting-queue radix tree, to depth 32

        def key(q: Seq) -> float:
            m = match(q)
            prompt = q.req.prompt
            if m <= IN_BATCH_PREFIX and len(prompt) >= IN_BATCH_PREFIX:
                head = prompt[:IN_BATCH_PREFIX].tobytes()
                if head in seen:
                    return math.inf  # a 32-token match in the queue: deprioritized
                seen.add(head)
            return -m

        ranked = sorted(waiting, key=key)  # keys in queue order, as SGLang matches them
        waiting.clear()
        waiting.extend(ranked)

    def _make_room(self) -> None:
        """Running requests need pages: the queue's head gives back any it took, else preempt.

        (Running requests are served before waiting ones, as in vLLM's and
        SGLang's schedulers.)
        """
        if self.waiting and self.waiting[0].alloc:
            self.replica.unreserve(self.waiting[0])
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
            self.replica.unreserve(self.waiting[0])
        self.waiting.appendleft(victim)

    def _admit(self, seq: Seq) -> None:
        """Admit ``seq``: the replica looks it up and reserves memory; its prefill is planned."""
        self.replica.admit(seq)
        # A preempted request recomputes its prompt and the output it had (vLLM
        # resumes with the output appended to the prompt).
        n = seq.prompt_len + seq.generated
        hit = seq.cached.hit.length if seq.cached is not None else seq.hit
        # The last prompt token is always computed: its logits give the first
        # output token, even when the whole prompt is cached.
        seq.prefill_left = max(1, n - hit)
        seq.ctx = n - seq.prefill_left
        if seq.admitted.triggered:
            return  # admitted again after a preemption: the record keeps the first time
        seq.admitted_s = self.env.now
        seq.admitted.succeed()


# A scheduler is built as ``factory(env, replica, pricer, max_batched_tokens, max_running)``;
# a new one (an engine mode's) only needs to satisfy :class:`Scheduler`.
SchedulerFactory = Callable[[simpy.Environment, ReplicaSide, StepPricer, int, int], Scheduler]
SCHEDULERS: dict[str, SchedulerFactory] = {ContinuousBatching.name: ContinuousBatching}


def get_scheduler(name: str) -> SchedulerFactory:
    """The scheduler registered as ``name``; a ``TwinError`` listing the valid names otherwise."""
    try:
        return SCHEDULERS[name]
    except KeyError:
        raise TwinError(
            f"unknown scheduler {name!r}; valid schedulers: {', '.join(SCHEDULERS)}"
        ) from None
