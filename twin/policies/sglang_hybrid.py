"""``sglang``: SGLang's prefix cache as it is today (issue #14), the ``sglang`` mode's policy.

- **Pure Transformers**: SGLang's ``RadixCache``, i.e. ``sglang+`` with its
  ``eviction`` order (``--radix-eviction-policy``); with ``lru`` the same hits.
- **Models with recurrent layers**: SGLang's ``MambaRadixCache``
  (:class:`twin.cache.hybrid_radix.HybridRadixCache`: two pools split by
  ``mamba_full_memory_ratio``, state tombstones) with its two LRU lists,
  ``full_lru_list`` (leaves, for KV) and ``mamba_lru_list`` (nodes holding a
  state, for states). ``--radix-eviction-policy`` does not reach it (SGLang's
  ``MambaRadixCache`` has only the LRU lists).

Recency follows ``mamba_radix_cache.py``: a lookup refreshes the path from the
node the hit ends at up to the root (``_match_post_processor``:
``reset_node_and_parents_mru``), an insert every node it walks and the node it
adds (``_insert_helper``), always with a node more recent than its parent, so
that ancestors lose their state first. Every refresh takes a fresh stamp from
one counter (SGLang's ``get_last_access_time``), so there are no ties.

Admission is ``sglang+``'s (a state at the branch point found by speculative
insertion and after the last token); ``page_size`` > 1 (SGLang ``--page-size``,
only allowed with ``--mamba-scheduler-strategy extra_buffer``) keeps states
only at whole pages, as ``cache_finished_req`` caches ``page_aligned_len``
tokens.
"""

from __future__ import annotations

from typing import Any

from twin.cache import HeldCache, Node
from twin.cache.hybrid_radix import MAMBA_FULL_MEMORY_RATIO, HybridRadixCache
from twin.cache.leaf_heap import LeafHeap
from twin.cache.radix import Match
from twin.errors import TwinError
from twin.policies.admissions import admission_rule
from twin.policies.sglang_plus import SGLangPlusPolicy


class SGLangPolicy(SGLangPlusPolicy):
    """SGLang today: RadixCache for Transformers, MambaRadixCache for hybrids."""

    name = "sglang"
    OPTIONS = ("eviction", "mamba_full_memory_ratio", "page_size", "int8_checkpoint")

    def __init__(
        self,
        eviction: str = "lru",
        mamba_full_memory_ratio: float = MAMBA_FULL_MEMORY_RATIO,
        page_size: int = 1,
        int8_checkpoint: bool = False,
    ) -> None:
        super().__init__(eviction)
        # SGLang 0.5.23 --enable-int8-mamba-checkpoint: cached states in int8, half a
        # state's bytes in the cache (twin.cache.hybrid_radix.HybridRadixCache).
        self.int8_checkpoint = bool(int8_checkpoint)
        if type(page_size) is not int or page_size < 1:
            raise TwinError(f"sglang: page_size must be a positive integer (got {page_size!r})")
        self.ratio = float(mamba_full_memory_ratio)
        self.page_size = page_size
        self.admission = admission_rule("page-aligned", page_size=page_size)
        self.hybrid = False
        self._stamp = 0
        self._mru: dict[
            int, int
        ] = {}  # node id -> its refresh stamp (the policy's, not the node's)
        self._full: LeafHeap[Node] = LeafHeap()  # leaves by (stamp, nid)
        self._states: LeafHeap[Node] = LeafHeap()  # nodes holding a state, by (stamp, nid)

    recurrent_structure = "hybrid-radix"  # MambaRadixCache; RadixCache for Transformers

    def bind(self, cache: HeldCache) -> None:
        super().bind(cache)
        self.hybrid = isinstance(cache, HybridRadixCache)

    # ----- recency (hybrid) ----------------------------------------------------
    def _stamp_path(self, node: Node | None) -> None:
        """Refresh ``node`` and its ancestors, each more recent than its parent."""
        path = []
        while node is not None and node.parent is not None:
            path.append(node)
            node = node.parent
        for n in reversed(path):
            self._stamp += 1
            self._mru[n.nid] = self._stamp
            self.on_node_changed(n)

    def on_hit(self, node: Node) -> None:
        if not self.hybrid:
            super().on_hit(node)
            return
        # cache.touch would also queue the node at its old stamp, an entry that the
        # fresh stamp below makes stale at once: set the access time only.
        node.t = self.cache.clock
        self._stamp_path(node)

    def on_insert_path(self, match: Match) -> None:
        """An insert walks ``match``'s path (``_insert_helper`` stamps each node)."""
        self._stamp_path(match.partial if match.partial is not None else match.node)

    def on_node_added(self, node: Node) -> None:
        if not self.hybrid:
            super().on_node_added(node)
            return
        self._stamp += 1
        self._mru[node.nid] = self._stamp  # insert_mru: the newest
        self.on_node_changed(node)
        for child in node.children.values():
            # A split's upper part: _split_node inserts it, then its child, as MRU
            # (the child stays more recent than its parent).
            self._stamp += 1
            self._mru[child.nid] = self._stamp
            self.on_node_changed(child)

    def on_node_changed(self, node: Node) -> None:
        if not self.hybrid:
            super().on_node_changed(node)
            return
        candidate = not node.lock and node.parent is not None
        key = (self._mru.get(node.nid, 0), node.nid)
        for heap, wanted in ((self._full, not node.children), (self._states, node.ckpt)):
            if candidate and wanted:
                heap.push(key, node)
            else:
                heap.discard(node)

    def on_node_removed(self, node: Node, into: Node | None = None) -> None:
        if not self.hybrid:
            super().on_node_removed(node, into)
            return
        self._full.discard(node)
        self._states.discard(node)
        self._mru.pop(node.nid, None)
        if into is not None:
            # A tombstone folded into its child: the child's tokens keep its own recency.
            self.on_node_changed(into)

    # ----- victims (hybrid) ----------------------------------------------------
    def full_victim(self) -> Node | None:
        """``full_lru_list.get_leaf_lru_no_lock``: the least recently used unpinned leaf."""
        return self._full.pop(lambda n: _unpinned(n) and not n.children)

    def state_victim(self) -> Node | None:
        """``mamba_lru_list.get_lru_no_lock``: the least recently used unpinned state."""
        return self._states.pop(lambda n: _unpinned(n) and bool(n.ckpt))

    def choose_victim(self) -> Node | None:
        return self.full_victim() if self.hybrid else super().choose_victim()

    def stats(self) -> dict[str, Any]:
        if not self.hybrid:
            return super().stats()
        return {"mamba_full_memory_ratio": self.ratio, "page_size": self.page_size}


def _unpinned(node: Node) -> bool:
    """Still in the tree and not locked: a candidate (its kind's condition aside)."""
    return node.parent is not None and not node.lock
