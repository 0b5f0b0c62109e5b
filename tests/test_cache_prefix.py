"""The radix-tree prefix cache: lookups, speculative insertion, bytes, eviction mechanics, pins."""

from __future__ import annotations

import numpy as np
import pytest
from marconi_oracle import restore, tree_policy
from token_seqs import BIG, a, path_tokens, seq

from twin.cache import PrefillFlops, PrefixCache, serve
from twin.policies.structures import make_cache
from twin.presets import get_model

pytestmark = pytest.mark.usefixtures("oracle_structure")

HYBRID = get_model("tiny-hybrid")
TRANSFORMER = get_model("tiny-transformer")
SSM = get_model("tiny-ssm")
KV, CK = HYBRID.kv_bytes_per_token, HYBRID.ssm_checkpoint_bytes


def cache_of(model=HYBRID, capacity=BIG, policy="sglang+", **options) -> PrefixCache:
    return make_cache(tree_policy(policy, **options), model, capacity)


def test_hybrid_hit_needs_a_checkpoint_transformer_does_not():
    for model, expect in ((HYBRID, 0), (TRANSFORMER, 3)):
        c = cache_of(model)
        c.insert(a(1, 2, 3, 4, 5), [5])
        assert c.lookup(a(1, 2, 3, 9)).length == expect  # ends inside the edge
        assert c.lookup(a(1, 2, 3, 4, 5, 6)).length == 5
    c = cache_of(HYBRID)
    c.insert(a(1, 2, 3, 4, 5), [2, 5])  # a checkpoint after 2 tokens splits the edge
    hit = c.lookup(a(1, 2, 3, 9))
    assert hit.length == 2 and hit.node.ckpt and hit.node.depth == 2
    c.verify()


def test_pure_ssm_holds_only_states():
    c = cache_of(SSM)
    c.insert(seq(0, 50), [20, 50])
    assert c.kv_bytes == 0 and c.ssm_bytes == 2 * SSM.ssm_checkpoint_bytes
    assert c.lookup(seq(0, 40)).length == 20
    c.verify()


def test_speculative_insert_finds_new_branch_points():
    c = cache_of(HYBRID)
    assert c.speculative_insert(a(1, 2, 3)) is None  # empty tree
    c.insert(a(1, 2, 3, 4, 5, 6), [6])
    assert c.speculative_insert(a(1, 2, 3, 9)) == 3  # would split the edge after 3
    assert c.speculative_insert(a(1, 2, 3)) == 3  # ends inside an edge: a split too
    assert c.speculative_insert(a(1, 2, 3, 4, 5, 6, 7)) is None  # extends the leaf
    assert c.speculative_insert(a(8, 9)) is None  # shares nothing
    c.insert(a(1, 2, 3, 9), [3, 4])
    assert c.speculative_insert(a(1, 2, 3, 7)) is None  # branch point holds a state already
    assert c.num_nodes == 4  # speculation never changes the tree


def test_insert_cuts_at_last_checkpoint_and_counts_bytes():
    c = cache_of(HYBRID)
    assert c.insert(seq(0, 10), [4, 7]) == 7  # tokens after the last state are useless
    assert c.kv_tokens == 7 and c.n_ckpts == 2
    assert c.used_bytes == 7 * KV + 2 * CK
    assert c.checkpoints_admitted == 2
    assert c.insert(seq(0, 10), [4, 7]) == 0  # already there
    assert c.checkpoints_admitted == 2
    c.verify()


def test_evicting_a_leaf_and_an_intermediate_node():
    c = cache_of(HYBRID, policy="marconi")
    c.insert(a(1, 2, 3, 4), [2, 4])
    upper = c.lookup(a(1, 2, 9)).node
    leaf = c.lookup(a(1, 2, 3, 4)).node
    assert upper.depth == 2 and leaf.depth == 4 and leaf.parent is upper
    # An intermediate node gives its KV to its child and drops its state.
    assert c.evict(upper) == CK
    assert leaf.depth == 4 and list(leaf.tokens) == [1, 2, 3, 4] and leaf.parent is c.root
    assert c.lookup(a(1, 2, 9)).length == 0
    assert c.kv_tokens == 4 and c.n_ckpts == 1
    # A leaf disappears with its KV and state.
    assert c.evict(leaf) == 4 * KV + CK
    assert c.used_bytes == 0 and c.num_nodes == 1 and c.evictions == 2
    c.verify()


def test_leaf_eviction_tidies_a_stateless_branch():
    c = cache_of(HYBRID)
    c.insert(a(1, 2, 3, 4), [4])
    c.insert(a(1, 2, 7, 8), [4])  # branch at 2 without a state (not admitted there)
    branch = c.lookup(a(1, 2, 3, 4)).node.parent
    assert branch.depth == 2 and not branch.ckpt
    c.evict(c.lookup(a(1, 2, 7, 8)).node)
    # The stateless one-child branch folded into its remaining child.
    assert c.num_nodes == 2 and c.lookup(a(1, 2, 3, 4)).length == 4
    c.verify()


def test_pinned_nodes_survive_and_what_cannot_fit_is_not_admitted():
    cap = 10 * KV + 2 * CK
    c = cache_of(HYBRID, cap)
    c.insert(seq(0, 6), [6])
    held = c.lookup(seq(0, 6)).node
    c.pin(held)
    # Room for 4 more tokens + 1 state only: the pinned leaf cannot go.
    assert c.insert(seq(100, 6), [3, 6]) == 3
    assert c.lookup(seq(0, 6)).node is held
    assert c.used_bytes <= cap
    assert c.insert(seq(200, 50), [50]) == 0  # larger than anything evictable
    c.unpin(held)
    assert c.insert(seq(200, 8), [8]) == 8  # now the old entries make way
    assert c.lookup(seq(0, 6)).length == 0
    c.verify()


def test_transformer_truncates_to_what_fits():
    cap = 5 * TRANSFORMER.kv_bytes_per_token
    c = cache_of(TRANSFORMER, cap)
    assert c.insert(seq(0, 8), [8]) == 5
    assert c.lookup(seq(0, 8)).length == 5
    c.verify()


def test_two_phase_use_pins_the_hit_until_insert():
    c = cache_of(HYBRID, 12 * KV + 2 * CK)
    c.insert(seq(0, 6), [6])
    hit = c.lookup(np.r_[seq(0, 6), a(50)])
    c.pin(hit.node)  # request starts: its state must stay
    c.insert(seq(300, 8), [8])  # another request completes meanwhile
    assert c.lookup(seq(0, 6)).node is hit.node
    c.insert(np.r_[seq(0, 6), a(50, 51)], [8])  # our request completes
    c.unpin(hit.node)
    c.verify()


def test_snapshot_restore_replays_identically():
    rng = np.random.default_rng(3)
    reqs = []
    for i in range(60):
        p = np.r_[seq(0, 20), rng.integers(0, 4, rng.integers(1, 30))].astype(np.int32)
        reqs.append(np.r_[p, a(1000 + i)])
    cap = 200 * KV + 8 * CK
    # marconi-twin: its recency lives on the nodes (``marconi`` keeps its own
    # logical clock, and only ever snapshots an empty cache).
    live = cache_of(HYBRID, cap, "marconi-twin", alpha=0.7)
    for full in reqs[:30]:
        serve(live, full[:-1], full)
    snap = live.snapshot()
    copy = restore(snap, HYBRID, tree_policy("marconi-twin", alpha=0.7))
    copy.verify()
    assert copy.used_bytes == live.used_bytes and copy.num_nodes == live.num_nodes
    for full in reqs[30:]:
        assert serve(live, full[:-1], full).length == serve(copy, full[:-1], full).length
    assert live.evictions == copy.evictions


def test_hits_are_exact_prefixes():
    c = cache_of(HYBRID)
    c.insert(np.r_[seq(0, 10), seq(50, 5)], [10, 15])
    prompt = np.r_[seq(0, 10), seq(50, 3)]
    hit = c.lookup(prompt)
    assert hit.length == 10
    assert np.array_equal(path_tokens(hit.node), prompt[: hit.length])


def test_prefill_flops_matches_the_model():
    for name in ("marconi-hybrid-7b", "jamba-1.5-mini", "tiny-ssm", "llama-3-8b"):
        m = get_model(name)
        f = PrefillFlops(m)
        assert f.exact
        for n, c in ((1, 0), (100, 7), (4096, 10000)):
            assert f.total(n, c) == pytest.approx(m.prefill_flops(n, c).total, rel=1e-12)


def test_match_resumes_from_a_prefix_match():
    c = cache_of(TRANSFORMER)
    c.insert(np.r_[seq(0, 10), seq(40, 5)], [15])
    c.insert(np.r_[seq(0, 10), seq(70, 5)], [15])
    tree = c.tree
    for prefix_len, full in (
        (10, np.r_[seq(0, 10), seq(40, 9)]),  # prefix ends on a node boundary
        (6, np.r_[seq(0, 10), seq(70, 2)]),  # prefix ends inside an edge
        (12, np.r_[seq(0, 10), seq(40, 1), a(99), seq(40, 3)]),  # prefix already diverged
    ):
        start = tree.match(full[:prefix_len])
        resumed, fresh = tree.match(full, start, prefix_len), tree.match(full)
        assert (resumed.node, resumed.length, resumed.partial) == (
            fresh.node,
            fresh.length,
            fresh.partial,
        )


@pytest.mark.parametrize("model", [HYBRID, get_model("tiny-transformer")])
def test_wider_integer_sequences_match_like_int32(model):
    narrow, wide = cache_of(model), cache_of(model)
    first, second = seq(1, 20), np.r_[seq(1, 12), seq(500, 9)].astype(np.int32)
    for c, cast in ((narrow, np.int32), (wide, np.int64)):
        serve(c, first.astype(cast), np.r_[first, [7]].astype(cast))
        c.speculative_insert(second.astype(cast))
        c.insert(np.r_[second, [8]].astype(cast), [12, 22])
        c.verify()
    for probe in (first, second, seq(1, 12)):
        assert wide.lookup(probe.astype(np.int64)).length == narrow.lookup(probe).length


def test_failed_eviction_keeps_the_requested_checkpoints_consistent():
    # A Marconi eviction round that cannot make room may fold a state on the
    # insert's own path; what is then admitted must still be tidy and hit.
    cache = cache_of(policy="marconi", alpha=0.0)
    x = np.arange(1, 11, dtype=np.int32)
    cache.insert(x, [5, 10])
    cache.capacity = cache.used_bytes + 10 * HYBRID.kv_bytes_per_token
    cache.insert(np.r_[x, np.arange(100, 120)].astype(np.int32), [5, 30])
    cache.verify()
    assert cache.lookup(x[:5]).length == 5


@pytest.mark.parametrize("model", [HYBRID, get_model("tiny-transformer")])
def test_peek_equals_lookup_without_touching_the_cache(model):
    cache = cache_of(model)
    x = seq(1, 12)
    serve(cache, x, np.r_[x, [5]].astype(np.int32))
    probe = np.r_[x, [5], seq(300, 4)].astype(np.int32)  # past the state after the output
    cache.set_clock(cache.clock + 1)
    state = [(n.t, n.ckpt_hit) for n in cache.tree.nodes()]
    peeked = cache.peek(probe)
    assert [(n.t, n.ckpt_hit) for n in cache.tree.nodes()] == state
    assert peeked == cache.lookup(probe).length == 13
    assert [(n.t, n.ckpt_hit) for n in cache.tree.nodes()] != state  # a lookup does refresh
