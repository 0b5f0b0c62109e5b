"""Engine modes (issue 14): vLLM's and SGLang's bundles, their flags, and the rules they follow."""

from __future__ import annotations

import numpy as np
import pytest
from test_bad_input import assert_clean_error
from test_engine_helpers import LinearPricer, generated, run, write_rows

from twin.engine import build_run
from twin.engine.modes import ENGINE_MODES, get_mode
from twin.engine.modes_vllm import vllm_block_size
from twin.errors import TwinError
from twin.presets import get_model
from twin.workloads.examples import example_path
from twin.workloads.schema import WorkloadRow


@pytest.mark.parametrize(
    "name", ["marconi-hybrid-7b", "jamba-1.5-mini", "zamba2-7b", "nemotron-h-8b", "tiny-hybrid"]
)
@pytest.mark.parametrize("user_block", [16, 32, 64])
def test_vllm_block_is_the_smallest_aligned_one_whose_attention_page_holds_a_mamba_page(
    name, user_block
):
    model = get_model(name)
    block = vllm_block_size(model, user_block)
    attn_1 = model.kv_bytes_per_token // model.n_attention_layers
    mamba = model.ssm_state_bytes_per_layer
    align = max(16, user_block)
    assert block % align == 0 and block >= user_block
    assert block * attn_1 >= mamba
    assert block == user_block or (block - align) * attn_1 < mamba


def test_vllm_block_of_the_paper_model_by_hand():
    # 4 attention layers x 2 x 8 KV heads x 128 x 2 B = 65,536 B/token: 16,384 a layer;
    # a Mamba layer's state 1,116,160 B: 68.1 tokens, so 5 x 16 = 80.
    model = get_model("marconi-hybrid-7b")
    assert model.ssm_state_bytes_per_layer == 1_116_160
    assert vllm_block_size(model) == 80
    assert vllm_block_size(get_model("llama-3-8b")) == 16  # a Transformer keeps --block-size


def test_under_vllm_align_prompts_shorter_than_a_block_never_hit(tmp_path):
    model = get_model("tiny-hybrid")
    block = vllm_block_size(model)
    assert block == 48
    short = np.arange(block - 2, dtype=np.int32)  # + the output: still one block short
    long = np.arange(3 * block + 5, dtype=np.int32) + 100
    rows = [WorkloadRow(i, 0, float(i), None, short, False, None, 1) for i in range(4)]
    rows += [WorkloadRow(4 + i, 0, 10.0 + i, None, long, False, None, 1) for i in range(3)]
    settings = get_mode("vllm").settings(model, {})
    _, recs = run(
        write_rows(tmp_path / "w.parquet", rows),
        LinearPricer(),
        model,
        shared_pool=True,
        gpu_memory_bytes=1e9,
        **settings,
    )
    hits = {r.row: r.hit_tokens for r in recs}
    assert [hits[i] for i in range(4)] == [0, 0, 0, 0]  # 0% hit rate, as vLLM users saw
    assert [hits[i] for i in range(4, 7)] == [0, 3 * block, 3 * block]  # on the block grid


@pytest.mark.parametrize(("mode", "baseline"), [("vllm", "vllm+"), ("sglang", "sglang+")])
def test_a_transformer_under_either_engine_hits_as_the_lru_baselines(tmp_path, mode, baseline):
    model = get_model("tiny-transformer")
    path = generated(tmp_path / "w.parquet", "chat", 12, 2.0, max_context=2048)
    settings = get_mode(mode).settings(model, {})
    options = {"block_size": 16} if baseline == "vllm+" else {}
    _, engine = run(path, LinearPricer(), model, shared_pool=True, gpu_memory_bytes=1e9, **settings)
    _, paper = run(
        path,
        LinearPricer(),
        model,
        policy=baseline,
        policy_options=options,
        cache_bytes=int(1e8),
        gpu_memory_bytes=1e9,
    )
    assert sum(r.hit_tokens for r in engine) > 0
    assert {r.row: r.hit_tokens for r in engine} == {r.row: r.hit_tokens for r in paper}


def test_a_mode_is_a_bundle_with_its_kernels_and_its_flags():
    chat = example_path("chat")
    run_ = build_run(
        chat,
        engine="sglang",
        cache_gb="auto",
        sets={"mamba_radix_cache_strategy": "extra_buffer", "max_running_requests": "64"},
    )
    cfg = run_.config
    assert (
        cfg.mode.engine == "sglang"
        and cfg.cache.policy == "sglang"
        and cfg.scheduling.preemption == "retract"
    )
    assert (
        cfg.memory.state_slots == 3 and cfg.scheduling.max_running == 64 and cfg.memory.shared_pool
    )
    assert cfg.mode.engine_flags == {
        "max_running_requests": "64",
        "mamba_radix_cache_strategy": "extra_buffer",
    }
    assert "SGLang" in run_.profile_info["provenance"]  # its kernels price the steps
    vllm = build_run(chat, engine="vllm", cache_gb="auto", sets={"max-num-seqs": "32"}).config
    assert vllm.cache.policy == "vllm+"
    assert vllm.cache.policy_options == {"block_size": 80, "retention_interval": 0}  # vLLM defaults
    assert vllm.scheduling.max_running == 32 and vllm.scheduling.preemption == "recompute"
    # An explicit setting wins over the mode's; the paper's world is the default.
    assert build_run(chat, engine="vllm", policy="marconi").config.cache.policy == "marconi"
    assert build_run(chat).config.cache.policy == "marconi"
    assert set(ENGINE_MODES) >= {"paper", "vllm", "sglang", "trtllm"}


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        ({"nope": "1"}, "engine 'vllm' has no such flag"),
        ({"max_num_seqs": "zero"}, "expected an integer"),
        ({"gpu_memory_utilization": "1.5"}, r"must be in \(0, 1\]"),
        ({"mamba_cache_mode": "all"}, "removed it; use --set prefix_cache_retention_interval=none"),
    ],
)
def test_bad_engine_flags_are_one_line_errors(sets, message):
    with pytest.raises(TwinError, match=message):
        build_run(example_path("chat"), engine="vllm", sets=sets)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--engine", "sglang", "--set", "page_sizes=4"], "no such flag"),
        (["--engine", "vllm", "--set", "max_num_seqs"], "expected KEY=VALUE"),
        (["--cache-gb", "lots"], "expected auto or a number"),
        (["--engine", "tgi"], "--engine 'tgi'"),
    ],
)
def test_cli_refuses_bad_flags_and_cache_sizes_in_one_line(capsys, tmp_path, args, message):
    assert_clean_error(capsys, ["simulate", *args, "--out", str(tmp_path / "o")], tmp_path, message)


def test_set_without_an_engine_says_which_engines_take_flags(capsys, tmp_path):
    argv = ["simulate", "--set", "max_num_seqs=4", "--out", str(tmp_path / "o")]
    assert_clean_error(capsys, argv, tmp_path, "--engine vllm or --engine sglang")


@pytest.mark.parametrize(
    ("policies", "message"),
    [
        ("vllm[max_num_seqs=abc]", "--policies 'vllm[max_num_seqs=abc]': max_num_seqs=abc:"),
        ("vllm[max_num_seqs=4]]", "expected ENGINE[flag=value;flag=value]"),
        ("vllm[max_num_seqs=4", "expected ENGINE[flag=value;flag=value]"),
        ("vllm[max_num_seqs=4;max_num_seqs=8]", "flag 'max_num_seqs' given twice"),
        ("vllm[]", "expected flag=value"),
        ("sglang[radix_eviction_policy=bad]", "--policies 'sglang[radix_eviction_policy=bad]'"),
    ],
)
def test_report_refuses_bad_engine_variants_before_any_work(capsys, tmp_path, policies, message):
    argv = ["report", "capacity", str(example_path("chat")), "--cache-gb", "auto"]
    argv += ["--policies", policies, "--session-rates", "1", "--out", str(tmp_path / "o")]
    assert_clean_error(capsys, argv, tmp_path, message)


def test_ray_address_needs_the_ray_executor(capsys, tmp_path):
    argv = ["report", "capacity", str(example_path("chat")), "--ray-address", "h:1"]
    argv += ["--out", str(tmp_path / "o")]
    assert_clean_error(capsys, argv, tmp_path, "--ray-address: needs --executor ray")


@pytest.mark.parametrize(("policy", "first"), [("fcfs", 1), ("lpm", 2)])
def test_sglang_lpm_admits_the_longest_cached_prefix_first(tmp_path, policy, first):
    model = get_model("tiny-transformer")
    a = np.arange(300, dtype=np.int32)
    rows = [
        WorkloadRow(0, 0, 0.0, None, a, False, None, 50),  # runs alone (max_running 1)
        WorkloadRow(1, 0, 0.001, None, a + 1000, False, None, 2),  # a miss, arrives first
        WorkloadRow(2, 0, 0.002, None, np.concatenate((a, a[:5] + 7)), False, None, 2),  # hits A
    ]
    settings = get_mode("sglang").settings(model, {"schedule_policy": policy})
    assert settings["schedule_policy"] == policy
    _, recs = run(
        write_rows(tmp_path / "w.parquet", rows),
        LinearPricer(),
        model,
        shared_pool=True,
        gpu_memory_bytes=1e9,
        max_running=1,
        **settings,
    )
    by = {r.row: r for r in recs}
    later = 3 - first
    assert by[first].admitted_s < by[later].admitted_s
    assert by[2].hit_tokens >= 300 - 16  # it did hit A's prefix


def test_hicache_ratio_without_the_host_tier_is_refused_and_with_it_sizes_the_tier():
    model = get_model("tiny-hybrid")
    sglang = get_mode("sglang")
    with pytest.raises(TwinError, match="enable_hierarchical_cache=true"):
        sglang.settings(model, {"hicache_ratio": "3"})
    with pytest.raises(TwinError, match="enable_hierarchical_cache=true"):
        sglang.settings(model, {"hicache_ratio": "3", "enable_hierarchical_cache": "false"})
    on = {"enable_hierarchical_cache": "true"}
    assert sglang.settings(model, {**on, "hicache_ratio": "3"})["host_cache_ratio"] == 3.0
    assert sglang.settings(model, on)["host_cache_ratio"] == 2.0  # SGLang's default ratio
    assert "host_cache_ratio" not in sglang.settings(model, {})


def test_an_explicit_option_and_an_engine_flag_for_the_same_setting_must_agree():
    chat = example_path("chat")
    sets = {"max_running_requests": "32"}
    with pytest.raises(TwinError, match="--max-running 64 conflicts with --set max_running_req"):
        build_run(chat, engine="sglang", cache_gb="auto", sets=sets, max_running=64)
    with pytest.raises(TwinError, match="--policy marconi conflicts with --set disable_radix"):
        build_run(chat, engine="sglang", sets={"disable_radix_cache": "true"}, policy="marconi")
    # Agreeing, or either alone, is fine.
    cfg = build_run(chat, engine="sglang", cache_gb="auto", sets=sets, max_running=32).config
    assert cfg.scheduling.max_running == 32
    assert build_run(chat, engine="sglang", max_running=64).config.scheduling.max_running == 64


def test_lpm_sorts_in_place_deprioritizes_in_queue_sharers_and_keeps_ties_by_history():
    """SGLang ``_sort_by_longest_prefix`` over ``_compute_prefix_matches``: stable, in place
    (ties keep the queue's current order), a request matching <= 32 cached tokens but 32 of
    an earlier such waiting request's prompt last."""
    from collections import deque
    from types import SimpleNamespace

    from twin.engine.lpm import order_by_prefix

    cached = {}
    waiting = deque()
    b, c = np.arange(300, dtype=np.int32), np.arange(300, dtype=np.int32) + 5000

    def seq(name, prompt):
        return SimpleNamespace(name=name, alloc=0, req=SimpleNamespace(prompt=prompt))

    queue = [
        seq("b", b),
        seq("b2", np.concatenate((b[:100], c[:50]))),  # shares 100 uncached tokens with b
        seq("c", c),
        seq("hot", c + 1),
        seq("short", b[:10]),  # under 32 tokens: never deprioritized
    ]
    cached["hot"] = 200
    waiting.extend(queue)
    order_by_prefix(waiting, lambda q: cached.get(q.name, 0))
    assert [q.name for q in waiting] == ["hot", "b", "c", "short", "b2"]
    # Ties keep the current order, the last sort's (history), not arrival order.
    cached.clear()
    waiting.rotate(1)  # b2 first now
    order_by_prefix(waiting, lambda q: cached.get(q.name, 0))
    assert [q.name for q in waiting] == ["b2", "hot", "c", "short", "b"]
