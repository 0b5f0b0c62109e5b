"""``vllm+``: vLLM's block prefix cache with a checkpoint per block (Marconi sec. 5 baseline).

Fine-grained checkpointing: every full block of ``block_size`` tokens (32 in
the paper's baseline) keeps its KV and the SSM state after it, so hits land
on block boundaries but most checkpoints are never used. Eviction is LRU over
leaf blocks with whole-chain refresh on access (vLLM touches every block a
request reuses).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from policies.base import Policy
from twin.cache import BlockCache, CacheStructure
from twin.errors import TwinError
from twin.model import ModelSpec


class VLLMPlusPolicy(Policy):
    """Checkpoint every block; LRU over leaf blocks (the block pool's own free queue)."""

    name = "vllm+"
    description = "a checkpoint + KV for every block of block_size tokens, LRU over leaf blocks"
    OPTIONS = ("block_size",)

    def __init__(self, block_size: int = 32) -> None:
        super().__init__()
        if type(block_size) is not int or block_size < 1:
            raise TwinError(f"vllm+: block size must be a positive integer (got {block_size!r})")
        self.block_size = block_size

    def make_cache(self, model: ModelSpec, capacity_bytes: int) -> BlockCache:
        return BlockCache(model, capacity_bytes, self, self.block_size)

    def admit(self, cache: CacheStructure, prompt: np.ndarray, full: np.ndarray) -> list[int]:
        # Every full block of input + output; the block pool checkpoints each one,
        # so only the last boundary needs saying.
        end = len(full) // self.block_size * self.block_size
        return [end] if end else []

    def stats(self) -> dict[str, Any]:
        return {"block_size": self.block_size}
