"""Block-granular prefix cache of the ``vllm+`` baseline (Marconi sec. 5; vLLM's block pool).

Every full block of ``block_size`` tokens is one entry: its tokens' KV plus,
for SSM-bearing models, one SSM checkpoint after its last token (the paper's
"fine-grained checkpointing" baseline). Entries are keyed by a chained prefix
hash, so equal keys mean equal prefixes; a partial last block is never cached
(vLLM caches full blocks only). A hit is the longest chain of cached blocks.

Eviction is LRU over leaf blocks (no cached child), owned by the pool as
vLLM's free queue is; a hit refreshes its whole chain. Only leaves go, so the
cached blocks of any sequence form a prefix of its block list: the longest
chain is a binary search over the request's keys, O(log n) probes.

Blocks are stored by *segment*, the run of blocks one insert created
(:mod:`twin.cache.block_segment`); the hash map sends each key
(:mod:`twin.cache.block_keys`) to its segment. So creating or evicting a run
of blocks costs a dictionary operation per block, not an object and a heap
entry per block: LRU order is the same as per block with key ``(stamp, id)``
(a leaf's parent inherits the later stamp, which is refreshing the whole path,
lazily), and an evicted tail's parent is next in line, so a run is trimmed
from the tail until the next block's key passes the best other candidate.
Segments whose tail is a leaf wait in a :class:`~twin.cache.leaf_heap.LeafHeap`.
This module keeps the segments' fields right: the pool's API, its LRU and the
trimming.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat

import numpy as np

from twin.cache.base import EvictHook, Hit, RequestPolicy, Started
from twin.cache.block_keys import BlockKeys
from twin.cache.block_segment import BlockRef, Segment
from twin.cache.leaf_heap import LeafHeap
from twin.cache.requests import ServesRequests
from twin.errors import TwinError
from twin.model import ModelSpec

__all__ = ["BlockCache", "BlockRef", "Segment"]  # the pool's node types, where they were


class BlockCache(Started, ServesRequests):
    """The block pool: same API as :class:`~twin.cache.prefix_cache.PrefixCache`.

    Nodes are :data:`BlockRef` pairs. The policy supplies admission; a hit refreshes
    its chain and eviction order is the pool's own LRU (vLLM's), so the policy is
    told of no node.
    """

    def __init__(
        self, model: ModelSpec, capacity_bytes: int, policy: RequestPolicy, block_size: int = 32
    ) -> None:
        self.start(model, capacity_bytes)
        if type(block_size) is not int or block_size < 1:
            raise TwinError(f"block size must be a positive integer (got {block_size!r})")
        self.block_size = block_size
        self.kv_per_token = model.kv_bytes_per_token
        self.block_bytes = block_size * self.kv_per_token + self.ckpt_bytes
        self.blocks: dict[int, Segment] = {}
        self.next_nid = 1
        self._lru: LeafHeap[Segment] = (
            LeafHeap()
        )  # segments whose tail is a leaf, by (tail stamp, tail id)
        self._hasher = BlockKeys(block_size)
        self.on_evict: EvictHook | None = None  # never called: write-back is the radix trees'
        self.policy = policy
        policy.bind(self)

    def set_clock(self, t: int) -> None:
        """Set recency's clock (the request protocol and snapshots do; see ``requests.py``)."""
        self.clock = t

    # ------------------------------------------------------------------ bytes
    @property
    def kv_bytes(self) -> int:
        return len(self.blocks) * self.block_size * self.kv_per_token

    @property
    def ssm_bytes(self) -> int:
        return len(self.blocks) * self.ckpt_bytes

    @property
    def used_bytes(self) -> int:
        return len(self.blocks) * self.block_bytes

    @property
    def num_nodes(self) -> int:
        return len(self.blocks)

    def node_bytes(self, node: BlockRef) -> int:
        return self.block_bytes

    # ------------------------------------------------------------------ queries
    def lookup(self, seq: np.ndarray, modules: np.ndarray | None = None) -> Hit[BlockRef]:
        """Longest chain of cached blocks of ``seq`` (block-aligned)."""
        keys = self._hasher.keys(seq, len(seq) // self.block_size)
        k = self._cached(keys)
        if k == 0:
            return Hit(0, None)
        return self._hit_at(self._ref(keys, k - 1), k)

    def _hit_at(self, ref: BlockRef, blocks: int) -> Hit[BlockRef]:
        """A hit of ``blocks`` blocks ending at ``ref``: count its state's first use, refresh."""
        seg, i = ref
        if self.has_ssm:
            if seg.ckpt_hit is None:
                seg.ckpt_hit = set()
            if i not in seg.ckpt_hit:
                seg.ckpt_hit.add(i)
                self.checkpoints_hit += 1
        self.touch(ref)
        return Hit(blocks * self.block_size, ref)

    def peek(self, seq: np.ndarray) -> int:
        """Tokens :meth:`lookup` would hit now, changing no recency (a router's probe)."""
        return self._cached(self._hasher.keys(seq, len(seq) // self.block_size)) * self.block_size

    def speculative_insert(self, seq: np.ndarray) -> int | None:
        """Block-aligned position where ``seq`` would branch off a cached chain, or ``None``."""
        keys = self._hasher.keys(seq, len(seq) // self.block_size)
        k = self._cached(keys)
        if k == 0 or k == len(keys):
            return None
        seg, i = self._ref(keys, k - 1)
        has_child = i < seg.n - 1 or bool(seg.branches and seg.branches.get(i))
        return k * self.block_size if has_child else None

    # ------------------------------------------------------------------ insert
    def insert(
        self, seq: np.ndarray, checkpoints: Sequence[int], modules: np.ndarray | None = None
    ) -> int:
        """Cache every full block of ``seq`` up to ``checkpoints[-1]`` (positions ascending).

        Each block is KV + a checkpoint, so the positions only say how far to go.
        Returns the tokens newly cached.
        """
        if not checkpoints:
            return 0
        nb = min(int(checkpoints[-1]), len(seq)) // self.block_size
        keys = self._hasher.keys(seq, nb)
        k = self._cached(keys)
        attach = self._ref(keys, k - 1) if k else None
        free = (self.capacity - self.used_bytes) // self.block_bytes
        if nb - k > free:
            if attach is not None:
                self.pin(attach)
            # Leaf-only eviction never removes an ancestor of the pinned attach
            # point, so the cached chain stays k blocks long.
            self._make_room(nb - k - free)
            if attach is not None:
                self.unpin(attach)
            nb = k + min(nb - k, (self.capacity - self.used_bytes) // self.block_bytes)
        if nb > k:
            self._add_segment(keys, k, nb, attach)
            if self.has_ssm:
                self.checkpoints_admitted += nb - k
        elif nb:
            self.touch(self._ref(keys, nb - 1))
        n = len(self.blocks)
        self.peak_bytes = max(self.peak_bytes, n * self.block_bytes)
        self.peak_kv_bytes = max(self.peak_kv_bytes, n * self.block_size * self.kv_per_token)
        self.peak_ssm_bytes = max(self.peak_ssm_bytes, n * self.ckpt_bytes)
        return (nb - k) * self.block_size if nb > k else 0

    def _add_segment(self, keys: list[int], k: int, end: int, attach: BlockRef | None) -> Segment:
        """Cache blocks ``k .. end - 1`` of ``keys`` as one segment hanging off ``attach``."""
        parent, pidx = attach if attach is not None else (None, -1)
        seg = Segment(keys[k:end], k, self.next_nid, self.clock, parent, pidx)
        self.next_nid += end - k
        self.blocks.update(zip(seg.keys, repeat(seg)))
        if parent is not None:
            if parent.branches is None:
                parent.branches = {}
            parent.branches[pidx] = parent.branches.get(pidx, 0) + 1
            self._push(parent)  # its tail may have stopped being a leaf
        self._push(seg)
        return seg

    # ------------------------------------------------------------------ pins, access, eviction
    def pin(self, node: BlockRef) -> None:
        seg, i = node
        if seg.locks is None:
            seg.locks = {}
        seg.locks[i] = seg.locks.get(i, 0) + 1
        if i == seg.n - 1:
            self._lru.discard(seg)  # a pinned tail is no candidate

    def unpin(self, node: BlockRef) -> None:
        seg, i = node
        assert seg.locks and seg.locks.get(i), "unpin without pin"
        seg.locks[i] -= 1
        if not seg.locks[i]:
            del seg.locks[i]
            self._push(seg)

    def touch(self, node: BlockRef) -> None:
        """Stamp a block accessed now (its chain, lazily: see the module docstring)."""
        seg, i = node
        if seg.stamps is None:
            seg.stamps = {}
        seg.stamps[i] = self.clock
        if i == seg.n - 1:
            self._push(seg)

    def evictable(self, node: BlockRef) -> bool:
        seg, i = node
        return 0 <= i < seg.n and seg.is_leaf(i)

    def evict(self, node: BlockRef) -> int:
        """Drop a leaf block; return the bytes freed."""
        if not self.evictable(node):
            raise ValueError(f"{node!r} is not evictable")
        self._trim(node[0], 1)
        return self.block_bytes

    def verify(self) -> None:
        """Assert the invariants: prefix-closed chains, branch counts, capacity."""
        live = {id(s): s for s in self.blocks.values()}
        assert sum(s.n for s in live.values()) == len(self.blocks)
        branches: dict[tuple[int, int], int] = {}
        for seg in live.values():
            assert all(self.blocks.get(k) is seg for k in seg.keys[: seg.n])
            if seg.parent is not None:
                assert id(seg.parent) in live and seg.pidx < seg.parent.n, "orphan segment"
                assert seg.start == seg.parent.start + seg.pidx + 1
                key = (id(seg.parent), seg.pidx)
                branches[key] = branches.get(key, 0) + 1
            else:
                assert seg.start == 0
        for seg in live.values():
            for i, c in (seg.branches or {}).items():
                assert c == branches.get((id(seg), i), 0)
        assert self.used_bytes <= self.capacity, "capacity exceeded"

    # ------------------------------------------------------------------ the LRU
    def _push(self, seg: Segment) -> None:
        """Re-file ``seg`` after a change: a fresh heap entry if its tail is a leaf."""
        n = seg.n
        if n and seg.is_leaf(n - 1):
            self._lru.push((seg.stamp(n - 1), seg.nid0 + n - 1), seg)
        else:
            self._lru.discard(seg)

    def shrink_to(self, limit: int) -> int:
        """Evict LRU leaf blocks until at most ``limit`` bytes are cached; set the capacity.

        As vLLM's ``BlockPool.get_new_blocks`` takes free blocks from the head of
        the free queue, evicting the cached block there (``vllm/v1/core/block_pool.py``).
        Pinned blocks stay: the capacity becomes ``max(limit, what is left)``.
        """
        limit = max(int(limit), 0)
        over = self.used_bytes - limit
        if over > 0:
            self._make_room(-(-over // self.block_bytes))
        self.capacity = max(limit, self.used_bytes)
        return self.used_bytes

    def _make_room(self, blocks: int) -> None:
        """Evict ``blocks`` leaf blocks in LRU order (fewer if the candidates run out)."""
        while blocks > 0:
            seg = self._lru.pop()
            if seg is None:
                return
            blocks -= self._trim(seg, blocks)

    def _trim(self, seg: Segment, want: int) -> int:
        """Evict up to ``want`` blocks from ``seg``'s tail while each is next in LRU order."""
        blocks, keys, top = self.blocks, seg.keys, self._lru.peek()
        branches, locks = seg.branches, seg.locks
        n, t, count = seg.n, seg.stamp(seg.n - 1), 0
        while True:
            n -= 1
            del blocks[keys[n]]
            count += 1
            if n == 0 or count == want:
                break
            j = n - 1
            tj = seg.stamp(j)
            if tj < t:
                tj = t  # the evicted child's stamp passes to its parent
            t = tj
            if (branches and branches.get(j)) or (locks and locks.get(j)):
                break  # block j keeps a child or a pin: no longer a candidate
            if top is not None and (tj, seg.nid0 + j) > top:
                break  # another candidate comes first
        seg.n = n
        self.evictions += count
        if n:
            if t > seg.stamp(n - 1):  # the new tail inherits the later stamp
                if seg.stamps is None:
                    seg.stamps = {}
                seg.stamps[n - 1] = t
            self._push(seg)
        else:
            self._lru.discard(seg)
            self._detach(seg, t)
        return count

    def _detach(self, seg: Segment, t: int) -> None:
        """``seg`` lost its last block: its parent block loses a child and inherits its stamp."""
        parent, i = seg.parent, seg.pidx
        if parent is None:
            return
        assert parent.branches is not None
        parent.branches[i] -= 1
        if not parent.branches[i]:
            del parent.branches[i]
        if t > parent.stamp(i):
            if parent.stamps is None:
                parent.stamps = {}
            parent.stamps[i] = t
        if i == parent.n - 1:
            self._push(parent)

    # ------------------------------------------------------------------ internals
    def _ref(self, keys: list[int], b: int) -> BlockRef:
        """The block at index ``b`` of a sequence whose keys are ``keys`` (must be cached)."""
        seg = self.blocks[keys[b]]
        return seg, b - seg.start

    def _cached(self, keys: list[int]) -> int:
        """Number of leading blocks of ``keys`` in the cache (they form a prefix)."""
        blocks = self.blocks
        lo, hi = 0, len(keys)
        if hi and keys[hi - 1] in blocks:
            return hi
        while lo < hi:  # invariant: keys[:lo] cached, keys[hi:] not
            mid = (lo + hi) // 2
            if keys[mid] in blocks:
                lo = mid + 1
            else:
                hi = mid
        return lo
