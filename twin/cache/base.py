"""What every prefix cache shares: the hit record, the cache API, the policy hooks.

Three structures implement the same cache API (:class:`CacheStructure`:
``lookup``, ``speculative_insert``, ``insert``, ``pin``/``unpin``, ``touch``,
``evict``): the token-exact radix tree
(:class:`~twin.cache.prefix_cache.PrefixCache`) and the block pool of the
``vllm+`` baseline (:class:`~twin.cache.block_cache.BlockCache`) and the
module store of ``prompt-cache`` (:class:`~twin.cache.module_cache.ModuleCache`).
``modules`` (a request's declared prompt modules, the workload's ``modules``
column) reach ``lookup`` and ``insert``; prefix caches find reuse from the
tokens alone and ignore them. A policy
(``policies/``) decides what is admitted and what is evicted; the cache only
keeps the structure and the bytes right and calls the policy's hooks
(:class:`CachePolicy`). Requests use a cache through one protocol,
:class:`twin.cache.requests.RequestCache`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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

    A hit that is not a prefix (Prompt Cache's modules, reused wherever they
    sit) may leave work for the engine to price: ``recompute`` hit tokens that
    the recurrent layers still compute (their state cannot be moved to another
    position), and ``host_tokens`` whose KV is copied from host memory first.
    Prefix caches leave both 0.
    """

    length: int
    node: CacheNode | None
    recompute: int = 0
    host_tokens: int = 0


# Told when cached content leaves the GPU (a host tier's write-back, ``RequestCache``):
# the token path from the root to the evicted node's end, and whether that
# position's state (an SSM checkpoint; always true on Transformers) went with it.
EvictHook = Callable[[np.ndarray, bool], None]

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


def evict_for(cache: CacheStructure, need: int) -> bool:
    """Evict the policy's victims until ``need`` bytes are free; ``False`` if it has none left."""
    while cache.capacity - cache.used_bytes < need:
        victim = cache.policy.choose_victim(cache)
        if victim is None:
            return False
        cache.evict(victim)
    return True


class TokenStateBytes:
    """Byte accounting of a cache that counts KV tokens and SSM checkpoints.

    Shared by the radix tree and the module store; the subclass sets
    ``kv_tokens``, ``n_ckpts``, ``kv_per_token`` and ``ckpt_bytes`` and keeps the
    first two current.
    """

    kv_tokens: int
    n_ckpts: int
    kv_per_token: int
    ckpt_bytes: int
    clock: int
    peak_bytes: int
    peak_kv_bytes: int
    peak_ssm_bytes: int

    def set_clock(self, t: int) -> None:
        """Set recency's clock (the request protocol and snapshots do; see ``requests.py``)."""
        self.clock = t

    @property
    def kv_bytes(self) -> int:
        return self.kv_tokens * self.kv_per_token

    @property
    def ssm_bytes(self) -> int:
        return self.n_ckpts * self.ckpt_bytes

    @property
    def used_bytes(self) -> int:
        return self.kv_tokens * self.kv_per_token + self.n_ckpts * self.ckpt_bytes

    def note_peaks(self) -> None:
        """Raise the peak counters to the bytes held now."""
        kv, ssm = self.kv_bytes, self.ssm_bytes  # used = kv + ssm (called once per insert)
        if kv + ssm > self.peak_bytes:
            self.peak_bytes = kv + ssm
        if kv > self.peak_kv_bytes:
            self.peak_kv_bytes = kv
        if ssm > self.peak_ssm_bytes:
            self.peak_ssm_bytes = ssm


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

    ``on_evict`` (``None`` by default) is called by :meth:`evict` before a
    victim's content goes; the radix trees call it (SGLang's HiCache write-back
    runs on them), the block pool and the module store never do.
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
    on_evict: EvictHook | None

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
    def lookup(self, seq: np.ndarray, modules: np.ndarray | None = None) -> Hit: ...
    def peek(self, seq: np.ndarray) -> int: ...
    def speculative_insert(self, seq: np.ndarray) -> int | None: ...
    def insert(
        self, seq: np.ndarray, checkpoints: Sequence[int], modules: np.ndarray | None = None
    ) -> int: ...
    def pin(self, node: CacheNode) -> None: ...
    def unpin(self, node: CacheNode) -> None: ...
    def touch(self, node: CacheNode) -> None: ...
    def evictable(self, node: CacheNode) -> bool: ...
    def evict(self, node: CacheNode) -> int: ...
    def shrink_to(self, limit: int) -> int: ...
    def verify(self) -> None: ...
