"""The compiled grid replay (``policies.compiled``) equals the Python oracle, exactly.

The oracle (``PrefixCache`` under ``marconi_oracle.MarconiOracle`` or
``MarconiTwinOracle``, served one request at a time) is the transliteration's
source; the compiled replay must give every request the same hit and leave the
same counters, on random traces with ties (a vocabulary of four tokens), truncated
admissions (capacities of a few tokens and states), from an empty cache or a
snapshot, at every alpha; and the two callers (``grid_scores``, the ``oracle``
replay) must give what the oracle's Python grid and replay give.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from marconi_oracle import (
    MarconiOracle,
    MarconiTwinOracle,
    OracleFlops,
    python_grid_scores,
    python_replay,
    restore,
)
from test_policies_props import traces
from token_seqs import cache_bytes, chat_sessions, full_sequences

from twin.cache import CacheSnapshot, PrefixCache, RequestCache
from twin.errors import TwinError
from twin.model import ModelSpec
from twin.policies.alpha_tuning import ALPHA_GRID, grid_scores
from twin.policies.compiled import compiled_grid_runs, constants
from twin.policies.compiled.kernel import scores, state
from twin.policies.compiled.live import LiveCache
from twin.policies.marconi import MarconiPolicy
from twin.policies.marconi_twin import MarconiTwinPolicy
from twin.policies.oracle import OraclePolicy
from twin.policies.reference_score import attn_flops, mamba1_flops, mlp_flops
from twin.policies.structures import make_cache
from twin.presets import get_model
from twin.replay import Trace, replay

pytestmark = pytest.mark.usefixtures("oracle_structure")

HYBRID = get_model("tiny-hybrid")
TRANSFORMER = get_model("tiny-transformer")  # no states: any matched prefix hits
# Sliding-window layers (window 8): each node keeps its tail of their KV; a Transformer's
# hit inside a node longer than the window resumes at the node's start.
SWA, SWA_HYBRID = get_model("tiny-swa"), get_model("tiny-swa-hybrid")
# No KV at all; and every kind but Mamba-1 (GDN, Mamba-2, sliding-window, MoE).
SSM, MIXED = get_model("tiny-ssm"), get_model("tiny-moe-hybrid")
MODELS = st.sampled_from([HYBRID, TRANSFORMER, SWA, SWA_HYBRID, SSM, MIXED])


ORACLE = {MarconiPolicy: MarconiOracle, MarconiTwinPolicy: MarconiTwinOracle}


def _python(requests, capacity: int, alpha: float, cls=MarconiPolicy, start=None, model=HYBRID):
    if start is None:
        cache = make_cache(ORACLE[cls](alpha=alpha), model, capacity)
    else:
        cache = restore(start, model, ORACLE[cls](alpha=alpha))
    assert isinstance(cache, PrefixCache)
    victims: list[int] = []
    evict = cache.evict
    cache.evict = lambda node: victims.append(node.nid) or evict(node)  # type: ignore[method-assign]
    protocol = RequestCache(cache)
    hits = [protocol.serve(full[:n], full).length for full, n in requests]
    return hits, cache, victims


def _same(requests, capacity: int, alpha: float, cls=MarconiPolicy, start=None, model=HYBRID):
    expected, cache, victims = _python(requests, capacity, alpha, cls, start, model)
    (run,) = compiled_grid_runs(model, capacity, requests, [alpha], cls, start)
    assert run.hits == expected
    assert run.victims == victims  # the same nodes go, in the same order
    c = run.counters
    assert (c["evictions"], c["kv_tokens"], c["n_ckpts"], c["swa_tokens"]) == (
        len(victims),
        cache.kv_tokens,
        cache.n_ckpts,
        cache.swa_tokens,
    )
    if start is None:  # a restored cache starts from the snapshot's peaks, a replay from 0
        assert (c["peak_bytes"], c["peak_kv_bytes"]) == (cache.peak_bytes, cache.peak_kv_bytes)
    assert c["num_nodes"] == cache.num_nodes - 1  # the root is not counted


def _snapshot(cls, capacity: int, warm, model=HYBRID) -> CacheSnapshot:
    """A cache after serving ``warm`` at alpha 0 (marconi-twin's window starts from one)."""
    cache = make_cache(ORACLE[cls](alpha=0.0), model, capacity)
    protocol = RequestCache(cache)
    for full, n in warm:
        protocol.serve(full[:n], full)
    return cache.snapshot()


ALPHAS = st.sampled_from([0.0, 0.1, 0.7, 1.0, 2.0])  # 1.0: ties as 1 + 0 = 0 + 1


@settings(max_examples=150, deadline=None)
@given(
    trace=traces(),
    tokens=st.integers(0, 60),
    states=st.integers(0, 8),
    alpha=ALPHAS,
    twin=st.booleans(),
    model=MODELS,
)
def test_compiled_replay_serves_like_the_python_cache(trace, tokens, states, alpha, twin, model):
    cls = MarconiTwinPolicy if twin else MarconiPolicy
    _same(full_sequences(trace), cache_bytes(tokens, states, model), alpha, cls, model=model)


@settings(max_examples=150, deadline=None)
@given(
    trace=traces(),
    warm=st.integers(0, 12),
    tokens=st.integers(0, 60),
    states=st.integers(0, 8),
    alpha=ALPHAS,
    twin=st.booleans(),
    model=MODELS,
)
def test_compiled_replay_from_a_snapshot(trace, warm, tokens, states, alpha, twin, model):
    cls = MarconiTwinPolicy if twin else MarconiPolicy
    requests = full_sequences(trace)
    capacity = cache_bytes(tokens, states, model)
    start = _snapshot(cls, capacity, requests[:warm], model)
    _same(requests[warm:] or requests, capacity, alpha, cls, start, model)


def _chat_like(seed: int, sessions: int = 40, turns: int = 6) -> list[tuple[np.ndarray, int]]:
    """Sessions behind three shared system prompts, interleaved, each turn extending the last."""
    return chat_sessions(seed, sessions, turns, 3, 50, (20, 60, 1, 30, 1, 20))


@pytest.mark.parametrize(
    "model",
    [HYBRID, TRANSFORMER, SWA, SWA_HYBRID, SSM, MIXED],
    ids=["hybrid", "transformer", "swa", "swa-hybrid", "ssm", "mixed"],
)
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("fraction", [0.02, 0.1, 0.3])
def test_compiled_replay_on_chat_like_traces(seed, fraction, model):
    requests = _chat_like(seed)
    total = sum(len(full) for full, _ in requests)
    capacity = int(fraction * cache_bytes(total, len(requests), model))
    half = len(requests) // 2
    for alpha in (0.0, 0.3, 1.0, 1.5):  # 1.0: ties (1 + 0 = 0 + 1), broken in pre-order
        for cls in (MarconiPolicy, MarconiTwinPolicy):
            _same(requests, capacity, alpha, cls, model=model)
            start = _snapshot(cls, capacity, requests[:half], model)
            _same(requests[half:], capacity, alpha, cls, start, model)


@pytest.mark.parametrize("cls", [MarconiPolicy, MarconiTwinPolicy])
def test_compiled_replay_of_negative_and_extreme_token_ids(cls):
    """Token ids anywhere in int32 (the Mooncake traces' hashed ids run negative): a
    vocabulary of four far-apart ids, so that keys of one node's children would collide
    if a token's sign reached the node's bits."""
    ids = np.array([-(2**31), -1, 0, 2**31 - 1], np.int32)
    for seed in (0, 1):
        requests = [(ids[full % 4], n) for full, n in _chat_like(seed, sessions=20, turns=4)]
        capacity = int(0.05 * cache_bytes(sum(len(f) for f, _ in requests), len(requests), HYBRID))
        for alpha in (0.0, 1.0):
            _same(requests, capacity, alpha, cls)


@pytest.mark.parametrize("cls", [MarconiPolicy, MarconiTwinPolicy])
def test_compiled_replay_of_requests_without_output_or_tokens(cls):
    """Empty outputs (the state at the prompt's end) and an empty request, as Python serves them."""
    rng = np.random.default_rng(5)
    requests = []
    for i in range(60):
        n_prompt, n_output = int(rng.integers(1, 9)), int(rng.integers(0, 3))
        if i == 7:
            n_prompt = n_output = 0
        prompt = rng.integers(0, 3, n_prompt).astype(np.int32)
        output = rng.integers(0, 3, n_output).astype(np.int32)
        requests.append((np.r_[prompt, output].astype(np.int32), len(prompt)))
    assert any(len(f) == n for f, n in requests) and any(len(f) == 0 for f, _ in requests)
    for alpha in (0.0, 1.0):
        _same(requests, cache_bytes(20, 3, HYBRID), alpha, cls)


@settings(max_examples=40, deadline=None)
@given(trace=traces(), tokens=st.integers(0, 40), states=st.integers(0, 6))
def test_grid_scores_are_the_python_grids(trace, tokens, states):
    window = full_sequences(trace)
    capacity = cache_bytes(tokens, states, HYBRID)
    grid = ALPHA_GRID[::4]
    for cls, snap in (
        (MarconiPolicy, make_cache(MarconiPolicy(), HYBRID, capacity).snapshot()),
        (MarconiTwinPolicy, _snapshot(MarconiTwinPolicy, capacity, window[: len(window) // 3])),
    ):
        for metric in ("reference", "hit-rate", "flops"):
            fast = grid_scores(snap, HYBRID, window, cls, metric, grid)
            assert fast == python_grid_scores(snap, HYBRID, window, ORACLE[cls], metric, grid)


@pytest.mark.parametrize("metric", ["hit-rate", "flops"])
def test_oracle_replay_is_the_python_one(metric):
    requests = _chat_like(3, sessions=20, turns=4)
    trace = Trace([full for full, _ in requests], [n for _, n in requests])
    capacity = int(0.05 * cache_bytes(sum(len(f) for f, _ in requests), len(requests), HYBRID))
    options = {"alpha_metric": metric}
    fast = replay(trace, HYBRID, capacity, "oracle", options, per_request=True)
    slow = python_replay(trace, HYBRID, capacity, "oracle", options, per_request=True)
    assert fast.details == slow.details and len(set(fast.details["grid"].values())) > 1
    assert {**fast.to_dict(), "wall_s": 0} == {**slow.to_dict(), "wall_s": 0}
    assert fast.per_request is not None and slow.per_request is not None
    for key, values in fast.per_request.items():
        assert np.array_equal(values, slow.per_request[key])


@pytest.mark.parametrize("name", ["marconi", "marconi-twin"])
def test_marconi_tuning_is_the_python_one(name):
    requests = _chat_like(4, sessions=30, turns=5)
    trace = Trace([full for full, _ in requests], [n for _, n in requests])
    capacity = int(0.05 * cache_bytes(sum(len(f) for f, _ in requests), len(requests), HYBRID))
    fast = replay(trace, HYBRID, capacity, name, per_request=True)
    assert fast.details["bootstrap"]["completed"]
    slow = python_replay(trace, HYBRID, capacity, name, per_request=True)
    assert {**fast.to_dict(), "wall_s": 0} == {**slow.to_dict(), "wall_s": 0}


def test_every_model_and_marconi_policy_runs_compiled():
    requests = full_sequences([(np.array([1, 2, 3]), np.array([4]))])
    for cls in (MarconiPolicy, OraclePolicy, MarconiTwinPolicy):
        for model in (HYBRID, TRANSFORMER, SWA, SWA_HYBRID, SSM, MIXED):
            (run,) = compiled_grid_runs(model, 10**6, requests, (0.0,), cls)
            assert run.hits == [0]
    # Declared prompt modules are ignored; int32 ids from any integer array are keys.
    with_modules = [(requests[0][0], 3, np.array([0, 1, 3], np.int32))]
    assert compiled_grid_runs(HYBRID, 10**6, with_modules, (0.0,), MarconiPolicy)
    ends = [2**31 - 1, -(2**31), 5]
    edge = [(np.array(ends, np.int64), 2), (np.array([*ends, 7], np.int64), 3)]
    assert compiled_grid_runs(HYBRID, 10**6, edge, (0.0,), MarconiPolicy)[0].hits == [0, 3]


def test_token_ids_past_int32_are_refused():
    """No workload holds them (``twin.workloads.schema``: int32 ids, read with a check)."""
    wide = [(np.array([2**31, 2], np.int64), 1)]  # would wrap if cast to int32
    with pytest.raises(TwinError, match="token id 2147483648 is past int32"):
        compiled_grid_runs(HYBRID, 10**6, wide, (0.0,), MarconiPolicy)


def test_a_model_whose_sequences_pass_2_62_bytes_is_refused():
    wide = {"n_heads": 1 << 12, "n_kv_heads": 1 << 12, "head_dim": 1 << 24}
    huge = ModelSpec.from_dict({**HYBRID.to_dict(derived=False), **wide})
    assert huge.kv_bytes_per_token << 24 >= 2**62
    with pytest.raises(TwinError, match="past the 2\\*\\*62 bytes"):
        LiveCache(huge, 10**9, MarconiPolicy())
    constants(get_model("marconi-hybrid-7b"), 10**9, state.REFERENCE)  # a real model passes


BIG = get_model("llama-3.1-70b")  # d 8,192, 80 layers: counts pass 2**53 near 58k tokens


def _exact_efficiency(model, depth: int, own: int) -> float:
    """The authors' efficiency in exact integers and one correctly rounded division."""
    d, parent = model.d_model, depth - own
    layers = model.n_mlp_layers + model.n_moe_layers
    saved = (
        model.n_ssm_layers * mamba1_flops(own, d, model.ssm_d_state)
        + model.n_attention_layers * (attn_flops(depth, d) - attn_flops(parent, d))
        + layers * (mlp_flops(depth, d) - attn_flops(parent, d))
    )
    held = model.ssm_checkpoint_bytes if model.n_ssm_layers else 0
    held += model.kv_bytes_per_token * depth
    return saved / held


@pytest.mark.parametrize("model", [HYBRID, get_model("marconi-hybrid-7b"), BIG])
def test_the_reference_efficiency_is_float64_counts_then_one_division(model):
    """The kernel's definition (``kernel.scores.reference_efficiency``) equals the oracle's at any
    size, and the authors' exact integers while every count is below 2**53 (so outputs
    before this definition stand); past it, it rounds and never overflows int64."""
    mc, _ = constants(model, 10**9, state.REFERENCE)
    flops = OracleFlops(model)
    exact_range = past = 0
    for depth in (1, 7, 300, 5_000, 30_000, 200_000, 2_000_000, 16_000_000):
        for own in (1, depth // 3 + 1, depth):
            eff = scores.reference_efficiency(depth, own, mc)
            assert eff == flops.efficiency(depth, own)
            d, layers = model.d_model, model.n_mlp_layers + model.n_moe_layers
            gained = model.n_ssm_layers * mamba1_flops(depth, d, model.ssm_d_state)
            gained += model.n_attention_layers * attn_flops(depth, d) + layers * mlp_flops(depth, d)
            if max(gained, layers * attn_flops(depth, d)) < 2**53:
                assert eff == _exact_efficiency(model, depth, own)
                exact_range += 1
            else:
                assert eff == pytest.approx(_exact_efficiency(model, depth, own), rel=1e-12)
                past += 1
    assert exact_range and (past or model is not BIG)


@pytest.mark.parametrize("name", ["marconi", "marconi-twin", "oracle"])
def test_declared_prompt_modules_are_ignored_as_the_python_cache_ignores_them(name):
    """A trace declaring prompt modules replays on the compiled tree, as the radix tree
    serves it (``PrefixCache`` takes the modules and uses none of them)."""
    requests = _chat_like(6, sessions=20, turns=4)
    modules = [np.array([0, n // 2, n], np.int32) for _, n in requests]
    trace = Trace([f for f, _ in requests], [n for _, n in requests], modules=modules)
    capacity = int(0.05 * cache_bytes(sum(len(f) for f, _ in requests), len(requests), HYBRID))
    fast = replay(trace, HYBRID, capacity, name, per_request=True)
    slow = python_replay(trace, HYBRID, capacity, name, per_request=True)
    assert fast.evictions > 0
    assert {**fast.to_dict(), "wall_s": 0} == {**slow.to_dict(), "wall_s": 0}
    assert fast.per_request is not None and slow.per_request is not None
    for key, values in fast.per_request.items():
        assert np.array_equal(values, slow.per_request[key])
