"""``vanilla``: no prefix caching at all (every request prefills from scratch)."""

from __future__ import annotations

from twin.cache import HeldCache
from twin.cache.empty import EmptyCache
from twin.model import ModelSpec
from twin.policies.admissions import admission_rule
from twin.policies.base import RadixPolicy


class VanillaPolicy(RadixPolicy):
    """Admits nothing, so every lookup misses."""

    name = "vanilla"
    description = "nothing cached: every prompt is prefilled from scratch"

    admission = admission_rule("nothing")

    def make_engine_cache(
        self,
        model: ModelSpec,
        capacity_bytes: int,
        host_tier: bool = False,
    ) -> HeldCache:
        """An empty cache without a tree (:mod:`twin.cache.empty`): the same answers;
        the radix tree with a host tier (its calls are the tree's)."""
        if host_tier:
            return self.make_cache(model, capacity_bytes)
        return EmptyCache(model, capacity_bytes, self)
