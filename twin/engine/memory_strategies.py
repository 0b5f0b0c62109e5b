"""What a replica's running requests hold, one class per memory mode, found by name.

The cluster gives each replica one :class:`MemoryStrategy`, named by
:func:`memory_mode` from :data:`MEMORY_STRATEGIES`, and optionally a :class:`HostTier`:

- ``dedicated`` (the Marconi paper, ``--cache-gb G``): a sequence's memory (KV of its
  prompt + output tokens, and its live SSM states) is reserved whole at admission, so a
  full replica queues instead of overcommitting and nothing is ever preempted. The
  reservation ignores the hit (the cache's bytes are a separate partition of ``--cache-gb``);
- ``shared_pool`` (the engines, ``--cache-gb auto``): one KV pool
  (:class:`twin.cache.pool.SharedPool`) holds running requests' pages and the cache's.
  Admission takes the prompt's pages (the hit's come back once the lookup is done) and
  the request's recurrent-state slots; decode steps take one token's pages per running
  request (:meth:`MemoryStrategy.grow`); a failed allocation evicts cached pages, then the
  scheduler preempts. Pages a prefill-end insert caches are handed to the cache (shared,
  counted once). A request's bytes follow the engine's allocator (twin.memory.footprint);
- ``split_pools``: SGLang's KV pool and mamba pool for a hybrid model
  (:class:`twin.cache.pool.SplitPool`), each evicting cached entries of its own kind;
- a host tier by SGLang's ``--hicache-write-policy`` (:data:`HOST_TIERS`): its loads
  lengthen a request's first step, write-back copies the step that evicts.

A request that could never fit is rejected at once (:meth:`MemoryStrategy.too_big`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from twin.cache import HeldCache, cache_stats
from twin.cache.base import HostCache
from twin.cache.hybrid_radix import HybridRadixCache
from twin.cache.pool import SharedPool, SplitPool
from twin.cache.requests import Requests
from twin.engine.cost import StepPricer
from twin.engine.seq import Seq
from twin.engine.speculative import sglang_verify_reserve
from twin.errors import lookup
from twin.memory.footprint import KvFootprint, get_kv_allocator
from twin.model import ModelSpec
from twin.policies.structures import SPLIT_POOLS_STRUCTURE

UNBOUNDED = 1 << 62  # tokens of room where a token takes no pool bytes


@dataclass(frozen=True)
class MemorySetup:
    """What a memory strategy is built from."""

    model: ModelSpec
    cache: HeldCache
    budget: float  # bytes for running requests; a pool's size (running + cached)
    state_slots: int = 1  # the engine mode's recurrent-state slots a running request
    kv_allocator: str = "bytes"  # a pool's allocator (twin.memory.footprint)
    # Speculative decoding (twin.engine.speculative): vLLM's more states a running request
    # (memory only: not checkpoint buffers, so the replica's copy time keeps its rule),
    # and the states a request slot of SGLang's verify buffer holds (0: none).
    extra_states: int = 0
    verify_states: int = 0
    max_running: int = 256


class MemoryStrategy:
    """A replica's memory for running requests (module docstring): one subclass a mode."""

    name: ClassVar[str] = ""
    # Running requests and the cache share one pool (admission takes pages, decodes grow
    # them, a full pool preempts): SGLang's admission control and vLLM's cached
    # preemption apply only then.
    pooled: ClassVar[bool] = True

    def __init__(self, setup: MemorySetup) -> None:
        model = setup.model
        self.budget = setup.budget
        self.kv_per_token = model.kv_bytes_per_token
        self.state_bytes = model.ssm_checkpoint_bytes if model.n_ssm_layers else 0
        # Recurrent states a running request holds (hybrids only).
        self.held_states = setup.state_slots + (setup.extra_states if self.state_bytes else 0)

    def footprint(self, total: int) -> int:
        """The most bytes a request of ``total`` tokens (prompt + output) holds."""
        raise NotImplementedError

    def too_big(self, footprint: int) -> bool:
        """Whether a request of ``footprint`` bytes can never fit."""
        return footprint > self.budget

    def fits(self, seq: Seq) -> bool:
        """Whether ``seq``'s memory can be taken now (a pool takes it, evicting)."""
        raise NotImplementedError

    def admitted(self, seq: Seq, gpu_hit: int) -> None:
        """``seq`` was admitted with ``gpu_hit`` tokens cached on the GPU."""
        raise NotImplementedError

    def prefilled(self, seq: Seq, tokens: int) -> None:
        """``seq``'s prefill ended and the cache took ``tokens`` of its prompt."""

    def completed(self, seq: Seq) -> None:
        """``seq`` completed: its memory comes free (before the cache inserts its state)."""
        raise NotImplementedError

    def preempted(self, seq: Seq, decoded: int) -> None:
        """``seq`` was preempted after growing ``decoded`` tokens since its last prefill."""
        raise NotImplementedError

    def unreserve(self, seq: Seq) -> None:
        """A waiting ``seq`` gives back what :meth:`fits` took for it."""

    def grow(self, tokens: int) -> bool:
        """Take ``tokens`` tokens' memory for running requests; ``False``: no room."""
        return True

    def shrink(self, tokens: int) -> None:
        """Give back ``tokens`` tokens' memory taken by :meth:`grow` but not used."""

    def room_tokens(self) -> int:
        """Tokens' memory free now (after a failed :meth:`grow`: all it can free)."""
        return UNBOUNDED

    def headroom_tokens(self) -> int:
        """Free + evictable tokens (SGLang's ``available_size + evictable_size``)."""
        return UNBOUNDED

    def state_tokens(self) -> int:
        """A request's state slots in tokens of the pool that holds its tokens too."""
        return 0

    # A disaggregated decode worker reserves a request's memory before the KV transfer.
    def reserve(self, seq: Seq) -> bool:
        """Take ``seq``'s memory before it queues; ``False``: not now."""
        return self.fits(seq)

    def fits_reserved(self, seq: Seq) -> bool:
        """:meth:`fits` for a request :meth:`reserve` took memory for."""
        return self.fits(seq)

    def admitted_reserved(self, seq: Seq) -> None:
        """:meth:`admitted` for a request :meth:`reserve` took memory for (no cache hit)."""
        self.admitted(seq, 0)

    def stats(self) -> dict[str, Any] | None:
        """The replica's ``pool`` section of the summary (``None``: no pool)."""
        return None


class DedicatedMemory(MemoryStrategy):
    """Whole footprints reserved at admission beside a cache of its own (module docstring)."""

    name = "dedicated"
    pooled = False

    def __init__(self, setup: MemorySetup) -> None:
        super().__init__(setup)
        self.used = 0  # bytes of admitted requests' footprints

    def footprint(self, total: int) -> int:
        return total * self.kv_per_token + self.held_states * self.state_bytes

    def fits(self, seq: Seq) -> bool:
        return self.used + seq.footprint <= self.budget

    def admitted(self, seq: Seq, gpu_hit: int) -> None:
        self.used += seq.footprint

    def completed(self, seq: Seq) -> None:
        self.used -= seq.footprint

    def reserve(self, seq: Seq) -> bool:
        ok = self.fits(seq)
        if ok:
            self.admitted(seq, 0)
        return ok

    def fits_reserved(self, seq: Seq) -> bool:
        return True  # reserved whole, never preempted

    def admitted_reserved(self, seq: Seq) -> None:
        pass  # taken by reserve


class SharedPoolMemory(MemoryStrategy):
    """One pool of pages for running requests and the cache (module docstring)."""

    name = "shared_pool"

    def __init__(self, setup: MemorySetup) -> None:
        super().__init__(setup)
        self.pool = self._make_pool(setup)
        self.kv: KvFootprint = get_kv_allocator(setup.kv_allocator, setup.model, self.held_states)
        self.growth = self.kv.growth  # bytes a token
        self.running_requests = self.peak_running_requests = 0  # admitted, not done

    def _make_pool(self, setup: MemorySetup) -> SharedPool:
        return SharedPool(int(setup.budget), setup.cache)

    def footprint(self, total: int) -> int:
        return self.kv.most(total)

    def fits(self, seq: Seq) -> bool:
        if seq.alloc:
            return True  # taken at an earlier try, still waiting for the token budget
        # The prompt (and the output recomputed after a preemption) as if nothing
        # hit: cached pages could be reclaimed by this very allocation.
        n, final = seq.prompt_len + seq.generated, seq.prompt_len + seq.out_len
        alloc = self._take(self.kv.tokens(n, final))
        if alloc is None:
            return False
        seq.alloc = alloc
        return True

    def _take(self, need: int) -> int | None:
        """Take a request's tokens and state slots; the bytes it holds (``None``: no room)."""
        need += self.kv.state
        return need if self.pool.allocate(need) else None

    def _free_states(self) -> None:
        """A request gives back state slots held apart from its bytes (split pools)."""

    def admitted(self, seq: Seq, gpu_hit: int) -> None:
        self.running_requests += 1
        self.peak_running_requests = max(self.peak_running_requests, self.running_requests)
        # The GPU hit's pages are the cache's (pinned); loaded ones are the request's.
        kv = self.kv
        own, final = seq.prompt_len + seq.generated, seq.prompt_len + seq.out_len
        back = kv.tokens(own, final) - kv.tokens(own - gpu_hit, final - gpu_hit)
        self.pool.release(back)
        seq.alloc -= back

    def prefilled(self, seq: Seq, tokens: int) -> None:
        if tokens:  # those prompt pages are the cache's now (shared, counted once)
            handed = min(self.kv.handed(tokens), seq.alloc)
            self.pool.hand_to_cache(handed)
            seq.alloc -= handed

    def completed(self, seq: Seq) -> None:
        # Freed as a preemption frees, before the cache may keep its pages (vLLM's freed
        # blocks stay hashed; SGLang's cache_finished_req inserts them).
        self.preempted(seq, seq.finish_step - seq.start_step)

    def preempted(self, seq: Seq, decoded: int) -> None:
        pool = self.pool
        pool.release(seq.alloc + decoded * self.growth)
        self._free_states()
        pool.unpinned()  # its hold on the cache goes too
        seq.alloc = 0
        self.running_requests -= 1

    def unreserve(self, seq: Seq) -> None:
        self.pool.release(seq.alloc)
        seq.alloc = 0
        self._free_states()

    def grow(self, tokens: int) -> bool:
        return self.pool.allocate(tokens * self.growth)

    def shrink(self, tokens: int) -> None:
        self.pool.release(tokens * self.growth)

    def room_tokens(self) -> int:
        return max(self.pool.free, 0) // self.growth if self.growth else UNBOUNDED

    def headroom_tokens(self) -> int:
        # Every cached page counts as evictable but those known pinned (the pool's floor).
        pool, g = self.pool, self.growth
        return (pool.size - pool.running - pool.floor) // g if g else UNBOUNDED

    def state_tokens(self) -> int:
        return -(-self.kv.state // self.growth) if self.growth else 0

    def stats(self) -> dict[str, Any] | None:
        pool = self.pool
        return {
            "bytes": pool.size,
            "peak_running_bytes": pool.peak_running,
            "peak_running_requests": self.peak_running_requests,
            "kv_allocator": self.kv.name,
        }


class SplitPoolsMemory(SharedPoolMemory):
    """SGLang's KV pool and mamba pool for a hybrid model (module docstring)."""

    name = "split_pools"
    pool: SplitPool

    def _make_pool(self, setup: MemorySetup) -> SplitPool:
        cache = setup.cache
        assert isinstance(cache, HybridRadixCache), "memory_mode names split pools for it"
        pool = SplitPool(int(setup.budget), cache)
        if setup.verify_states:  # SGLang's speculative verify buffer, off the mamba pool
            pool.reserve_states(
                sglang_verify_reserve(
                    pool.state_size,
                    cache.slot_bytes,
                    setup.verify_states,
                    setup.state_slots,
                    setup.max_running,
                )
            )
        return pool

    def too_big(self, footprint: int) -> bool:
        # Each of SGLang's pools must hold its part (SplitPool).
        state = self.kv.state
        return state > self.pool.state_size or footprint - state > self.pool.size

    def _take(self, need: int) -> int | None:
        # State slots from the mamba pool first (HybridReqToTokenPool.alloc in
        # alloc_req_slots), then the tokens from the KV pool.
        pool, state = self.pool, self.kv.state
        if not pool.allocate_states(state):
            return None
        if not pool.allocate(need):
            pool.release_states(state)
            return None
        return need

    def _free_states(self) -> None:
        self.pool.release_states(self.kv.state)

    def state_tokens(self) -> int:
        return 0  # gated by the mamba pool, not by the KV pool's tokens

    def stats(self) -> dict[str, Any] | None:
        pool = self.pool
        return {
            **(super().stats() or {}),
            "state_bytes": pool.state_size,
            "peak_running_state_bytes": pool.peak_running_states,
        }


MEMORY_STRATEGIES: dict[str, type[MemoryStrategy]] = {
    cls.name: cls for cls in (DedicatedMemory, SharedPoolMemory, SplitPoolsMemory)
}


def memory_mode(shared_pool: bool, structure: str) -> str:
    """A replica's strategy: ``--cache-gb G`` dedicated; ``auto`` one shared pool, or
    SGLang's split pools where the structure (its name) is its hybrid radix cache."""
    if not shared_pool:
        return DedicatedMemory.name
    split = structure == SPLIT_POOLS_STRUCTURE
    return SplitPoolsMemory.name if split else SharedPoolMemory.name


def get_memory(name: str, setup: MemorySetup) -> MemoryStrategy:
    """The strategy registered as ``name``, built from ``setup``."""
    return lookup(MEMORY_STRATEGIES, name, "memory strategy")(setup)


class HostTier:
    """A host-memory tier under the device cache, filled as copies are made (SGLang's
    ``write_through``/``write_through_selective``, vLLM's CPU offload): no eviction waits."""

    def __init__(self, cache: HeldCache, pricer: StepPricer, write_policy: str) -> None:
        self.cache = cache  # what the summary reports
        self.host: HostCache = cache  # what the request protocols above it use
        self.pricer = pricer
        self.write_policy = write_policy
        self.loaded_tokens = 0
        self.load_s = 0.0

    def requests(self, device: HeldCache) -> Requests:
        """The request protocol over ``device`` with this tier beneath it (``device``'s own
        where it has one: ``twin.cache.HeldCache.request_cache``)."""
        return device.request_cache(self.host, self.write_policy)

    def load_time(self, tokens: int, states: int) -> float:
        """Seconds to load a hit back before the prefill can use it (HiCache's load_back,
        vLLM's CPU offload connector): host-to-device copies, not overlapped with compute."""
        seconds = self.pricer.hit_work_time(0, tokens, states)
        self.loaded_tokens += tokens
        self.load_s += seconds
        return seconds

    def write_back_time(self, requests: Requests) -> float:
        """Seconds of the write-back copies made since the last call."""
        return 0.0

    def stats(self, requests: Requests) -> dict[str, Any]:
        """The replica's ``host_cache`` section of the summary."""
        capacity = {"capacity_bytes": self.cache.capacity}
        loads = {"loaded_tokens": self.loaded_tokens, "load_s": self.load_s}
        return {**cache_stats(self.cache), **capacity, **loads}


class WriteBackHostTier(HostTier):
    """SGLang's ``write_back``: an eviction copies to the host and waits for the copy
    (``HiRadixCache.evict``, ``writing_check(write_back=True)``), in the step that evicts."""

    def __init__(self, cache: HeldCache, pricer: StepPricer, write_policy: str) -> None:
        super().__init__(cache, pricer, write_policy)
        self.write_s = 0.0  # the copies' seconds, priced
        self._priced = (0, 0)  # (tokens, states) already priced

    def write_back_time(self, requests: Requests) -> float:
        done = (requests.written_back_tokens, requests.written_back_states)
        tokens, states = done[0] - self._priced[0], done[1] - self._priced[1]
        if not tokens and not states:
            return 0.0
        self._priced = done
        seconds = self.pricer.write_back_time(tokens, states)
        self.write_s += seconds
        return seconds

    def stats(self, requests: Requests) -> dict[str, Any]:
        copies = {"written_back_tokens": requests.written_back_tokens, "write_back_s": self.write_s}
        return {**super().stats(requests), **copies}


# By SGLang's --hicache-write-policy (twin.cache.requests.WRITE_POLICIES).
HOST_TIERS: dict[str, type[HostTier]] = {
    "write_through": HostTier,
    "write_through_selective": HostTier,
    "write_back": WriteBackHostTier,
}
