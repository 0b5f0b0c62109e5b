"""``sglang+``: SGLang's radix cache extended to hybrid models (Marconi sec. 5 baseline).

Admission is Marconi's judicious rule (a checkpoint at the branch point found
by speculative insertion, and after the last decoded token), so it differs
from ``marconi`` only in eviction: plain LRU over leaves, where a hit
refreshes the whole matched path (SGLang's ``match_prefix`` updates every
node's access time).
"""

from __future__ import annotations

import numpy as np

from policies.base import judicious_admission
from policies.lru import LeafLRU
from twin.cache import CacheStructure


class SGLangPlusPolicy(LeafLRU):
    """Judicious admission + LRU over leaves with whole-path refresh."""

    name = "sglang+"
    description = "judicious admission (branch points + last token), LRU over leaves"

    def admit(self, cache: CacheStructure, prompt: np.ndarray, full: np.ndarray) -> list[int]:
        return judicious_admission(cache, prompt, full)
