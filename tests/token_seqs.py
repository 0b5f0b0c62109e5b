"""Token sequences the cache, policy and replay tests build their prompts from."""

from __future__ import annotations

import numpy as np

BIG = 10**12  # bytes: a capacity no test fills


def seq(start: int, n: int) -> np.ndarray:
    """The ``n`` token ids ``start, start + 1, ...`` (int32, as the caches take them)."""
    return np.arange(start, start + n, dtype=np.int32)


def a(*xs: int) -> np.ndarray:
    """The token ids ``xs`` (int32)."""
    return np.array(xs, np.int32)


def path_tokens(node) -> np.ndarray:
    """The tokens on the radix tree's path from the root to the end of ``node``."""
    parts = []
    while node.parent is not None:
        parts.append(node.tokens)
        node = node.parent
    return np.concatenate(parts[::-1]) if parts else np.zeros(0, np.int32)
