"""``--shared-kv-tier``: one KV store under every prefill worker's cache."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from twin.cache import HeldCache, Hit, cache_stats
from twin.engine.config import EngineConfig
from twin.engine.fabric import kv_link
from twin.engine.memory_strategies import HostTier
from twin.model import ModelSpec
from twin.parallel import Layout, kv_bytes_per_token_per_gpu


class _StoreView:
    """The shared store's cache as each prefill worker's request cache sees it (a
    ``twin.cache.base.HostCache``): every worker sets the clock to its own admission
    count (``RequestCache._admit``), so the store keeps its own (one tick a lookup) for
    its recency; it counts the lookups and the prompt tokens looked up (the hit rate's
    denominator)."""

    def __init__(self, cache: HeldCache) -> None:
        self._cache = cache
        self._tick = 0
        self.lookups = self.looked_up_tokens = 0

    @property
    def checkpoints_admitted(self) -> int:
        return self._cache.checkpoints_admitted

    def set_clock(self, order: int) -> None:
        self._tick += 1
        self._cache.set_clock(self._tick)

    def peek(self, prompt: np.ndarray) -> int:
        self.lookups += 1
        self.looked_up_tokens += len(prompt)
        return int(self._cache.peek(prompt))

    def lookup(self, seq: np.ndarray, modules: np.ndarray | None = None) -> Hit[object]:
        return self._cache.lookup(seq, modules)

    def insert(
        self, seq: np.ndarray, checkpoints: Sequence[int], modules: np.ndarray | None = None
    ) -> int:
        return self._cache.insert(seq, checkpoints, modules)


class SharedKvTier(HostTier):
    """``--shared-kv-tier``: one KV store under every prefill worker's cache, as
    Mooncake's store serves SGLang's HiCache (``--hicache-storage-backend mooncake``,
    SGLang 0.5.10.post1 ``mem_cache/storage/mooncake_store``): a prefix a worker's GPU
    lacks is looked up there and, if longer, loaded before the prefill can use it; what a
    worker caches is written there too (write-through, off the critical path: HiCache's
    storage backup runs in its own thread). The store is the run's policy's own structure
    (a hybrid's states only at its exact checkpoints, as in any tier: ``RequestCache``).

    A load moves each GPU's share of the hit's KV (and of a hybrid's state) over that
    GPU's NIC (:data:`IB_BW_PER_GPU`, :data:`IB_LATENCY_S`; Mooncake's transfer engine
    reads the store's memory by RDMA), its seconds added to the request's first step,
    not overlapped. The loads do not queue behind the KV transfers on the same NIC.
    The decode workers do not read it (SGLang's decode worker has no HiCache)."""

    def __init__(self, cache: HeldCache, model: ModelSpec, tp: int) -> None:
        super().__init__(cache, None, "write_through")  # type: ignore[arg-type]
        self.store = _StoreView(cache)
        self.host = self.store
        self.kv_per_token_gpu = float(kv_bytes_per_token_per_gpu(model, Layout(tp)))
        self.state_bytes_gpu = (model.ssm_checkpoint_bytes if model.n_ssm_layers else 0) / tp
        self.link = kv_link("ib", None, EngineConfig())
        self.hits = 0  # admissions that loaded a prefix from the store

    def load_time(self, tokens: int, states: int) -> float:
        gpu_bytes = tokens * self.kv_per_token_gpu + states * self.state_bytes_gpu
        _, seconds = self.link.seconds(gpu_bytes)
        self.loaded_tokens += tokens
        self.load_s += seconds
        self.hits += 1
        return seconds

    def summary(self) -> dict[str, Any]:
        """The summary's ``pools.shared_tier``: capacity, contents, the hit rate."""
        store = self.store
        looked = store.looked_up_tokens
        return {
            **cache_stats(self.cache),
            "capacity_bytes": self.cache.capacity,
            "lookups": store.lookups,
            "requests_hit": self.hits,
            "looked_up_tokens": looked,
            "loaded_tokens": self.loaded_tokens,
            "hit_rate_tokens": self.loaded_tokens / looked if looked else None,
            "load_s": self.load_s,
            **{f"load_{k}": v for k, v in self.link.to_dict().items() if k != "link"},
        }
