"""A cache that admits nothing (``vanilla`` in the engine), and its request protocol.

``vanilla`` on a ``PrefixCache`` keeps an empty tree: every lookup misses, no
checkpoint is placed, every counter stays 0. :class:`EmptyCache` answers the same
without the tree's per-request work (the request's tokens joined, a walk of an
empty tree, the policy's calls), so an engine run of ``vanilla`` prices the engine
alone; its outputs are the same byte for byte
(``tests/test_engine_cache.py::test_vanilla_empty_cache_is_the_same``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from twin.cache.base import EvictHook, Hit, HostCache, RequestPolicy
from twin.cache.requests import Admission
from twin.model import ModelSpec

_MISS: Hit[object] = Hit(0, None)


class EmptyCache:
    """What reports read of an empty ``PrefixCache`` (``cache_stats``, occupancy)."""

    kv_bytes = ssm_bytes = used_bytes = 0
    peak_bytes = peak_kv_bytes = peak_ssm_bytes = 0
    evictions = checkpoints_admitted = checkpoints_hit = 0
    num_nodes = 1  # the root, as ``RadixTree.num_nodes``
    clock = 0  # its own protocol keeps no clock: nothing is refreshed
    on_evict: EvictHook | None = None  # never called: nothing is evicted

    def __init__(self, model: ModelSpec, capacity: int, policy: RequestPolicy) -> None:
        self.model = model
        self.capacity = int(capacity)
        self.policy = policy
        self.has_ssm = model.n_ssm_layers > 0
        policy.bind(self)

    def set_clock(self, t: int) -> None:
        pass

    def peek(self, seq: np.ndarray) -> int:
        return 0

    def lookup(self, seq: np.ndarray, modules: np.ndarray | None = None) -> Hit[object]:
        return _MISS

    def insert(
        self, seq: np.ndarray, checkpoints: Sequence[int], modules: np.ndarray | None = None
    ) -> int:
        return 0

    def verify(self) -> None:
        """``PrefixCache.verify`` of an empty tree: nothing held (tests and debugging)."""
        assert self.used_bytes == 0 <= self.capacity

    def shrink_to(self, limit: int) -> int:
        """``PrefixCache.shrink_to`` of an empty tree: the capacity follows a shared pool."""
        self.capacity = max(int(limit), 0)
        return 0

    def request_cache(
        self, host: HostCache | None = None, write_policy: str = "write_through"
    ) -> NothingCached:
        """The request protocol (``HeldCache.request_cache``); never over a host tier
        (``vanilla`` runs on the radix tree there: ``policies.structures.choose_structure``)."""
        assert host is None, "an empty cache has no host tier"
        return NothingCached()


class NothingCached:
    """``RequestCache``'s four steps where nothing is ever cached: a miss, no positions."""

    written_back_tokens = written_back_states = 0

    def __init__(self) -> None:
        self.admissions = 0

    def admit(
        self, prompt: np.ndarray, full: np.ndarray, modules: np.ndarray | None = None
    ) -> Admission:
        order = self.admissions
        self.admissions += 1
        return Admission(order, prompt, full, _MISS, [], [], modules)

    def insert_at_prefill_end(self, adm: Admission) -> int:
        return 0

    def serve(
        self, prompt: np.ndarray, full: np.ndarray, modules: np.ndarray | None = None
    ) -> Hit[object]:
        """``RequestCache.serve`` (a replay's request): a miss."""
        self.admissions += 1
        return _MISS

    def insert_at_completion(self, adm: Admission) -> int:
        return 0

    def complete(self, adm: Admission) -> int:
        self.release(adm)
        return 0

    def insert_preempted(self, adm: Admission, tokens: int) -> int:
        return 0

    def release(self, adm: Admission) -> None:
        adm.full = None
