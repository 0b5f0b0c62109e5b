"""Eviction orders: which candidate leaf goes first, one small function each, found by name.

An order maps a candidate (a radix tree's node) and what its policy counts beside the
tree (the node's hit count; 0 for a policy that counts none) to a priority key, the
smallest evicted first; the policy appends the node's creation id, so every key is
unique (:class:`twin.cache.leaf_heap.LeafHeap`). The leaf policies
(:class:`twin.policies.lru.LeafLRU`: ``sglang+``, ``sglang``, ``jenga``) take theirs from
:data:`EVICTION_ORDERS` by name; adding an order never edits a policy.

:data:`SGLANG_ORDERS` are SGLang's ``--radix-eviction-policy`` (``sglang+``'s and
``sglang``'s ``eviction`` option), as ``python/sglang/srt/mem_cache/evict_policy.py``
(``*Strategy.get_priority``) orders the evictable leaves ``RadixCache.evict`` reads:

- ``lru``: last access; ``mru``: the newest access first;
- ``fifo``: creation order (a node's ``nid``; a split's upper part is a new node, as
  SGLang's ``_split_node`` creates one); ``filo``: the newest created first;
- ``lfu``: (hit count, last access); ``slru``: (hit count >= 2, last access),
  ``SLRUStrategy``'s default ``protected_threshold`` of 2;
- ``priority``: (request priority, last access); the twin's workloads carry no
  priorities (all 0, SGLang's default), so it orders as ``lru``.

``lru-deepest`` is Jenga's (arXiv 2503.18292, sec. 5: balanced, aligned eviction): the
oldest access first, among equals the longest prefix (the deepest node) first.
"""

from __future__ import annotations

from collections.abc import Callable

from twin.cache import Node
from twin.errors import TwinError

# SLRU: hits needed to enter the protected segment (evict_policy.py SLRUStrategy default).
SLRU_PROTECTED_HITS = 2

Order = Callable[[Node, int], tuple[int, ...]]

EVICTION_ORDERS: dict[str, Order] = {
    "lru": lambda n, h: (n.t,),
    "lfu": lambda n, h: (h, n.t),
    "fifo": lambda n, h: (n.nid,),
    "mru": lambda n, h: (-n.t,),
    "filo": lambda n, h: (-n.nid,),
    "priority": lambda n, h: (0, n.t),
    "slru": lambda n, h: (int(h >= SLRU_PROTECTED_HITS), n.t),
    "lru-deepest": lambda n, h: (n.t, -n.depth),
}

# SGLang's --radix-eviction-policy choices, in its order (the ``eviction`` option).
SGLANG_ORDERS = ("lru", "lfu", "fifo", "mru", "filo", "priority", "slru")

# The orders that read a node's hit count (a policy counts hits only for these).
COUNTS_HITS = frozenset({"lfu", "slru"})


def eviction_order(name: str, choices: tuple[str, ...], policy: str) -> Order:
    """The order called ``name``, one of ``choices`` (those ``policy`` offers), or a
    ``TwinError`` listing them."""
    if name not in choices:
        raise TwinError(f"{policy}: eviction must be one of {', '.join(choices)} (got {name!r})")
    return EVICTION_ORDERS[name]
