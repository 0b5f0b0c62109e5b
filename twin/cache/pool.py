"""One KV pool per replica, shared by running requests and the prefix cache (the engines' reality).

vLLM and SGLang size one pool of pages from the GPU memory left after weights
and activations (vLLM: ``gpu_memory_utilization``, ``vllm/v1/worker/gpu_worker.py``
``determine_available_memory``; SGLang: ``mem_fraction_static``,
``python/sglang/srt/model_executor/model_runner.py`` ``profile_max_num_token``).
Running requests and cached prefixes live in that one pool: a cached page is
a free page that still remembers its content, reclaimed (evicted) when an
allocation needs it (vLLM ``vllm/v1/core/block_pool.py`` ``BlockPool.get_new_blocks``
pops the free queue and evicts the block's hash; SGLang
``python/sglang/srt/mem_cache/memory_pool.py`` + ``RadixCache.evict`` when
``alloc`` finds too few free slots).

Accounting, in bytes: ``running`` (pages running requests own, not shared with
the cache) + ``cache.used_bytes`` (cached pages, pinned ones included) +
``free`` = ``size``, always. The cache's ``capacity`` is kept at
``size - running`` so an insert evicts what it must and never takes a page a
running request holds; :meth:`allocate` shrinks the cache to make room.
Allocation is by the byte (a request's pages are not rounded up to whole
pages: the waste is under one page per running request).
"""

from __future__ import annotations

from twin.cache.base import HeldCache
from twin.cache.hybrid_radix import HybridRadixCache


class SharedPool:
    """One replica's pages: running requests' + the prefix cache's + free (module docstring)."""

    __slots__ = ("cache", "floor", "peak_running", "running", "size")

    def __init__(self, size: int, cache: HeldCache) -> None:
        self.size = int(size)
        self.cache = cache
        self.running = 0
        self.peak_running = 0
        # Cached bytes known unevictable (pinned) since the last failed allocation; a
        # lower bound until a pin is released (:meth:`unpinned`). It spares the cache a
        # second futile eviction round while the queue's head waits.
        self.floor = 0
        cache.shrink_to(self.size)

    @property
    def free(self) -> int:
        """Bytes neither running requests nor the cache hold."""
        return self.size - self.running - self.cache.used_bytes

    def allocate(self, nbytes: int) -> bool:
        """Give ``nbytes`` to running requests, evicting cached pages if needed; ``False``: no room.

        On failure nothing is allocated; the evictable pages are gone by then
        (they could not make room), and what stays is remembered as the floor.
        """
        if nbytes <= 0:
            return True
        cache = self.cache
        room = self.size - self.running - nbytes
        if cache.used_bytes > room:
            if room < self.floor:
                return False
            if cache.shrink_to(room) > room:
                cache.capacity = self.size - self.running
                self.floor = cache.used_bytes
                return False
        self.running += nbytes
        cache.capacity = self.size - self.running
        if self.running > self.peak_running:
            self.peak_running = self.running
        return True

    def release(self, nbytes: int) -> None:
        """Running requests give ``nbytes`` back (free pages now, the cache may use them)."""
        self.running -= nbytes
        assert self.running >= 0, "released more than allocated"
        self.cache.capacity = self.size - self.running

    def unpinned(self) -> None:
        """A running request released its hold on the cache: the floor is no longer known."""
        self.floor = 0

    def hand_to_cache(self, nbytes: int) -> None:
        """``nbytes`` of a running request's pages were just cached: the cache owns them now.

        (vLLM hashes a request's full blocks as they are computed and SGLang
        inserts a prefilled prompt into the radix tree: the pages are shared,
        counted once.)
        """
        self.release(min(nbytes, self.running))

    def verify(self) -> None:
        """Assert running + cached + free = size, none negative."""
        cached = self.cache.used_bytes
        assert self.running >= 0 and cached >= 0 and self.free >= 0, (
            self.running,
            cached,
            self.size,
        )
        assert self.running + cached + self.free == self.size


class SplitPool(SharedPool):
    """SGLang's two pools for a hybrid model: full-attention KV and recurrent states.

    SGLang sizes a mamba pool beside the KV pool from the memory left after the
    weights (``python/sglang/srt/model_executor/model_runner.py``
    ``_handle_max_mamba_cache``: ``max_mamba_cache_size`` whole states fit in
    ``rest * mamba_full_memory_ratio / (1 + mamba_full_memory_ratio)``, the KV
    pool gets what they leave). Running requests take their state slots (1, or 3 with
    ``extra_buffer``) from the mamba pool (``HybridReqToTokenPool.alloc``,
    ``mem_cache/memory_pool.py``) and their tokens from the KV pool; the radix
    cache's states and KV live in the same two pools, and each pool evicts
    cached entries of its own kind when short (``MambaRadixCache.evict_mamba``
    for states, ``evict`` for tokens). Here: the inherited fields are the KV
    pool's (``size``, ``running``, ``floor``: what decode growth and the
    admission checks read); ``state_size`` and ``running_states`` the mamba
    pool's. Per pool: running + cached + free = size.
    """

    __slots__ = ("peak_running_states", "running_states", "state_floor", "state_size")

    def __init__(self, size: int, cache: HybridRadixCache) -> None:
        r = cache.ratio
        slot = max(cache.slot_bytes, 1)  # mamba_cache_per_req: one request's state
        self.state_size = int(int(size) * r / (1.0 + r)) // slot * slot
        self.running_states = self.peak_running_states = 0
        self.state_floor = 0
        self.cache = cache
        self.size = int(size) - self.state_size
        self.running = self.peak_running = 0
        self.floor = 0
        cache.hold_pools(self.size, self.state_size)

    def reserve_states(self, nbytes: int) -> None:
        """Take ``nbytes`` off the mamba pool for good, before any request runs (SGLang's
        speculative verify buffer, ``twin.engine.speculative.sglang_verify_reserve``)."""
        self.state_size -= min(max(int(nbytes), 0), self.state_size)
        cache = self.cache
        assert isinstance(cache, HybridRadixCache)
        cache.hold_pools(self.size, self.state_size)

    @property
    def free(self) -> int:
        """KV bytes neither running requests nor the cache hold."""
        return self.size - self.running - self.cache.kv_bytes

    @property
    def state_free(self) -> int:
        """State bytes neither running requests nor the cache hold."""
        return self.state_size - self.running_states - self.cache.ssm_bytes

    def _limits(self) -> tuple[int, int]:
        return self.size - self.running, self.state_size - self.running_states

    def allocate(self, nbytes: int) -> bool:
        """KV for running requests, evicting cached tokens (whole leaves) if needed."""
        return self._take(nbytes, states=False)

    def allocate_states(self, nbytes: int) -> bool:
        """State slots for a running request, evicting cached states if needed."""
        return self._take(nbytes, states=True)

    def _take(self, nbytes: int, states: bool) -> bool:
        """Give ``nbytes`` of one pool to running requests; ``False``: pins leave no room.

        The cache is held to what the pool leaves (its own kind evicted by its
        LRU); on failure what stays is that pool's floor until a pin is released.
        """
        if nbytes <= 0:
            return True
        cache = self.cache
        assert isinstance(cache, HybridRadixCache)
        kv_room, state_room = self._limits()
        if states:
            state_room -= nbytes
            short = cache.ssm_bytes > state_room
            floor, room = self.state_floor, state_room
        else:
            kv_room -= nbytes
            short = cache.kv_bytes > kv_room
            floor, room = self.floor, kv_room
        if short:
            if room < floor:
                return False
            if not cache.hold_pools(kv_room, state_room):
                cache.hold_pools(*self._limits())
                if states:
                    self.state_floor = cache.ssm_bytes
                else:
                    self.floor = cache.kv_bytes
                return False
        if states:
            self.running_states += nbytes
            self.peak_running_states = max(self.peak_running_states, self.running_states)
        else:
            self.running += nbytes
            self.peak_running = max(self.peak_running, self.running)
        cache.hold_pools(*self._limits())
        return True

    def release(self, nbytes: int) -> None:
        self.running -= nbytes
        assert self.running >= 0, "released more than allocated"
        self._relimit()

    def release_states(self, nbytes: int) -> None:
        """A running request gives its state slots back."""
        self.running_states -= nbytes
        assert self.running_states >= 0, "released more states than allocated"
        self._relimit()

    def _relimit(self) -> None:
        cache = self.cache
        assert isinstance(cache, HybridRadixCache)
        cache.split = self._limits()
        cache.capacity = sum(cache.split)

    def unpinned(self) -> None:
        self.floor = self.state_floor = 0

    def verify(self) -> None:
        """Assert, per pool, running + cached + free = size, none negative."""
        cache = self.cache
        for running, cached, free, size in (
            (self.running, cache.kv_bytes, self.free, self.size),
            (self.running_states, cache.ssm_bytes, self.state_free, self.state_size),
        ):
            assert running >= 0 and cached >= 0 and free >= 0, (running, cached, size)
            assert running + cached + free == size
