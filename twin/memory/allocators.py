"""KV memory allocators of heterogeneous models: PagedAttention pages and Jenga's two levels.

Both take a model's layer kinds (:mod:`twin.memory.kinds`: kind -> bytes) and
a pool of bytes, and admit requests by their length in tokens; what differs
is how many fit.

- :class:`PagedAllocator`, the baseline (PagedAttention, Kwon et al., SOSP
  2023; vLLM before its hybrid allocator): one page size for every kind, the
  largest kind's page; a token kind's page then holds ``page_bytes //
  token_bytes`` tokens (vLLM's ``mamba_cache_mode=align`` enlarges the
  attention block the same way) and every kind keeps every token: a sliding
  window is treated as full attention, as PagedAttention assumes.
- :class:`JengaAllocator` (Zhang et al., "Jenga: Effective Memory Management
  for Serving LLM with Heterogeneity", SOSP 2025, arXiv 2503.18292, sec. 4):
  large pages of the least common multiple of the kinds' small-page sizes,
  each given to one kind when needed and carved into that kind's small pages;
  a sliding-window kind keeps only its window; request-aware allocation takes
  a growing request's small pages from the large pages it already holds
  before other requests' partly used ones (and a free large page last), so a
  request's pages gather in few large pages and a finished one tends to hand
  whole large pages back (sec. 4.2). Taking a fresh large page before filling
  others' holes would do that better but, with a fixed pool, strands whole
  large pages per kind (tried: a Mamba hybrid then fit 35% fewer requests).

When the LCM is more than ``MAX_LARGE_FACTOR`` x the largest small page (a
Mamba state's odd size against attention pages), the large page is the largest
small page and every other kind's small page is padded to ``large // n`` for
the largest ``n`` that still holds it; the padding counts as fragmentation.
This is the twin's choice where the paper leaves the size open.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from twin.errors import TwinError
from twin.memory.kinds import LayerKind

# vLLM's default KV block size in tokens (``CacheConfig.block_size``, 16 on GPUs).
DEFAULT_PAGE_TOKENS = 16
# Largest LCM large page accepted, in units of the largest small page (the twin's choice).
MAX_LARGE_FACTOR = 8


def small_page_bytes(kind: LayerKind, page_tokens: int) -> int:
    """One small page of ``kind``: ``page_tokens`` tokens' KV, or one request's state."""
    return kind.state_bytes if kind.is_state else page_tokens * kind.token_bytes


def data_bytes(kinds: Sequence[LayerKind], tokens: int, page_tokens: int) -> int:
    """Bytes a request of ``tokens`` tokens really needs (windows applied, no page rounding)."""
    return sum(
        k.state_bytes if k.is_state else k.tokens_needed(tokens, 0) * k.token_bytes for k in kinds
    )


class PagedAllocator:
    """PagedAttention-style one-size pages for every kind (module docstring)."""

    name = "paged"

    def __init__(
        self,
        kinds: Sequence[LayerKind],
        capacity_bytes: int,
        page_tokens: int = DEFAULT_PAGE_TOKENS,
    ) -> None:
        _check(kinds, capacity_bytes, page_tokens)
        self.kinds = list(kinds)
        self.page_tokens = page_tokens
        self.page_bytes = max(small_page_bytes(k, page_tokens) for k in kinds)
        self.capacity = int(capacity_bytes)
        self.n_pages = self.capacity // self.page_bytes
        self.free_pages = self.n_pages
        self.held: dict[int, int] = {}  # request -> pages
        self.data: dict[int, int] = {}  # request -> bytes it needs

    def pages_for(self, tokens: int) -> int:
        """Pages a request of ``tokens`` tokens takes: every kind keeps every token."""
        pages = 0
        for k in self.kinds:
            if k.is_state:
                pages += -(-k.state_bytes // self.page_bytes)
            else:
                per_page = self.page_bytes // k.token_bytes
                pages += -(-tokens // per_page)
        return pages

    def admit(self, req: int, tokens: int) -> bool:
        """Reserve ``req``'s pages for ``tokens`` tokens; ``False`` (nothing taken) if full."""
        need = self.pages_for(tokens) - self.held.get(req, 0)
        if need > self.free_pages:
            return False
        self.free_pages -= need
        self.held[req] = self.held.get(req, 0) + need
        self.data[req] = data_bytes(self.kinds, tokens, self.page_tokens)
        return True

    def free(self, req: int) -> None:
        self.free_pages += self.held.pop(req, 0)
        self.data.pop(req, None)

    @property
    def used_data_bytes(self) -> int:
        return sum(self.data.values())


class _LargePage:
    __slots__ = ("free", "kind", "pid")

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.kind: str | None = None
        self.free = 0  # free small slots while assigned to a kind


class JengaAllocator:
    """Jenga's two-level allocator (module docstring)."""

    name = "jenga"

    def __init__(
        self,
        kinds: Sequence[LayerKind],
        capacity_bytes: int,
        page_tokens: int = DEFAULT_PAGE_TOKENS,
        request_aware: bool = True,
    ) -> None:
        _check(kinds, capacity_bytes, page_tokens)
        self.kinds = {k.name: k for k in kinds}
        self.page_tokens = page_tokens
        self.request_aware = request_aware
        sizes = {k.name: small_page_bytes(k, page_tokens) for k in kinds}
        self.large_bytes, self.small_bytes = large_page(sizes)
        self.slots = {n: self.large_bytes // s for n, s in self.small_bytes.items()}
        self.capacity = int(capacity_bytes)
        self.pages = [_LargePage(i) for i in range(self.capacity // self.large_bytes)]
        self.free_large: list[int] = [p.pid for p in reversed(self.pages)]  # a stack
        self.partial: dict[str, dict[int, None]] = {n: {} for n in self.kinds}  # ordered sets
        self.held: dict[int, dict[str, dict[int, int]]] = {}  # req -> kind -> large id -> pages
        self.data: dict[int, int] = {}

    # ------------------------------------------------------------------ requests
    def pages_for(self, kind: LayerKind, tokens: int) -> int:
        """Small pages of ``kind`` a request of ``tokens`` tokens holds (windows applied)."""
        if kind.is_state:
            return 1
        return -(-kind.tokens_needed(tokens, self.page_tokens) // self.page_tokens)

    def admit(self, req: int, tokens: int) -> bool:
        """Grow ``req`` to ``tokens`` tokens (a new request starts at 0); ``False`` if it
        cannot, with nothing taken."""
        held = self.held.setdefault(req, {n: {} for n in self.kinds})
        taken: list[tuple[str, int, int]] = []
        for name, kind in self.kinds.items():
            need = self.pages_for(kind, tokens) - sum(held[name].values())
            got = self._take(name, need, held[name]) if need > 0 else []
            if got is None:
                for n, pid, c in taken:
                    self._give_back(n, pid, c, held[n])
                if not any(held[n] for n in held):
                    del self.held[req]
                return False
            taken.extend((name, pid, c) for pid, c in got)
        self.data[req] = data_bytes(list(self.kinds.values()), tokens, self.page_tokens)
        return True

    def free(self, req: int) -> None:
        """Release every small page of ``req``; emptied large pages go back to the pool."""
        held = self.held.pop(req, {})
        for name, pages in held.items():
            for pid, c in list(pages.items()):
                self._give_back(name, pid, c, pages)
        self.data.pop(req, None)

    # ------------------------------------------------------------------ accounting
    @property
    def reserved_bytes(self) -> int:
        """Bytes of large pages given to a kind (the pool no longer has them)."""
        return (len(self.pages) - len(self.free_large)) * self.large_bytes

    @property
    def used_data_bytes(self) -> int:
        return sum(self.data.values())

    @property
    def free_large_pages(self) -> int:
        return len(self.free_large)

    # ------------------------------------------------------------------ internals
    def _take(self, name: str, need: int, mine: dict[int, int]) -> list[tuple[int, int]] | None:
        """``need`` small pages of kind ``name`` for the request holding ``mine`` (its pages
        of that kind per large page): [(large id, pages)], or None."""
        slots = self.slots[name]
        partial = self.partial[name]
        available = sum(self.pages[pid].free for pid in partial) + len(self.free_large) * slots
        if need > available:
            return None
        # Order of preference (sec. 4.2): the request's own partly used large
        # pages, other partly used ones of the kind, then a free large page.
        # Without request awareness: partly used pages in the order they opened.
        queue = list(partial)
        if self.request_aware:
            queue = [pid for pid in queue if pid in mine] + [
                pid for pid in queue if pid not in mine
            ]
        got: list[tuple[int, int]] = []
        while need > 0:
            if queue:
                page = self.pages[queue.pop(0)]
            else:
                page = self.pages[self.free_large.pop()]
                page.kind, page.free = name, slots
                partial[page.pid] = None
            c = min(need, page.free)
            page.free -= c
            mine[page.pid] = mine.get(page.pid, 0) + c
            if page.free == 0:
                partial.pop(page.pid, None)
            got.append((page.pid, c))
            need -= c
        return got

    def _give_back(self, name: str, pid: int, count: int, mine: dict[int, int]) -> None:
        """Return ``count`` small pages of large page ``pid`` from the request holding ``mine``."""
        page = self.pages[pid]
        page.free += count
        mine[pid] -= count
        if not mine[pid]:
            del mine[pid]
        if page.free == self.slots[name]:
            self.partial[name].pop(pid, None)
            page.kind, page.free = None, 0
            self.free_large.append(pid)
        else:
            self.partial[name][pid] = None


def large_page(sizes: dict[str, int]) -> tuple[int, dict[str, int]]:
    """(large page bytes, each kind's small page bytes after padding): the LCM when it is at
    most ``MAX_LARGE_FACTOR`` x the largest small page, else the largest small page with
    the others padded to fit it a whole number of times (module docstring)."""
    lcm = math.lcm(*sizes.values())
    biggest = max(sizes.values())
    if lcm <= MAX_LARGE_FACTOR * biggest:
        return lcm, dict(sizes)
    return biggest, {n: biggest // (biggest // s) for n, s in sizes.items()}


def fit_requests(allocator: PagedAllocator | JengaAllocator, lengths: Iterable[int]) -> int:
    """How many requests of these lengths (in order) are admitted before the first refusal."""
    count = 0
    for tokens in lengths:
        if not allocator.admit(count, tokens):
            break
        count += 1
    return count


def _check(kinds: Sequence[LayerKind], capacity: int, page_tokens: int) -> None:
    if not kinds:
        raise TwinError("an allocator needs at least one layer kind")
    if capacity < 0:
        raise TwinError(f"memory pool must be >= 0 bytes (got {capacity})")
    if page_tokens < 1:
        raise TwinError(f"page size must be at least 1 token (got {page_tokens})")
