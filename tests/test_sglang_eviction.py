"""SGLang's ``--radix-eviction-policy`` orders (issue 14) on a hand-worked trace.

SGLang ``mem_cache/evict_policy.py``: each strategy is a priority key over the
radix cache's evictable leaves, the smallest evicted first; hit counts grow on
every node an insert walks (``RadixCache._insert_helper``).
"""

from __future__ import annotations

import numpy as np
import pytest

from twin.cache import serve
from twin.engine.modes import get_mode
from twin.errors import TwinError
from twin.policies import get_policy
from twin.policies.structures import make_cache
from twin.presets import get_model

TRANSFORMER = get_model("tiny-transformer")
HYBRID = get_model("tiny-hybrid")


def block(k: int) -> np.ndarray:
    return np.arange(100 * k, 100 * k + 10, dtype=np.int32)


A, B, C, D = (block(k) for k in range(1, 5))

# Four disjoint 10-token prompts (no output), room for three:
#   t=0 A (new, 1 hit)   t=1 B (new, 1)   t=2 B again (2 hits, access 2)
#   t=3 C (new, 1)       t=4 A again (2 hits, access 4)
#   t=5 D needs 10 tokens: one leaf goes.
# Last access A=4 B=2 C=3; creation A<B<C; hits A=2 B=2 C=1.
EXPECTED_VICTIM = {
    "lru": "B",  # oldest access
    "priority": "B",  # every request has SGLang's default priority: LRU
    "mru": "A",  # newest access
    "fifo": "A",  # created first
    "filo": "C",  # created last
    "lfu": "C",  # fewest hits (1)
    "slru": "C",  # the only probationary leaf (hits < 2)
}


@pytest.mark.parametrize("eviction", sorted(EXPECTED_VICTIM))
def test_each_eviction_order_picks_the_hand_worked_victim(eviction):
    cache = make_cache(
        get_policy("sglang+", eviction=eviction), TRANSFORMER, 30 * TRANSFORMER.kv_bytes_per_token
    )
    for prompt in (A, B, B, C, A, D):
        serve(cache, prompt, prompt)
    cache.verify()
    gone = [name for name, s in zip("ABC", (A, B, C), strict=True) if cache.peek(s) == 0]
    assert gone == [EXPECTED_VICTIM[eviction]]
    assert cache.peek(D) == 10


# A second trace separates the orders the first one pairs (mru/fifo, filo/lfu/slru):
#   A B C A C A C B, then D. Last access A=5 C=6 B=7; creation A<B<C; hits A=3 B=2 C=3,
#   so every leaf is protected under slru (hits >= 2) and slru falls back to LRU.
SECOND_TRACE = (A, B, C, A, C, A, C, B, D)
SECOND_VICTIM = {
    "lru": "A",  # oldest access
    "mru": "B",  # newest access (fifo still evicts A: created first)
    "fifo": "A",
    "filo": "C",  # created last
    "lfu": "B",  # fewest hits (2)
    "slru": "A",  # no probationary leaf: LRU among the protected
}


@pytest.mark.parametrize("eviction", sorted(SECOND_VICTIM))
def test_a_second_trace_separates_the_orders_the_first_pairs(eviction):
    cache = make_cache(
        get_policy("sglang+", eviction=eviction), TRANSFORMER, 30 * TRANSFORMER.kv_bytes_per_token
    )
    for prompt in SECOND_TRACE:
        serve(cache, prompt, prompt)
    gone = [name for name, s in zip("ABC", (A, B, C), strict=True) if cache.peek(s) == 0]
    assert gone == [SECOND_VICTIM[eviction]]
    # With the first trace, each pair of orders the two traces share a victim in differs once.
    both = {e: (EXPECTED_VICTIM[e], SECOND_VICTIM[e]) for e in SECOND_VICTIM}
    assert len(set(both.values())) == len(both)


def test_lru_is_todays_sglang_plus():
    default, lru = get_policy("sglang+"), get_policy("sglang+", eviction="lru")
    caches = [
        make_cache(p, TRANSFORMER, 30 * TRANSFORMER.kv_bytes_per_token) for p in (default, lru)
    ]
    for prompt in (A, B, B, C, A, D, B, C):
        assert serve(caches[0], prompt, prompt).length == serve(caches[1], prompt, prompt).length


def test_unknown_eviction_is_refused():
    with pytest.raises(TwinError, match="eviction must be one of"):
        get_policy("sglang+", eviction="random")


def test_the_sglang_flag_reaches_the_radix_cache_of_a_transformer_only():
    mode = get_mode("sglang==0.5.10.post1")  # 0.5.23 refuses lfu on a hybrid (test_engine_releases)
    assert mode.settings(TRANSFORMER, {"radix_eviction_policy": "lfu"})["policy_options"] == {
        "eviction": "lfu"
    }
    # SGLang's MambaRadixCache keeps LRU lists whatever the flag says.
    assert mode.settings(HYBRID, {"radix-eviction-policy": "lfu"})["policy_options"] == {}
    # No radix cache, no eviction order.
    off = mode.settings(TRANSFORMER, {"radix_eviction_policy": "fifo", "disable_radix_cache": "1"})
    assert off["policy"] == "vanilla" and off["policy_options"] == {}
    with pytest.raises(TwinError, match="radix_eviction_policy=random"):
        mode.settings(TRANSFORMER, {"radix_eviction_policy": "random"})
