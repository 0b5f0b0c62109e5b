"""Caches: the radix tree and its byte-accounted cache, the vllm+ block pool, the module store."""

from __future__ import annotations

from typing import TYPE_CHECKING

from twin.exports import lazy_exports

if TYPE_CHECKING:
    from twin.cache.base import (
        COUNTERS,
        CacheReadout,
        CacheStructure,
        HeldCache,
        Hit,
        RequestPolicy,
        TreePolicy,
        cache_stats,
    )
    from twin.cache.block_cache import BlockCache
    from twin.cache.block_segment import BlockRef, Segment
    from twin.cache.flops import PrefillFlops
    from twin.cache.module_cache import Module, ModuleCache, ModuleHold
    from twin.cache.prefix_cache import PrefixCache
    from twin.cache.radix import Match, Node, RadixTree
    from twin.cache.requests import Admission, RequestCache, serve
    from twin.cache.snapshot import CacheSnapshot

if not TYPE_CHECKING:
    __getattr__ = lazy_exports(__name__)  # the names above on first use

__all__ = [
    "COUNTERS",
    "Admission",
    "BlockCache",
    "BlockRef",
    "CacheReadout",
    "CacheSnapshot",
    "CacheStructure",
    "HeldCache",
    "Hit",
    "Match",
    "Module",
    "ModuleCache",
    "ModuleHold",
    "Node",
    "PrefillFlops",
    "PrefixCache",
    "RadixTree",
    "RequestCache",
    "RequestPolicy",
    "Segment",
    "TreePolicy",
    "cache_stats",
    "serve",
]
