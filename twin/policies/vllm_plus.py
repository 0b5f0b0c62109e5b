"""``vllm+``: vLLM's block prefix cache with a checkpoint per block (Marconi sec. 5 baseline).

Fine-grained checkpointing: every full block of ``block_size`` tokens (32 in
the paper's baseline) keeps its KV and the SSM state after it, so hits land
on block boundaries but most checkpoints are never used. Eviction is LRU over
leaf blocks with whole-chain refresh on access (vLLM touches every block a
request reuses).

``retention_interval`` is current vLLM's ``--prefix-cache-retention-interval``
(``vllm/config/cache.py`` ``CacheConfig.prefix_cache_retention_interval``):
``None`` (the default here, the paper's baseline) keeps a state on every
block; ``0`` (vLLM's default) keeps one only at the "semantic" checkpoints,
the replay boundary and the shared-prefix junction; ``N`` also every ``N``
tokens. The KV of every full block is cached either way; a model without
recurrent layers has no states, so the option changes nothing for it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from twin.cache import BlockCache
from twin.cache.sparse_blocks import KVOnly, SparseBlockCache
from twin.errors import TwinError
from twin.model import ModelSpec
from twin.policies.base import Policy


class VLLMPlusPolicy(Policy):
    """Checkpoint every block (or vLLM's retained ones); LRU over leaf blocks."""

    cache: BlockCache

    name = "vllm+"
    description = "a checkpoint + KV for every block of block_size tokens, LRU over leaf blocks"
    OPTIONS = ("block_size", "retention_interval")

    def __init__(self, block_size: int = 32, retention_interval: int | None = None) -> None:
        super().__init__()
        if type(block_size) is not int or block_size < 1:
            raise TwinError(f"vllm+: block size must be a positive integer (got {block_size!r})")
        if retention_interval is not None and (
            type(retention_interval) is not int
            or retention_interval < 0
            or retention_interval % block_size
        ):
            # vllm/v1/core/kv_cache_coordinator.py _validate_prefix_cache_retention_interval:
            # non-negative and a multiple of the scheduler block (a real hit boundary).
            raise TwinError(
                f"vllm+: retention_interval must be 0 or a positive multiple of the block size "
                f"({block_size}) (got {retention_interval!r})"
            )
        self.block_size = block_size
        self.retention_interval = retention_interval
        # MambaManager.reachable_block_mask returns None (every block) for None and
        # for an interval of at most one block; 0 and longer intervals are sparse.
        self.sparse = retention_interval == 0 or (retention_interval or 0) // block_size > 1

    def make_cache(self, model: ModelSpec, capacity_bytes: int) -> BlockCache:
        if self.sparse and model.n_ssm_layers:
            return SparseBlockCache(model, capacity_bytes, self, self.block_size)
        return BlockCache(model, capacity_bytes, self, self.block_size)

    def admit(self, prompt: np.ndarray, full: np.ndarray) -> list[int]:
        bs = self.block_size
        cache = self.cache
        end = len(full) // bs * bs
        if not isinstance(cache, SparseBlockCache):
            # Every full block of input + output; the block pool checkpoints each
            # one, so only the last boundary needs saying.
            return [end] if end else []
        return retained_states(cache, prompt, end, bs, self.retention_interval or 0)

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {"block_size": self.block_size}
        if self.retention_interval is not None:
            out["retention_interval"] = self.retention_interval
        return out


def retained_states(
    cache: SparseBlockCache, prompt: np.ndarray, end: int, block_size: int, interval: int
) -> list[int]:
    """The positions whose state vLLM keeps for one request, then the KV's end.

    ``SingleTypeKVCacheManager.cache_blocks`` (``vllm/v1/core/
    single_type_kv_cache_manager.py``) passes two reachable boundaries, the
    replay boundary ``num_prompt_tokens - 1`` and the request's
    ``shared_prefix_boundary`` (the junction, when a prefix is cached as KV
    beyond its deepest state); ``MambaManager.reachable_block_mask`` keeps the
    state of the block ending on each, floored to the block grid, plus, for an
    interval ``N > 0``, that of every block ending on a multiple of ``N``.
    """
    keep = {(len(prompt) - 1) // block_size * block_size, cache.junction(prompt)}
    if interval:
        keep.update(range(interval, end + 1, interval))
    positions = sorted(p for p in keep if 0 < p <= end)
    if end and (not positions or positions[-1] < end):
        positions.append(KVOnly(end))
    return positions
