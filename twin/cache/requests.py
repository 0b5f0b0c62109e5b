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

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from twin.cache.base import CacheStructure, H, HeldCache, Hit
from twin.errors import expect_one_of

if TYPE_CHECKING:
    import numpy as np

    from twin.cache.base import HostCache

C = TypeVar("C", bound=HeldCache)  # the GPU's cache, as its own protocol knows it


class Admission:
    """One admitted request's hold on the cache: its hit, pin and pending checkpoints."""

    __slots__ = (
        "at_completion",
        "at_prefill",
        "full",
        "hit",
        "host_tokens",
        "modules",
        "order",
        "prefill_tokens",
        "prompt",
        "unpin",
    )

    def __init__(
        self,
        order: int,
        prompt: np.ndarray,
        full: np.ndarray,
        hit: Hit[object],
        at_prefill: list[int],
        at_completion: list[int],
        modules: np.ndarray | None = None,
    ) -> None:
        self.order = order  # the admission index (the cache clock during the admission)
        self.prompt = prompt
        self.full: np.ndarray | None = full  # prompt + output; dropped on release
        self.hit = hit
        # Unpins the hit's node (its structure's own handle), until :meth:`RequestCache.release`.
        self.unpin: Callable[[], None] | None = None
        self.at_prefill = at_prefill  # checkpoint positions inside the prompt
        self.at_completion = at_completion  # positions past it (input + output)
        self.modules = modules  # the prompt modules it declares (workload ``modules`` column)
        self.prefill_tokens = 0  # prompt tokens the prefill-end insert newly cached
        self.host_tokens = 0  # hit tokens loaded back from the host tier (not on the GPU)


class Requests(Protocol):
    """The request protocol's calls, as the engine makes them: :class:`RequestCache`'s, or a
    cache's own (a compiled cache's, ``policies.compiled.live.LiveRequests``)."""

    admissions: int
    written_back_tokens: int
    written_back_states: int

    def admit(
        self, prompt: np.ndarray, full: np.ndarray, modules: np.ndarray | None = None
    ) -> Admission: ...
    def insert_at_prefill_end(self, adm: Admission) -> int: ...
    def insert_at_completion(self, adm: Admission) -> int: ...
    def complete(self, adm: Admission) -> int: ...
    def insert_preempted(self, adm: Admission, tokens: int) -> int: ...
    def release(self, adm: Admission) -> None: ...
    def serve(
        self, prompt: np.ndarray, full: np.ndarray, modules: np.ndarray | None = None
    ) -> Hit[object]: ...


class HostWrites(Generic[C]):
    """A host tier's part of the protocol, for :class:`RequestCache` and a cache's own
    protocol alike (a compiled cache's, ``policies.compiled.live.LiveRequests``): what is
    written to the host, what a hit loads back from it.

    The constructor both protocols share: ``cache`` the GPU's, ``host`` the host tier's
    (``None``: none), filled by ``write_policy``."""

    __slots__ = (
        "admissions",
        "cache",
        "host",
        "split",
        "write_policy",
        "written_back_states",
        "written_back_tokens",
    )
    cache: C
    host: HostCache | None
    write_policy: str
    split: bool
    written_back_tokens: int
    written_back_states: int

    def __init__(
        self,
        cache: C,
        host: HostCache | None = None,
        write_policy: str = "write_through",
    ) -> None:
        expect_one_of(write_policy, WRITE_POLICIES, "host write policy")
        self.cache = cache
        self.split = cache.has_ssm  # its model has SSM layers
        # A host-memory tier: filled by ``write_policy`` (module constant
        # WRITE_POLICIES), looked up after the GPU cache; a longer hit there is
        # loaded back.
        self.host = host
        self.write_policy = write_policy
        # Device-to-host copies made by write-back evictions (the engine prices
        # them into the step that evicts: ``written_back`` in the replica).
        self.written_back_tokens = 0
        self.written_back_states = 0
        if host is not None and write_policy == "write_back":
            cache.on_evict = self._write_back
        # Resume counting where the cache's clock is (a restored snapshot).
        self.admissions: int = cache.clock

    def _write_through(
        self, seq: np.ndarray, checkpoints: list[int], modules: np.ndarray | None
    ) -> None:
        """Back up to the host what this insert's policy says (before the GPU insert).

        SGLang ``HiRadixCache._insert_helper`` bumps the hit count of every node
        the insert walks (``inc_hit_count``; a new node starts at one) and backs
        a node up once the count reaches ``write_through_threshold``
        (``HiRadixCache.__init__``: 1 for ``write_through``, 2 otherwise). So
        ``write_through`` copies everything inserted, ``write_through_selective``
        only the part the GPU already held (this insert is its second), and
        ``write_back`` nothing here (``inc_hit_count`` returns at once). The
        copies overlap compute (non-blocking ``write_backup``) and are not priced.
        """
        host = self.host
        if host is None or self.write_policy == "write_back":
            return
        if self.write_policy == "write_through":
            host.insert(seq, checkpoints, modules)
            return
        held = self.cache.peek(seq[: max(checkpoints)])
        if held:
            host.insert(seq, [held], modules)

    def _write_back(self, path: np.ndarray, has_state: bool) -> None:
        """``on_evict`` under write-back: copy the victim to the host before it goes.

        SGLang ``HiRadixCache.evict``: a victim not yet backed up is written to
        the host (``write_backup(write_back=True)``) and the eviction waits for
        the copy (``writing_check(write_back=True)`` blocks), so the engine
        prices it into the evicting step. The twin's host tier is a prefix cache
        of its own, whose hits need the whole prefix: the victim goes with its
        path (ancestors still on the GPU included; only tokens new to the host
        are copied and counted). A position without a state cannot end a hit
        on a model with SSM layers, so nothing is copied for it. What the host
        cannot fit (after its own evictions) is lost.
        """
        host = self.host
        assert host is not None
        if self.split and not has_state:
            return
        states = host.checkpoints_admitted
        self.written_back_tokens += host.insert(path, [len(path)])
        if self.split:
            self.written_back_states += host.checkpoints_admitted - states

    def _load_back(self, prompt: np.ndarray, hit: Hit[object]) -> tuple[Hit[object], int]:
        """The hit across both tiers and the tokens loaded back from the host (0: none).

        The longest prefix across both tiers (SGLang ``match_prefix`` walks one tree
        whose nodes are on the GPU, backed up, or both): a host hit past the GPU's is
        loaded back, only what the GPU lacks (``HiRadixCache.load_back``). Under
        write-through the host's hit is at least the GPU's; under write-back or
        selective it may be shorter or none, and the GPU hit stands.
        """
        host = self.host
        if host is None:
            return hit, 0
        far = host.peek(prompt)
        if far <= hit.length:
            return hit, 0
        host.lookup(prompt)  # an access: the host tier's policy refreshes it
        return Hit(far, hit.node, hit.recompute, hit.host_tokens), far - hit.length

    @staticmethod
    def _with_loaded(positions: list[int], hit: Hit[object], loaded: int) -> list[int]:
        """The admission's positions: the loaded prefix (and its state) is cached on the
        GPU again."""
        if loaded and hit.length not in positions:
            return sorted([*positions, hit.length])
        return positions


class RequestCache(HostWrites[CacheStructure[H]], Generic[H]):
    """The request-facing side of one cache structure (module docstring), whose hits'
    handles are ``H``."""

    __slots__ = ()

    def admit(
        self, prompt: np.ndarray, full: np.ndarray, modules: np.ndarray | None = None
    ) -> Admission:
        """Step 1: set the clock, tell the policy, look up and pin, choose checkpoints.

        ``full`` is the prompt followed by the output (``prompt`` its first
        tokens: the workload reader hands both as views of one array).
        """
        return self._admit(prompt, full, modules=modules)

    def insert_at_prefill_end(self, adm: Admission) -> int:
        """Step 2: cache the checkpoints inside the prompt; return the checkpoints admitted."""
        if not adm.at_prefill:
            return 0
        cache = self.cache
        before = cache.checkpoints_admitted
        self._write_through(adm.prompt, adm.at_prefill, adm.modules)
        adm.prefill_tokens = cache.insert(adm.prompt, adm.at_prefill, adm.modules)
        return cache.checkpoints_admitted - before

    def insert_at_completion(self, adm: Admission) -> int:
        """Step 3: cache input + output up to the last checkpoint; return checkpoints admitted."""
        if not adm.at_completion:
            return 0
        cache = self.cache
        before = cache.checkpoints_admitted
        assert adm.full is not None, "insert after release"
        self._write_through(adm.full, adm.at_completion, adm.modules)
        cache.insert(adm.full, adm.at_completion, adm.modules)
        return cache.checkpoints_admitted - before

    def complete(self, adm: Admission) -> int:
        """Steps 3 and 4 at a request's end (a compiled cache makes them one call); return
        the checkpoints admitted."""
        made = self.insert_at_completion(adm)
        release(adm)
        return made

    def insert_preempted(self, adm: Admission, tokens: int) -> int:
        """A preempted request's first ``tokens`` (prompt and output so far) stay cached,
        as vLLM frees a preempted request's blocks still hashed; return tokens newly
        cached (a block pool keeps the full blocks among them)."""
        assert adm.full is not None, "insert after release"
        if tokens <= 0:
            return 0
        seq = adm.full[:tokens]
        self._write_through(seq, [tokens], adm.modules)
        return self.cache.insert(seq, [tokens], adm.modules)

    def release(self, adm: Admission) -> None:
        """Step 4: unpin the hit (idempotent) and drop the request's tokens."""
        release(adm)

    def serve(
        self, prompt: np.ndarray, full: np.ndarray, modules: np.ndarray | None = None
    ) -> Hit[object]:
        """The protocol back to back, with one insertion of all the checkpoints.

        The clock then points to the next request (a snapshot taken now
        resumes there).
        """
        adm = self._admit(prompt, full, split=False, modules=modules)
        self.complete(adm)
        self.cache.set_clock(self.admissions)
        return adm.hit

    def _admit(
        self,
        prompt: np.ndarray,
        full: np.ndarray,
        split: bool = True,
        modules: np.ndarray | None = None,
    ) -> Admission:
        cache = self.cache
        policy = cache.policy
        order = self.admissions
        cache.set_clock(order)
        if self.host is not None:
            self.host.set_clock(order)  # the host tier's recency runs on the same clock
        self.admissions += 1
        policy.on_request(prompt, full)
        found = cache.lookup(prompt, modules)
        node = found.node
        if node is not None:
            cache.pin(node)
        hit, loaded = self._load_back(prompt, found)
        positions = self._with_loaded(policy.admit(prompt, full), hit, loaded)
        if split and self.split:
            n = len(prompt)
            at_prefill = [p for p in positions if p <= n]
            at_completion = [p for p in positions if p > n]
        else:
            at_prefill, at_completion = [], list(positions)
        adm = Admission(order, prompt, full, hit, at_prefill, at_completion, modules)
        adm.host_tokens = loaded
        if node is not None:
            adm.unpin = partial(cache.unpin, node)
        return adm


def release(adm: Admission) -> None:
    """Unpin an admission's hit (idempotent) and drop its tokens."""
    unpin = adm.unpin
    if unpin is not None:
        unpin()
        adm.unpin = None
    adm.full = None


class ServesRequests:
    """A Python structure's :meth:`HeldCache.request_cache`: :class:`RequestCache` on it."""

    __slots__ = ()

    def request_cache(
        self: CacheStructure[H], host: HostCache | None = None, write_policy: str = "write_through"
    ) -> RequestCache[H]:
        return RequestCache(self, host, write_policy)


# How the host tier is filled: SGLang's --hicache-write-policy (server_args.py).
WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")


def serve(
    cache: CacheStructure[H],
    prompt: np.ndarray,
    full: np.ndarray,
    modules: np.ndarray | None = None,
) -> Hit[object]:
    """One request served back to back on ``cache`` (:meth:`RequestCache.serve`)."""
    return RequestCache(cache).serve(prompt, full, modules)
