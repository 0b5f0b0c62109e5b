"""The block pool keeping recurrent states on some blocks only (vLLM's retention interval).

Current vLLM caches the KV of every full block (the full-attention manager)
but a hybrid model's recurrent state only on the blocks its retention mask
marks (``vllm/v1/core/single_type_kv_cache_manager.py``:
``SingleTypeKVCacheManager.cache_blocks`` passes ``reachable_block_mask`` to
``BlockPool.cache_full_blocks``; ``MambaManager.reachable_block_mask``).
:class:`SparseBlockCache` is :class:`~twin.cache.block_cache.BlockCache` with
that split: a cached block holds KV and, where the policy asked for one, a
state. Which blocks get one is the policy's rule (``twin/policies/vllm_plus.py``
computes vLLM's mask); this module keeps the bytes, the hits and eviction right:

- **bytes**: ``block_size`` tokens of KV per block plus one checkpoint per
  block holding a state; eviction frees what the evicted blocks held;
- **hits** follow ``MambaManager.find_longest_cache_hit`` after the
  full-attention manager: the longest chain of cached KV blocks (at most
  ``len(prompt) - 1`` tokens: ``KVCacheManager.get_computed_blocks`` caps a hit
  at ``num_tokens - 1`` so the last token is computed), then the deepest block
  of that chain holding a state; a hit ends there or is empty;
- **the junction** (``HybridKVCacheCoordinator.find_longest_cache_hit``'s
  ``num_uncached_common_prefix_tokens``, ``vllm/v1/core/kv_cache_coordinator.py``):
  where the cached KV runs past the deepest state, the request's prefill stops
  there and its state is kept (the scheduler's ``_mamba_block_aligned_split``
  and ``request.shared_prefix_boundary``), so :meth:`SparseBlockCache.junction`
  reports it to the policy;
- **a state added to a cached block** (the junction of a prefix cached as KV
  only, or a repeated prompt's replay boundary) costs one checkpoint and no KV.

Eviction stays the base pool's: LRU over leaf blocks, tail first, KV and state
of a block leaving together.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from twin.cache.base import Hit, RequestPolicy
from twin.cache.block_cache import BlockCache
from twin.cache.block_segment import BlockRef, Segment
from twin.model import ModelSpec


class KVOnly(int):
    """A checkpoint position whose block keeps KV but no recurrent state.

    A policy of a :class:`SparseBlockCache` ends its positions with one when the
    furthest block to cache (the last full block of input + output) is not one
    its retention rule keeps a state on; plain ints are state positions.
    """

    __slots__ = ()


class SparseBlockCache(BlockCache):
    """:class:`BlockCache` whose blocks hold a recurrent state only where asked."""

    def __init__(
        self, model: ModelSpec, capacity_bytes: int, policy: RequestPolicy, block_size: int = 32
    ) -> None:
        self.kv_block_bytes = block_size * model.kv_bytes_per_token
        self.n_states = 0  # blocks holding a state
        super().__init__(model, capacity_bytes, policy, block_size)

    # ------------------------------------------------------------------ bytes
    @property
    def ssm_bytes(self) -> int:
        return self.n_states * self.ckpt_bytes

    @property
    def used_bytes(self) -> int:
        return len(self.blocks) * self.kv_block_bytes + self.n_states * self.ckpt_bytes

    def node_bytes(self, node: BlockRef) -> int:
        return self.kv_block_bytes + (self.ckpt_bytes if self._has_state(node) else 0)

    # ------------------------------------------------------------------ queries
    def lookup(self, seq: np.ndarray, modules: np.ndarray | None = None) -> Hit[BlockRef]:
        """The deepest state-holding block of the longest cached KV chain of ``seq``."""
        ref, blocks, _ = self._hit(seq)
        return Hit(0, None) if ref is None else self._hit_at(ref, blocks)

    def peek(self, seq: np.ndarray) -> int:
        return self._hit(seq)[1] * self.block_size

    def junction(self, seq: np.ndarray) -> int:
        """Where ``seq``'s cached KV runs past its deepest cached state (0: it does not).

        vLLM's shared-prefix junction: ``shared_prefix_boundary`` =
        hit + ``num_uncached_common_prefix_tokens`` when the latter is positive
        (``KVCacheManager.get_computed_blocks``), the full-attention hit's end.
        """
        _, hit, kv = self._hit(seq)
        return kv * self.block_size if kv > hit else 0

    def _hit(self, seq: np.ndarray) -> tuple[BlockRef | None, int, int]:
        """(the hit's block, the hit in blocks, the cached KV chain in blocks)."""
        keys = self._hasher.keys(seq, max(len(seq) - 1, 0) // self.block_size)
        kv = self._cached(keys)
        if kv == 0:
            return None, 0, 0
        seg: Segment | None = self.blocks[keys[kv - 1]]
        i = kv - 1 - self.blocks[keys[kv - 1]].start
        # MambaManager.find_longest_cache_hit searches right to left for the first
        # cached state: here, up the chain of segments from the KV chain's end.
        while seg is not None:
            if seg.states:
                j = max((s for s in seg.states if s <= i), default=-1)
                if j >= 0:
                    return (seg, j), seg.start + j + 1, kv
            i = seg.pidx
            seg = seg.parent
        return None, 0, kv

    # ------------------------------------------------------------------ insert
    def insert(
        self, seq: np.ndarray, checkpoints: Sequence[int], modules: np.ndarray | None = None
    ) -> int:
        """Cache the KV of every full block up to ``checkpoints[-1]``, a state at the others.

        Positions are ascending; a plain int keeps the state of the block ending
        there (floored to the block grid), a :class:`KVOnly` one only says how far
        the KV goes. Blocks are taken in position order (states of cached blocks
        first, then new blocks) until the pool is full, so the cached blocks stay
        a prefix. Returns the tokens newly cached.
        """
        if not checkpoints:
            return 0
        bs, kvb, cb = self.block_size, self.kv_block_bytes, self.ckpt_bytes
        nb = min(int(checkpoints[-1]), len(seq)) // bs
        keys = self._hasher.keys(seq, nb)
        k = self._cached(keys)
        want = sorted({p // bs - 1 for p in checkpoints if not isinstance(p, KVOnly)})
        want = [b for b in want if 0 <= b < nb]
        upgrades = [b for b in want if b < k and not self._has_state(self._ref(keys, b))]
        fresh = {b for b in want if b >= k}
        attach = self._ref(keys, k - 1) if k else None
        need = (nb - k) * kvb + (len(upgrades) + len(fresh)) * cb
        if need > self.capacity - self.used_bytes:
            if attach is not None:
                self.pin(attach)  # leaf-only eviction keeps its ancestors: the chain stays k long
            self._evict_down_to(self.capacity - need)
            if attach is not None:
                self.unpin(attach)
        room = self.capacity - self.used_bytes
        end = k
        for b in upgrades:
            if room < cb:
                break
            seg, i = self._ref(keys, b)
            self._add_state(seg, i)
            room -= cb
        else:
            while end < nb and room >= kvb + (cb if end in fresh else 0):
                room -= kvb + (cb if end in fresh else 0)
                end += 1
        if end > k:
            seg = self._add_segment(keys, k, end, attach)
            for b in sorted(fresh):
                if b < end:
                    self._add_state(seg, b - k)
        elif end:
            self.touch(self._ref(keys, end - 1))
        self.peak_bytes = max(self.peak_bytes, self.used_bytes)
        self.peak_kv_bytes = max(self.peak_kv_bytes, self.kv_bytes)
        self.peak_ssm_bytes = max(self.peak_ssm_bytes, self.ssm_bytes)
        return (end - k) * bs

    def _has_state(self, node: BlockRef) -> bool:
        states = node[0].states
        return states is not None and node[1] in states

    def _add_state(self, seg: Segment, i: int) -> None:
        if seg.states is None:
            seg.states = set()
        seg.states.add(i)
        self.n_states += 1
        self.checkpoints_admitted += 1

    # ------------------------------------------------------------------ eviction
    def evict(self, node: BlockRef) -> int:
        """Drop a leaf block; return the bytes freed (its KV, and its state if it has one)."""
        if not self.evictable(node):
            raise ValueError(f"{node!r} is not evictable")
        freed = self.node_bytes(node)
        self._trim(node[0], 1)
        return freed

    def shrink_to(self, limit: int) -> int:
        """Evict LRU leaf blocks until at most ``limit`` bytes are cached; set the capacity."""
        limit = max(int(limit), 0)
        self._evict_down_to(limit)
        self.capacity = max(limit, self.used_bytes)
        return self.used_bytes

    def _evict_down_to(self, limit: int) -> None:
        """Evict leaf blocks in LRU order until ``used_bytes <= limit`` (or no candidate is left).

        Each round takes from the best candidate's tail just the blocks whose
        bytes cover what is still over (blocks differ: some hold a state).
        """
        kvb, cb = self.kv_block_bytes, self.ckpt_bytes
        while self.used_bytes > limit:
            seg = self._lru.pop()
            if seg is None:
                return
            over, n, want, states = self.used_bytes - limit, seg.n, 0, seg.states
            while n > 0 and over > 0:
                n -= 1
                want += 1
                over -= kvb + (cb if states and n in states else 0)
            self._trim(seg, max(want, 1))

    def _trim(self, seg: Segment, want: int) -> int:
        count = super()._trim(seg, want)
        states = seg.states
        if states:
            gone = [i for i in states if i >= seg.n]
            for i in gone:
                states.discard(i)
            self.n_states -= len(gone)
        return count

    def verify(self) -> None:
        """The base invariants, and the state count against the blocks holding one."""
        super().verify()
        live = {id(s): s for s in self.blocks.values()}.values()
        assert all(i < s.n for s in live for i in s.states or ()), "state past a segment's tail"
        assert self.n_states == sum(len(s.states or ()) for s in live), "state count"
