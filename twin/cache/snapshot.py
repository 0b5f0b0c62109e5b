"""Flat, picklable copies of a prefix cache: Marconi's bootstrap replays start from one.

Marconi (arXiv 2411.19379, sec. 4.2) tunes alpha by replaying a window of
requests from the cache state at the window's start. The snapshot is a flat
list of nodes (parents first) with one token buffer, so copying and pickling
never recurse, however deep the tree. Pins are dropped: they belong to
running requests, which a replayed window does not have.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from twin.cache.base import COUNTERS
from twin.cache.radix import Node

if TYPE_CHECKING:
    from twin.cache.prefix_cache import PrefixCache


@dataclass
class CacheSnapshot:
    """Nodes listed parents first; ``parents`` indexes that list (-1 = the root)."""

    capacity: int
    clock: Any
    next_nid: int
    parents: list[int]
    offsets: np.ndarray  # node i's tokens are tokens[offsets[i]:offsets[i + 1]]
    tokens: np.ndarray
    ckpt: list[bool]
    t: list[Any]
    nid: list[int]
    ckpt_hit: list[bool]
    counters: dict[str, int]


def take_snapshot(cache: PrefixCache) -> CacheSnapshot:
    """Copy ``cache`` (a :class:`~twin.cache.prefix_cache.PrefixCache`) into a snapshot."""
    nodes = _preorder(cache.root)
    index = {id(n): i for i, n in enumerate(nodes)}
    lengths = np.fromiter((len(n.tokens) for n in nodes), np.int64, len(nodes))
    offsets = np.zeros(len(nodes) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = np.concatenate([n.tokens for n in nodes]) if nodes else np.zeros(0, np.int32)
    return CacheSnapshot(
        capacity=cache.capacity,
        clock=cache.clock,
        next_nid=cache.tree.next_nid,
        parents=[index.get(id(n.parent), -1) for n in nodes],
        offsets=offsets,
        tokens=tokens.astype(np.int32, copy=False),
        ckpt=[n.ckpt for n in nodes],
        t=[n.t for n in nodes],
        nid=[n.nid for n in nodes],
        ckpt_hit=[n.ckpt_hit for n in nodes],
        counters={k: getattr(cache, k) for k in COUNTERS},
    )


def _preorder(root: Node) -> list[Node]:
    """Every node but ``root`` in pre-order, children in insertion order (no recursion).

    Restoring in this order rebuilds every ``children`` dict in its original
    order, which ``marconi``'s tie-break (first in pre-order) reads.
    """
    out: list[Node] = []
    stack = list(reversed(root.children.values()))
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(reversed(node.children.values()))
    return out
