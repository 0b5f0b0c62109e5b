"""``vanilla``: no prefix caching at all (every request prefills from scratch)."""

from __future__ import annotations

import numpy as np

from policies.base import Policy
from twin.cache import CacheStructure


class VanillaPolicy(Policy):
    """Admits nothing, so every lookup misses."""

    name = "vanilla"
    description = "nothing cached: every prompt is prefilled from scratch"

    def admit(self, cache: CacheStructure, prompt: np.ndarray, full: np.ndarray) -> list[int]:
        return []
