"""The cache's hit rule and bytes per mixer kind (issue 13; Jenga's sliding-window rule)."""

from __future__ import annotations

import numpy as np
import pytest
from marconi_oracle import tree_policy
from token_seqs import BIG, seq

from twin.cache import PrefixCache
from twin.cache.kinds import KindBytes
from twin.model import ModelSpec
from twin.policies.structures import make_cache
from twin.presets import get_model

pytestmark = pytest.mark.usefixtures("oracle_structure")

SWA = get_model("tiny-swa")  # 3 swa layers (window 8) + 1 full, no recurrent layer
W = 8
FULL, SLIDE = SWA.kv_bytes_per_token_of("attention"), SWA.kv_bytes_per_token_of("swa")
SWA_HYBRID = get_model("tiny-swa-hybrid")  # + Mamba2: hits only at checkpoints


def cache_of(model: ModelSpec, capacity: int = BIG, policy: str = "sglang+") -> PrefixCache:
    return make_cache(tree_policy(policy), model, capacity)


def test_kind_bytes_known_answers() -> None:
    k = KindBytes(SWA)
    assert (k.full_kv_per_token, k.swa_kv_per_token, k.window) == (128, 3 * 128, 8)
    assert [k.tail(n) for n in (0, 3, 8, 9, 100)] == [0, 3, 8, 8, 8]
    assert k.node_bytes(100, False) == 100 * 128 + 8 * 384
    assert k.hit_inside_ok(100, 100) and k.hit_inside_ok(8, 3) and not k.hit_inside_ok(9, 3)
    plain = KindBytes(get_model("tiny-hybrid"))  # no window: every token, like before
    assert plain.window is None and plain.swa_kv_per_token == 0
    assert plain.node_bytes(100, True) == 100 * 128 + get_model("tiny-hybrid").ssm_checkpoint_bytes


def test_old_sliding_window_kv_is_dropped_and_counted_as_freed() -> None:
    c = cache_of(SWA)
    c.insert(seq(0, 100), [100])
    assert c.used_bytes == 100 * FULL + W * SLIDE
    assert (c.kv_tokens, c.swa_tokens) == (100, W)  # [0, 92)'s window KV dropped
    assert c.lookup(seq(0, 100)).length == 100  # at the node's end the window is there
    # Inside the long node the window was dropped: no hit (the node starts at the root).
    assert c.lookup(np.r_[seq(0, 60), seq(900, 5)]).length == 0
    # A request branching at 60 recomputed [0, 60): the split keeps both tails.
    c.insert(np.r_[seq(0, 60), seq(900, 30)], [90])
    c.verify()
    assert c.used_bytes == 130 * FULL + 3 * W * SLIDE
    assert c.lookup(np.r_[seq(0, 60), seq(700, 3)]).length == 60


def test_short_nodes_keep_every_token_so_partial_hits_stay() -> None:
    c = cache_of(SWA)
    c.insert(seq(0, 6), [6])  # shorter than the window: all of it is held
    assert c.used_bytes == 6 * (FULL + SLIDE)
    assert c.lookup(np.r_[seq(0, 4), seq(50, 2)]).length == 4


def test_hybrid_with_swa_hits_at_checkpoints_with_their_windows() -> None:
    c = cache_of(SWA_HYBRID)
    kinds = KindBytes(SWA_HYBRID)
    c.insert(seq(0, 50), [20, 50])  # two nodes: 20 and 30 tokens, each with a state
    expect = 50 * kinds.full_kv_per_token + 2 * W * kinds.swa_kv_per_token
    assert c.used_bytes == expect + 2 * SWA_HYBRID.ssm_checkpoint_bytes
    assert c.lookup(np.r_[seq(0, 45), seq(800, 3)]).length == 20
    c.verify()


def _window_covered(cache: PrefixCache) -> None:
    """Every node end finds the sliding-window KV of its last W tokens on its path."""
    for node in cache.tree.nodes():
        held: set[int] = set()
        n = node
        while n.parent is not None:
            held |= set(range(n.depth - cache.kinds.tail(len(n.tokens)), n.depth))
            n = n.parent
        assert set(range(max(0, node.depth - W), node.depth)) <= held


@pytest.mark.parametrize("model", [SWA, SWA_HYBRID], ids=["swa", "swa-hybrid"])
@pytest.mark.parametrize("policy", ["sglang+", "marconi"])
def test_random_traffic_keeps_counters_capacity_and_windows(model, policy) -> None:
    rng = np.random.default_rng(7)
    kinds = KindBytes(model)
    capacity = 40 * (kinds.full_kv_per_token + kinds.swa_kv_per_token) + 3 * kinds.state_bytes
    c = cache_of(model, capacity, policy)
    stems = [rng.integers(0, 50, size=int(rng.integers(5, 30))).astype(np.int32) for _ in range(4)]
    for i in range(150):
        s = np.r_[stems[i % 4], rng.integers(0, 50, size=int(rng.integers(1, 25)))].astype(np.int32)
        c.set_clock(i)
        c.lookup(s)
        branch = c.speculative_insert(s)
        c.insert(s, sorted({len(s), *([branch] if branch else [])}))
        c.verify()
        _window_covered(c)
    assert c.evictions > 0  # the capacity was tight enough to exercise eviction


def _pinned_tight(model: ModelSpec, first: np.ndarray, ckpts: list[int], free: int) -> PrefixCache:
    """A cache holding ``first`` pinned (nothing evictable), ``free`` bytes left."""
    c = cache_of(model)
    c.insert(first, ckpts)
    node = c._match(first).node
    c.pin(node)
    c.capacity = c.used_bytes + free
    return c


def test_a_truncated_insert_counts_the_split_tail_of_a_state_placed_inside_an_edge() -> None:
    # Issue 15c: a state placed inside a pinned edge splits it (one more window tail);
    # the truncation once charged only the state, and the insert overflowed by the tail's
    # bytes (with room for the state but not the tail, here 1 byte short).
    ckpt = SWA_HYBRID.ssm_checkpoint_bytes
    slide = SWA_HYBRID.kv_bytes_per_token_of("swa")
    c = _pinned_tight(SWA_HYBRID, seq(0, 100), [100], ckpt + W * slide - 1)
    c.insert(np.r_[seq(0, 60), seq(900, 30)], [60])  # everything pinned: cut, not evicted
    c.verify()
    assert c.used_bytes <= c.capacity


def test_a_truncated_insert_counts_the_split_tail_of_the_chains_attach_point() -> None:
    # The same for a model without states: the new chain attached inside a pinned edge.
    c = _pinned_tight(SWA, seq(0, 100), [100], 12 * (FULL + SLIDE))
    c.insert(np.r_[seq(0, 60), seq(900, 30)], [90])
    c.verify()
    assert c.used_bytes <= c.capacity
    assert c.lookup(np.r_[seq(0, 60), seq(900, 30)]).length > 60  # a prefix of it still fits
