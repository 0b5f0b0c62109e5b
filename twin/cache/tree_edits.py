"""The structural edits of a prefix cache's radix tree, keeping its counters and hooks right.

:class:`~twin.cache.radix.RadixTree` only changes the structure; these edits
(split an edge where a state goes, hang a new chain, remove a leaf, fold a node
into its only child, tidy what can no longer end a hit) also keep the cache's
token, sliding-window tail and checkpoint counters current and tell the policy
(``on_node_added`` / ``on_node_changed`` / ``on_node_removed``).
:class:`~twin.cache.prefix_cache.PrefixCache` decides when each one happens.
"""

from __future__ import annotations

import numpy as np

from twin.cache.base import TreePolicy
from twin.cache.kinds import KindBytes
from twin.cache.radix import Node, RadixTree


class TreeEdits:
    """The edits of :class:`~twin.cache.prefix_cache.PrefixCache` (it sets these fields)."""

    tree: RadixTree
    root: Node
    kinds: KindBytes
    policy: TreePolicy[Node]
    has_ssm: bool
    clock: int
    kv_tokens: int
    swa_tokens: int
    n_ckpts: int
    checkpoints_admitted: int

    def _node_ending_at(self, below: Node, p: int) -> Node:
        """The node ending exactly at depth ``p`` on ``below``'s path (splits an edge if needed)."""
        node = node_holding(below, p)
        if node.depth == p:
            return node
        before, k = len(node.tokens), p - (node.depth - len(node.tokens))
        upper = self.tree.split(node, k)
        tail = self.kinds.tail
        self.swa_tokens += tail(k) + tail(before - k) - tail(before)
        self.policy.on_node_added(upper)
        self.policy.on_node_changed(node)
        return upper

    def _set_ckpt(self, node: Node) -> None:
        node.ckpt = True
        node.t = self.clock
        self.n_ckpts += 1
        self.checkpoints_admitted += 1
        self.policy.on_node_changed(node)

    def _add_chain(self, attach: Node, seq: np.ndarray, start: int, ends: list[int]) -> None:
        """Hang ``seq[start:ends[-1]]`` under ``attach`` as a chain cut at ``ends``."""
        tokens = np.array(seq[start : ends[-1]], dtype=np.int32)  # owned copy
        chain = []
        parent, prev = attach, start
        for end in ends:
            node = self.tree.add_child(parent, tokens[prev - start : end - start])
            node.t = self.clock
            if self.has_ssm:
                node.ckpt = True
                self.n_ckpts += 1
                self.checkpoints_admitted += 1
            chain.append(node)
            self.swa_tokens += self.kinds.tail(end - prev)
            parent, prev = node, end
        self.kv_tokens += ends[-1] - start
        # Hooks after the chain is whole: inner chain nodes are never seen as leaves.
        for node in chain:
            self.policy.on_node_added(node)
        if attach is not self.root:
            self.policy.on_node_changed(attach)

    def _remove_leaf(self, node: Node) -> None:
        parent = node.parent
        assert parent is not None
        self.tree.remove_leaf(node)
        self.kv_tokens -= len(node.tokens)
        self.swa_tokens -= self.kinds.tail(len(node.tokens))
        self.n_ckpts -= node.ckpt
        self.policy.on_node_removed(node)
        node.parent = None
        if parent is not self.root:
            self.policy.on_node_changed(parent)

    def _merge(self, node: Node) -> None:
        tail, upper = self.kinds.tail, len(node.tokens)
        lower = len(next(iter(node.children.values())).tokens)
        self.swa_tokens += tail(upper + lower) - tail(upper) - tail(lower)
        child = self.tree.merge_into_child(node)
        self.n_ckpts -= node.ckpt
        self.policy.on_node_removed(node, child)
        node.parent = None
        self.policy.on_node_changed(child)

    def _tidy(self, node: Node | None) -> None:
        """Drop checkpoint-less leaves and fold checkpoint-less one-child nodes (SSM models)."""
        while (
            self.has_ssm
            and node is not None
            and node is not self.root
            and not node.lock
            and not node.ckpt
        ):
            if not node.children:
                parent = node.parent
                self._remove_leaf(node)
                node = parent
                continue
            if len(node.children) == 1:
                self._merge(node)
            return


def node_holding(below: Node, p: int) -> Node:
    """The node on ``below``'s path whose edge holds the ``p``-th token (``0 < p <= depth``)."""
    node = below
    while node.depth - len(node.tokens) >= p:
        node = parent_of(node)
    return node


def parent_of(node: Node) -> Node:
    """The parent of a node below the root (which every walk up from a cached node meets)."""
    parent = node.parent
    assert parent is not None, "walked above the root"
    return parent
