"""How a request uses a prefix cache: the one protocol every caller follows.

A request's life against the cache, in this order:

1. :meth:`RequestCache.admit` when the request is admitted (as vLLM and
   SGLang match prefixes at scheduling time): the cache clock is set to the
   admission index (recency's unit: ``twin replay``'s request index, the
   engine's admission count), the policy hears the request, the prompt is
   looked up and the hit pinned (never evicted while the request runs), and
   the policy picks its checkpoint positions (speculative insertion), split
   into those inside the prompt and those past it;
2. :meth:`RequestCache.insert_at_prefill_end`: the checkpoints inside the
   prompt become visible when its prefill ends (DESIGN.md, prefix cache
   semantics). Only models with SSM layers have such states; a
   Transformer's prompt is cached with the final insert anyway;
3. :meth:`RequestCache.insert_at_completion`: the state after the last
   decoded token (input + output) becomes visible when the request completes;
4. :meth:`RequestCache.release`: the hit is unpinned.

:meth:`RequestCache.serve` is the same protocol back to back with one
insertion (the Marconi artifact's replay step). The engine's replica, the
reference executor and ``twin replay`` all go through this class, so none of
them writes the cache clock or orders these calls itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from twin.cache.base import Hit

if TYPE_CHECKING:
    from twin.cache.base import CacheStructure


class Admission:
    """One admitted request's hold on the cache: its hit, pin and pending checkpoints."""

    __slots__ = (
        "at_completion",
        "at_prefill",
        "full",
        "hit",
        "host_tokens",
        "modules",
        "node",
        "order",
        "prefill_tokens",
        "prompt",
    )

    def __init__(
        self,
        order: int,
        prompt: np.ndarray,
        full: np.ndarray,
        hit: Hit,
        at_prefill: list[int],
        at_completion: list[int],
        modules: np.ndarray | None = None,
    ) -> None:
        self.order = order  # the admission index (the cache clock during the admission)
        self.prompt = prompt
        self.full: np.ndarray | None = full  # prompt + output; dropped on release
        self.hit = hit
        self.node: Any = hit.node  # pinned until :meth:`RequestCache.release`
        self.at_prefill = at_prefill  # checkpoint positions inside the prompt
        self.at_completion = at_completion  # positions past it (input + output)
        self.modules = modules  # the prompt modules it declares (workload ``modules`` column)
        self.prefill_tokens = 0  # prompt tokens the prefill-end insert newly cached
        self.host_tokens = 0  # hit tokens loaded back from the host tier (not on the GPU)


class RequestCache:
    """The request-facing side of one cache structure (module docstring)."""

    __slots__ = ("admissions", "cache", "host", "policy", "split")

    def __init__(self, cache: CacheStructure, host: CacheStructure | None = None) -> None:
        self.cache = cache
        # A host-memory tier (twin.cache.host_tier): written through on every insert,
        # looked up after the GPU cache; a longer hit there is loaded back.
        self.host = host
        self.policy = cache.policy
        # Resume counting where the cache's clock is (a restored snapshot).
        self.admissions: int = cache.clock
        self.split = cache.has_ssm

    def admit(
        self, prompt: np.ndarray, output: np.ndarray, modules: np.ndarray | None = None
    ) -> Admission:
        """Step 1: set the clock, tell the policy, look up and pin, choose checkpoints."""
        full = np.concatenate((prompt, output))
        return self._admit(prompt, full, modules=modules)

    def insert_at_prefill_end(self, adm: Admission) -> int:
        """Step 2: cache the checkpoints inside the prompt; return the checkpoints admitted."""
        if not adm.at_prefill:
            return 0
        cache = self.cache
        before = cache.checkpoints_admitted
        adm.prefill_tokens = cache.insert(adm.prompt, adm.at_prefill, adm.modules)
        if self.host is not None:
            self.host.insert(adm.prompt, adm.at_prefill, adm.modules)
        return cache.checkpoints_admitted - before

    def insert_at_completion(self, adm: Admission) -> int:
        """Step 3: cache input + output up to the last checkpoint; return checkpoints admitted."""
        if not adm.at_completion:
            return 0
        cache = self.cache
        before = cache.checkpoints_admitted
        assert adm.full is not None, "insert after release"
        cache.insert(adm.full, adm.at_completion, adm.modules)
        if self.host is not None:
            self.host.insert(adm.full, adm.at_completion, adm.modules)
        return cache.checkpoints_admitted - before

    def release(self, adm: Admission) -> None:
        """Step 4: unpin the hit (idempotent) and drop the request's tokens."""
        if adm.node is not None:
            self.cache.unpin(adm.node)
            adm.node = None
        adm.full = None

    def serve(self, prompt: np.ndarray, full: np.ndarray, modules: np.ndarray | None = None) -> Hit:
        """The protocol back to back, with one insertion of all the checkpoints.

        The clock then points to the next request (a snapshot taken now
        resumes there).
        """
        adm = self._admit(prompt, full, split=False, modules=modules)
        self.insert_at_completion(adm)
        self.release(adm)
        self.cache.set_clock(self.admissions)
        return adm.hit

    def _admit(
        self,
        prompt: np.ndarray,
        full: np.ndarray,
        split: bool = True,
        modules: np.ndarray | None = None,
    ) -> Admission:
        cache, policy = self.cache, self.policy
        order = self.admissions
        cache.set_clock(order)
        self.admissions += 1
        policy.on_request(cache, prompt, full)
        hit = cache.lookup(prompt, modules)
        if hit.node is not None:
            cache.pin(hit.node)
        host = self.host
        loaded = 0
        if host is not None:
            # The host holds everything the GPU cache was given (write-through), so
            # its hit is at least as long; what the GPU lacks is loaded back.
            far = host.peek(prompt)
            if far > hit.length:
                host.lookup(prompt)  # an access: the host tier's policy refreshes it
                loaded = far - hit.length
                hit = Hit(far, hit.node, hit.recompute, hit.host_tokens)
        positions = policy.admit(cache, prompt, full)
        if loaded and hit.length not in positions:
            # The loaded prefix (and its state) is cached on the GPU again.
            positions = sorted([*positions, hit.length])
        if split and self.split:
            n = len(prompt)
            at_prefill = [p for p in positions if p <= n]
            at_completion = [p for p in positions if p > n]
        else:
            at_prefill, at_completion = [], list(positions)
        adm = Admission(order, prompt, full, hit, at_prefill, at_completion, modules)
        adm.host_tokens = loaded
        return adm


def serve(
    cache: CacheStructure, prompt: np.ndarray, full: np.ndarray, modules: np.ndarray | None = None
) -> Hit:
    """One request served back to back on ``cache`` (:meth:`RequestCache.serve`)."""
    return RequestCache(cache).serve(prompt, full, modules)
