"""LRU over unpinned leaves with O(1) path refresh: the eviction of ``sglang+``.

SGLang and vLLM refresh every node (block) of a matched path on access. Only
leaves are evicted, and a node becomes a leaf only once every descendant has
gone, so its effective last access is the latest access at or below it. We
therefore stamp only the accessed node, and when a leaf is evicted hand its
stamp to its parent (``parent.t = max(parent.t, leaf.t)``): the same order as
refreshing the whole path, without walking it.

Candidates live in a heap keyed by ``(t, nid)`` (ties by creation order) with
lazy invalidation: every change bumps the node's version and pushes a fresh
entry if the node is a candidate; entries whose version is stale are skipped.
"""

from __future__ import annotations

import heapq
from typing import Any

from policies.base import Policy
from twin.cache import CacheNode, CacheStructure, PrefixCache


class LeafLRU(Policy):
    """Evicts the least recently used unpinned leaf."""

    cache: PrefixCache  # a radix-tree policy: it reads the tree's nodes

    def __init__(self) -> None:
        super().__init__()
        self._heap: list[tuple[Any, int, int, Any]] = []
        self._limit = 1024  # heap size that triggers dropping stale entries
        self._is_candidate: Any = None

    def bind(self, cache: CacheStructure) -> None:
        super().bind(cache)
        self._is_candidate = self.cache.leaf_evictable

    def on_node_changed(self, node: CacheNode) -> None:
        node.ver += 1
        if self._is_candidate(node):
            heap = self._heap
            heapq.heappush(heap, (node.t, node.nid, node.ver, node))
            if len(heap) > self._limit:
                self._compact()

    def on_node_removed(self, node: CacheNode, into: CacheNode | None = None) -> None:
        node.ver += 1
        parent = node.parent
        if into is None and parent is not None and node.t > parent.t:
            parent.t = node.t  # the lazy path refresh (module docstring)

    def choose_victim(self, cache: CacheStructure) -> CacheNode | None:
        heap = self._heap
        while heap:
            _, _, ver, node = heap[0]
            heapq.heappop(heap)
            if ver == node.ver:
                return node
        return None

    def _compact(self) -> None:
        self._heap = [e for e in self._heap if e[2] == e[3].ver]
        heapq.heapify(self._heap)
        self._limit = 2 * len(self._heap) + 1024
