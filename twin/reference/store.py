"""Real tensors behind the twin's prefix cache: the same tree, the same policy, actual states.

The executor runs the twin's own :class:`~twin.cache.PrefixCache` and policy
(so what is admitted, hit and evicted is decided by exactly the code the twin
simulates) and keeps, for every node of the tree, the tensors that node stands
for: the KV of its tokens in every attention layer and, when it holds a
checkpoint, every SSM layer's recurrent and conv state after its last token.

The tensors follow the tree through the policy hooks the cache already calls
(:class:`StateMirror` wraps the policy and forwards every call):

- a node added by an insert takes its tokens' KV (and its checkpoint) from the
  sequence just computed (:attr:`TensorStore.pending`);
- a node added by splitting an edge takes the first part of its child's KV;
- a checkpoint set on an existing node takes the state computed at its depth;
- a node folded into its child (Marconi's eviction of a one-child node, or the
  tidying of a checkpoint-less node) hands its KV to the child, its state is
  freed; an evicted leaf frees everything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from twin.cache import CacheNode, CacheStructure
from twin.reference.model import Kv, SeqState, SsmState


@dataclass
class NodeTensors:
    """One node's tensors: KV of tokens [start, start + len) and maybe a checkpoint."""

    start: int
    kv: list[Kv]
    ckpt: list[SsmState] | None = None


@dataclass
class Pending:
    """The sequence being inserted: KV of its tokens [0, len) and states at positions."""

    kv: list[Kv]
    states: dict[int, list[SsmState]]


def _slice(kv: list[Kv], a: int, b: int) -> list[Kv]:
    """Owned copies of tokens [a, b) of every layer's KV."""
    return [(k[:, :, a:b].clone(), v[:, :, a:b].clone()) for k, v in kv]


class TensorStore:
    """Node -> tensors, kept in step with the cache through :class:`StateMirror`.

    ``windows`` gives each KV layer's sliding window (None: full attention). The cache
    keeps only a node's last ``min(len, W)`` tokens of sliding-window KV
    (``twin.cache.kinds``); the store drops the rest for real, overwriting it with NaN,
    so a hit that needed dropped KV would turn the logits into NaN.
    """

    def __init__(self, windows: list[int | None] | None = None) -> None:
        self.nodes: dict[Any, NodeTensors] = {}
        self.pending: Pending | None = None
        self.windows = windows or []

    def _drop_old_window_kv(self, held: NodeTensors) -> None:
        """NaN the sliding-window KV before a node's tail (what the cache freed)."""
        for i, w in enumerate(self.windows):
            n = held.kv[i][0].shape[2]
            if w is not None and n > w:
                held.kv[i][0][:, :, : n - w] = float("nan")
                held.kv[i][1][:, :, : n - w] = float("nan")

    def _fresh_tail(self, held: NodeTensors, end: int) -> None:
        """A split's upper part: its sliding-window tail comes from the sequence being
        inserted, which computed those tokens (``twin.cache.kinds``)."""
        pending = self.pending
        if pending is None:
            return
        for i, w in enumerate(self.windows):
            if w is None:
                continue
            lo = max(held.start, end - w)
            k, v = pending.kv[i]
            held.kv[i][0][:, :, lo - held.start :] = k[:, :, lo:end]
            held.kv[i][1][:, :, lo - held.start :] = v[:, :, lo:end]

    # ------------------------------------------------------------------ reads
    def gather(self, node: Any, upto: int | None = None) -> SeqState:
        """The state a hit on ``node`` resumes from: KV of its path (cut at ``upto``
        tokens if given) and the node's checkpoint (empty on Transformers)."""
        path = []
        cur = node
        while cur is not None and cur in self.nodes:
            path.append(self.nodes[cur])
            cur = cur.parent
        path.reverse()
        assert path and path[0].start == 0, "a hit's path must reach the root"
        layers = len(path[0].kv)
        kv = []
        for i in range(layers):
            k = torch.cat([p.kv[i][0] for p in path], dim=2)
            v = torch.cat([p.kv[i][1] for p in path], dim=2)
            if upto is not None:
                k, v = k[:, :, :upto], v[:, :, :upto]
            kv.append((k, v))
        ckpt = self.nodes[node].ckpt
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

    # ------------------------------------------------------------------ hook handlers
    def added(self, node: Any, has_ssm: bool) -> None:
        start = node.depth - len(node.tokens)
        child = next(iter(node.children.values())) if len(node.children) == 1 else None
        below = self.nodes.get(child) if child is not None else None
        if below is not None and below.start < start + len(node.tokens):
            # An edge split: ``node`` is the upper part of what ``child`` held.
            cut = node.depth - below.start
            self.nodes[node] = NodeTensors(start, _slice(below.kv, start - below.start, cut))
            n_child = below.kv[0][0].shape[2] if below.kv else 0
            below.kv = _slice(below.kv, cut, n_child)
            below.start = node.depth
            self._fresh_tail(self.nodes[node], node.depth)
        else:
            pending = self._pending(node)
            self.nodes[node] = NodeTensors(start, _slice(pending.kv, start, node.depth))
        self._drop_old_window_kv(self.nodes[node])
        self.changed(node, has_ssm)

    def changed(self, node: Any, has_ssm: bool) -> None:
        held = self.nodes.get(node)
        if held is None:
            return
        if has_ssm and node.ckpt and held.ckpt is None:
            states = self._pending(node).states.get(node.depth)
            assert states is not None, f"no state computed at position {node.depth}"
            held.ckpt = [(s.clone(), c.clone()) for s, c in states]
        elif not node.ckpt:
            held.ckpt = None

    def removed(self, node: Any, into: Any | None) -> None:
        held = self.nodes.pop(node, None)
        if held is None or into is None:
            return
        child = self.nodes[into]
        child.kv = [
            (torch.cat((a[0], b[0]), dim=2), torch.cat((a[1], b[1]), dim=2))
            for a, b in zip(held.kv, child.kv, strict=True)
        ]
        child.start = held.start
        self._drop_old_window_kv(child)

    def _pending(self, node: Any) -> Pending:
        assert self.pending is not None, f"{node!r} changed outside an insert"
        return self.pending


class StateMirror:
    """A policy wrapper: forwards every call, and keeps a :class:`TensorStore` in step."""

    def __init__(self, policy: Any, store: TensorStore, has_ssm: bool) -> None:
        self.policy, self.store, self.has_ssm = policy, store, has_ssm

    def __getattr__(self, name: str) -> Any:  # decisions, stats, options: the policy's own
        return getattr(self.policy, name)

    def bind(self, cache: CacheStructure) -> None:
        self.policy.bind(cache)

    def on_request(self, cache: CacheStructure, prompt: Any, full: Any) -> None:
        self.policy.on_request(cache, prompt, full)

    def admit(self, cache: CacheStructure, prompt: Any, full: Any) -> list[int]:
        return self.policy.admit(cache, prompt, full)

    def on_hit(self, cache: CacheStructure, node: CacheNode) -> None:
        self.policy.on_hit(cache, node)

    def choose_victim(self, cache: CacheStructure) -> CacheNode | None:
        return self.policy.choose_victim(cache)

    def on_node_added(self, node: CacheNode) -> None:
        self.store.added(node, self.has_ssm)
        self.policy.on_node_added(node)

    def on_node_changed(self, node: CacheNode) -> None:
        self.store.changed(node, self.has_ssm)
        self.policy.on_node_changed(node)

    def on_node_removed(self, node: Any, into: Any | None = None) -> None:
        self.store.removed(node, into)
        self.policy.on_node_removed(node, into)
