"""A lazy min-heap of eviction candidates: stale entries are skipped, not searched for.

A policy bumps a node's version (``node.ver``) on every change and pushes a
fresh entry when the node is a candidate; an entry whose version is no longer
the node's is stale and is skipped when it reaches the top. Once the heap
outgrows twice its live entries (plus :data:`COMPACT_SLACK`) the stale ones are
dropped, which bounds its memory without changing the order anything pops in.
Used by the leaf-evicting policies (``policies.lru`` and those built on it,
``policies.sglang_hybrid``) and by the block pool's LRU
(:class:`~twin.cache.block_cache.BlockCache`, whose segments carry ``ver`` too).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

# Entries beyond twice the live ones that trigger dropping the stale (a bound on
# the heap's memory, not on its order).
COMPACT_SLACK = 1024


class Versioned(Protocol):
    """A candidate: its version, bumped by its owner on every change."""

    ver: int


V = TypeVar("V", bound=Versioned)


class LeafHeap(Generic[V]):
    """Candidates by priority key, the smallest first; keys must be unique (end with ``nid``)."""

    __slots__ = ("_entries", "_limit")

    def __init__(self) -> None:
        self._entries: list[tuple[tuple[Any, ...], int, V]] = []
        self._limit = COMPACT_SLACK  # heap size that triggers dropping stale entries

    def push(self, key: tuple[Any, ...], node: V) -> None:
        """Make ``node`` a candidate at ``key`` as of its current version."""
        heapq.heappush(self._entries, (key, node.ver, node))
        if len(self._entries) > self._limit:
            self._compact()

    def pop(self, still: Callable[[V], bool] | None = None) -> V | None:
        """Pop the candidate with the smallest key whose entry is current; ``None`` if none is.

        ``still``: a check the node must also pass; current entries that fail it
        are dropped too (candidates that stopped being ones without a new version).
        """
        entries = self._entries
        while entries:
            _, ver, node = heapq.heappop(entries)
            if ver == node.ver and (still is None or still(node)):
                return node
        return None

    def peek(self) -> tuple[Any, ...] | None:
        """The smallest key whose entry is current (stale entries above it are dropped)."""
        entries = self._entries
        while entries and entries[0][1] != entries[0][2].ver:
            heapq.heappop(entries)
        return entries[0][0] if entries else None

    def __len__(self) -> int:
        """Entries held, stale ones included."""
        return len(self._entries)

    def _compact(self) -> None:
        self._entries = [e for e in self._entries if e[1] == e[2].ver]
        heapq.heapify(self._entries)
        self._limit = 2 * len(self._entries) + COMPACT_SLACK
