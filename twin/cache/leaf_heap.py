"""A lazy min-heap of eviction candidates: stale entries are skipped, not searched for.

The heap, not the candidate, knows which entry of a candidate is current: its owner
pushes a fresh entry whenever a candidate changes (:meth:`LeafHeap.push`, which makes
the candidate's older entries stale) and discards it when it changes into no
candidate (:meth:`LeafHeap.discard`); a stale entry is skipped when it reaches the
top. Once the heap outgrows twice its live entries (plus :data:`COMPACT_SLACK`) the
stale ones are dropped, which bounds its memory without changing the order anything
pops in. Used by the leaf-evicting policies (``policies.lru`` and those built on it,
``policies.sglang_hybrid``), which so keep their state beside the tree and none on
its nodes, and by the block pool's LRU (:class:`~twin.cache.block_cache.BlockCache`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

# Entries beyond twice the live ones that trigger dropping the stale (a bound on
# the heap's memory, not on its order).
COMPACT_SLACK = 1024

V = TypeVar("V", bound=Hashable)


class LeafHeap(Generic[V]):
    """Candidates by priority key, the smallest first; keys must be unique (end with ``nid``)."""

    __slots__ = ("_entries", "_limit", "_live", "_pushes")

    def __init__(self) -> None:
        self._entries: list[tuple[tuple[Any, ...], int, V]] = []
        self._live: dict[V, int] = {}  # candidate -> the push number of its current entry
        self._pushes = 0
        self._limit = COMPACT_SLACK  # heap size that triggers dropping stale entries

    def push(self, key: tuple[Any, ...], node: V) -> None:
        """Make ``node`` a candidate at ``key`` (its older entries are stale from now on)."""
        self._pushes += 1
        self._live[node] = self._pushes
        heapq.heappush(self._entries, (key, self._pushes, node))
        if len(self._entries) > self._limit:
            self._compact()

    def discard(self, node: V) -> None:
        """``node`` changed and is no candidate now: its entries are stale."""
        self._live.pop(node, None)

    def pop(self, still: Callable[[V], bool] | None = None) -> V | None:
        """Pop the candidate with the smallest key whose entry is current; ``None`` if none is.

        ``still``: a check the node must also pass; current entries that fail it
        are dropped too (candidates that stopped being ones without a new push).
        """
        entries, live = self._entries, self._live
        while entries:
            _, n, node = heapq.heappop(entries)
            if live.get(node) == n:
                del live[node]
                if still is None or still(node):
                    return node
        return None

    def peek(self) -> tuple[Any, ...] | None:
        """The smallest key whose entry is current (stale entries above it are dropped)."""
        entries, live = self._entries, self._live
        while entries and live.get(entries[0][2]) != entries[0][1]:
            heapq.heappop(entries)
        return entries[0][0] if entries else None

    def __len__(self) -> int:
        """Entries held, stale ones included."""
        return len(self._entries)

    def _compact(self) -> None:
        live = self._live
        self._entries = [e for e in self._entries if live.get(e[2]) == e[1]]
        heapq.heapify(self._entries)
        self._limit = 2 * len(self._entries) + COMPACT_SLACK
