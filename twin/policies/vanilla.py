"""``vanilla``: no prefix caching at all (every request prefills from scratch)."""

from __future__ import annotations

from twin.policies.admissions import admission_rule
from twin.policies.base import RadixPolicy


class VanillaPolicy(RadixPolicy):
    """Admits nothing, so every lookup misses."""

    name = "vanilla"

    admission = admission_rule("nothing")
    # An empty cache without a tree (twin.cache.empty): the same answers; the radix tree
    # where the holder calls the tree itself (a host tier, the reference executor).
    fast_structure = "empty"
