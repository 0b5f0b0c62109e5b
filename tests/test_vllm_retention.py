"""vLLM's prefix-cache retention interval: recurrent states only where vLLM keeps them.

Hand-worked traces on a 4-token block (tiny-hybrid: KV 4 x 1,024 B a block, a
state 16,128 B), then the engine mode's flags and the equivalence of a state
on every block with the dense pool.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from test_bad_input import assert_clean_error
from test_engine_helpers import LinearPricer, generated, run
from test_policies_props import traces
from token_seqs import seq

from twin.cache import BlockCache, RequestCache, serve
from twin.cache.sparse_blocks import KVOnly, SparseBlockCache
from twin.engine import build_run
from twin.engine.modes import get_mode
from twin.engine.modes_vllm import largest_state_page, vllm_block_size
from twin.errors import TwinError
from twin.policies import get_policy
from twin.policies.structures import make_cache
from twin.policies.vllm_plus import VLLMPlusPolicy
from twin.presets import get_model
from twin.workloads.examples import example_path

HYBRID = get_model("tiny-hybrid")
KV_BLOCK = 4 * HYBRID.kv_bytes_per_token
STATE = HYBRID.ssm_checkpoint_bytes


def sparse(retention: int = 0, capacity: int = 10**12) -> tuple[SparseBlockCache, RequestCache]:
    cache = make_cache(
        get_policy("vllm+", block_size=4, retention_interval=retention), HYBRID, capacity
    )
    assert isinstance(cache, SparseBlockCache)
    return cache, RequestCache(cache)


def run_request(requests: RequestCache, prompt: np.ndarray, output: int = 2) -> int:
    """One request through the protocol (admit, prefill-end insert, completion, release)."""
    adm = requests.admit(prompt, np.concatenate((prompt, seq(9000, output))))
    requests.insert_at_prefill_end(adm)
    requests.insert_at_completion(adm)
    requests.release(adm)
    return adm.hit.length


def states(cache: SparseBlockCache) -> set[int]:
    """Token positions holding a state (the end of each block holding one)."""
    segs = {id(s): s for s in cache.blocks.values()}.values()
    return {(s.start + i + 1) * cache.block_size for s in segs for i in s.states or ()}


def test_two_prompts_sharing_a_prefix_keep_a_state_at_the_junction_only():
    cache, requests = sparse()
    shared = seq(0, 8)
    # A: 18 tokens + 2 out. KV: 5 full blocks (20 tokens); a state only at the replay
    # boundary (18 - 1) // 4 * 4 = 16, none on the shared blocks.
    assert run_request(requests, np.r_[shared, seq(100, 10)]) == 0
    assert len(cache.blocks) == 5 and states(cache) == {16}
    assert cache.used_bytes == 5 * KV_BLOCK + 1 * STATE
    # B shares 8 tokens of cached KV without a state there: no hit, and the junction
    # (8) gets a state on the cached block (a state's bytes, no KV), with B's own 16.
    b = np.r_[shared, seq(200, 10)]
    assert cache.junction(b) == 8
    assert run_request(requests, b) == 0
    assert states(cache) == {8, 16} and cache.n_states == 3  # A's 16 and B's 16
    assert cache.used_bytes == 8 * KV_BLOCK + 3 * STATE
    # C hits exactly at the junction; block 0 (tokens 0-4) holds no state.
    assert run_request(requests, np.r_[shared, seq(300, 10)]) == 8
    assert 4 not in states(cache)
    cache.verify()


def test_a_hit_never_reaches_the_last_prompt_token():
    # vLLM caps a hit at num_tokens - 1: a 16-token prompt served twice hits 12, not 16.
    cache, requests = sparse()
    prompt = seq(0, 16)
    assert run_request(requests, prompt) == 0
    assert states(cache) == {12}  # replay boundary (16 - 1) // 4 * 4
    assert run_request(requests, prompt) == 12
    # Its KV to 16 is cached, but a hit may not reach 16: no junction there either.
    assert cache.junction(prompt) == 0 and states(cache) == {12}
    assert run_request(requests, prompt) == 12


def test_the_next_turn_hits_the_replay_boundary_and_keeps_a_state_where_the_kv_ends():
    cache, requests = sparse()
    turn1 = seq(0, 10)  # + 6 output tokens: KV to 16, a state at 8
    assert run_request(requests, turn1, output=6) == 0
    assert states(cache) == {8} and len(cache.blocks) == 4
    turn2 = np.r_[turn1, seq(9000, 6), seq(500, 9)]  # 25 tokens, extends turn 1
    assert cache.peek(turn2) == 8  # the output's blocks hold KV only
    assert cache.junction(turn2) == 16  # the cached KV runs on to 16
    assert run_request(requests, turn2, output=3) == 8
    assert states(cache) == {8, 16, 24}  # junction 16, replay boundary (25 - 1) // 4 * 4
    cache.verify()


def test_an_interval_keeps_a_state_every_n_tokens_as_well():
    cache, requests = sparse(retention=8)
    run_request(requests, seq(0, 30), output=10)  # KV to 40
    # Every 8 tokens (8 ... 40) and the replay boundary 28.
    assert states(cache) == {8, 16, 24, 28, 32, 40}
    assert cache.used_bytes == 10 * KV_BLOCK + 6 * STATE
    zero, requests0 = sparse(retention=0)
    run_request(requests0, seq(0, 30), output=10)
    assert states(zero) == {28}


def test_an_interval_of_one_block_is_every_block_as_vllm_masks_it():
    # MambaManager.reachable_block_mask: an interval of at most one block caches densely.
    assert not VLLMPlusPolicy(4, 4).sparse and VLLMPlusPolicy(4, 8).sparse
    assert VLLMPlusPolicy(4, 0).sparse and not VLLMPlusPolicy(4, None).sparse
    cache = make_cache(VLLMPlusPolicy(4, 4), HYBRID, 10**9)
    assert type(cache) is BlockCache
    with pytest.raises(TwinError, match="multiple of the block size"):
        VLLMPlusPolicy(4, 6)


def test_a_transformer_keeps_the_dense_pool():
    cache = make_cache(VLLMPlusPolicy(4, 0), get_model("tiny-transformer"), 10**9)
    assert type(cache) is BlockCache


def test_eviction_frees_the_bytes_the_blocks_held():
    # Room for 6 KV blocks and 2 states.
    cache, requests = sparse(capacity=6 * KV_BLOCK + 2 * STATE)
    requests.cache.set_clock(0)
    run_request(requests, seq(0, 14))  # KV 0-16 (4 blocks), a state at 12
    assert cache.used_bytes == 4 * KV_BLOCK + STATE
    # The next one needs 3 KV blocks + a state at its prefill end (1 KV block short: the
    # older chain's KV-only tail 12-16 goes), then 1 KV block at completion (the older
    # chain's next leaf goes, with its state: it holds more than the block missing).
    run_request(requests, seq(100, 14))
    assert cache.evictions == 2 and len(cache.blocks) == 6 and cache.n_states == 1
    assert cache.used_bytes == 6 * KV_BLOCK + STATE
    assert cache.peek(seq(0, 14)) == 0 and cache.peek(seq(100, 14)) == 12
    cache.verify()


def test_a_state_added_to_a_cached_block_costs_a_state_and_no_kv():
    cache, _ = sparse()
    cache.insert(seq(0, 12), [KVOnly(12)])  # KV only
    assert cache.used_bytes == 3 * KV_BLOCK and cache.n_states == 0
    assert cache.lookup(seq(0, 13)).length == 0  # KV without a state serves no hit
    assert cache.insert(seq(0, 12), [8, KVOnly(12)]) == 0  # no new tokens...
    assert cache.used_bytes == 3 * KV_BLOCK + STATE  # ...one state more
    assert cache.lookup(seq(0, 13)).length == 8
    cache.verify()


@settings(max_examples=40, deadline=None)
@given(trace=traces(), tokens_cap=st.integers(0, 60), states_cap=st.integers(0, 8))
def test_a_state_on_every_block_is_the_dense_pool(trace, tokens_cap, states_cap):
    """The sparse pool asked for a state on every block equals today's pool (hits, bytes)."""
    # The dense pool does not cap a hit at len - 1: no prompt ends on the block grid.
    trace = [(p if len(p) % 3 else p[:-1], o) for p, o in trace]
    assume(all(len(p) for p, _ in trace))
    capacity = tokens_cap * HYBRID.kv_bytes_per_token + states_cap * STATE

    class EveryBlock(VLLMPlusPolicy):
        def admit(self, prompt, full):
            end = len(full) // 3 * 3
            return list(range(3, end + 1, 3))

    dense = make_cache(get_policy("vllm+", block_size=3), HYBRID, capacity)
    every = SparseBlockCache(HYBRID, capacity, EveryBlock(3, 0), 3)
    for prompt, output in trace:
        full = np.r_[prompt, output]
        assert serve(dense, prompt, full).length == serve(every, prompt, full).length
        assert (every.used_bytes, every.ssm_bytes) == (dense.used_bytes, dense.ssm_bytes)
        assert every.evictions == dense.evictions
    every.verify()


# ---------------------------------------------------------------------- the engine mode
def test_the_vllm_mode_defaults_to_vllms_retention_and_none_is_todays_dense_pool():
    model = get_model("tiny-hybrid")
    mode = get_mode("vllm")
    assert mode.settings(model, {})["policy_options"] == {"block_size": 48, "retention_interval": 0}
    dense = mode.settings(model, {"prefix_cache_retention_interval": "none"})
    assert dense["policy_options"] == {"block_size": 48}  # the options the mode gave before
    assert mode.settings(model, {"prefix_cache_retention_interval": "96"})["policy_options"] == {
        "block_size": 48,
        "retention_interval": 96,
    }
    # A model without recurrent layers has nothing to retain.
    transformer = mode.settings(get_model("tiny-transformer"), {})
    assert transformer["policy_options"] == {"block_size": 16}


def test_retention_none_reproduces_the_dense_runs_and_zero_keeps_fewer_states(tmp_path):
    model = get_model("tiny-hybrid")
    path = generated(tmp_path / "w.parquet", "chat", 16, 2.0, max_context=2048)
    mode = get_mode("vllm")
    before = {"policy": "vllm+", "policy_options": {"block_size": 48}}
    results = {}
    for name, sets in [("none", {"prefix_cache_retention_interval": "none"}), ("0", {})]:
        settings_ = mode.settings(model, sets)
        results[name] = run(
            path, LinearPricer(), model, shared_pool=True, gpu_memory_bytes=1e9, **settings_
        )
    settings_ = {**mode.settings(model, {}), **before}
    old = run(path, LinearPricer(), model, shared_pool=True, gpu_memory_bytes=1e9, **settings_)
    assert [r.hit_tokens for r in results["none"][1]] == [r.hit_tokens for r in old[1]]
    none, zero = results["none"][0], results["0"][0]
    assert 0 < zero["hit"]["checkpoints_admitted"] < none["hit"]["checkpoints_admitted"]


def test_the_block_follows_the_largest_state_page():
    # A GDN and a Mamba2 layer (tiny-moe-hybrid, GDN value heads widened to 64): vLLM
    # pads every state page to one size, so one attention page (2 KV heads x 16 x 2 x
    # 2 B = 128 B a token) must hold the larger state, 10,752 B: 84 tokens, 6 x 16 =
    # 96; the mean of the two (8,064 B, 63 tokens) would give 64.
    model = dataclasses.replace(get_model("tiny-moe-hybrid"), gdn_head_v_dim=64)
    assert model.kv_bytes_per_token // model.n_attention_layers == 128
    assert largest_state_page(model) == 10752 and model.ssm_state_bytes_per_layer == 8064
    assert vllm_block_size(model) == 96


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        ({"block_size": "24"}, "--set block_size=24: .* multiple of 16"),
        ({"prefix_cache_retention_interval": "100"}, "multiple of the block size .80 tokens"),
        ({"prefix_cache_retention_interval": "-80"}, "must be at least 0"),
        ({"prefix_cache_retention_interval": "some"}, "expected an integer"),
        ({"enable_mamba_shared_prefix_checkpoint": "true"}, "EAGLE/MTP speculative decoding"),
        (
            {"enable_mamba_fine_grained_prefix_cache": "true"},
            "renamed it enable_mamba_shared_prefix_checkpoint",
        ),
    ],
)
def test_bad_retention_and_block_flags_are_one_line_errors(sets, message):
    with pytest.raises(TwinError, match=message):
        build_run(example_path("chat"), engine="vllm", sets=sets)


def test_the_fine_grained_option_is_refused_with_exit_2(capsys, tmp_path):
    argv = ["simulate", "--engine", "vllm", "--set", "enable_mamba_shared_prefix_checkpoint=1"]
    argv += ["--out", str(tmp_path / "o")]
    assert_clean_error(capsys, argv, tmp_path, "only with EAGLE/MTP")
    build_run(
        example_path("chat"), engine="vllm", sets={"enable_mamba_shared_prefix_checkpoint": "0"}
    )
