"""LRU over unpinned leaves with O(1) path refresh: the eviction of ``sglang+``.

SGLang and vLLM refresh every node (block) of a matched path on access. Only
leaves are evicted, and a node becomes a leaf only once every descendant has
gone, so its effective last access is the latest access at or below it. We
therefore stamp only the accessed node, and when a leaf is evicted hand its
stamp to its parent (``parent.t = max(parent.t, leaf.t)``): the same order as
refreshing the whole path, without walking it.

Candidates live in a :class:`twin.cache.leaf_heap.LeafHeap` keyed by
:meth:`LeafLRU.eviction_key`: the policy's eviction order (one small function of
:mod:`twin.policies.eviction_orders`, found by name; ``lru`` here, ``(t,)``) and the
node's creation id (ties by creation order): every change pushes a fresh entry if the
node is a candidate and discards it if not; stale entries are skipped. Policies
built on this one evict in another order by naming it.
"""

from __future__ import annotations

from typing import ClassVar

from twin.cache import HeldCache, Node
from twin.cache.leaf_heap import LeafHeap
from twin.policies.base import RadixPolicy
from twin.policies.eviction_orders import EVICTION_ORDERS, Order


class LeafLRU(RadixPolicy):
    """Evicts unpinned leaves in its eviction order (the least recently used first)."""

    order: ClassVar[str] = "lru"  # its eviction order's name (``EVICTION_ORDERS``)

    def __init__(self) -> None:
        super().__init__()
        self._leaves: LeafHeap[Node] = LeafHeap()
        self._order: Order = EVICTION_ORDERS[self.order]

    def bind(self, cache: HeldCache) -> None:
        super().bind(cache)
        self._is_candidate = self.cache.leaf_evictable

    def hit_count(self, node: Node) -> int:
        """The hits the policy counted for ``node`` (none here), which its order may read."""
        return 0

    def eviction_key(self, node: Node) -> tuple[int, ...]:
        """The candidate's priority, the smallest evicted first; unique (ends with ``nid``)."""
        return (*self._order(node, self.hit_count(node)), node.nid)

    def on_node_changed(self, node: Node) -> None:
        if self._is_candidate(node):
            self._leaves.push(self.eviction_key(node), node)
        else:
            self._leaves.discard(node)

    def on_node_removed(self, node: Node, into: Node | None = None) -> None:
        self._leaves.discard(node)
        parent = node.parent
        if into is None and parent is not None and node.t > parent.t:
            parent.t = node.t  # the lazy path refresh (module docstring)

    def choose_victim(self) -> Node | None:
        return self._leaves.pop()
