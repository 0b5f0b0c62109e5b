"""A radix tree over token ids: the structure under every prefix cache.

Each node's edge is a numpy int32 run of tokens; children are keyed by their
edge's first token. Matching compares a whole edge at once with numpy, so the
Python work per lookup is one step per node on the path, not one per token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class Node:
    """A run of tokens hanging under ``parent``; ``depth`` counts tokens from the root to its end."""

    __slots__ = ("children", "depth", "parent", "tokens")

    def __init__(self, tokens: np.ndarray, parent: Node | None, depth: int) -> None:
        self.tokens = tokens
        self.parent = parent
        self.depth = depth
        self.children: dict[int, Node] = {}

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def __repr__(self) -> str:
        return f"Node(depth={self.depth}, len={len(self.tokens)}, children={len(self.children)})"


@dataclass(slots=True)
class Match:
    """Result of a lookup.

    ``node`` is the deepest node whose whole edge matched; ``length`` counts
    every matched token, including a partial match into ``partial`` (the child
    of ``node`` whose edge matched only ``length - node.depth`` tokens).
    """

    node: Node
    length: int
    partial: Node | None


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the common prefix of two int32 arrays."""
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n


class RadixTree:
    """Longest-prefix match and insertion over token sequences."""

    def __init__(self) -> None:
        self.root = Node(np.zeros(0, np.int32), None, 0)
        self.num_nodes = 1
        self.num_tokens = 0  # tokens held on all edges

    def match(self, seq: np.ndarray) -> Match:
        """Find the longest prefix of ``seq`` present in the tree."""
        node, pos, n = self.root, 0, len(seq)
        while pos < n:
            child = node.children.get(int(seq[pos]))
            if child is None:
                return Match(node, pos, None)
            k = _common_prefix(child.tokens, seq[pos:])
            if k < len(child.tokens):
                return Match(node, pos + k, child)
            node, pos = child, pos + k
        return Match(node, pos, None)

    def insert(self, seq: np.ndarray) -> Node:
        """Insert ``seq``; return the node that ends exactly at ``len(seq)``."""
        m = self.match(seq)
        node = m.node
        if m.partial is not None:
            node = self.split(m.partial, m.length - m.node.depth)
        if m.length < len(seq):
            # Copy the new suffix so the tree never pins the caller's buffer.
            node = self._add_child(node, np.array(seq[m.length :], dtype=np.int32))
        return node

    def split(self, node: Node, k: int) -> Node:
        """Cut ``node``'s edge after ``k`` tokens; return the new upper node."""
        assert 0 < k < len(node.tokens)
        parent = node.parent
        assert parent is not None
        upper = Node(node.tokens[:k], parent, node.depth - len(node.tokens) + k)
        parent.children[int(node.tokens[0])] = upper
        node.tokens = node.tokens[k:]
        node.parent = upper
        upper.children[int(node.tokens[0])] = node
        self.num_nodes += 1
        return upper

    def _add_child(self, parent: Node, tokens: np.ndarray) -> Node:
        child = Node(tokens, parent, parent.depth + len(tokens))
        parent.children[int(tokens[0])] = child
        self.num_nodes += 1
        self.num_tokens += len(tokens)
        return child
