"""Caches: the radix tree and its byte-accounted cache, the vllm+ block pool, the module store."""

from twin.cache.base import COUNTERS, CacheNode, CachePolicy, CacheStructure, Hit, cache_stats
from twin.cache.block_cache import BlockCache
from twin.cache.block_segment import BlockRef, Segment
from twin.cache.flops import PrefillFlops
from twin.cache.module_cache import Module, ModuleCache, ModuleHold
from twin.cache.prefix_cache import PrefixCache
from twin.cache.radix import Match, Node, RadixTree
from twin.cache.requests import Admission, RequestCache, serve
from twin.cache.snapshot import CacheSnapshot

__all__ = [
    "COUNTERS",
    "Admission",
    "BlockCache",
    "BlockRef",
    "CacheNode",
    "CachePolicy",
    "CacheSnapshot",
    "CacheStructure",
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
    "Segment",
    "cache_stats",
    "serve",
]
