"""SGLang's radix cache for hybrid models: one tree, two pools, two LRU orders, state tombstones.

Follows SGLang ``python/sglang/srt/mem_cache/mamba_radix_cache.py``
(``MambaRadixCache``), on the token-exact tree of :class:`PrefixCache`:

- **Two pools.** Full-attention KV and recurrent states are held in separate
  pools (SGLang's token-to-KV pool and its mamba pool). Their split is
  ``--mamba-full-memory-ratio`` ``r`` (default 0.9): states get ``r / (1 + r)``
  of the bytes, KV the rest (``model_runner`` memory sizing:
  ``mamba_budget = rest * r / (1 + r)``). Under the shared KV pool the split
  applies to what the cache may hold now (its ``capacity``); with ``--cache-gb``
  to the dedicated cache.
- **Two LRU orders, each evicting for its own pool** (``evict_full``,
  ``evict_mamba``): when KV is short, the least recently used unpinned *leaf*
  goes with its KV and state; when states are short, the least recently used
  unpinned node *holding a state* loses it: a leaf goes whole, an inner node
  becomes a **tombstone** (KV kept, state dropped: ``_tombstone_internal_node``).
  Leaves are never tombstones (``_iteratively_delete_tombstone_leaf``); a
  tombstone with one child is folded into it here (the same tokens, bytes and
  hits as SGLang's separate node).
- **Hit rule** (``_match_prefix_helper``): the hit ends at the deepest node on
  the matched path that holds a state; a tombstone's KV is used only as part of
  a longer match ending at such a node (:meth:`PrefixCache._usable`).

The order of each pool (which node is least recently used) is the policy's
(``policies.sglang_hybrid``); this module keeps the pools' bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from twin.cache.base import TreePolicy
from twin.cache.prefix_cache import PrefixCache
from twin.cache.radix import Match, Node
from twin.errors import TwinError
from twin.model import ModelSpec

# SGLang server_args.py: --mamba-full-memory-ratio default.
MAMBA_FULL_MEMORY_RATIO = 0.9


class PoolPolicy(TreePolicy[Node], Protocol):
    """What the hybrid cache asks of its policy besides the hooks: recency and two victims."""

    def on_insert_path(self, match: Match) -> None: ...
    def full_victim(self) -> Node | None: ...
    def state_victim(self) -> Node | None: ...


class HybridRadixCache(PrefixCache):
    """MambaRadixCache's pools and eviction on the token-exact tree (module docstring)."""

    def __init__(
        self,
        model: ModelSpec,
        capacity_bytes: int,
        policy: PoolPolicy,
        ratio: float = MAMBA_FULL_MEMORY_RATIO,
        int8_checkpoint: bool = False,
    ) -> None:
        if not (ratio > 0 and np.isfinite(ratio)):
            raise TwinError(f"mamba_full_memory_ratio must be a positive number (got {ratio!r})")
        if not model.n_ssm_layers:
            raise TwinError(
                f"the hybrid radix cache needs recurrent layers ({model.name} has none)"
            )
        self.ratio = float(ratio)
        # What each pool was last held to (by an insert or shrink_to): its share, or
        # more while pins keep it over. The shared KV pool may lower ``capacity``
        # without evicting while the total fits; the shares apply again at the next
        # insert. ``verify`` checks the pools against these.
        self._limits = (0, 0)
        # SGLang's separate pools for running requests too (twin.cache.pool.SplitPool):
        # (KV bytes, state bytes) the cache may hold, set by that pool; None: the
        # ratio's split of ``capacity``.
        self.split: tuple[int, int] | None = None
        self._pools = policy  # the policy, with the two LRU lists' victims
        super().__init__(model, capacity_bytes, policy)
        # A running request's state slot (SplitPool's unit); a cached state costs half of
        # it with SGLang 0.5.23's --enable-int8-mamba-checkpoint ("~2x cached-prefix
        # capacity at fixed memory": int8 checkpoints of the radix-cached states).
        self.slot_bytes = self.ckpt_bytes
        if int8_checkpoint:
            self.ckpt_bytes = self.ckpt_bytes // 2

    # ------------------------------------------------------------------ pools
    @property
    def state_capacity(self) -> int:
        """Bytes the mamba pool may hold: ``capacity * r / (1 + r)`` (or the split's)."""
        if self.split is not None:
            return self.split[1]
        return int(self.capacity * self.ratio / (1.0 + self.ratio))

    @property
    def kv_capacity(self) -> int:
        """Bytes the full-attention KV pool may hold: the rest of ``capacity`` (or the split's)."""
        if self.split is not None:
            return self.split[0]
        return self.capacity - self.state_capacity

    def hold_pools(self, kv: int, states: int) -> bool:
        """Hold the pools to ``kv`` and ``states`` bytes, evicting by each pool's LRU.

        (:class:`twin.cache.pool.SplitPool`: running requests took the rest.)
        ``False`` when pins keep a pool over its limit; the limits stay set.
        """
        self.split = (max(kv, 0), max(states, 0))
        self.capacity = self.split[0] + self.split[1]
        ok = self._evict_pools()
        self._hold_limits()
        return ok

    # ------------------------------------------------------------------ insert
    def insert(
        self, seq: np.ndarray, checkpoints: Sequence[int], modules: np.ndarray | None = None
    ) -> int:
        """Cache ``seq`` up to its last checkpoint, making room in each pool by its own LRU.

        What cannot fit once every evictable node of a pool is gone is cut off
        (the longest admission prefix that fits both pools), then
        :meth:`PrefixCache.insert` places it without evicting further.
        """
        seq = np.asarray(seq, dtype=np.int32)
        pos = sorted({int(p) for p in checkpoints if 0 < p <= len(seq)})
        if not pos:
            return 0
        m = self._match(seq[: pos[-1]])
        self._pools.on_insert_path(m)  # _insert_helper stamps the walked path
        base = m.partial if m.partial is not None else m.node
        covered = m.length
        pinned = base is not self.root
        if pinned:
            self.pin(base)  # keep the attach point while making room
        kv, states = self._split_need(base, pos, covered)
        self._evict_pools(kv, states)
        kv, states = self._split_need(base, pos, covered)
        if self.kv_bytes + kv > self.kv_capacity or self.ssm_bytes + states > self.state_capacity:
            pos = self._fitting(base, pos, covered)
        if pinned:
            self.unpin(base)
        self._hold_limits()
        return super().insert(seq, pos) if pos else 0

    def _split_need(self, base: Node, pos: list[int], covered: int) -> tuple[int, int]:
        """(KV bytes, state bytes) admitting ``pos`` would add."""
        missing, need = self._need(base, pos, covered)
        states = (len(missing) + sum(1 for p in pos if p > covered)) * self.ckpt_bytes
        return need - states, states

    def _fitting(self, base: Node, pos: list[int], covered: int) -> list[int]:
        """The longest prefix of ``pos`` whose KV and states fit their pools now."""
        kept: list[int] = []
        for p in pos:
            kv, states = self._split_need(base, [*kept, p], covered)
            if (
                self.kv_bytes + kv > self.kv_capacity
                or self.ssm_bytes + states > self.state_capacity
            ):
                break
            kept.append(p)
        return kept

    # ------------------------------------------------------------------ eviction
    def _evict_pools(self, kv: int = 0, states: int = 0) -> bool:
        """Evict until ``kv`` and ``states`` more bytes fit their pools; ``False``: a pool is stuck.

        SGLang ``MambaRadixCache.evict``: ``evict_full`` for the tokens, then
        ``evict_mamba`` for the states, each by its own LRU list.
        """
        while self.kv_bytes + kv > self.kv_capacity:
            victim = self._pools.full_victim()
            if victim is None:
                return False
            self.evict(victim)
        while self.ssm_bytes + states > self.state_capacity:
            victim = self._pools.state_victim()
            if victim is None:
                return False
            self.drop_state(victim)
        return True

    def shrink_to(self, limit: int) -> int:
        cached = super().shrink_to(limit)
        self._hold_limits()
        return cached

    def _hold_limits(self) -> None:
        self._limits = (
            max(self.kv_capacity, self.kv_bytes),
            max(self.state_capacity, self.ssm_bytes),
        )

    def _evict_until(self, need: int) -> bool:
        # ``shrink_to`` (the shared pool reclaiming pages) and the base insert's
        # loop land here: each pool is brought within its share of ``capacity``.
        # The base insert never needs more (this class made room before calling it).
        return self._evict_pools() and need <= self.capacity - self.used_bytes

    def drop_state(self, node: Node) -> int:
        """Evict ``node``'s state (``evict_mamba``): a leaf goes, an inner node is tombstoned."""
        assert node.ckpt and not node.lock and node is not self.root, (
            f"{node!r} holds no free state"
        )
        before = self.used_bytes
        if not node.children:
            self.evict(node)
            return before - self.used_bytes
        self._tell_evict(node)
        node.ckpt = False
        self.n_ckpts -= 1
        self.evictions += 1
        self.policy.on_node_changed(node)
        self._tidy(node)  # one child: folded into it (KV kept, the same hits)
        return before - self.used_bytes

    def evictable(self, node: Node) -> bool:
        """Leaves only (``evict_full``); inner states go through :meth:`drop_state`."""
        return not node.lock and node is not self.root and not node.children

    def verify(self) -> None:
        super().verify()
        kv, states = self._limits
        assert self.kv_bytes <= kv, "KV pool exceeded"
        assert self.ssm_bytes <= states, "state pool exceeded"
