"""The decode worker: a replica that takes requests whose KV arrives over the link."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from twin.cache import HeldCache
from twin.engine.batching import ContinuousBatching
from twin.engine.config import SchedulerConfig
from twin.engine.cost import StepPricer
from twin.engine.memory_strategies import HostTier, MemoryStrategy
from twin.engine.replica import Replica, Seq
from twin.engine.sim import Environment


class DecodeReplica(Replica):
    """A decode worker: requests arrive with their prompt's KV, reserved before it came.

    Its requests' prompt is the prompt + the first output token; the prompt's KV counts
    as this replica's own pages (``seq.hit``: no cache holds them), so the scheduler
    computes the first token's forward alone (``prefill_left`` 1). No prefix cache is
    looked up or filled, unless :attr:`prefix_cache` (``--decode-prefix-cache``): then the
    prompt is looked up in the worker's own cache when its memory is reserved, the hit is
    the cache's pages (pinned) and is not sent, and a completed request's KV is inserted
    (:meth:`reserve`).
    """

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
        scheduling = dataclasses.replace(
            scheduling,
            new_token_ratio={},  # SGLang's PrefillAdder is the prefill side's
            # Arrivals join the running batch in order (SGLang's get_new_prebuilt_batch);
            # the prefill scheduler's lpm sort is not the decode worker's.
            schedule_policy="fcfs",
            scheduler=(
                scheduling.scheduler
                if scheduling.scheduler in ("continuous", "vllm")
                else "continuous"
            ),
        )
        super().__init__(env, index, pricer, cache, memory, scheduling, state_slots, host)
        assert isinstance(self.scheduler, ContinuousBatching)
        self.scheduler.arrivals_reserved = True  # their KV is in memory reserved for them
        self.reserved = 0  # requests holding a reservation (until they complete)
        self.peak_reserved = 0
        self.unit = 0  # its index among the decode pool's units (DisaggCluster)
        self.preempted_waiting = 0  # preempted requests waiting to take memory again
        self.on_freed: Callable[[DecodeReplica], None] | None = None
        self._order = 0
        self.prefix_cache = False  # decode-side prefix reuse (DisaggCluster sets it)
        self.hit_tokens = 0  # prompt tokens found in its cache, not sent
        # SGLang's decode worker keeps a retracted request's KV in host memory and loads it
        # back (0.5.10.post1 managers/schedule_batch.py ScheduleBatch.release_req:
        # req.offload_kv_cache when disaggregation_mode is decode;
        # disaggregation/decode.py resume_retracted_reqs: req.load_kv_cache): nothing is
        # recomputed. Its KV pools' get_cpu_copy/load_cpu_copy (mem_cache/memory_pool.py,
        # MHA and MLA) copy synchronously; the hybrid pool has none, so a hybrid keeps
        # the recompute. vLLM recomputes (no offload on preemption).
        self.offloads = self.preemption == "retract" and not self.memory.state_bytes
        self.offloaded: dict[int, int] = {}  # id(seq) -> tokens it keeps in host memory
        self._copy_s = 0.0  # offload copies since the scheduler last asked

    def reserve(self, seq: Seq, max_running: int) -> bool:
        """Reserve ``seq``'s memory now (SGLang's pre-allocation); ``False``: not yet.

        Not while a preempted request waits for memory: SGLang 0.5.10.post1
        ``disaggregation/decode.py`` ``process_decode_queue`` returns before
        ``pop_preallocated`` while ``retracted_queue`` is not empty; vLLM 0.19.0 allocates
        a new request's blocks from ``waiting``, behind the preempted request it prepends
        there (``Scheduler.schedule`` stops at the first request it cannot allocate).
        """
        if self.preempted_waiting or self.reserved >= max_running or not self.memory.reserve(seq):
            return False
        self.reserved += 1
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        if self.prefix_cache:
            self._look_up(seq)
        return True

    def _look_up(self, seq: Seq) -> None:
        """Decode-side prefix reuse: ``seq``'s prompt looked up in this worker's cache
        once its memory is taken (taking it may evict, as an aggregated admission's
        :meth:`Replica.fits` before :meth:`Replica.admit`); the hit is pinned, its pages
        are the cache's (given back from the reservation) and only the rest is sent.

        SGLang 0.5.23 ``disaggregation/decode.py`` ``pop_preallocated`` with
        ``--disaggregation-decode-enable-radix-cache`` (off by default): the prefix is
        matched and locked in the decode radix tree at pre-allocation, only the rest is
        allocated, and its length goes to the prefill server as ``decode_prefix_len``,
        which sends from there (``disaggregation/prefill.py`` ``finalize_bootstrap``:
        ``start_send_idx``). vLLM 0.19.0 ``nixl_connector.py``
        ``get_num_new_matched_tokens``: the decode instance pulls the prompt less its
        locally cached blocks (``actual - num_computed_tokens``; prefix caching is on by
        default). The hit is capped at the prompt: the first token's KV is computed here.
        """
        req = seq.req
        adm = self.requests.admit(req.prompt, req.full, req.modules)
        seq.cached = adm
        hit = min(adm.hit.length - adm.host_tokens, seq.prompt_len - 1)
        seq.hit = hit  # read by DisaggCluster._handoff (the bytes sent) until admission
        self.hit_tokens += hit
        if self.memory.pooled:  # a dedicated cache's hit is apart from the reservation
            self.memory.admitted(seq, hit)

    def queue(self, seq: Seq) -> None:
        """``seq``'s KV has arrived: it queues for the running batch."""
        self.submitted += 1
        self.outstanding_tokens += seq.prompt_len + seq.out_len
        self.scheduler.submit(seq)

    def fits(self, seq: Seq) -> bool:
        # Reserved before the transfer (a pool takes it again after a preemption).
        return self.memory.fits_reserved(seq)

    def admit(self, seq: Seq) -> None:
        self._order += 1
        seq.order = self._order
        looked_up = seq.cached is not None  # by _look_up: its memory is admitted already
        if not looked_up:
            seq.cached = None
        # The prompt's KV arrived; after a preemption it is gone and is recomputed, or
        # loaded back from host memory (offloads) before the step that resumes it.
        seq.hit = 0 if seq.preemptions else seq.prompt_len - 1
        seq.hit_work_s = 0.0
        kept = self.offloaded.pop(id(seq), 0)
        if kept:
            seq.hit = kept
            seq.hit_work_s = self.pricer.hit_work_time(0, kept)
        if not looked_up:
            self.memory.admitted_reserved(seq)
        if seq.preemptions:
            self.preempted_waiting -= 1
            if not self.preempted_waiting and self.on_freed is not None:
                self.on_freed(self)  # reservations resume (see reserve)

    def preempt(self, seq: Seq, decoded: int, kept: int) -> None:
        self.memory.preempted(seq, decoded)
        if seq.cached is not None:  # its hold on the cache goes; it recomputes it all
            self.requests.release(seq.cached)
            seq.cached = None
        if self.offloads:
            # All but the last token's KV to host memory (SGLang's req_to_token[:seqlen - 1]),
            # a copy the step that retracts it waits for.
            self.offloaded[id(seq)] = kept - 1
            self._copy_s += self.pricer.write_back_time(kept - 1, 0)
        else:
            seq.recomputed += kept
        seq.preemptions += 1
        self.preemptions += 1
        self.preempted_waiting += 1

    def write_back_time(self) -> float:
        """Seconds of the offload copies of requests retracted since the last call."""
        seconds, self._copy_s = self._copy_s, 0.0
        return seconds

    def step_end(self, prefilled: list[Seq], completed: list[Seq]) -> int:
        memory, requests = self.memory, self.requests
        for seq in completed:
            memory.completed(seq)
            adm = seq.cached
            if adm is not None:
                # Its KV stays in this worker's cache (SGLang's cache_finished_req into
                # the decode radix tree; vLLM's freed blocks stay hashed).
                requests.complete(adm)
                seq.cached = None
            self.outstanding_tokens -= seq.prompt_len + seq.out_len
            self.reserved -= 1
        if completed and self.on_freed is not None:
            self.on_freed(self)
        return 0
