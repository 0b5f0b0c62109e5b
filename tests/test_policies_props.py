"""Property tests over random traces and capacities, for every policy and model kind."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from marconi_oracle import tree_policy
from token_seqs import path_tokens

from twin.cache import PrefixCache, serve
from twin.cache.sparse_blocks import SparseBlockCache
from twin.policies.structures import make_cache
from twin.presets import get_model
from twin.replay import Trace, replay

pytestmark = pytest.mark.usefixtures("oracle_structure")

MODELS = [get_model(n) for n in ("tiny-hybrid", "tiny-transformer", "tiny-ssm")]
POLICIES = [
    ("sglang+", {}),
    ("marconi", {"alpha": 0.0}),
    ("marconi", {"alpha": 1.3}),
    ("marconi", {"bootstrap_multiplier": 1}),
    ("vllm+", {"block_size": 1}),
    ("vllm+", {"block_size": 3}),
    ("vllm+", {"block_size": 3, "retention_interval": 0}),  # vLLM's default: junctions only
    ("vllm+", {"block_size": 2, "retention_interval": 6}),  # and every 6 tokens
]


@st.composite
def traces(draw) -> list[tuple[np.ndarray, np.ndarray]]:
    """Requests that continue earlier ones, share prefixes, or start fresh (vocabulary of 4)."""
    n = draw(st.integers(1, 30))
    tokens = st.lists(st.integers(0, 3), min_size=1, max_size=12)
    fulls: list[np.ndarray] = []
    out = []
    for _ in range(n):
        kind = draw(st.integers(0, 2))
        if fulls and kind == 0:  # next turn of an earlier request
            base = fulls[draw(st.integers(0, len(fulls) - 1))]
        elif fulls and kind == 1:  # a prefix of an earlier request
            prev = fulls[draw(st.integers(0, len(fulls) - 1))]
            base = prev[: draw(st.integers(1, len(prev)))]
        else:
            base = np.zeros(0, np.int32)
        prompt = np.r_[base, np.array(draw(tokens), np.int32)].astype(np.int32)
        output = np.array(draw(st.lists(st.integers(0, 3), min_size=1, max_size=4)), np.int32)
        fulls.append(np.r_[prompt, output])
        out.append((prompt, output))
    return out


def lcp(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n


def recomputed_bytes(cache) -> int:
    """The byte total from scratch, node by node."""
    if isinstance(cache, PrefixCache):
        return sum(cache.node_bytes(n) for n in cache.tree.nodes())
    segments = {id(s): s for s in cache.blocks.values()}.values()
    return sum(cache.node_bytes((s, i)) for s in segments for i in range(s.n))


@settings(max_examples=40, deadline=None)
@given(
    trace=traces(),
    model_i=st.integers(0, len(MODELS) - 1),
    policy_i=st.integers(0, len(POLICIES) - 1),
    tokens_cap=st.integers(0, 60),
    states_cap=st.integers(0, 6),
)
def test_invariants_hold_after_every_request(trace, model_i, policy_i, tokens_cap, states_cap):
    model = MODELS[model_i]
    name, options = POLICIES[policy_i]
    capacity = tokens_cap * model.kv_bytes_per_token + states_cap * model.ssm_checkpoint_bytes
    cache = make_cache(tree_policy(name, **options), model, capacity)
    seen: list[np.ndarray] = []
    for prompt, output in trace:
        full = np.r_[prompt, output]
        hit = serve(cache, prompt, full)
        # Capacity never exceeded; the byte total equals the sum over nodes.
        assert cache.used_bytes <= capacity
        assert cache.used_bytes == recomputed_bytes(cache)
        cache.verify()
        # Every hit is an exact prefix of the request, no longer than what was inserted.
        assert 0 <= hit.length <= len(prompt)
        assert hit.length <= max((lcp(prompt, s) for s in seen), default=0)
        if hit.length and isinstance(cache, PrefixCache) and model.n_ssm_layers:
            assert hit.node.depth == hit.length and hit.node.ckpt  # ends at a checkpoint
        if hit.length and isinstance(cache, PrefixCache):
            assert np.array_equal(path_tokens(hit.node)[: hit.length], prompt[: hit.length])
        if hit.length and not isinstance(cache, PrefixCache):
            assert hit.length % cache.block_size == 0
        if hit.length and isinstance(cache, SparseBlockCache):
            assert hit.length < len(prompt)  # vLLM computes the last prompt token
            seg, i = hit.node
            assert i in seg.states  # a hit ends on a block holding a state
        seen.append(full)
    if isinstance(cache, PrefixCache):
        assert not any(n.lock for n in cache.tree.nodes())  # every pin was released
    else:
        assert not any(seg.locks for seg in cache.blocks.values())


@settings(max_examples=15, deadline=None)
@given(trace=traces(), tokens_cap=st.integers(0, 40), policy_i=st.integers(0, len(POLICIES) - 1))
def test_replay_is_deterministic(trace, tokens_cap, policy_i):
    model = MODELS[0]
    name, options = POLICIES[policy_i]
    capacity = tokens_cap * model.kv_bytes_per_token + 3 * model.ssm_checkpoint_bytes
    runs = []
    for _ in range(2):
        r = replay(Trace.from_pairs(trace), model, capacity, name, options).to_dict()
        r.pop("wall_s")
        runs.append(r)
    assert runs[0] == runs[1]


@settings(max_examples=15, deadline=None)
@given(trace=traces(), tokens_cap=st.integers(5, 40))
def test_oracle_bounds_every_fixed_alpha(trace, tokens_cap):
    model = MODELS[0]
    capacity = tokens_cap * model.kv_bytes_per_token + 3 * model.ssm_checkpoint_bytes
    t = Trace.from_pairs(trace)
    best = replay(t, model, capacity, "oracle")
    for alpha in (0.0, 0.7, 2.0):
        assert replay(t, model, capacity, "marconi", {"alpha": alpha}).hit_tokens <= best.hit_tokens
    assert best.details["grid"][str(best.alpha)] == best.hit_tokens
