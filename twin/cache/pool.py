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

from twin.cache.base import CacheStructure


class SharedPool:
    """One replica's pages: running requests' + the prefix cache's + free (module docstring)."""

    __slots__ = ("cache", "floor", "peak_running", "running", "size")

    def __init__(self, size: int, cache: CacheStructure) -> None:
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
