"""SGLang's radix cache for hybrid models (issue 14): pools, two LRUs, tombstones, the hit rule.

Hand-worked traces on ``tiny-hybrid`` (128 B of KV a token, 16,128 B a state),
following SGLang ``mem_cache/mamba_radix_cache.py``. The sizes make one pool
short and the other not, so each pool's own LRU list picks the victim.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import test_mixer_presets_run
from hypothesis import given, settings
from hypothesis import strategies as st
from test_policies import hits, random_trace
from token_seqs import seq
from typer.testing import CliRunner

from twin.cache import serve
from twin.cache.hybrid_radix import HybridRadixCache
from twin.cli import app
from twin.policies import get_policy
from twin.policies.eviction_orders import SGLANG_ORDERS
from twin.policies.structures import make_cache
from twin.presets import get_model

HYBRID = get_model("tiny-hybrid")
TRANSFORMER = get_model("tiny-transformer")
KV, CK = HYBRID.kv_bytes_per_token, HYBRID.ssm_checkpoint_bytes
workload = test_mixer_presets_run.workload  # a fixture: two conversations, 4 requests


S = seq(1000, 200)  # a shared system prompt
X, Y = np.r_[S, seq(0, 50)], np.r_[S, seq(100, 50)]  # two requests behind it


def sglang_cache(capacity: int, ratio: float = 1.0) -> HybridRadixCache:
    cache = make_cache(get_policy("sglang", mamba_full_memory_ratio=ratio), HYBRID, capacity)
    assert isinstance(cache, HybridRadixCache)
    return cache


def serve_all(cache, *prompts) -> list[int]:
    out = []
    for p in prompts:
        out.append(serve(cache, p, p).length)
        cache.verify()
    return out


def test_the_ratio_splits_the_pool_as_sglang_sizes_it():
    # model_runner: mamba = rest * r / (1 + r); the KV pool gets the rest.
    cache = sglang_cache(20 * CK, ratio=0.25)
    assert cache.state_capacity == 4 * CK and cache.kv_capacity == 16 * CK
    # Ten disjoint 20-token prompts: KV fits (200 tokens), four states do.
    prompts = [seq(100 * k, 20) for k in range(10)]
    serve_all(cache, *prompts)
    assert cache.n_ckpts == 4
    assert [cache.peek(p) for p in prompts] == [0] * 6 + [20] * 4  # the four most recent
    wide = sglang_cache(20 * CK, ratio=1.0)  # ten states fit
    serve_all(wide, *prompts)
    assert [wide.peek(p) for p in prompts] == [20] * 10


def test_state_pool_short_tombstones_the_least_recently_used_state():
    # Pools of 3 states and 378 tokens. X, then Y: the branch at 200 gets a state.
    # Stamps (insert path root->leaf, a split's upper part before its child):
    # S=3, a=4, b=5 -> the mamba LRU list is S, a, b.
    cache = sglang_cache(6 * CK)
    assert serve_all(cache, X, Y) == [0, 0]
    assert cache.n_ckpts == 3 and cache.kv_tokens == 300
    z = seq(5000, 20)
    serve_all(cache, z)  # needs a 4th state: S's goes, S keeps its KV (a tombstone)
    assert cache.n_ckpts == 3 and cache.kv_tokens == 320
    node = cache.tree.match(S).node
    assert node.depth == 200 and not node.ckpt and len(node.children) == 2
    # The hit rule: the tombstone alone is no hit; its KV serves a longer match.
    assert cache.peek(np.r_[S, seq(7000, 5)]) == 0
    assert cache.peek(X) == 250 and cache.peek(Y) == 250 and cache.peek(z) == 20


def test_kv_pool_short_evicts_the_least_recently_used_leaf_not_a_state():
    # Pools of 4 states and 504 tokens: the 250-token z overflows the KV pool only.
    # The full LRU list holds leaves: a (4) is older than b (5); S is no leaf.
    cache = sglang_cache(8 * CK)
    serve_all(cache, X, Y)
    z = seq(5000, 250)
    serve_all(cache, z)
    assert cache.kv_tokens == 500 and cache.n_ckpts == 3  # a's 50 tokens and state went
    assert cache.peek(X) == 200  # S kept its state: X resumes there
    assert cache.peek(Y) == 250 and cache.peek(z) == 250


def test_a_lookup_refreshes_the_path_so_the_other_branch_goes_first():
    cache = sglang_cache(8 * CK)
    serve_all(cache, X, Y)
    assert cache.lookup(X).length == 250  # stamps S, then a: b is now the LRU leaf
    serve_all(cache, seq(5000, 250))
    assert cache.peek(X) == 250 and cache.peek(Y) == 200


def test_evicting_the_last_leaves_deletes_a_tombstone_left_as_a_leaf():
    cache = sglang_cache(6 * CK)
    serve_all(cache, X, Y, seq(5000, 20))  # S tombstoned (above)
    # Two more states: the mamba LRU goes a, b (both leaves, KV and state).
    serve_all(cache, seq(6000, 20), seq(7000, 20))
    assert cache.peek(X) == 0 and cache.peek(Y) == 0
    assert cache.tree.match(S).length == 0  # the tombstone leaf was deleted with them
    assert cache.kv_tokens == 60 and cache.n_ckpts == 3


def test_page_size_keeps_states_on_whole_pages():
    policy = get_policy("sglang", page_size=16)
    cache = make_cache(policy, HYBRID, 10**9)
    p = seq(0, 40)
    serve(cache, p, p)
    assert cache.peek(p) == 32 and cache.peek(p[:20]) == 16 * 0  # 20 ends before the state


@pytest.mark.parametrize("seed", range(3))
def test_a_pure_transformer_gets_todays_sglang_plus_hits(seed):
    pairs = random_trace(seed)
    for capacity in (10**12, 300 * TRANSFORMER.kv_bytes_per_token):
        assert hits("sglang", TRANSFORMER, pairs, capacity) == hits(
            "sglang+", TRANSFORMER, pairs, capacity
        )


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    states=st.integers(1, 12),
    tokens=st.integers(10, 600),
    ratio=st.sampled_from([0.1, 0.5, 0.9, 1.0, 3.0]),
)
def test_pools_hold_their_bytes_and_every_hit_resumes_from_a_state(seed, states, tokens, ratio):
    cache = sglang_cache(states * CK + tokens * KV, ratio)
    rng = np.random.default_rng(seed)
    for prompt, output in random_trace(seed, 40):
        full = np.r_[prompt, output].astype(np.int32)
        hit = serve(cache, prompt, full)
        cache.verify()  # KV and states within their pools, counters exact, tidy tree
        assert cache.kv_bytes <= cache.kv_capacity and cache.ssm_bytes <= cache.state_capacity
        if hit.length:
            node, path = hit.node, []
            assert node.ckpt and node.depth == hit.length  # the state at the hit exists
            while node.parent is not None:
                path.append(node.tokens)
                node = node.parent
            assert np.array_equal(np.concatenate(path[::-1]), prompt[: hit.length])
        if rng.random() < 0.2:
            cache.shrink_to(int(cache.capacity * 0.7))  # the shared pool reclaims pages
            cache.verify()


@pytest.mark.parametrize("eviction", sorted(SGLANG_ORDERS))
def test_simulate_sglang_on_a_hybrid_runs_with_each_eviction_policy(eviction, workload, tmp_path):
    out = tmp_path / "sim"
    # SGLang 0.5.10.post1: MambaRadixCache takes every order and keeps its LRU lists (0.5.23
    # refuses all but lru on a hybrid: tests/test_engine_releases.py).
    args = ["simulate", str(workload), "-m", "tiny-hybrid", "--gpu", "h100"]
    args += ["--engine", "sglang==0.5.10.post1"]
    sets = ["--set", f"radix_eviction_policy={eviction}", "--set", "mamba_full_memory_ratio=0.5"]
    result = CliRunner().invoke(app, [*args, *sets, "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"]["measured"] == 4


def test_a_hit_queues_each_node_on_its_path_once():
    """on_hit refreshes the path with fresh stamps and queues each node once (no stale
    duplicate at the old stamp)."""
    cache = sglang_cache(100 * CK)
    serve_all(cache, X, Y)  # S is a branch point: X and Y leaves under it
    policy = cache.policy
    full, states = len(policy._full), len(policy._states)
    hit = cache.lookup(X)
    assert hit.length > 0
    # The path from X's leaf to the root: S (a state, inner) and X's leaf (a state, a leaf).
    assert len(policy._full) - full == 1
    assert len(policy._states) - states == 2
