"""LRU over unpinned leaves with O(1) path refresh: the eviction of ``sglang+``.

SGLang and vLLM refresh every node (block) of a matched path on access. Only
leaves are evicted, and a node becomes a leaf only once every descendant has
gone, so its effective last access is the latest access at or below it. We
therefore stamp only the accessed node, and when a leaf is evicted hand its
stamp to its parent (``parent.t = max(parent.t, leaf.t)``): the same order as
refreshing the whole path, without walking it.

Candidates live in a :class:`twin.cache.leaf_heap.LeafHeap` keyed by
:meth:`LeafLRU.eviction_key`, here ``(t, nid)`` (ties by creation order): every
change bumps the node's version and pushes a fresh entry if the node is a
candidate; entries whose version is stale are skipped. Policies built on this
one evict in another order by overriding :meth:`LeafLRU.eviction_key` alone.
"""

from __future__ import annotations

from typing import Any

from twin.cache import HeldCache, Node
from twin.cache.leaf_heap import LeafHeap
from twin.policies.base import RadixPolicy


class LeafLRU(RadixPolicy):
    """Evicts the least recently used unpinned leaf."""

    def __init__(self) -> None:
        super().__init__()
        self._leaves: LeafHeap[Node] = LeafHeap()

    def bind(self, cache: HeldCache) -> None:
        super().bind(cache)
        self._is_candidate = self.cache.leaf_evictable

    def eviction_key(self, node: Node) -> tuple[Any, ...]:
        """The candidate's priority, the smallest evicted first; unique (ends with ``nid``)."""
        return (node.t, node.nid)

    def on_node_changed(self, node: Node) -> None:
        node.ver += 1
        if self._is_candidate(node):
            self._leaves.push(self.eviction_key(node), node)

    def on_node_removed(self, node: Node, into: Node | None = None) -> None:
        node.ver += 1
        parent = node.parent
        if into is None and parent is not None and node.t > parent.t:
            parent.t = node.t  # the lazy path refresh (module docstring)

    def choose_victim(self) -> Node | None:
        return self._leaves.pop()
