"""The block pool's storage unit: a *segment*, the run of blocks one insert created.

A segment is a chain hanging off one cached block (or the root). It holds its
blocks' keys, one creation stamp and sparse per-block exceptions (later stamps,
pins, branches, states that served a hit); the pool's hash map sends each key
to its segment. A block is the pair ``(segment, index)`` (:data:`BlockRef`),
whose creation id is ``segment.nid0 + index``. Eviction trims a segment from
its tail (``keys[:n]`` stay cached). The pool that keeps these fields right is
:class:`~twin.cache.block_cache.BlockCache`.
"""

from __future__ import annotations

BlockRef = tuple["Segment", int]  # a block: its segment and its index there


class Segment:
    """The blocks one insert created: ``keys[:n]`` are still cached (eviction trims the tail)."""

    __slots__ = (
        "branches",
        "ckpt_hit",
        "keys",
        "locks",
        "n",
        "nid0",
        "parent",
        "pidx",
        "stamps",
        "start",
        "states",
        "t0",
    )

    def __init__(
        self, keys: list[int], start: int, nid0: int, t0: int, parent: Segment | None, pidx: int
    ) -> None:
        self.keys = keys
        self.start = start  # block index (in any sequence holding it) of keys[0]
        self.n = len(keys)
        self.nid0 = nid0
        self.t0 = t0  # creation stamp of every block
        self.parent, self.pidx = parent, pidx  # the block it hangs off (None: the root)
        self.branches: dict[int, int] | None = None  # index -> segments hanging off it
        self.locks: dict[int, int] | None = None  # index -> pins
        self.stamps: dict[int, int] | None = None  # index -> later stamp than t0
        self.ckpt_hit: set[int] | None = None  # indices whose state served a hit
        # Indices holding a recurrent state, for a pool that keeps states on some
        # blocks only (twin.cache.sparse_blocks); None here: every block has one.
        self.states: set[int] | None = None

    def stamp(self, i: int) -> int:
        s = self.stamps
        return s.get(i, self.t0) if s else self.t0

    def is_leaf(self, i: int) -> bool:
        """Block ``i`` has no cached child and no pin."""
        return (
            i == self.n - 1
            and not (self.branches and self.branches.get(i))
            and not (self.locks and self.locks.get(i))
        )

    def __repr__(self) -> str:
        return f"Segment(nid0={self.nid0}, start={self.start}, n={self.n}/{len(self.keys)})"
