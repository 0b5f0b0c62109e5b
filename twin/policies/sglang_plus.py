"""``sglang+``: SGLang's radix cache extended to hybrid models (Marconi sec. 5 baseline).

Admission is Marconi's judicious rule (a checkpoint at the branch point found
by speculative insertion, and after the last decoded token), so it differs
from ``marconi`` only in eviction: by default plain LRU over leaves (``policies.lru``).

Refresh follows the Marconi authors' SGLang+ ("policy version 1" of
github.com/ruipeterpan/marconi ``radix_cache_hybrid.py``): ``_match_prefix_helper``
and ``_insert_helper`` stamp every node they visit, at the lookup of the input
and again at the insert of input + output. That includes the node a sequence
diverges inside (the partly matched edge, before it is split), so when an
agent rewrites an older observation the whole old branch stays warm. The
matched path itself is refreshed lazily by ``policies.lru``; here we stamp
the partly matched node, which that rule would not reach.

``eviction`` is SGLang's ``--radix-eviction-policy`` (issue #14): the order in
which unpinned leaves go, one of SGLang's orders
(:data:`twin.policies.eviction_orders.SGLANG_ORDERS`, each a small function of the
candidate and its hit count there).

A node's hit count follows ``RadixCache._insert_helper`` / ``_inc_hit_count``:
every node an insert walks through (whole or split) and the new node it adds
gain one. Last access uses the lazy path refresh of ``policies.lru`` (the
same order as SGLang stamping the whole matched path).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from twin.cache import Match, Node
from twin.policies.admissions import admission_rule
from twin.policies.eviction_orders import COUNTS_HITS, SGLANG_ORDERS, eviction_order
from twin.policies.lru import LeafLRU


class SGLangPlusPolicy(LeafLRU):
    """Judicious admission + leaf eviction in SGLang's order (LRU by default)."""

    name = "sglang+"
    OPTIONS: ClassVar[tuple[str, ...]] = ("eviction",)

    def __init__(self, eviction: str = "lru") -> None:
        super().__init__()
        self._order = eviction_order(eviction, SGLANG_ORDERS, "sglang+")
        self.eviction = eviction
        self.admission = admission_rule("judicious")
        self.hits: dict[Node, int] = {}  # node -> hit count (lfu, slru), beside the tree

    def admit(self, prompt: np.ndarray, full: np.ndarray) -> list[int]:
        """The insert's walk refreshes (and counts) its path, then the rule admits."""
        # Input + output's walk covers the input's: a node the input diverges
        # inside is on it, whole or partly matched.
        cache = self.cache
        m = cache.tree.match(np.asarray(full, dtype=np.int32))
        if m.partial is not None:
            cache.touch(m.partial)
        if self.eviction in COUNTS_HITS:
            self._count_path(m)
        return super().admit(prompt, full)

    def _count_path(self, m: Match) -> None:
        """One hit for every node the insert of ``full`` walks (RadixCache._insert_helper)."""
        node: Node | None = m.partial if m.partial is not None else m.node
        while node is not None and node.parent is not None:
            self.hits[node] = self.hits.get(node, 0) + 1
            self.on_node_changed(node)
            node = node.parent

    def on_node_added(self, node: Node) -> None:
        # A new node starts at one hit; the upper part of a split keeps the count
        # of the node it was cut from (its child, already counted).
        if node not in self.hits:
            below = [self.hits.get(c, 0) for c in node.children.values()]
            self.hits[node] = max(below) if below else 1
        self.on_node_changed(node)

    def hit_count(self, node: Node) -> int:
        return self.hits.get(node, 0)

    def on_node_removed(self, node: Node, into: Node | None = None) -> None:
        super().on_node_removed(node, into)
        self.hits.pop(node, None)

    def stats(self) -> dict[str, Any]:
        return {"eviction": self.eviction} if self.eviction != "lru" else {}
