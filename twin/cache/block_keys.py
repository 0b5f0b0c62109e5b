"""The block pool's keys: chained prefix hashes of a sequence's full blocks.

A block's key is the prefix sum ``sum_i mix(x_i, i)`` over the sequence's
tokens up to the block's end, with uint64 wrap-around (one vectorised
``cumsum``), where ``mix`` is the splitmix64 finaliser of the token and its
position (not a polynomial hash: see ``_mix``). Equal keys mean equal
prefixes: two different prefixes collide with probability about 2**-64 per
pair, and nothing verifies tokens, as in vLLM. Used by
:class:`~twin.cache.block_cache.BlockCache`.
"""

from __future__ import annotations

import numpy as np

# Block keys sum a pseudo-random 64-bit value per (token, position): the
# splitmix64 finaliser of token ^ position * golden ratio. A polynomial hash
# mod 2**64 is not enough: Thue-Morse-like sequences make any of them collide
# (a wrong hit, then a corrupted block map); mixed values do not, and summing
# keeps the prefix chaining a single vectorised cumsum.
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def _mix(tokens: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """splitmix64(token ^ position * golden): independent-looking 64-bit words."""
    z = tokens.astype(np.uint64) ^ (positions * _GOLDEN)
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    mixed: np.ndarray = z ^ (z >> np.uint64(31))
    return mixed


class BlockKeys:
    """Keys of a sequence's first blocks; a sequence extending the last one reuses its keys."""

    __slots__ = ("_last", "_positions", "block_size")

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self._positions = np.arange(1, dtype=np.uint64)
        self._last: tuple[np.ndarray | None, list[int]] = (None, [])  # last hashed sequence

    def keys(self, seq: np.ndarray, nblocks: int) -> list[int]:
        """Chained hashes of the first ``nblocks`` full blocks of ``seq``.

        A request's insert (prompt + output) extends its lookup (prompt): the
        hashes of the shared blocks are reused and the rest continue from them.
        """
        bs = self.block_size
        n = nblocks * bs
        if n == 0:
            return []
        if len(self._positions) < n:
            self._positions = np.arange(max(n, 2 * len(self._positions)), dtype=np.uint64)
        prev_seq, prev = self._last
        start, keys = 0, []
        if prev:
            assert prev_seq is not None
            m = min(len(prev), nblocks) * bs
            if seq[:m].tobytes() == prev_seq[:m].tobytes():
                start, keys = m, prev[: m // bs]
        if start < n:
            h = np.cumsum(_mix(seq[start:n], self._positions[start:n]), dtype=np.uint64)
            if keys:
                h += np.uint64(keys[-1])  # array op: wraps silently, as intended
            keys = keys + h[bs - 1 :: bs].tolist()
        self._last = (seq, keys)
        return keys
