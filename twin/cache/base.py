"""What every prefix cache shares: the hit record, the cache API, the policy hooks.

Two structures implement the same cache API (:class:`CacheStructure`:
``lookup``, ``speculative_insert``, ``insert``, ``pin``/``unpin``, ``touch``,
``evict``): the token-exact radix tree
(:class:`~twin.cache.prefix_cache.PrefixCache`) and the block pool of the
``vllm+`` baseline (:class:`~twin.cache.block_cache.BlockCache`). A policy
(``policies/``) decides what is admitted and what is evicted; the cache only
keeps the structure and the bytes right and calls the policy's hooks
(:class:`CachePolicy`). Requests use a cache through one protocol,
:class:`twin.cache.requests.RequestCache`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from twin.model import ModelSpec

# What a cache structure calls a node: a radix-tree ``Node`` or a block pool's
# ``BlockRef``. Callers only hand it back (pin, unpin, touch, evict).
CacheNode = Any


@dataclass(slots=True)
class Hit:
    """A lookup's answer: ``length`` prompt tokens served from cache, via ``node``.

    ``node`` is what the request must pin while it runs (the node whose state
    the hit resumes from); ``None`` on a miss.
    """

    length: int
    node: CacheNode | None


# The counters every cache keeps (they only grow): snapshots carry them, reports show them.
COUNTERS = (
    "peak_bytes",
    "peak_kv_bytes",
    "peak_ssm_bytes",
    "evictions",
    "checkpoints_admitted",
    "checkpoints_hit",
)


def cache_stats(cache: CacheStructure) -> dict[str, int]:
    """What reports show of a cache: the bytes it holds now, its counters, its nodes."""
    return {
        "kv_bytes": cache.kv_bytes,
        "ssm_bytes": cache.ssm_bytes,
        **{name: getattr(cache, name) for name in COUNTERS},
        "nodes": cache.num_nodes,
    }


class CachePolicy(Protocol):
    """The hooks a cache calls; :class:`policies.base.Policy` implements them."""

    def bind(self, cache: CacheStructure) -> None: ...
    def on_request(self, cache: CacheStructure, prompt: np.ndarray, full: np.ndarray) -> None: ...
    def admit(self, cache: CacheStructure, prompt: np.ndarray, full: np.ndarray) -> list[int]: ...
    def on_hit(self, cache: CacheStructure, node: CacheNode) -> None: ...
    def choose_victim(self, cache: CacheStructure) -> CacheNode | None: ...
    def on_node_added(self, node: CacheNode) -> None: ...
    def on_node_changed(self, node: CacheNode) -> None: ...
    def on_node_removed(self, node: CacheNode, into: CacheNode | None = None) -> None: ...
    def stats(self) -> dict[str, Any]: ...


class CacheStructure(Protocol):
    """The cache API both structures implement (radix tree, block pool).

    Counters (``evictions``, ``checkpoints_admitted``, ``checkpoints_hit``,
    the peaks) only grow; ``clock`` is recency's unit, set only through
    :meth:`set_clock` by the request protocol and by snapshots.
    """

    model: ModelSpec
    policy: CachePolicy
    capacity: int
    has_ssm: bool
    clock: int
    evictions: int
    checkpoints_admitted: int
    checkpoints_hit: int
    peak_bytes: int
    peak_kv_bytes: int
    peak_ssm_bytes: int

    @property
    def kv_bytes(self) -> int: ...
    @property
    def ssm_bytes(self) -> int: ...
    @property
    def used_bytes(self) -> int: ...
    @property
    def num_nodes(self) -> int: ...

    def set_clock(self, t: int) -> None: ...
    def node_bytes(self, node: CacheNode) -> int: ...
    def lookup(self, seq: np.ndarray) -> Hit: ...
    def peek(self, seq: np.ndarray) -> int: ...
    def speculative_insert(self, seq: np.ndarray) -> int | None: ...
    def insert(self, seq: np.ndarray, checkpoints: Sequence[int]) -> int: ...
    def pin(self, node: CacheNode) -> None: ...
    def unpin(self, node: CacheNode) -> None: ...
    def touch(self, node: CacheNode) -> None: ...
    def evictable(self, node: CacheNode) -> bool: ...
    def evict(self, node: CacheNode) -> int: ...
    def shrink_to(self, limit: int) -> int: ...
    def verify(self) -> None: ...
