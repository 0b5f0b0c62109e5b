"""``vanilla``: no prefix caching at all (every request prefills from scratch)."""

from __future__ import annotations

from typing import Any

import numpy as np

from twin.cache import CacheStructure
from twin.cache.empty import EmptyCache
from twin.model import ModelSpec
from twin.policies.base import Policy


class VanillaPolicy(Policy):
    """Admits nothing, so every lookup misses."""

    name = "vanilla"
    description = "nothing cached: every prompt is prefilled from scratch"

    def admit(self, cache: CacheStructure, prompt: np.ndarray, full: np.ndarray) -> list[int]:
        return []

    def make_engine_cache(
        self,
        model: ModelSpec,
        capacity_bytes: int,
        host_tier: bool = False,
    ) -> Any:
        """An empty cache without a tree (:mod:`twin.cache.empty`): the same answers;
        the radix tree with a host tier (its calls are the tree's)."""
        if host_tier:
            return self.make_cache(model, capacity_bytes)
        return EmptyCache(model, capacity_bytes, self)
