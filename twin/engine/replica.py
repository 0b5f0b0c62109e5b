"""A replica: one model instance with its prefix cache and memory, driven by a scheduler.

The replica owns what a request *holds* while it runs, the scheduler
(:mod:`twin.engine.scheduler`) decides *when* it computes:

- memory, in one of two modes:

  * dedicated (the Marconi paper, ``--cache-gb G``): a sequence's memory (KV
    of its prompt + output tokens, and one live SSM state) is reserved whole
    at admission, so a full replica queues instead of overcommitting and
    nothing is ever preempted. The reservation ignores the hit (the cache's
    bytes are a separate partition of ``--cache-gb``);
  * shared (the engines, ``--cache-gb auto``): one KV pool
    (:class:`twin.cache.pool.SharedPool`) holds running requests' pages and
    the cache's. Admission takes the prompt's pages (the hit's come back once
    the lookup is done) and the request's recurrent-state slots; decode steps
    take one token's pages per running request (:meth:`Replica.grow`); a
    failed allocation evicts cached pages, then the scheduler preempts
    (:meth:`Replica.preempt`). Pages a prefill-end insert caches are handed to
    the cache (shared, counted once).

  Either way a request that could never fit is rejected and recorded at once;
- the cache, through its one request protocol
  (:class:`twin.cache.RequestCache`): looked up when a request is admitted
  (as vLLM and SGLang match prefixes at scheduling time; the cache clock
  counts admissions, as ``twin replay`` counts requests), checkpoints inside
  the prompt inserted when the prefill ends, the state after the last token
  when the request completes (DESIGN.md, prefix cache semantics), the hit
  released at completion.

The scheduler is found by name (:data:`twin.engine.scheduler.SCHEDULERS`);
it calls back :meth:`Replica.fits`, :meth:`Replica.admit` and
:meth:`Replica.step_end`.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from twin.cache import CacheStructure
from twin.cache.hybrid_radix import HybridRadixCache
from twin.cache.pool import SharedPool, SplitPool
from twin.cache.requests import request_cache_for
from twin.engine.admission import NewTokenRatio
from twin.engine.cost import StepPricer
from twin.engine.scheduler import get_scheduler
from twin.engine.seq import Seq
from twin.engine.sim import Environment, Event
from twin.engine.speculative import sglang_verify_reserve
from twin.memory.footprint import get_kv_allocator
from twin.model import ModelSpec
from twin.token_gaps import TokenGaps
from twin.workloads.reader import Request

__all__ = ["Replica", "Seq"]


class Replica:
    """One model instance on ``tp`` GPUs with its own cache; :meth:`run` is its step loop."""

    def __init__(
        self,
        env: Environment,
        index: int,
        model: ModelSpec,
        pricer: StepPricer,
        cache: CacheStructure,
        max_batched_tokens: int,
        max_running: int,
        memory_budget: float,
        scheduler: str = "continuous",
        shared_pool: bool = False,
        preemption: str = "recompute",
        state_slots: int = 1,
        host: CacheStructure | None = None,
        schedule_policy: str = "fcfs",
        kv_allocator: str = "bytes",
        new_token_ratio: dict[str, float] | None = None,
        host_write_policy: str = "write_through",
        scheduler_options: dict[str, Any] | None = None,
        speculative: dict[str, Any] | None = None,
    ) -> None:
        self.env = env
        self.index = index
        self.cache = cache
        self.policy = cache.policy
        self.requests = request_cache_for(cache, host, host_write_policy)
        self.host = host
        self.pricer = pricer
        self.host_loaded_tokens = 0
        self.host_load_s = 0.0
        self.host_write_s = 0.0  # write-back copies to the host tier, priced
        self._written_back = (0, 0)  # (tokens, states) already priced
        # Only write-back evictions copy to the host (``RequestCache._write_back``).
        self._writes_back = host is not None and host_write_policy == "write_back"
        self.memory_budget = memory_budget
        self.kv_per_token = model.kv_bytes_per_token
        self.state_bytes = model.ssm_checkpoint_bytes if model.n_ssm_layers else 0
        self.state_slots = state_slots
        # SGLang's extra_buffer writes the next checkpoint into a spare state slot
        # instead of copying it (scheduler strategy docs, mamba_radix_cache.py).
        self.copy_s = (
            pricer.checkpoint_copy_time() if self.state_bytes and state_slots == 1 else 0.0
        )
        # SGLang keeps a hybrid model's states in their own pool (SplitPool); other
        # caches share one pool of bytes.
        self.split = shared_pool and isinstance(cache, HybridRadixCache)
        self.pool: SharedPool | None = None
        if self.split:
            assert isinstance(cache, HybridRadixCache)
            self.pool = SplitPool(int(memory_budget), cache)
        elif shared_pool:
            self.pool = SharedPool(int(memory_budget), cache)
        # States a running request holds: with speculative decoding (twin.engine.speculative)
        # vLLM's more states a request (memory only: not checkpoint buffers, so copy_s
        # keeps its rule), and SGLang's verify buffer taken from the mamba pool.
        spec = speculative or {}
        self.held_states = state_slots + (
            int(spec.get("state_slots", 0)) if self.state_bytes else 0
        )
        if self.split and spec.get("verify_states"):
            assert isinstance(self.pool, SplitPool) and isinstance(cache, HybridRadixCache)
            self.pool.reserve_states(
                sglang_verify_reserve(
                    self.pool.state_size,
                    cache.slot_bytes,
                    int(spec["verify_states"]),
                    state_slots,
                    max_running,
                )
            )
        # Shared pool: a running request's bytes under the engine's allocator (issue 15).
        self.kv = get_kv_allocator(kv_allocator, model, self.held_states) if shared_pool else None
        self.growth = self.kv.growth if self.kv is not None else self.kv_per_token  # per token
        self.preemption = preemption
        self.preemptions = 0
        self.running_requests = self.peak_running_requests = 0  # shared pool: admitted, not done
        self.schedule_policy = schedule_policy
        # SGLang's admission control (twin.engine.admission): shared pool only.
        self.new_token_ratio = (
            NewTokenRatio.from_options(new_token_ratio)
            if new_token_ratio is not None and shared_pool
            else None
        )
        self.memory_used = 0  # dedicated cache only (the shared pool counts its own bytes)
        self.outstanding_tokens = 0  # the routers' load signal
        self.submitted = self.rejected = 0
        # The scheduler's own settings (an engine mode's flags), read by the scheduler.
        self.scheduler_options: dict[str, Any] = dict(scheduler_options or {})
        # vLLM: a preempted request's blocks stay cached (preempt); Transformers only
        # (a hybrid's recurrent states are not kept per block here).
        self.cache_preempted = (
            shared_pool
            and bool(self.scheduler_options.get("cache_preempted"))
            and not self.state_bytes
        )
        self.scheduler = get_scheduler(scheduler)(
            env, self, pricer, max_batched_tokens, max_running
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
    def submit(self, req: Request, arrival_s: float | None = None) -> Seq:
        """Queue ``req`` (FCFS); a request too big for the replica's memory is rejected at once.

        ``arrival_s``: when the client sent it, if before now (a front end delayed it).
        """
        env = self.env
        total = len(req.full)
        kv = self.kv
        if kv is None:
            footprint = total * self.kv_per_token + self.held_states * self.state_bytes
        else:
            footprint = kv.most(total)
        seq = Seq(req, self.index, env.now if arrival_s is None else arrival_s, footprint, env)
        self.submitted += 1
        too_big = footprint > self.memory_budget
        if self.split:
            # Each of SGLang's pools must hold its part (SplitPool).
            assert isinstance(self.pool, SplitPool) and kv is not None
            too_big = kv.state > self.pool.state_size or footprint - kv.state > self.pool.size
        if too_big:
            # As a server answers a request longer than it can ever hold: an
            # error now, recorded, rather than a queue that never drains.
            seq.rejected = True
            self.rejected += 1
            seq.done_s = env.now
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
        """Whether ``seq``'s memory can be taken now (shared pool: it is taken, evicting)."""
        pool = self.pool
        if pool is None:
            return self.memory_used + seq.footprint <= self.memory_budget
        if seq.alloc:
            return True  # taken at an earlier try, still waiting for the token budget
        # The prompt (and the output recomputed after a preemption) as if nothing
        # hit: cached pages could be reclaimed by this very allocation.
        kv = self.kv
        assert kv is not None
        need = kv.tokens(seq.prompt_len + seq.generated, seq.prompt_len + seq.out_len)
        if self.split:
            # State slots from the mamba pool first (HybridReqToTokenPool.alloc in
            # alloc_req_slots), then the tokens from the KV pool.
            assert isinstance(pool, SplitPool)
            if not pool.allocate_states(kv.state):
                return False
            if not pool.allocate(need):
                pool.release_states(kv.state)
                return False
        else:
            need += kv.state
            if not pool.allocate(need):
                return False
        seq.alloc = need
        return True

    def _free_states(self) -> None:
        """Split pools: a request that held state slots gives them back (SplitPool)."""
        if self.split:
            assert isinstance(self.pool, SplitPool) and self.kv is not None
            self.pool.release_states(self.kv.state)

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
        if adm.host_tokens:
            # Loaded back from the host tier before the prefill can use it (HiCache's
            # load_back, vLLM's CPU offload connector), priced by the cost model's
            # host-to-device copies; not overlapped with compute.
            states = 1 if self.state_bytes else 0
            load_s = self.pricer.hit_work_time(0, adm.host_tokens, states)
            seq.hit_work_s += load_s
            self.host_loaded_tokens += adm.host_tokens
            self.host_load_s += load_s
        pool = self.pool
        if pool is None:
            seq.hit = hit.length
            self.memory_used += seq.footprint
            return
        if not seq.preemptions:
            seq.hit = hit.length  # the record keeps the first admission's hit
        self.running_requests += 1
        self.peak_running_requests = max(self.peak_running_requests, self.running_requests)
        # The GPU hit's pages are the cache's (pinned); loaded ones are the request's.
        kv = self.kv
        assert kv is not None
        gpu_hit = hit.length - adm.host_tokens
        own, final = seq.prompt_len + seq.generated, seq.prompt_len + seq.out_len
        back = kv.tokens(own, final) - kv.tokens(own - gpu_hit, final - gpu_hit)
        pool.release(back)
        seq.alloc -= back

    def write_back_time(self) -> float:
        """Seconds of the write-back copies made since the last call (0 without write-back).

        SGLang's write-back eviction waits for its device-to-host copy
        (``HiRadixCache.evict``, ``writing_check(write_back=True)``): the
        scheduler adds this to the step during which the evictions happened.
        """
        if not self._writes_back:
            return 0.0
        req = self.requests
        done = (req.written_back_tokens, req.written_back_states)
        tokens, states = done[0] - self._written_back[0], done[1] - self._written_back[1]
        if not tokens and not states:
            return 0.0
        self._written_back = done
        seconds = self.pricer.write_back_time(tokens, states)
        self.host_write_s += seconds
        return seconds

    def cached_prefix(self, seq: Seq) -> int:
        """Tokens of ``seq``'s prompt the cache would hit now (no recency change)."""
        return self.cache.peek(seq.req.prompt)

    def headroom_tokens(self) -> int:
        """Shared pool: free + evictable tokens (SGLang's ``available_size + evictable_size``).

        Every cached page counts as evictable but those known pinned (the pool's floor).
        """
        pool = self.pool
        assert pool is not None
        return (pool.size - pool.running - pool.floor) // self.growth if self.growth else 1 << 62

    def ratio_candidate(self, seq: Seq) -> int:
        """Tokens ``seq`` must find free to pass SGLang's ``add_one_req`` check.

        Its extend (what is not cached on the GPU), its clipped remaining output,
        one page (``per_req_token_overhead``), and its state slots' bytes in tokens.
        """
        ratio = self.new_token_ratio
        kv = self.kv
        assert ratio is not None and kv is not None
        extend = seq.prompt_len + seq.generated - self.cached_prefix(seq)
        # One pool: the state slots are bytes of it too (split pools gate them apart).
        state = -(-kv.state // self.growth) if self.growth and not self.split else 0
        return ratio.candidate(max(extend, 1), seq.out_len - seq.generated) + state

    def grow(self, tokens: int) -> bool:
        """Shared pool: take ``tokens`` tokens' pages for running requests; ``False``: no room."""
        pool = self.pool
        assert pool is not None
        ok = pool.allocate(tokens * self.growth)
        return ok

    def room_tokens(self) -> int:
        """Shared pool: tokens' pages free now (after a failed :meth:`grow`: all it can free)."""
        pool = self.pool
        assert pool is not None
        kv = self.growth
        return max(pool.free, 0) // kv if kv else 1 << 62

    def shrink(self, tokens: int) -> None:
        """Shared pool: give back ``tokens`` tokens' pages taken by :meth:`grow` but not used."""
        pool = self.pool
        assert pool is not None
        pool.release(tokens * self.growth)

    def unreserve(self, seq: Seq) -> None:
        """Shared pool: a waiting request gives back the pages :meth:`fits` took for it."""
        pool = self.pool
        assert pool is not None
        pool.release(seq.alloc)
        seq.alloc = 0
        self._free_states()

    def preempt(self, seq: Seq, decoded: int, kept: int) -> None:
        """Shared pool: free ``seq``'s pages and its hold on the cache; it will start again.

        ``decoded`` output tokens' pages it grew since its last prefill; ``kept``
        the tokens it must prefill again because of this preemption (its
        ``recomputed`` tokens, priced as prefill when it is admitted again).
        Nothing is inserted into the cache: a preempted request's pages are
        the ones the allocation needs (vLLM frees them to the free queue,
        where the failed allocation takes them first).
        """
        pool = self.pool
        assert pool is not None and seq.cached is not None
        pool.release(seq.alloc + decoded * self.growth)
        seq.alloc = 0
        self._free_states()
        adm = seq.cached
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
        pool.unpinned()
        seq.cached = None
        seq.preemptions += 1
        self.running_requests -= 1
        self.preemptions += 1

    def step_end(self, prefilled: list[Seq], completed: list[Seq]) -> int:
        """Cache what a step's end makes visible; free what completed; return the copies made."""
        requests = self.requests
        copies = 0
        pool = self.pool
        for seq in prefilled:
            adm = seq.cached
            assert adm is not None
            # Checkpoints inside the prompt: visible when its prefill ends.
            made = requests.insert_at_prefill_end(adm)
            seq.ckpts += made
            copies += made
            if pool is not None and adm.prefill_tokens:
                # Those prompt pages are the cache's now (shared, counted once).
                assert self.kv is not None
                handed = min(self.kv.handed(adm.prefill_tokens), seq.alloc)
                pool.hand_to_cache(handed)
                seq.alloc -= handed
        for seq in completed:
            adm = seq.cached
            assert adm is not None
            if pool is not None:
                # Its pages come free first: the cache may keep them (vLLM's freed
                # blocks stay hashed; SGLang's cache_finished_req inserts them).
                pool.release(seq.alloc + (seq.finish_step - seq.start_step) * self.growth)
                self._free_states()
                pool.unpinned()
                seq.alloc = 0
                self.running_requests -= 1
            # The state after the last token: visible at completion.
            made = requests.insert_at_completion(adm)
            seq.ckpts += made
            copies += made
            requests.release(adm)
            seq.cached = None
            if pool is None:
                self.memory_used -= seq.footprint
            else:
                self.outstanding_tokens -= seq.prompt_len + seq.out_len
        return copies
