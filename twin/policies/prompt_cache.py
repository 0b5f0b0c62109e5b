"""``prompt-cache``: Prompt Cache's schema-declared modules, reused at any position.

Gim et al., "Prompt Cache: Modular Attention Reuse for Low-Latency Inference"
(MLSys 2024, arXiv 2311.04934). The structure and its reuse rules are
:class:`twin.cache.module_cache.ModuleCache`; this policy chooses where modules
live (``storage``: ``gpu`` or ``host`` memory, sec. 4) and which module goes
when the store is full: the least recently used unpinned one (the paper keeps
every module of its schema and names no eviction rule; LRU is the twin's).

It reuses only what a workload's ``modules`` column declares: on a workload
without the column nothing is reused (prefix sharing is the prefix policies'
business).
"""

from __future__ import annotations

from typing import Any

from twin.cache.module_cache import STORAGES, Module, ModuleCache
from twin.errors import TwinError
from twin.policies.admissions import admission_rule
from twin.policies.base import RulePolicy


class PromptCachePolicy(RulePolicy):
    """Modules' attention KV in GPU or host memory, reused wherever declared; LRU eviction."""

    name = "prompt-cache"
    OPTIONS = ("storage",)

    cache: ModuleCache
    structure = "modules"
    admission = admission_rule("whole-prompt")

    def __init__(self, storage: str = "gpu") -> None:
        super().__init__()
        if storage not in STORAGES:
            raise TwinError(
                f"prompt-cache: storage must be one of {', '.join(STORAGES)} (got {storage!r})"
            )
        self.storage = storage

    def choose_victim(self) -> Module | None:
        store: ModuleCache = self.cache
        best: Module | None = None
        for m in store.modules.values():  # insertion order breaks ties: oldest first
            if m.lock == 0 and (best is None or m.t < best.t):
                best = m
        return best

    def stats(self) -> dict[str, Any]:
        c = self.cache
        return {
            "storage": self.storage,
            "modules_cached": c.num_nodes,
            "module_hits": c.module_hits,
            "reused_tokens": c.reused_tokens,
            "recompute_tokens": c.recompute_tokens,
            "host_copied_tokens": c.host_tokens,
        }
