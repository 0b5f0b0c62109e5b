"""The one request-cache protocol (``twin.cache.RequestCache``): order, clock, pins, split."""

from __future__ import annotations

import numpy as np
import pytest
from marconi_oracle import tree_policy
from token_seqs import BIG, seq

from twin.cache import RequestCache, serve
from twin.policies.structures import make_cache
from twin.presets import get_model

pytestmark = pytest.mark.usefixtures("oracle_structure")

HYBRID = get_model("tiny-hybrid")
TRANSFORMER = get_model("tiny-transformer")


def prompt_full(prompt: np.ndarray, output: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(prompt, prompt + output)`` as int32, as ``RequestCache.admit`` takes them."""
    full = np.r_[prompt, output].astype(np.int32)
    return full[: len(prompt)], full


def test_admission_sets_the_clock_pins_the_hit_and_splits_the_checkpoints():
    cache = make_cache(tree_policy("sglang+"), HYBRID, BIG)
    requests = RequestCache(cache)
    system = seq(0, 20)
    first = requests.admit(*prompt_full(np.r_[system, seq(100, 5)], seq(500, 3)))
    assert first.order == 0 and cache.clock == 0 and first.hit.length == 0
    assert first.at_prefill == [] and first.at_completion == [28]  # the state after the output
    assert requests.insert_at_completion(first) == 1
    requests.release(first)
    second = requests.admit(*prompt_full(np.r_[system, seq(200, 5)], seq(600, 3)))
    assert second.order == 1 and cache.clock == 1
    # Speculative insertion finds the branch point at the shared system prompt:
    # a checkpoint inside the prompt, visible when the prefill ends.
    assert second.at_prefill == [20] and second.at_completion == [28]
    assert requests.insert_at_prefill_end(second) == 1
    third = requests.admit(*prompt_full(np.r_[system, seq(300, 5)], seq(700, 3)))
    assert third.hit.length == 20 and third.unpin is not None and third.hit.node.lock == 1
    requests.release(third)
    requests.release(third)  # idempotent: one pin, one unpin
    assert third.unpin is None and third.hit.node.lock == 0 and third.full is None
    cache.verify()


def test_transformers_insert_everything_at_completion():
    requests = RequestCache(make_cache(tree_policy("sglang+"), TRANSFORMER, BIG))
    requests.serve(seq(0, 20), np.r_[seq(0, 20), seq(50, 2)].astype(np.int32))
    adm = requests.admit(*prompt_full(np.r_[seq(0, 10), seq(900, 5)], seq(60, 2)))
    assert adm.at_prefill == [] and adm.at_completion
    assert adm.hit.length == 10


@pytest.mark.parametrize("policy", ["sglang+", "marconi", "vllm+"])
def test_serve_leaves_the_clock_at_the_next_request_and_equals_one_insertion(policy):
    rng = np.random.default_rng(3)
    a = make_cache(tree_policy(policy), HYBRID, 400_000)
    b = make_cache(tree_policy(policy), HYBRID, 400_000)
    requests = RequestCache(b)
    for i in range(60):
        prompt = rng.integers(0, 30, rng.integers(5, 60)).astype(np.int32)
        full = np.r_[prompt, rng.integers(0, 30, 4)].astype(np.int32)
        assert serve(a, prompt, full).length == requests.serve(prompt, full).length
        assert a.clock == b.clock == i + 1
    assert a.evictions == b.evictions > 0
