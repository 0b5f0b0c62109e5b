"""``sglang+``: SGLang's radix cache extended to hybrid models (Marconi sec. 5 baseline).

Admission is Marconi's judicious rule (a checkpoint at the branch point found
by speculative insertion, and after the last decoded token), so it differs
from ``marconi`` only in eviction: plain LRU over leaves (``policies.lru``).

Refresh follows the Marconi authors' SGLang+ ("policy version 1" of
github.com/ruipeterpan/marconi ``radix_cache_hybrid.py``): ``_match_prefix_helper``
and ``_insert_helper`` stamp every node they visit, at the lookup of the input
and again at the insert of input + output. That includes the node a sequence
diverges inside (the partly matched edge, before it is split), so when an
agent rewrites an older observation the whole old branch stays warm. The
matched path itself is refreshed lazily by ``policies.lru``; here we stamp
the partly matched node, which that rule would not reach.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from policies.base import judicious_admission
from policies.lru import LeafLRU


class SGLangPlusPolicy(LeafLRU):
    """Judicious admission + LRU over leaves with whole-path refresh."""

    name = "sglang+"
    description = "judicious admission (branch points + last token), LRU over leaves"

    def admit(self, cache: Any, prompt: np.ndarray, full: np.ndarray) -> list[int]:
        # Input + output's walk covers the input's: a node the input diverges
        # inside is on it, whole or partly matched.
        partial = cache.tree.match(np.asarray(full, dtype=np.int32)).partial
        if partial is not None:
            cache.touch(partial)
        return judicious_admission(cache, prompt, full)
