"""A dense table of eviction candidates: recency and FLOP efficiency by slot, O(1) per change.

Shared by the two Marconi scores (``policies.flop_aware`` for ``marconi-twin``,
``policies.reference_score`` for ``marconi``). A node's ``slot`` indexes its
row (-1: not a candidate); removing a row moves the last one into its place,
so a victim is always one pass over ``r[:n]`` and ``f[:n]``: the rule's one
implementation, compiled (:func:`rules`), which the compiled tree of
``policies.compiled.kernel`` runs on its own table too. A ``held`` row (a
pinned node) is scored with the others but is no victim.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np


def rules() -> ModuleType:
    """The victim rules' module (``policies.compiled.kernel``: ``reference_victim_row``,
    ``twin_victim_row``), loaded on the first victim (numba loads with it)."""
    from twin.policies.compiled import kernel

    return kernel


class CandidateTable:
    """Rows ``(r, f, nid, held)`` for the nodes in ``nodes``; ``n`` rows are live."""

    def __init__(self, size: int = 256) -> None:
        self.n = 0
        self.r = np.zeros(size)
        self.f = np.zeros(size)
        self.nid = np.zeros(size, np.int64)
        self.held = np.zeros(size, bool)
        self.score = np.zeros(size)  # the victim pass's scratch
        self.rows = np.arange(size)  # row -> row (``twin_victim_row`` reads ``nid[rows[i]]``)
        self.n_held = 0
        self.nodes: list[Any] = []

    def set(self, node: Any, r: float, f: float, held: bool = False) -> None:
        """Add ``node`` (if new) and write its row."""
        i = node.slot
        if i < 0:
            i = node.slot = self.n
            if i == len(self.r):
                self._grow()
            self.nodes.append(node)
            self.nid[i] = node.nid
            self.held[i] = False
            self.n += 1
        self.r[i] = r
        self.f[i] = f
        self.n_held += int(held) - int(self.held[i])
        self.held[i] = held

    def drop(self, node: Any) -> None:
        """Swap-remove ``node``'s row (a no-op if it has none)."""
        i, last = node.slot, self.n - 1
        if i < 0:
            return
        self.n_held -= int(self.held[i])
        if i != last:
            moved = self.nodes[last]
            self.nodes[i] = moved
            moved.slot = i
            self.r[i], self.f[i], self.nid[i] = self.r[last], self.f[last], self.nid[last]
            self.held[i] = self.held[last]
        self.nodes.pop()
        self.n = last
        node.slot = -1

    def _grow(self) -> None:
        for name in ("r", "f", "nid", "held"):
            old = getattr(self, name)
            new = np.zeros(2 * len(old), old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)
        self.score = np.zeros(len(self.r))
        self.rows = np.arange(len(self.r))
