"""Real tensors behind the twin's prefix cache: the same tree, the same policy, actual states.

The executor runs the cache the policy runs on in the twin (the radix tree,
:class:`~twin.cache.PrefixCache`; for ``marconi`` and ``marconi-twin`` the compiled
live cache, ``twin.policies.compiled.live.LiveCache``), so what is admitted, hit and
evicted is decided by exactly the code the twin simulates. The store keeps, for every
node of that tree (named by its creation id), the tensors the node stands for: the KV
of its tokens in every attention layer and, when it holds a checkpoint, every SSM
layer's recurrent and conv state after its last token.

After each call that may change the tree (an admission, an insert, a release) the
store reads the tree's nodes (:func:`cache_edges`) and follows them
(:meth:`TensorStore.sync`): a node whose range of positions is unchanged keeps its
tensors; any other node (new, split or folded into by an eviction) takes the KV of
each of its positions from the tensors an old node on its path held there, else from
the sequence just computed (:attr:`TensorStore.pending`); a checkpoint newly set takes
the state computed at its depth; a node gone frees everything it held.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np
import torch

from twin.cache import PrefixCache
from twin.policies.compiled.live import LiveCache
from twin.reference.model import Kv, SeqState, SsmState

# One node: (its handle in the cache: a node or an id, creation id, parent's handle
# (None: the root), end depth, its edge's tokens, holds a state).
Edge = tuple[Hashable, int, Hashable | None, int, np.ndarray, bool]
_NONE = np.zeros(0, np.int32)


def cache_edges(cache: PrefixCache | LiveCache) -> list[Edge]:
    """Every node of ``cache`` but the root, parents first (:data:`Edge`)."""
    if isinstance(cache, LiveCache):
        return list(cache.edges())
    root = cache.root
    return [
        (n, n.nid, None if n.parent is root else n.parent, n.depth, n.tokens, bool(n.ckpt))
        for n in cache.tree.nodes()
    ]


@dataclass
class NodeTensors:
    """One node's tensors: KV of tokens [start, end) of ``path`` and maybe a checkpoint."""

    start: int
    path: np.ndarray  # the tokens from the root to the node's end
    parent: int  # the parent's creation id (-1: the root)
    kv: list[Kv]
    ckpt: list[SsmState] | None = None


@dataclass
class Pending:
    """The sequence being inserted: KV of its tokens [0, len) and states at positions."""

    kv: list[Kv]
    states: dict[int, list[SsmState]]
    tokens: np.ndarray


class TensorStore:
    """Creation id -> tensors, kept in step with the cache by :meth:`sync`.

    ``windows`` gives each KV layer's sliding window (None: full attention). The cache
    keeps only a node's last ``min(len, W)`` tokens of sliding-window KV
    (``twin.cache.kinds``); the store drops the rest for real, overwriting it with NaN,
    so a hit that needed dropped KV would turn the logits into NaN.
    """

    def __init__(self, windows: list[int | None], has_ssm: bool) -> None:
        self.nodes: dict[int, NodeTensors] = {}
        self.ids: dict[Hashable, int] = {}  # the cache's node handles -> creation ids
        self.pending: Pending | None = None
        self.windows = windows
        self.has_ssm = has_ssm

    # ------------------------------------------------------------------ reads
    def gather(self, node: Hashable, upto: int | None = None) -> SeqState:
        """The state a hit on ``node`` (the cache's handle) resumes from: KV of its path
        (cut at ``upto`` tokens if given) and the node's checkpoint (empty on Transformers)."""
        path = []
        nid = self.ids[node]
        while nid >= 0:
            path.append(self.nodes[nid])
            nid = path[-1].parent
        path.reverse()
        assert path[0].start == 0, "a hit's path must reach the root"
        kv = []
        for i in range(len(path[0].kv)):
            k = torch.cat([p.kv[i][0] for p in path], dim=2)
            v = torch.cat([p.kv[i][1] for p in path], dim=2)
            if upto is not None:
                k, v = k[:, :, :upto], v[:, :, :upto]
            kv.append((k, v))
        ckpt = path[-1].ckpt
        return SeqState(kv=kv, ssm=list(ckpt) if ckpt is not None else [])

    def tensor_bytes(self) -> int:
        """Bytes the stored tensors really occupy."""
        total = 0
        for t in self.nodes.values():
            for k, v in t.kv:
                total += k.numel() * k.element_size() + v.numel() * v.element_size()
            for s, c in t.ckpt or ():
                total += s.numel() * s.element_size() + c.numel() * c.element_size()
        return total

    # ------------------------------------------------------------------ following the tree
    def sync(self, cache: PrefixCache | LiveCache) -> None:
        """Follow the cache's nodes after a call that may have changed them."""
        old, new, ids = self.nodes, {}, {}
        moved = []
        for handle, nid, parent, end, tokens, ckpt in cache_edges(cache):
            ids[handle] = nid
            pid = -1 if parent is None else ids[parent]
            held = old.get(nid)
            if held is not None and len(held.path) != end:
                # A split keeps the lower node's id and a fold the child's, so a node's
                # end depth never moves (tree_edits, the compiled live cache); the tensors
                # below are reused on that assumption.
                raise AssertionError(
                    f"cache node {nid} ended at depth {len(held.path)}, now at {end}"
                )
            if held is not None and held.start == end - len(tokens):
                held.parent = pid
                new[nid] = held
                self._checkpoint(held, ckpt)
            else:
                moved.append((nid, pid, end - len(tokens), tokens, ckpt, held))
        # Old nodes whose positions went to others (split, folded, gone): the sources.
        spare = [t for nid, t in old.items() if new.get(nid) is not t]
        for nid, pid, start, tokens, ckpt, held in moved:
            path = held.path if held is not None else np.r_[_path(new, pid), tokens]
            kv = self._assemble(start, path, spare, fresh=held is None)
            new[nid] = NodeTensors(start, path, pid, kv, held.ckpt if held else None)
            self._checkpoint(new[nid], ckpt)
        self.nodes, self.ids = new, ids

    def _assemble(self, start: int, path: np.ndarray, spare: list[NodeTensors], fresh: bool):
        """KV of positions [start, len(path)) of ``path``: each from the old node on the
        path that held it, else from the pending sequence; a new node's sliding-window
        tail from the pending sequence (it computed those tokens; an old node held them
        before its own tail, dropped), the KV before its tail dropped."""
        end = len(path)
        on_path = sorted(
            (t for t in spare if t.start < end and len(t.path) > start and _same(t.path, path)),
            key=lambda t: t.start,
        )
        pieces: list[list[Kv]] = []
        pos = start
        for t in on_path:
            if t.start > pos:
                pieces.append(self._fresh(path, pos, t.start))
                pos = t.start
            if len(t.path) > pos:
                b = min(len(t.path), end)
                pieces.append(_slice(t.kv, pos - t.start, b - t.start))
                pos = b
        if pos < end:
            pieces.append(self._fresh(path, pos, end))
        kv = [
            (torch.cat([p[i][0] for p in pieces], 2), torch.cat([p[i][1] for p in pieces], 2))
            if len(pieces) > 1
            else pieces[0][i]
            for i in range(len(pieces[0]))
        ]
        for i, w in enumerate(self.windows):
            if w is None:
                continue
            k, v = kv[i]
            lo = max(start, end - w)
            if fresh and self.pending is not None:
                pk, pv = self._pending(path, end).kv[i]
                k[:, :, lo - start :] = pk[:, :, lo:end]
                v[:, :, lo - start :] = pv[:, :, lo:end]
            k[:, :, : lo - start] = float("nan")
            v[:, :, : lo - start] = float("nan")
        return kv

    def _fresh(self, path: np.ndarray, a: int, b: int) -> list[Kv]:
        """Positions [a, b) of ``path`` from the pending sequence."""
        return _slice(self._pending(path, b).kv, a, b)

    def _pending(self, path: np.ndarray, end: int) -> Pending:
        pending = self.pending
        assert pending is not None, "a node's tensors changed outside an insert"
        assert np.array_equal(pending.tokens[:end], path[:end]), "not the pending sequence"
        return pending

    def _checkpoint(self, held: NodeTensors, ckpt: bool) -> None:
        if self.has_ssm and ckpt and held.ckpt is None:
            states = self._pending(held.path, len(held.path)).states.get(len(held.path))
            assert states is not None, f"no state computed at position {len(held.path)}"
            held.ckpt = [(s.clone(), c.clone()) for s, c in states]
        elif not ckpt:
            held.ckpt = None


def _slice(kv: list[Kv], a: int, b: int) -> list[Kv]:
    """Owned copies of tokens [a, b) of every layer's KV."""
    return [(k[:, :, a:b].clone(), v[:, :, a:b].clone()) for k, v in kv]


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Are ``a`` and ``b`` on one path from the root (one a prefix of the other)?"""
    n = min(len(a), len(b))
    return bool(np.array_equal(a[:n], b[:n]))


def _path(nodes: dict[int, NodeTensors], nid: int) -> np.ndarray:
    return nodes[nid].path if nid >= 0 else _NONE
