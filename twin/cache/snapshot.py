"""Flat, picklable copies of a prefix cache: Marconi's bootstrap replays start from one.

The compiled live cache takes them (``twin.policies.compiled.live.LiveCache.snapshot``)
and its replays start from them (``kernel.replay.start``); the tests' radix-tree oracle
(``tests/marconi_oracle.py``) takes and restores the same layout.

Marconi (arXiv 2411.19379, sec. 4.2) tunes alpha by replaying a window of
requests from the cache state at the window's start. The snapshot is a flat
list of nodes (parents first) with one token buffer, so copying and pickling
never recurse, however deep the tree. Pins are dropped: they belong to
running requests, which a replayed window does not have.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class CacheSnapshot:
    """Nodes listed parents first; ``parents`` indexes that list (-1 = the root)."""

    capacity: int
    clock: int
    next_nid: int
    parents: list[int]
    offsets: np.ndarray  # node i's tokens are tokens[offsets[i]:offsets[i + 1]]
    tokens: np.ndarray
    ckpt: list[bool]
    t: list[int]
    nid: list[int]
    ckpt_hit: list[bool]
    counters: dict[str, int]
