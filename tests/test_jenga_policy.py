"""The ``jenga`` policy's prefix-caching rules (Jenga, arXiv 2503.18292, sec. 5; issue 15)."""

from __future__ import annotations

import numpy as np
import pytest
from token_seqs import seq

from twin.cache import RequestCache
from twin.errors import TwinError
from twin.policies import get_policy
from twin.policies.structures import make_cache
from twin.presets import get_model


def cache_for(policy: str, model: str, capacity: int = 10**12):
    return make_cache(get_policy(policy), get_model(model), capacity)


def test_mamba_hits_land_on_multiples_of_512():
    cache = cache_for("jenga", "tiny-hybrid")
    first = seq(0, 1300)
    RequestCache(cache).serve(first, first)
    nxt = np.concatenate((first, seq(5000, 50)))
    assert cache.lookup(nxt).length == 1024  # the last multiple of 512 inside the prefix
    assert cache.lookup(seq(0, 700)).length == 512
    assert cache.lookup(seq(0, 500)).length == 0


def test_full_attention_hits_every_prefix_token():
    cache = cache_for("jenga", "tiny-transformer")
    RequestCache(cache).serve(seq(0, 1300), seq(0, 1300))
    assert cache.lookup(seq(0, 777)).length == 777


def test_ties_go_to_the_longest_prefix():
    kv = get_model("tiny-transformer").kv_bytes_per_token
    cache = cache_for("jenga", "tiny-transformer", capacity=300 * kv)
    cache.set_clock(0)
    cache.insert(seq(0, 100), [100])
    cache.insert(seq(1000, 200), [200])  # same access time, longer prefix
    cache.set_clock(1)
    cache.insert(seq(5000, 100), [100])  # needs 100 tokens: one victim
    assert cache.peek(seq(0, 100)) == 100
    assert cache.peek(seq(1000, 200)) == 0


@pytest.mark.parametrize(("policy", "parent_t"), [("jenga", 0), ("sglang+", 2)])
def test_only_the_last_cached_token_is_refreshed(policy, parent_t):
    cache = cache_for(policy, "tiny-hybrid")
    x = seq(0, 1024)
    cache.set_clock(0)
    cache.insert(x, [512, 1024])
    cache.set_clock(2)
    hit = cache.lookup(x)
    assert hit.length == 1024
    leaf = hit.node
    parent = leaf.parent
    cache.evict(leaf)  # the leaf leaves; what does its parent remember?
    cache.policy.on_node_changed(parent)
    assert parent.t == parent_t


def test_state_interval_is_checked_and_reported():
    with pytest.raises(TwinError, match="state_interval must be a positive integer"):
        get_policy("jenga", state_interval=0)
    cache = cache_for("jenga", "marconi-hybrid-7b")
    stats = cache.policy.stats()
    assert stats["state_interval"] == 512
    # The LCM of 1 MiB attention pages and a 26.8 MB state is too large: attention
    # pages are padded so that 25 fill one state-sized large page.
    small = stats["small_page_bytes"]["attention"]
    assert stats["large_page_bytes"] == stats["small_page_bytes"]["mamba2"] == 26_787_840
    assert small >= 16 * get_model("marconi-hybrid-7b").kv_bytes_per_token
    assert stats["large_page_bytes"] // small == 25


def test_sliding_window_hybrid_hits_on_multiples_of_512_holding_only_windows():
    model = get_model("tiny-swa-hybrid")
    cache = cache_for("jenga", "tiny-swa-hybrid")
    first = seq(0, 1300)
    RequestCache(cache).serve(first, first)
    assert cache.lookup(np.concatenate((first, seq(9000, 10)))).length == 1024
    # The window's layers keep only each node's last W tokens (the cache's rule).
    assert cache.kv_bytes < 1024 * model.kv_bytes_per_token
    assert cache.swa_tokens < cache.kv_tokens
