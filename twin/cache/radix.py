"""A radix tree over token ids: the structure under every prefix cache.

Each node's edge is a numpy int32 run of tokens; children are keyed by their
edge's first token. Matching compares a whole edge at once with numpy, so the
Python work per lookup is one step per node on the path, not one per token.

Besides the structure, a node carries the few fields a cache needs (checkpoint
flag, lock count, last access, creation id, whether its checkpoint was hit); a
policy's own state (candidate heaps, hit counts, stamps) lives beside the tree,
keyed by node. The tree itself
only maintains the structure; :class:`twin.cache.prefix_cache.PrefixCache` gives
those fields their meaning.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class Node:
    """A run of tokens under ``parent``; ``depth`` counts tokens from the root to its end."""

    __slots__ = (
        "children",
        "ckpt",
        "ckpt_hit",
        "depth",
        "key",
        "lock",
        "nid",
        "parent",
        "t",
        "tokens",
    )

    def __init__(self, tokens: np.ndarray, parent: Node | None, depth: int, nid: int = 0) -> None:
        self.tokens = tokens
        self.key = tokens.tobytes()  # the edge's raw int32 bytes (``RadixTree.match``)
        self.parent = parent
        self.depth = depth
        self.children: dict[int, Node] = {}
        self.ckpt = False  # holds the SSM state after its last token
        self.lock = 0  # running requests using this node (never evicted while > 0)
        self.t = 0  # last access on the cache's clock
        self.nid = nid  # creation order: the deterministic tie-break everywhere
        self.ckpt_hit = False  # its checkpoint served at least one hit (counted once)

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def __repr__(self) -> str:
        return (
            f"Node(nid={self.nid}, depth={self.depth}, len={len(self.tokens)}, "
            f"children={len(self.children)}, ckpt={self.ckpt}, lock={self.lock})"
        )


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
        self.root = Node(np.zeros(0, np.int32), None, 0, nid=0)
        self.num_nodes = 1
        self.num_tokens = 0  # tokens held on all edges
        self.next_nid = 1
        # Bumped by every structural change, so a caller may reuse a match
        # computed while this number stayed the same.
        self.mutations = 0

    def match(
        self,
        seq: np.ndarray,
        resume: Match | None = None,
        resumed_len: int = 0,
        raw: bytes | None = None,
    ) -> Match:
        """Find the longest prefix of ``seq`` present in the tree.

        ``resume``: the match of ``seq[:resumed_len]`` in this same, unchanged
        tree; the walk goes on from there instead of from the root. ``raw``:
        ``seq.tobytes()``, where the caller has it already.
        """
        node, pos, n = self.root, 0, len(seq)
        if resume is not None:
            if resume.length < resumed_len:
                return resume  # the prefix already left the tree
            node, pos = resume.node, resume.length
            if resume.partial is not None:  # the prefix ended inside an edge
                part = resume.partial
                off = pos - node.depth
                k = _common_prefix(part.tokens[off:], seq[pos:])
                if off + k < len(part.tokens):
                    return Match(node, pos + k, part)
                node, pos = part, pos + k
        # Whole-edge equality on bytes: one memcmp, much cheaper than numpy
        # ufuncs on the short edges typical of a cache.
        if raw is None:
            raw = seq.tobytes()
        while pos < n:
            child = node.children.get(int(seq[pos]))
            if child is None:
                return Match(node, pos, None)
            if raw.startswith(child.key, 4 * pos):
                # The usual case on a cached path: the whole edge matches.
                node, pos = child, pos + len(child.tokens)
                continue
            edge = child.tokens
            # The edge differs or runs past the end of ``seq``: a partial match
            # (never empty: the first token selected this child).
            return Match(node, pos + _common_prefix(edge, seq[pos:]), child)
        return Match(node, pos, None)

    def insert(self, seq: np.ndarray) -> Node:
        """Insert ``seq``; return the node that ends exactly at ``len(seq)``."""
        m = self.match(seq)
        node = m.node
        if m.partial is not None:
            node = self.split(m.partial, m.length - m.node.depth)
        if m.length < len(seq):
            # Copy the new suffix so the tree never pins the caller's buffer.
            node = self.add_child(node, np.array(seq[m.length :], dtype=np.int32))
        return node

    def split(self, node: Node, k: int) -> Node:
        """Cut ``node``'s edge after ``k`` tokens; return the new upper node.

        ``node`` keeps its identity (and everything a running request holds on
        it) as the lower part; the upper part is a new node that inherits its
        last-access time.
        """
        assert 0 < k < len(node.tokens)
        parent = node.parent
        assert parent is not None
        upper = Node(node.tokens[:k], parent, node.depth - len(node.tokens) + k, self.next_nid)
        self.next_nid += 1
        upper.t = node.t
        parent.children[int(node.tokens[0])] = upper
        node.tokens = node.tokens[k:]
        node.key = node.key[4 * k :]
        node.parent = upper
        upper.children[int(node.tokens[0])] = node
        self.num_nodes += 1
        self.mutations += 1
        return upper

    def add_child(self, parent: Node, tokens: np.ndarray) -> Node:
        """Hang a new node holding ``tokens`` (owned by the tree from now on) under ``parent``."""
        child = Node(tokens, parent, parent.depth + len(tokens), self.next_nid)
        self.next_nid += 1
        parent.children[int(tokens[0])] = child
        self.num_nodes += 1
        self.num_tokens += len(tokens)
        self.mutations += 1
        return child

    def remove_leaf(self, node: Node) -> None:
        """Unhook a leaf from its parent (its fields stay readable for the caller)."""
        assert not node.children and node.parent is not None
        del node.parent.children[int(node.tokens[0])]
        self.num_nodes -= 1
        self.num_tokens -= len(node.tokens)
        self.mutations += 1

    def merge_into_child(self, node: Node) -> Node:
        """Fold a one-child node into its child, which keeps its identity and depth.

        The child's edge grows by ``node``'s tokens: the inverse of :meth:`split`.
        """
        assert len(node.children) == 1 and node.parent is not None
        (child,) = node.children.values()
        child.tokens = np.concatenate((node.tokens, child.tokens))
        child.key = node.key + child.key
        child.parent = node.parent
        node.parent.children[int(node.tokens[0])] = child
        node.children = {}
        self.num_nodes -= 1
        self.mutations += 1
        return child

    def nodes(self) -> list[Node]:
        """Every node but the root, parents before children (iterative: no recursion limit)."""
        out: list[Node] = []
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(node.children.values())
        return out
