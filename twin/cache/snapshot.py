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


def fill(cache: PrefixCache, snap: CacheSnapshot) -> None:
    """Rebuild ``snap``'s tree into an empty ``cache``; its policy hears about every node.

    Restored edges are views of the snapshot's token buffer: the tree never
    writes into token arrays, so several restores may share one snapshot.
    """
    cache.set_clock(snap.clock)
    tree = cache.tree
    tree.next_nid = snap.next_nid
    nodes: list[Node] = []
    off = snap.offsets.tolist()
    for i, p in enumerate(snap.parents):
        parent = cache.root if p < 0 else nodes[p]
        toks = snap.tokens[off[i] : off[i + 1]]
        node = Node(toks, parent, parent.depth + len(toks), snap.nid[i])
        node.ckpt, node.t, node.ckpt_hit = snap.ckpt[i], snap.t[i], snap.ckpt_hit[i]
        parent.children[int(toks[0])] = node
        nodes.append(node)
        cache.kv_tokens += len(toks)
        cache.swa_tokens += cache.kinds.tail(len(toks))
        cache.n_ckpts += node.ckpt
    tree.num_nodes += len(nodes)
    tree.num_tokens = cache.kv_tokens
    for k, v in snap.counters.items():
        setattr(cache, k, v)
    for node in nodes:
        cache.policy.on_node_added(node)
