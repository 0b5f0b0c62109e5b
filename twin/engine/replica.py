"""A replica: one model instance with its prefix cache and memory, driven by a scheduler.

The replica owns what a request *holds* while it runs, the scheduler
(:mod:`twin.engine.scheduler`) decides *when* it computes:

- memory, through the :class:`twin.engine.memory_strategies.MemoryStrategy` it is
  given (dedicated, one shared pool, SGLang's split pools), and an optional
  :class:`twin.engine.memory_strategies.HostTier`. A request that could never fit
  is rejected and recorded at once;
- the cache, through its one request protocol
  (:class:`twin.cache.RequestCache`): looked up when a request is admitted
  (as vLLM and SGLang match prefixes at scheduling time; the cache clock
  counts admissions, as ``twin replay`` counts requests), checkpoints inside
  the prompt inserted when the prefill ends, the state after the last token
  when the request completes (DESIGN.md, prefix cache semantics), the hit
  released at completion.

The scheduler is found by name (:data:`twin.engine.scheduler.SCHEDULERS`);
it calls back :meth:`Replica.fits`, :meth:`Replica.admit` and
:meth:`Replica.step_end`, and asks the memory for decode growth.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from twin.cache import HeldCache
from twin.engine.admission import NewTokenRatio
from twin.engine.config import SchedulerConfig
from twin.engine.cost import StepPricer
from twin.engine.memory_strategies import HostTier, MemoryStrategy
from twin.engine.scheduler import get_scheduler
from twin.engine.seq import Seq
from twin.engine.sim import Environment, Event
from twin.token_gaps import TokenGaps
from twin.workloads.reader import Request

__all__ = ["Replica", "Seq"]


class Replica:
    """One model instance on ``tp`` GPUs with its own cache; :meth:`run` is its step loop."""

    def __init__(
        self,
        env: Environment,
        index: int,
        pricer: StepPricer,
        cache: HeldCache,
        memory: MemoryStrategy,
        scheduling: SchedulerConfig,
        state_slots: int = 1,
        host: HostTier | None = None,
    ) -> None:
        self.env = env
        self.index = index
        self.cache = cache
        self.policy = cache.policy
        self.memory = memory
        self.host = host
        self.requests = cache.request_cache() if host is None else host.requests(cache)
        self.pricer = pricer
        self.state_slots = state_slots
        # SGLang's extra_buffer writes the next checkpoint into a spare state slot
        # instead of copying it (scheduler strategy docs, mamba_radix_cache.py).
        self.copy_s = (
            pricer.checkpoint_copy_time() if memory.state_bytes and state_slots == 1 else 0.0
        )
        self.preemption = scheduling.preemption
        self.preemptions = 0
        self.schedule_policy = scheduling.schedule_policy
        # SGLang's admission control (twin.engine.admission): a shared pool's only.
        self.new_token_ratio = (
            NewTokenRatio.from_options(scheduling.new_token_ratio)
            if scheduling.new_token_ratio and memory.pooled
            else None
        )
        self.outstanding_tokens = 0  # the routers' load signal
        self.submitted = self.rejected = 0
        # The scheduler's own settings (an engine mode's flags), read by the scheduler.
        self.scheduler_options: dict[str, Any] = dict(scheduling.scheduler_options)
        # vLLM: a preempted request's blocks stay cached (preempt); Transformers only
        # (a hybrid's recurrent states are not kept per block here).
        self.cache_preempted = (
            memory.pooled
            and bool(self.scheduler_options.get("cache_preempted"))
            and not memory.state_bytes
        )
        self.scheduler = get_scheduler(scheduling.scheduler)(
            env, self, pricer, scheduling.max_batched_tokens, scheduling.max_running
        )

    @property
    def step_no(self) -> int:
        """Steps the scheduler has run."""
        return self.scheduler.step_no

    @property
    def busy_s(self) -> float:
        """Simulated seconds the replica spent computing."""
        return self.scheduler.busy_s

    def token_gaps(self) -> TokenGaps:
        """Its inter-token gaps (``twin.token_gaps``), of steps started after the warm-up."""
        return self.scheduler.token_gaps()

    def busy_until_now_s(self) -> float:
        """:attr:`busy_s` plus the part of the step in flight already computed."""
        since = self.scheduler.busy_since
        return self.busy_s + (self.env.now - since if since is not None else 0.0)

    # ------------------------------------------------------------------ requests in
    def new_seq(self, req: Request, arrival_s: float | None = None) -> tuple[Seq, bool]:
        """A sequence for ``req`` (sent at ``arrival_s``, else now) and whether it can
        never fit in the replica's memory."""
        env, memory = self.env, self.memory
        footprint = memory.footprint(len(req.full))
        seq = Seq(req, self.index, env.now if arrival_s is None else arrival_s, footprint, env)
        return seq, memory.too_big(footprint)

    def submit(self, req: Request, arrival_s: float | None = None) -> Seq:
        """Queue ``req`` (FCFS); a request too big for the replica's memory is rejected at once.

        ``arrival_s``: when the client sent it, if before now (a front end delayed it).
        """
        seq, too_big = self.new_seq(req, arrival_s)
        self.submitted += 1
        if too_big:
            # As a server answers a request longer than it can ever hold: an
            # error now, recorded, rather than a queue that never drains.
            seq.rejected = True
            self.rejected += 1
            seq.done_s = self.env.now
            seq.done.succeed()
            return seq
        self.outstanding_tokens += seq.prompt_len + seq.out_len
        self.scheduler.submit(seq)
        return seq

    def run(self) -> Generator[Event, Any, None]:
        """The scheduler's step loop (a SimPy process)."""
        return self.scheduler.run()

    # ------------------------------------------------------------------ the scheduler's calls
    def fits(self, seq: Seq) -> bool:
        """Whether ``seq``'s memory can be taken now (a pool takes it, evicting)."""
        return self.memory.fits(seq)

    def admit(self, seq: Seq) -> None:
        """Admit to the cache (lookup, pin, checkpoints: ``RequestCache.admit``), reserve memory."""
        req = seq.req
        if seq.preemptions and self.cache_preempted:
            # Looked up again with its output so far (vLLM matches all the request's
            # tokens, Request.all_token_ids): the blocks its preemption left cached.
            adm = self.requests.admit(req.full[: seq.prompt_len + seq.generated], req.full)
            redo = seq.prompt_len + seq.generated - adm.hit.length
            seq.recomputed += max(redo, 1)
        else:
            adm = self.requests.admit(req.prompt, req.full, req.modules)
        seq.cached = adm
        seq.order = adm.order
        hit = adm.hit
        seq.hit_recompute = hit.recompute
        seq.hit_work_s = 0.0
        if hit.recompute or hit.host_tokens:
            # A non-prefix hit's own work (``twin.cache.Hit``: Prompt Cache modules).
            seq.hit_work_s = self.pricer.hit_work_time(hit.recompute, hit.host_tokens)
        host = self.host
        if adm.host_tokens and host is not None:
            # Loaded back from the host tier before the prefill can use it.
            seq.hit_work_s += host.load_time(adm.host_tokens, 1 if self.memory.state_bytes else 0)
        if not seq.preemptions:
            seq.hit = hit.length  # the record keeps the first admission's hit
        self.memory.admitted(seq, hit.length - adm.host_tokens)

    def write_back_time(self) -> float:
        """Seconds of the host tier's write-back copies since the last call (0 without)."""
        host = self.host
        return 0.0 if host is None else host.write_back_time(self.requests)

    def cached_prefix(self, seq: Seq) -> int:
        """Tokens of ``seq``'s prompt the cache would hit now (no recency change)."""
        return self.cache.peek(seq.req.prompt)

    def preempt(self, seq: Seq, decoded: int, kept: int) -> None:
        """Free ``seq``'s memory and its hold on the cache; it will start again.

        ``decoded`` output tokens' pages it grew since its last prefill; ``kept``
        the tokens it must prefill again because of this preemption (its
        ``recomputed`` tokens, priced as prefill when it is admitted again).
        Nothing is inserted into the cache: a preempted request's pages are
        the ones the allocation needs (vLLM frees them to the free queue,
        where the failed allocation takes them first).
        """
        adm = seq.cached
        assert adm is not None
        self.memory.preempted(seq, decoded)
        if self.cache_preempted:
            # vLLM V1 with prefix caching (KVCacheManager.free -> BlockPool.free_blocks):
            # the victim's full blocks go back to the free queue still hashed, its tail
            # first, so they are the cache's now (the most recent, tail blocks evicted
            # first) and its next admission hits what was not reused meanwhile. What it
            # recomputes is counted then (Replica.admit).
            assert adm.full is not None
            self.requests.insert_preempted(adm, kept)
        else:
            seq.recomputed += kept
        self.requests.release(adm)
        seq.cached = None
        seq.preemptions += 1
        self.preemptions += 1

    def step_end(self, prefilled: list[Seq], completed: list[Seq]) -> int:
        """Cache what a step's end makes visible; free what completed; return the copies made."""
        requests, memory = self.requests, self.memory
        copies = 0
        for seq in prefilled:
            adm = seq.cached
            assert adm is not None
            # Checkpoints inside the prompt: visible when its prefill ends.
            made = requests.insert_at_prefill_end(adm)
            seq.ckpts += made
            copies += made
            memory.prefilled(seq, adm.prefill_tokens)
        for seq in completed:
            adm = seq.cached
            assert adm is not None
            memory.completed(seq)
            # The state after the last token: visible at completion; then the release.
            made = requests.complete(adm)
            seq.ckpts += made
            copies += made
            seq.cached = None
            # the routers' load signal: a completed request no longer loads the replica
            self.outstanding_tokens -= seq.prompt_len + seq.out_len
        return copies
