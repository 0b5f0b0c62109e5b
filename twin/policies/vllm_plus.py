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

from twin.cache import BlockCache
from twin.errors import TwinError
from twin.policies.admissions import admission_rule
from twin.policies.base import RulePolicy


class VLLMPlusPolicy(RulePolicy):
    """Checkpoint every block (or vLLM's retained ones); LRU over leaf blocks."""

    cache: BlockCache
    structure = "blocks"

    name = "vllm+"
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
        if self.sparse:
            self.recurrent_structure = "sparse-blocks"
        self.admission = admission_rule(
            "every-block", block_size=block_size, retention_interval=retention_interval
        )

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {"block_size": self.block_size}
        if self.retention_interval is not None:
            out["retention_interval"] = self.retention_interval
        return out
