"""A replica: one model instance with its prefix cache and memory, driven by a scheduler.

The replica owns what a request *holds* while it runs, the scheduler
(:mod:`twin.engine.scheduler`) decides *when* it computes:

- memory: a sequence's memory (KV of its prompt + output tokens, and one
  live SSM state) is reserved whole at admission, so a full replica queues
  instead of overcommitting and nothing is ever preempted. The reservation
  ignores the hit (the cache's bytes are a separate partition of
  ``--cache-gb``), which keeps admission free of lookups and makes memory
  never favour a hit or a miss; a request that could never fit is rejected
  and recorded at once;
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

import simpy

from twin.cache import CacheStructure, RequestCache
from twin.engine.cost import StepPricer
from twin.engine.scheduler import MAX_RUN_STEPS, MIN_RUN_STEPS, DecodeRun, get_scheduler
from twin.engine.seq import Seq
from twin.model import ModelSpec
from workloads.reader import Request

__all__ = ["MAX_RUN_STEPS", "MIN_RUN_STEPS", "DecodeRun", "Replica", "Seq"]


class Replica:
    """One model instance on ``tp`` GPUs with its own cache; :meth:`run` is its step loop."""

    def __init__(
        self,
        env: simpy.Environment,
        index: int,
        model: ModelSpec,
        pricer: StepPricer,
        cache: CacheStructure,
        max_batched_tokens: int,
        max_running: int,
        memory_budget: float,
        scheduler: str = "continuous",
    ) -> None:
        self.env = env
        self.index = index
        self.cache = cache
        self.policy = cache.policy
        self.requests = RequestCache(cache)
        self.memory_budget = memory_budget
        self.kv_per_token = model.kv_bytes_per_token
        self.state_bytes = model.ssm_checkpoint_bytes if model.n_ssm_layers else 0
        self.copy_s = pricer.checkpoint_copy_time() if self.state_bytes else 0.0
        self.pricer = pricer
        self.memory_used = 0
        self.outstanding_tokens = 0  # the routers' load signal
        self.submitted = self.rejected = 0
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

    def busy_until_now_s(self) -> float:
        """:attr:`busy_s` plus the part of the step in flight already computed."""
        since = self.scheduler.busy_since
        return self.busy_s + (self.env.now - since if since is not None else 0.0)

    # ------------------------------------------------------------------ requests in
    def submit(self, req: Request) -> Seq:
        """Queue ``req`` (FCFS); a request too big for the replica's memory is rejected at once."""
        env = self.env
        footprint = (len(req.prompt) + len(req.output)) * self.kv_per_token + self.state_bytes
        seq = Seq(req, self.index, env.now, footprint, env)
        self.submitted += 1
        if footprint > self.memory_budget:
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

    def run(self) -> Generator[simpy.Event, Any, None]:
        """The scheduler's step loop (a SimPy process)."""
        return self.scheduler.run()

    # ------------------------------------------------------------------ the scheduler's calls
    def fits(self, seq: Seq) -> bool:
        """Whether ``seq``'s whole footprint can be reserved now."""
        return self.memory_used + seq.footprint <= self.memory_budget

    def admit(self, seq: Seq) -> None:
        """Admit to the cache (lookup, pin, checkpoints: ``RequestCache.admit``), reserve memory."""
        req = seq.req
        adm = self.requests.admit(req.prompt, req.output, req.modules)
        seq.cached = adm
        seq.order = adm.order
        hit = adm.hit
        seq.hit = hit.length
        seq.recompute = hit.recompute
        if hit.recompute or hit.host_tokens:
            seq.hit_work_s = self.pricer.hit_work_time(hit.recompute, hit.host_tokens)
        self.memory_used += seq.footprint

    def step_end(self, prefilled: list[Seq], completed: list[Seq]) -> int:
        """Cache what a step's end makes visible; free what completed; return the copies made."""
        requests = self.requests
        copies = 0
        for seq in prefilled:
            adm = seq.cached
            assert adm is not None
            # Checkpoints inside the prompt: visible when its prefill ends.
            made = requests.insert_at_prefill_end(adm)
            seq.ckpts += made
            copies += made
        for seq in completed:
            adm = seq.cached
            assert adm is not None
            # The state after the last token: visible at completion.
            made = requests.insert_at_completion(adm)
            seq.ckpts += made
            copies += made
            requests.release(adm)
            seq.cached = None
            self.memory_used -= seq.footprint
            self.outstanding_tokens -= seq.prompt_len + seq.out_len
        return copies
