"""``vanilla``: no prefix caching at all (every request prefills from scratch)."""

from __future__ import annotations

from typing import Any

import numpy as np

from policies.base import Policy


class VanillaPolicy(Policy):
    """Admits nothing, so every lookup misses."""

    name = "vanilla"
    description = "nothing cached: every prompt is prefilled from scratch"

    def admit(self, cache: Any, prompt: np.ndarray, full: np.ndarray) -> list[int]:
        return []
