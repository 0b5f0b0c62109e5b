"""Token-exact prefix caches: the radix tree, its byte-accounted cache, the vllm+ block pool."""

from twin.cache.base import COUNTERS, CacheNode, CachePolicy, CacheStructure, Hit, cache_stats
from twin.cache.block_cache import BlockCache, BlockRef, Segment
from twin.cache.flops import PrefillFlops
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
    "Node",
    "PrefillFlops",
    "PrefixCache",
    "RadixTree",
    "RequestCache",
    "Segment",
    "cache_stats",
    "serve",
]
