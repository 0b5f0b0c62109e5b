"""Continuous batching with chunked prefill: the replica's step loop (a SimPy process).

:class:`ContinuousBatching` is iteration-level continuous batching (vLLM V1 /
SGLang style):

- every step, each decoding sequence contributes one token; the rest of the
  ``max_batched_tokens`` budget goes to prefill chunks, first to sequences
  already prefilling (in admission order), then to newly admitted ones;
- admission is FCFS from the waiting queue (or SGLang's ``lpm`` order,
  :mod:`twin.engine.lpm`), while the budget, the ``max_running`` cap and the
  replica's memory allow; the head of the queue blocks those behind it (no
  skipping); SGLang's ``new_token_ratio`` check (:mod:`twin.engine.admission`),
  where the mode sets it, is :meth:`ContinuousBatching._ratio_admits`;
- the last prompt token is always computed, even on a full hit, since its
  logits give the first output token; each checkpoint copy the cache makes
  at a step's end lengthens that step by the pricer's copy time.

With the shared KV pool (``--cache-gb auto``) each step first takes one
token's pages per decoding sequence (a decode run: for all its steps, cut to
what fits, cached pages evicted first); when the pool cannot give them, the queue's
head gives back pages it took while waiting, else one running request is preempted
(:meth:`ContinuousBatching._preempt_one`, by the engine's rule) and goes back to the
queue (its head under vLLM, its end under SGLang), to be recomputed.

Decode runs are fast-forwarded: while no sequence prefills and none can be
admitted, nothing can change the batch before the next completion, so the
next k steps are timed in one go (in closed form when the pricer is affine in
the context, see :class:`twin.engine.decode_run.DecodeRun`; else priced a chunk
at a time while an arrival may still cut the run short) and waited for with one
timeout a chunk, interrupted early only by a new arrival (which can then be
admitted at the next step boundary). The result is the same step-by-step
schedule, computed in bulk. Decoding sequences are kept in a heap by the step
at which they finish, and the batch's context sum is kept incrementally, so an
event costs O(log batch) rather than O(batch).

SGLang's ``--scheduler-recv-interval N`` (``scheduler_options``; 1, every iteration, by
default) polls for new requests only once every N decode iterations (``N x tau`` token
steps under speculative decoding), and at the first iteration after a prefill (or mixed)
batch (``managers/scheduler_recv_skipper.py``,
0.5.10.post1: a decode or verify iteration adds 1 to a counter, any other forward mode
1000, the poll when it reaches N, which resets it): an arrival while the batch decodes
waits in an inbox until that poll, and a decode run is cut at the poll, not at the
step in flight. An idle server polls at once (its idle loop spins).

Each step's end gives every decoding sequence a token, so the inter-token gaps are
the steps' durations, ``batch`` times each: the loop records each mixed step or
decode run as it ends (:mod:`twin.engine.step_gaps`), a decode run's step ends
being already in the gaps' buffer, where it wrote them.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from twin.engine.admission import NewTokenRatio
from twin.engine.cost import Durations, StepPricer
from twin.engine.decode_run import MAX_RUN_STEPS, MIN_RUN_STEPS, DecodeRun
from twin.engine.lpm import order_by_prefix
from twin.engine.seq import Seq
from twin.engine.sim import Environment, Event, Interrupt, Process, redirect, redirected, wait_until
from twin.engine.step_gaps import KEPT, StepGaps
from twin.token_gaps import TokenGaps

if TYPE_CHECKING:
    from twin.engine.scheduler import ReplicaSide


class ContinuousBatching:
    """Continuous batching with chunked prefill (module docstring); :meth:`run` is the loop."""

    name: ClassVar[str] = "continuous"
    # The scheduler option that makes the loop schedule one step ahead (the engine's
    # overlap of scheduling with the forward: TensorRT-LLM's overlap scheduler, vLLM's
    # asynchronous scheduling; :meth:`_stamp_ready`); None: the loop plans each step when
    # the one before ends.
    lag_option: ClassVar[str | None] = None

    def __init__(
        self,
        env: Environment,
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
        self._wake: Event | None = None  # the idle loop's wait
        self._cuttable = False  # the loop waits on a decode chunk, which an arrival may cut
        self._process: Process | None = None  # the loop's (``run``'s) process
        self._run: DecodeRun | None = None  # the decode run in flight
        self._cut = 0  # the step at which an arrival cut it
        # Inter-token gaps (``twin.engine.step_gaps``): of steps starting at or after
        # ``warmup_s`` (the cluster sets the run's before the loop starts). Priced runs
        # write their step ends (at most MAX_RUN_STEPS) into its buffer.
        self.gaps = StepGaps(MAX_RUN_STEPS)
        self.warmup_s = 0.0
        self._run_cap = MIN_RUN_STEPS
        self.memory = replica.memory  # decode growth (dedicated memory always grows)
        self.lpm = replica.schedule_policy == "lpm"
        # SGLang's PrefillAdder reservation (twin.engine.admission); the tokens this
        # step's admissions reserved and how many they were.
        self.ratio: NewTokenRatio | None = replica.new_token_ratio
        self._step_reserved = self._step_admitted = 0
        self._ratio_blocked = False
        # SGLang's scheduler_recv_interval (module docstring): arrivals not yet polled,
        # and a step at whose end the loop polled with only decode steps since. SGLang
        # counts engine iterations; under speculative decoding an iteration spans
        # ``tau`` of the loop's token steps (``pricer.tokens_per_iteration``), so the poll
        # comes every ``interval x tau`` token steps (0.5.9
        # ``managers/scheduler_recv_skipper.py``: ``last_batch.forward_mode`` weighs 1 a
        # decode; ``speculative/eagle_worker.py`` ``verify`` and
        # ``forward_draft_extend_after_decode`` leave a speculative iteration's batch in
        # ``ForwardMode.DECODE``, so it counts once, whatever it emits; 0.5.23
        # ``managers/scheduler_components/recv_skipper.py``: the same weights, one a batch,
        # DECODE or TARGET_VERIFY).
        interval = int(replica.scheduler_options.get("scheduler_recv_interval", 1))
        if interval > 1:
            interval = max(round(interval * pricer.tokens_per_iteration()), 1)
        self.recv_interval = interval
        self._inbox: list[Seq] = []
        self._recv_anchor = 0
        # A disaggregated decode worker's scheduler (set by ``twin.engine.disagg``): its
        # requests arrive holding memory reserved for them before their KV transfer, never
        # give it back while they wait, and go ahead of the preempted requests, which wait
        # to take memory again (:meth:`_preempted_from`).
        self.arrivals_reserved = False
        # A disaggregated prefill worker's scheduler under SGLang's per-chunk sends (set by
        # ``twin.engine.disagg``): called at a step's end for each sequence whose prefill
        # chunk ended and whose prefill goes on (its ``ctx`` tokens computed so far).
        self.on_chunk: Callable[[Seq], None] | None = None
        # Scheduling one step ahead (``lag_option``): each waiting request's first step
        # count (``step_no``) at which the loop may schedule it; absent: at once.
        option = self.lag_option
        self.overlap = bool(option and replica.scheduler_options.get(option, False))
        self._ready: dict[Seq, int] = {}
        # The response path's seconds per streamed token (``stream_token_s``, set by the
        # cluster; :meth:`_streamed`) and when it has handed out every token so far.
        self.stream_token_s = 0.0
        self._stream_free = 0.0
        # A fresh server's one stall at its first step that extends a prompt after tokens
        # already in the KV (``cold_prefix_stall_s``, set by the cluster; :meth:`_cold_stall`);
        # 0 once paid, or for a warm server.
        self.cold_prefix_stall_s = 0.0

    def _enqueue(self, seq: Seq) -> None:
        """An arrival joins the queue: at its end, or a decode worker's ahead of the
        preempted requests."""
        if self.arrivals_reserved:
            self.waiting.insert(self._preempted_from(), seq)
        else:
            self.waiting.append(seq)

    def submit(self, seq: Seq) -> None:
        """Queue ``seq`` (FCFS) and wake the loop if it idles or waits on a decode chunk."""
        self._stamp_ready(seq)
        wake = self._wake
        if wake is not None and not wake.triggered:
            self._enqueue(seq)
            self._recv_anchor = self.step_no  # an idle server polls at once
            wake.succeed()
            return
        if self.recv_interval > 1:
            self._submit_polled(seq)
            return
        self._enqueue(seq)
        if self._cuttable:
            # The loop waits on a decode chunk: the arrival cuts the run at the step in
            # flight, where the newcomer joins.
            run, t0 = self._run, self.busy_since
            assert run is not None and t0 is not None
            self._cut_run(run.steps_to_reach(self.env.now - t0))

    def _cut_run(self, m: int) -> None:
        """End the decode run in flight after its ``m``-th step: the loop's wait moves to
        that boundary (``twin.engine.sim.redirect``; the chunk's timeout, when it fires
        later, resumes no one)."""
        self._cuttable = False
        env, run, t0 = self.env, self._run, self.busy_since
        assert run is not None and t0 is not None and self._process is not None
        if m > run.priced:
            run.price_next(m - run.priced)
        self._cut = m
        end = run.end(m)
        if m < run.k or env.now - t0 < end:
            run.capped = False  # cut short (one at the run's very end leaves its cap)
        redirect(self._process, env.timeout(max(t0 + end - env.now, 0.0)))

    def _next_poll(self, step: int) -> int:
        """The first step boundary at or after ``step`` where the loop polls, counting
        decode steps from ``_recv_anchor``."""
        anchor, n = self._recv_anchor, self.recv_interval
        return anchor + n * -(-(step - anchor) // n)

    def _submit_polled(self, seq: Seq) -> None:
        """``submit`` under a poll interval: a prefill or mixed step in flight polls at its
        end; a decode run at the next poll, cut there when it comes before the run's end,
        the arrival held in the inbox until then."""
        run = self._run
        if run is None:  # a prefill or mixed step: polled at its end
            self._enqueue(seq)
            return
        if not self._cuttable:  # a run the head's block decided, or its copies' time
            self._inbox.append(seq)
            return
        t0 = self.busy_since
        assert t0 is not None
        m = self._next_poll(self.step_no + run.steps_to_reach(self.env.now - t0)) - self.step_no
        if m > run.k:
            self._inbox.append(seq)  # the run ends first, at a completion
            return
        self._enqueue(seq)
        self._cut_run(m)

    def _poll(self) -> None:
        """At a step boundary: the inbox joins the queue when the loop polls here (or has
        nothing left to run)."""
        n = self.step_no
        if (n - self._recv_anchor) % self.recv_interval and (
            self.decoding or self.prefilling or self.waiting
        ):
            return
        self._recv_anchor = n
        for seq in self._inbox:
            self._enqueue(seq)
        self._inbox.clear()

    def run(self) -> Generator[Event, Any, None]:
        """The scheduler: plan a step, wait its price in seconds, apply its end; forever.

        Plain methods plan and apply; only this loop yields, so a step costs one
        generator resume rather than a nest of sub-generators.
        """
        env = self.env
        self._process = env.active_process
        # The gaps' log (``StepGaps``; its ``step`` and ``run`` inlined below).
        gaps, warmup = self.gaps, self.warmup_s
        records, views, pages, limit = gaps.records, gaps.views, gaps.pages, gaps.limit
        record, page = records.extend, 0  # where the next decode run writes its ends
        while True:
            if self._inbox:
                self._poll()
            if not self.waiting and not self.prefilling and not self.decoding:
                self._wake = env.event()
                yield self._wake  # idle until a request is submitted
                continue
            if self.lpm and len(self.waiting) > 1:
                order_by_prefix(self.waiting, self.replica.cached_prefix)
            if self.prefilling or self._can_admit():
                chunked, seconds, batch = self._plan_step()  # each of batch gets a token
                if self.cold_prefix_stall_s and any(seq.ctx for seq, _ in chunked):
                    seconds += self._cold_stall()  # a hit admitted in this very step
                run = self._run = None
                self.busy_since = t0 = env.now
                yield env.timeout(seconds)
                self.busy_s += seconds
                self.step_no += 1
                self._recv_anchor = self.step_no  # a prefill step: the loop polls next
                prefilled = self._apply_chunks(chunked)
            elif not self.decoding:
                # Nothing runs and the queue's head cannot take the memory it needs: it
                # is held by requests still to come (a decode worker's reservations for
                # transfers in flight), so wait for one. A step that preempted the last
                # running request was empty; the next one may admit (vLLM).
                if self._end_empty_step():
                    continue
                extra = self.replica.write_back_time()  # copies that preemption made
                if extra:
                    self.busy_since = env.now
                    yield env.timeout(extra)
                    self.busy_s += extra
                    self.busy_since = None
                    continue
                self._wake = env.event()
                yield self._wake
                continue
            else:
                # A decode run (module docstring): the next k steps in one wait.
                run = self._plan_run(views[page])
                if run is None:
                    continue  # the pool ran out: a request was preempted, plan again
                t0, m = env.now, run.k
                batch = len(self.decoding)
                self.busy_since = t0
                self._run = run
                if self.waiting and not self.arrivals_reserved:
                    # The head is blocked (memory or max_running) until a
                    # completion: an arrival cannot change this run.
                    yield env.timeout(run.price_next(m))
                else:
                    # Wait for the run's end or a submission, whichever comes
                    # first (a submission moves the wait to the step boundary
                    # where it joins: ``submit``). Steps are priced a chunk at a
                    # time: at each chunk's end with no arrival, the next is priced.
                    while True:
                        target = run.price_next()
                        self._cuttable = True
                        try:
                            if env.now > t0:  # a later chunk: it ends where one whole would
                                yield from wait_until(env, t0 + target)
                            else:
                                yield env.timeout(target)
                        except Interrupt as cut:  # an arrival cut the run (``submit``)
                            yield redirected(cut)
                            m = self._cut
                            break
                        self._cuttable = False
                        if run.priced == m:
                            break
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
                if m < run.k:
                    self.memory.shrink((run.k - m) * len(self.decoding))
                prefilled = []
            completed = self._complete_due()
            replica = self.replica
            if prefilled:
                # A request whose prefill yields its last token completes at once (one
                # output token, or a preempted one whose recompute brought it there).
                completed.extend(seq for seq in prefilled if seq.out_len - seq.generated == 1)
            copies = replica.step_end(prefilled, completed) if prefilled or completed else 0
            # The checkpoint copies and write-back evictions' copies lengthen the step.
            extra = copies * replica.copy_s + replica.write_back_time()
            if self.cold_prefix_stall_s and any(seq.ctx for seq in self.prefilling):
                extra += self._cold_stall()  # the next step extends a prompt: before its outputs
            if extra:
                self.busy_since = env.now
                yield env.timeout(extra)
                self.busy_s += extra
            self.busy_since = None
            if batch:
                # The decoding sequences' gaps: each step's seconds, the extra after
                # the last; only of steps starting in the measured window.
                if t0 >= warmup:
                    if run is None:  # StepGaps.step
                        record((0, batch, seconds + extra))
                        if len(records) > KEPT:
                            gaps.flush()
                            page = 0
                    elif run.ends is not None:  # StepGaps.run: its ends are in place
                        record((m, batch, extra))
                        page += pages[m]
                        if page > limit:
                            gaps.flush()
                            page = 0
                    else:
                        gaps.affine(run.alpha, run.beta, m, batch, extra)
                elif run is not None and t0 + run.end(m - 1) >= warmup:
                    self._gaps_after_warmup(run, m, batch, t0, extra)  # once a replica
            now = env.now
            if self.stream_token_s:
                # Handed out behind the response path's backlog (:meth:`_streamed`); the
                # client sees a completion then (``Cluster``'s closed loop waits for it).
                if run is None:  # one step: its decodes' tokens and its first tokens
                    step_tokens = batch + sum(1 for seq in prefilled if not seq.generated)
                    now = self._streamed(t0, step_tokens, step_tokens)
                else:
                    now = self._streamed(t0, m * batch, batch)
            for seq in prefilled:
                if not seq.generated:  # a recompute after preemption emits no first token
                    seq.first_token_s = now
            for seq in completed:
                seq.done_s = now
                seq.done.succeed()

    def _streamed(self, t0: float, tokens: int, final_step_tokens: int) -> float:
        """When the response path has handed out the ``tokens`` of the step or decode run
        that began at ``t0`` and ends now, ``final_step_tokens`` of them in its final step.

        One server per replica taking tokens one at a time, ``stream_token_s`` each: the
        serving process that turns every output token of every request into a stream chunk
        in Python (aiconfigurator's TensorRT-LLM deployment, Dynamo's worker
        ``python3 -m dynamo.trtllm``: ``request_handlers/handler_base.py``
        ``generate_locally`` yields one chunk per ``GenerationResult`` response, and the
        LLM API hands the worker one response per token and request in streaming mode).
        The tokens of a run come as it goes, so the server works them from the run's start
        or its own backlog, whichever is later, and the final step's cannot be handed
        out before the step ends; while the server keeps up a token waits only for the
        tokens of its own step, once it falls behind the backlog grows with the rate."""
        h = self.stream_token_s
        free = max(max(self._stream_free, t0) + tokens * h, self.env.now + final_step_tokens * h)
        self._stream_free = free
        return free

    def _cold_stall(self) -> float:
        """The seconds of a fresh server's one stall, now paid (``cold_prefix_stall_s``).

        Paid the first time a step extends a prompt after tokens already in its KV: a
        prompt's chunk after its first (the first wave of prompts is larger than the step's
        token budget), or a prefix hit. Such a step runs the attention over the prefix, a
        kernel path a prompt from an empty cache never takes, and an engine's own start-up
        warm-up (one short prompt) never reaches; a server that no client warm-up reached
        loads or builds those kernels on first use, its loop's host blocked meanwhile.
        SGLang 0.5.5 (wheel read): ``models/deepseek_v2.py`` ``forward_normal_chunked_kv_core``
        calls ``_chunked_prefix_attn_mha`` only when ``extend_prefix_lens`` has a non-zero
        entry, and under ``--attention-backend trtllm_mla`` that runs FlashInfer's
        ``trtllm_ragged_attention_deepseek`` non-causal with ``return_lse`` (a trtllm-gen
        kernel whose cubin FlashInfer 0.5.0 ``jit/cubin_loader.py`` ``get_cubin`` reads from
        its cubin directory or downloads on first use). The stall delays the outputs of the
        step before it too: the engines' overlap loops launch a step before they hand out
        the previous step's outputs (SGLang 0.5.5 ``managers/scheduler.py``
        ``event_loop_overlap``: ``run_batch(batch)``, then ``process_batch_result`` of the
        last batch), so the loop pays it at the end of a step after which a prompt
        continues (:meth:`run`), or at the start of a step that admits a hit. 0, a warm
        server, is the default; which measured rows ran cold and the seconds fitted on them
        are in docs/decisions.md ("Issue 31, step: the cold start of InferenceMAX's servers",
        helper ``cold-start``, session 27)."""
        stall, self.cold_prefix_stall_s = self.cold_prefix_stall_s, 0.0
        return stall

    def _gaps_after_warmup(
        self, run: DecodeRun, m: int, batch: int, t0: float, extra: float
    ) -> None:
        """The gaps of the first ``m`` steps of ``run``, begun at ``t0`` in the warm-up,
        that start at or after ``warmup_s``."""
        ends = run.step_ends(m)
        durations = np.diff(ends, prepend=0.0)
        durations[-1] += extra
        starts = t0 + np.concatenate(([0.0], ends[:-1]))
        self.gaps.hist.add_many(durations[starts >= self.warmup_s], batch)

    def token_gaps(self) -> TokenGaps:
        """Every inter-token gap of the steps that started at or after ``warmup_s``."""
        return self.gaps.histogram()

    def _end_empty_step(self) -> bool:
        """A step with nothing to run ended; whether the queue may be tried again now
        (an engine's rule that held it back for that step only)."""
        return False

    def _preempted_from(self) -> int:
        """Where the waiting requests that must take memory begin: at the queue's head,
        or on a decode worker (:attr:`arrivals_reserved`) after the arrivals, which hold
        theirs. vLLM 0.19.0 ``v1/core/sched/scheduler.py``: requests whose KV a connector
        loads wait in ``skipped_waiting`` holding their blocks, and under FCFS
        ``_select_waiting_queue_for_scheduling`` serves that queue before ``waiting``, where
        a preempted request is prepended; SGLang 0.5.10.post1 ``disaggregation/decode.py``:
        a retracted request waits in ``retracted_queue`` while transferred ones join the
        running batch from ``waiting_queue`` (``get_new_prebuilt_batch``)."""
        if not self.arrivals_reserved:
            return 0
        waiting = self.waiting
        return next((i for i, q in enumerate(waiting) if q.preemptions), len(waiting))

    def _stamp_ready(self, seq: Seq) -> None:
        """Under a loop that schedules one step ahead (``lag_option``), stamp the step
        ``seq`` may join: the one after the step that follows the step in flight. The
        loop fixes step n+1's batch when step n starts on the GPU, so a request that
        arrives while step n runs is scheduled for step n+2 at the earliest; with nothing
        else to run the loop blocks on its queue and takes it at once. The engines' rules
        are in their schedulers' modules (``twin.engine.trtllm_batching``,
        ``twin.engine.vllm_batching``)."""
        if self.overlap and self.busy_since is not None:
            run = self._run
            if run is None:  # a prefill or mixed step in flight: step ``step_no + 1``
                in_flight = self.step_no + 1
            else:
                in_flight = self.step_no + run.steps_to_reach(self.env.now - self.busy_since)
            self._ready[seq] = in_flight + 1

    def _overlap_holds(self) -> bool:
        """Whether the queue's head arrived too late for the step about to be planned
        (a loop scheduling one step ahead fixed that step's batch before it came); never
        while nothing else runs (the idle loop takes it at once)."""
        if not self._ready or not self.waiting:
            return False
        ready = self._ready.get(self.waiting[0])
        if ready is None:
            return False
        if ready > self.step_no and (self.decoding or self.prefilling):
            return True
        del self._ready[self.waiting[0]]
        return False

    def _can_admit(self) -> bool:
        self._ratio_blocked = False
        if self._overlap_holds():
            return False
        if not self.waiting or len(self.prefilling) + len(self.decoding) >= self.max_running:
            return False
        head = self.waiting[0]
        if self.ratio is not None and not head.alloc and not self._ratio_admits(head):
            self._ratio_blocked = True
            return False
        return self.replica.fits(head)

    def _plan_step(self) -> tuple[list[tuple[Seq, int]], float, int]:
        """A mixed step: decodes, prefill chunks of running sequences, then admissions;
        the chunks, the step's seconds and how many sequences decode in it."""
        # Each decode takes one token's pages; preempt until they fit.
        while self.decoding and not self.memory.grow(len(self.decoding)):
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
        extra = self._admissions(chunked, budget)
        self._step_reserved = self._step_admitted = 0  # the next step starts afresh
        n = self.step_no + 1
        seconds = self.pricer.step_time(
            [(c, seq.ctx) for seq, c in chunked], batch, self.ctx_base + batch * n
        )
        return chunked, seconds + extra, batch

    def _admissions(self, chunked: list[tuple[Seq, int]], budget: int) -> float:
        """Admit from the queue into the step's ``chunked`` while ``budget`` tokens last;
        the seconds the admitted hits' own work (non-prefix or host-loaded) adds."""
        extra = 0.0
        while budget > 0 and self._can_admit():
            work, c = self._admit_chunk(chunked, budget)
            extra += work
            budget -= c
        return extra

    def _admit_chunk(self, chunked: list[tuple[Seq, int]], budget: int) -> tuple[float, int]:
        """Admit the queue's head into ``chunked`` with at most ``budget`` of its prefill
        tokens (the rest continue next step); return its hit's own work's seconds
        (``_admit_head``) and the tokens it took."""
        seq, work = self._admit_head()
        c = min(seq.prefill_left, budget)
        chunked.append((seq, c))
        return work, c

    def _admit_head(self) -> tuple[Seq, float]:
        """Admit the queue's head into this step's prefills; return it and the seconds its
        hit's own work (non-prefix or host-loaded) adds to the step. Every scheduler's
        admission goes through here."""
        seq = self.waiting.popleft()
        self._admit(seq)
        ratio = self.ratio
        if ratio is not None:
            # The admitted request reserves its whole clipped output this step
            # (its extend pages are taken already: SGLang's _update_prefill_budget).
            self._step_reserved += min(seq.out_len - seq.generated, ratio.clip) + 1
            self._step_admitted += 1
        work, seq.hit_work_s = seq.hit_work_s, 0.0
        self.prefilling.append(seq)
        return seq, work

    def _apply_chunks(self, chunked: list[tuple[Seq, int]]) -> list[Seq]:
        """Advance the chunks' sequences; return those whose prefill ended (first token out)."""
        n = self.step_no
        prefilled: list[Seq] = []
        for seq, c in chunked:
            seq.ctx += c
            seq.prefill_left -= c
            if seq.prefill_left:
                if self.on_chunk is not None:
                    self.on_chunk(seq)
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

    def _plan_run(self, ends: np.ndarray) -> DecodeRun | None:
        """The next pure-decode steps, up to the next completion (or the cap, when priced);
        a priced run writes its step ends into ``ends`` (the gaps' buffer, ``StepGaps``).

        The run also stops where a shared pool runs out (its pages
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
        if self.waiting:
            k = self._hold_cut(k)
        if self._inbox:
            k = min(k, self._next_poll(n0 + 1) - n0)  # the run ends at the next poll
        memory = self.memory
        if not memory.grow(k * batch):
            # Not every step to the next completion fits: as many as the free pages
            # and the evictable cached ones hold. The engines evict cached pages before
            # they preempt (SGLang 0.5.10.post1 ``schedule_batch.py``
            # ``ScheduleBatch.check_decode_mem``: ``evict_from_tree_cache`` then the
            # free size; vLLM's cached blocks sit in its free queue). A grow larger
            # than the pool leaves evicts nothing (``SharedPool.allocate``), so the
            # free pages alone would preempt while the cache still holds pages.
            k = min(k, memory.headroom_tokens() // batch)
            if k == 0 or not memory.grow(k * batch):
                # Pinned pages beyond the known floor: the failed try evicted what it
                # could, the free pages are all there is now.
                k = min(k, memory.room_tokens() // batch)
                if k == 0:
                    self._make_room()
                    return None
                memory.grow(k * batch)
            capped = False
        if fit is not None:
            a, b = fit
            return DecodeRun(k, a + b * context, b * batch)
        # The pricer's compiled step ends where it has them (``PricerBase.decode_ends``).
        decode_ends = getattr(self.pricer, "decode_ends", None)
        fill = decode_ends(batch, context) if decode_ends is not None else None
        if fill is not None:
            return DecodeRun(k, fill=fill, capped=capped, ends=ends)
        decode_run = self.pricer.decode_run

        def price(first: int, n: int) -> Durations:
            return decode_run(batch, context + first * batch, n)

        return DecodeRun(k, price=price, capped=capped, ends=ends)

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
        if seq.preemptions:
            return  # admitted again after a preemption: the record keeps the first time
        seq.admitted_s = self.env.now

    # ------------------------------------------------------------------ preemption
    def _make_room(self) -> None:
        """Running requests need pages: the queue's head gives back any it took, else preempt.

        (Running requests are served before waiting ones, as in vLLM's and
        SGLang's schedulers.)
        """
        waiting, i = self.waiting, self._preempted_from()
        if i < len(waiting) and waiting[i].alloc:
            self.memory.unreserve(waiting[i])
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
        the fewest output tokens retracted first). Either way its lost KV is
        computed again (priced as prefill when it is admitted again). vLLM
        prepends the victim to the waiting queue (``prepend_request``); SGLang
        0.5.10.post1 appends it (``scheduler.py`` ``Scheduler.update_running_batch``
        -> ``_add_request_to_queue``: ``waiting_queue.append``, which the default
        ``fcfs`` policy does not re-sort, ``SchedulePolicy.calc_priority``), so a
        retracted request waits behind those already queued. A decode worker's
        victims wait after its arrivals (:meth:`_preempted_from`).
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
        waiting = self.waiting
        if self.replica.preemption == "retract" and not self.arrivals_reserved:
            waiting.append(victim)  # behind the queue (docstring): the head keeps its place
            return
        i = self._preempted_from()
        if i < len(waiting) and waiting[i].alloc:
            # The old head's pages were taken while it waited for the token budget;
            # it is no longer first, so it gives them back (no one waits holding pages
            # but a decode worker's arrivals, whose KV is in theirs).
            self.memory.unreserve(waiting[i])
        waiting.insert(i, victim)

    # ------------------------------------------------- SGLang's new_token_ratio check
    def _running_left(self) -> list[int]:
        """Output tokens each running request (admitted before this step) has still to come."""
        n = self.step_no
        left = [e[0] - n for e in self.decoding]  # finish step - now
        earlier = len(self.prefilling) - self._step_admitted
        left.extend(q.out_len - q.generated for q in list(self.prefilling)[:earlier])
        return left

    def _ratio_candidate(self, seq: Seq) -> int:
        """Tokens ``seq`` must find free to pass ``add_one_req``: its extend (what is not
        cached on the GPU), its clipped remaining output, one page
        (``per_req_token_overhead``) and its state slots' bytes in tokens."""
        ratio = self.ratio
        assert ratio is not None
        extend = seq.prompt_len + seq.generated - self.replica.cached_prefix(seq)
        left = seq.out_len - seq.generated
        return ratio.candidate(max(extend, 1), left) + self.memory.state_tokens()

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
            self.memory.headroom_tokens()
            - ratio.reserved(self._running_left())
            - self._step_reserved
        )
        return self._ratio_candidate(seq) < room

    def _hold_cut(self, k: int) -> int:
        """Steps of a decode run after which the engine's own rule may admit the queue's
        head it holds back now (a head a loop scheduling one step ahead holds joins once
        the steps before it have run; TensorRT-LLM's batch waiting); ``k``: no such rule."""
        ready = self._ready.get(self.waiting[0]) if self._ready else None
        if ready is not None and ready > self.step_no:
            return min(k, ready - self.step_no)
        return k

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
        room = self.memory.headroom_tokens() - j * batch - reserved
        ok = np.flatnonzero(room > self._ratio_candidate(self.waiting[0]))
        return int(ok[0]) + 1 if ok.size else k
