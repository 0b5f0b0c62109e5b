"""The vllm+ block pool: block-aligned hits, full blocks only, LRU over leaf blocks."""

from __future__ import annotations

import numpy as np
import pytest
from token_seqs import seq

from twin.cache import BlockCache, serve
from twin.policies import get_policy
from twin.policies.structures import make_cache
from twin.presets import get_model

HYBRID = get_model("tiny-hybrid")
BLOCK = 4 * HYBRID.kv_bytes_per_token + HYBRID.ssm_checkpoint_bytes


def pool(capacity: int = 10**12, block_size: int = 4) -> BlockCache:
    return make_cache(get_policy("vllm+", block_size=block_size), HYBRID, capacity)


def pool_of(blocks: int, block_size: int) -> BlockCache:
    """A pool with room for exactly ``blocks`` blocks."""
    per_block = block_size * HYBRID.kv_bytes_per_token + HYBRID.ssm_checkpoint_bytes
    return pool(blocks * per_block, block_size)


def test_hits_on_block_boundaries_full_blocks_only():
    c = pool()
    assert c.insert(seq(0, 10), [8]) == 8  # 2 full blocks; the partial third is not cached
    assert len(c.blocks) == 2 and c.used_bytes == 2 * BLOCK
    assert c.checkpoints_admitted == 2
    assert c.lookup(seq(0, 10)).length == 8
    assert c.lookup(np.r_[seq(0, 6), seq(99, 4)]).length == 4  # diverges inside block 2
    assert c.lookup(seq(1, 10)).length == 0
    c.verify()


def test_equal_blocks_at_other_positions_do_not_match():
    c = pool()
    c.insert(np.r_[seq(0, 4), seq(0, 4)], [8])
    assert c.lookup(np.r_[seq(50, 4), seq(0, 4)]).length == 0  # chained: prefix matters


def test_lru_over_leaf_blocks_with_chain_refresh():
    c = pool(capacity=4 * BLOCK)
    c.set_clock(0)
    c.insert(seq(0, 8), [8])  # chain A: 2 blocks
    c.set_clock(1)
    c.insert(seq(100, 8), [8])  # chain B: 2 blocks
    c.set_clock(2)
    assert c.lookup(seq(0, 8)).length == 8  # refreshes all of chain A
    c.set_clock(3)
    c.insert(seq(200, 8), [8])  # needs 2 blocks: B's go (leaf first, then its parent)
    assert c.lookup(seq(100, 8)).length == 0
    assert c.lookup(seq(0, 8)).length == 8
    assert c.evictions == 2
    c.verify()


def test_pinned_chain_is_kept_and_overflow_is_cut():
    c = pool(capacity=3 * BLOCK)
    c.insert(seq(0, 8), [8])
    hit = c.lookup(seq(0, 8))
    c.pin(hit.node)
    assert c.insert(seq(100, 12), [12]) == 4  # one block of room; the pinned chain stays
    c.unpin(hit.node)
    assert c.lookup(seq(0, 8)).length == 8
    c.verify()


def test_block_size_one_hits_every_token():
    c = pool(block_size=1)
    serve(c, seq(0, 5), np.r_[seq(0, 5), seq(10, 2)])
    assert c.lookup(np.r_[seq(0, 5), seq(10, 1), seq(70, 3)]).length == 6


def test_speculative_insert_reports_block_aligned_branches():
    c = pool()
    c.insert(seq(0, 12), [12])
    assert c.speculative_insert(seq(0, 12)) is None  # all cached
    assert c.speculative_insert(np.r_[seq(0, 8), seq(50, 4)]) == 8
    assert c.speculative_insert(seq(90, 8)) is None


class _ReferencePool:
    """vLLM-style pool, block by block: exact tuple keys, path stamps, full-scan LRU."""

    def __init__(self, capacity_blocks: int, block_size: int) -> None:
        self.cap, self.bs = capacity_blocks, block_size
        self.blocks: dict[tuple, dict] = {}  # prefix -> {t, nid, children, lock}
        self.clock = self.nid = self.evictions = 0

    def _chain(self, seq, nb: int) -> list[tuple]:
        return [tuple(seq[: (i + 1) * self.bs].tolist()) for i in range(nb)]

    def _cached(self, chain: list[tuple]) -> int:
        return next((i for i, key in enumerate(chain) if key not in self.blocks), len(chain))

    def _stamp(self, chain: list[tuple], k: int) -> None:
        for key in chain[:k]:
            self.blocks[key]["t"] = self.clock

    def serve(self, prompt, full) -> int:
        chain = self._chain(prompt, len(prompt) // self.bs)
        hit = self._cached(chain)
        self._stamp(chain, hit)
        pinned = chain[hit - 1] if hit else None
        chain = self._chain(full, len(full) // self.bs)
        k = self._cached(chain)
        attach = chain[k - 1] if k else None
        for p in (pinned, attach):
            if p is not None:
                self.blocks[p]["lock"] += 1
        while len(self.blocks) + len(chain) - k > self.cap:
            leaves = [
                (b["t"], b["nid"], key)
                for key, b in self.blocks.items()
                if not b["children"] and not b["lock"]
            ]
            if not leaves:
                break
            key = min(leaves)[2]
            del self.blocks[key]
            if len(key) > self.bs:
                self.blocks[key[: -self.bs]]["children"] -= 1
            self.evictions += 1
        nb = min(len(chain), k + self.cap - len(self.blocks))
        for i in range(k, nb):
            self.nid += 1
            self.blocks[chain[i]] = {"t": self.clock, "nid": self.nid, "children": 0, "lock": 0}
            if i:
                self.blocks[chain[i - 1]]["children"] += 1
        self._stamp(chain, nb)
        for p in (pinned, attach):
            if p is not None:
                self.blocks[p]["lock"] -= 1
        self.clock += 1
        return hit * self.bs


@pytest.mark.parametrize("block_size", [1, 2, 3, 4])
def test_segment_pool_equals_a_block_by_block_reference(block_size):
    rng = np.random.default_rng(block_size)
    for trial in range(25):
        cap_blocks = int(rng.integers(2, 40))
        pool = pool_of(cap_blocks, block_size)
        ref = _ReferencePool(cap_blocks, block_size)
        fulls: list[np.ndarray] = []
        for _ in range(80):
            base = fulls[int(rng.integers(len(fulls)))] if fulls and rng.random() < 0.7 else []
            cut = int(rng.integers(0, len(base) + 1)) if len(base) else 0
            prompt = np.r_[base[:cut], rng.integers(0, 3, rng.integers(1, 9))].astype(np.int32)
            full = np.r_[prompt, rng.integers(0, 3, rng.integers(1, 5))].astype(np.int32)
            assert serve(pool, prompt, full).length == ref.serve(prompt, full), trial
            pool.verify()
            assert len(pool.blocks) == len(ref.blocks)
            fulls.append(full)
        assert pool.evictions == ref.evictions


def test_thue_morse_sequences_do_not_collide():
    """Any polynomial hash mod 2**64 maps a Thue-Morse sequence and its complement
    to the same key once they are 2**11 tokens long; block keys must not."""
    n = 2048
    t = np.array([bin(i).count("1") & 1 for i in range(n)], np.int32)
    a, b = t + 5, (1 - t) + 5  # differ at every position
    cache = pool(block_size=32)
    serve(cache, a, np.r_[a, [1]].astype(np.int32))
    assert cache.lookup(b).length == 0
    cache.insert(np.r_[b, [1]].astype(np.int32), [n + 1])
    cache.verify()
    assert cache.lookup(a).length == n and cache.lookup(b).length == n


def test_peek_reports_the_lookup_length_and_changes_no_recency():
    cache = pool_of(2, 4)  # room for two blocks
    first, second = seq(1, 4), seq(100, 4)
    serve(cache, first, np.r_[first, [9]].astype(np.int32))
    serve(cache, second, np.r_[second, [9]].astype(np.int32))
    assert cache.peek(first) == 4  # a lookup would hit and refresh `first`...
    third = seq(200, 4)
    serve(cache, third, np.r_[third, [9]].astype(np.int32))
    assert cache.peek(first) == 0  # ...but peek did not: the oldest block went
    assert cache.peek(second) == 4
