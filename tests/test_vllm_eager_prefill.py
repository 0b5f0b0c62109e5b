"""vLLM's steps above its largest captured CUDA graph run eagerly: the host time of an
eager forward is added to those steps only (``EagerPrefillPricer(graph_tokens=...)``,
``eager_prefill.vllm_graph_tokens``, ``eager_prefill.eager_prefill_s`` for vLLM MoE rows)."""

from __future__ import annotations

import dataclasses

import pytest
from silicon_rows import planned, silicon_row
from test_engine_helpers import ConstantPricer

from twin.engine.config import EngineConfig
from twin.engine.host_time import EagerPrefillPricer
from twin.errors import TwinError
from twin.presets import get_model
from twin.validate import silicon as sil

IMAX = "source_file=2026-04-06.csv; model=X; silicon_concurrency=4"


def test_only_a_prefill_step_above_the_graph_size_pays_the_host_time():
    every = EagerPrefillPricer(ConstantPricer(0.01), 0.02)
    graphed = EagerPrefillPricer(ConstantPricer(0.01), 0.02, graph_tokens=512)
    assert every.step_time([], 64, 1000) == graphed.step_time([], 64, 1000) == 0.01
    assert every.step_time([(256, 0)], 8, 1000) == pytest.approx(0.03)
    assert graphed.step_time([(256, 0)], 8, 1000) == 0.01  # 264 tokens: a graph replays
    assert graphed.step_time([(504, 0)], 8, 1000) == 0.01  # 512: the largest graph
    assert graphed.step_time([(505, 0)], 8, 1000) == pytest.approx(0.03)  # 513: eager
    assert graphed.step_time([(300, 0), (300, 64)], 0, 0) == pytest.approx(0.03)


def test_the_graph_size_is_a_config_field_left_out_of_summaries_at_its_default():
    assert "eager_graph_tokens" not in EngineConfig().to_dict()
    assert EngineConfig.of(eager_graph_tokens=512).to_dict()["eager_graph_tokens"] == 512
    with pytest.raises(TwinError, match="--eager-graph-tokens: must be >= 0"):
        EngineConfig.of(eager_graph_tokens=-1)


def test_vllm_capture_size_from_the_server_limits_and_gpt_oss_scripts():
    minimax = silicon_row(source=IMAX, model_path="MiniMaxAI/MiniMax-M2.5", system="b200_sxm")
    sets = {"sets": {"max_num_batched_tokens": "8192", "max_num_seqs": "512"}}
    assert sil.vllm_graph_tokens(minimax, sets) == 512  # min(2 x 512, 512)
    assert sil.vllm_graph_tokens(minimax, {"sets": {"max_num_seqs": "4"}}) == 8
    assert sil.vllm_graph_tokens(minimax, {}) == 512
    gpt_oss = silicon_row(source=IMAX)  # InferenceMAX's max-cudagraph-capture-size: 2048
    assert sil.vllm_graph_tokens(gpt_oss, sets) == 2048
    small = {"sets": {"max_num_batched_tokens": "1024", "max_num_seqs": "512"}}
    assert sil.vllm_graph_tokens(gpt_oss, small) == 1024  # capped by the step budget
    # the script's size goes with the script's limits: not at the engine's defaults
    assert sil.vllm_graph_tokens(gpt_oss, {}, "defaults") == 512
    assert sil.vllm_graph_tokens(gpt_oss, sets, "aiconfigurator") == 512


def test_vllm_moe_rows_get_the_eager_host_time_and_dense_rows_none():
    row = silicon_row(source=IMAX, model_path="MiniMaxAI/MiniMax-M2.5", system="b200_sxm")
    for version, eager in (
        ("0.14.0", True),
        ("0.19.0", True),
        ("nightly-5b8c30d62b754b57", True),
        ("0.12.0", False),  # not read
        ("0.11.2", False),
        ("", False),
    ):
        assert sil.vllm_prefills_eagerly(dataclasses.replace(row, backend_version=version)) is eager
    old = dataclasses.replace(row, backend_version="0.12.0")
    assert sil.eager_prefill_s(old, get_model("gpt-oss-120b"), "b200") == 0.0
    moe = get_model("gpt-oss-120b")
    per_launch = sil.VLLM_EAGER_LAUNCH_S["b200"]
    assert sil.eager_prefill_s(row, moe, "b200") == pytest.approx(
        per_launch * sil.vllm_eager_launches(moe, row.tp or 1)
    )
    assert sil.eager_prefill_s(row, get_model("llama-3-8b"), "b200") == 0.0
    assert sil.eager_prefill_s(dataclasses.replace(row, attention_dp=2), moe, "b200") == 0.0
    assert sil.eager_prefill_s(row, moe, "a100") == 0.0  # no fitted host time


def test_vllm_launch_counts_follow_the_layer_parts_and_the_linears_precision():
    """vLLM's own launches per layer (``VLLM_EAGER_LAUNCHES``), not SGLang's: a linear is
    one launch, two where its activations are quantised; the experts two more then."""
    n, experts = sil.VLLM_EAGER_LAUNCHES, sil.VLLM_EXPERT_LAUNCHES
    kimi = get_model("kimi-k2.5")  # MLA on 61 layers, a shared expert, one dense layer
    assert dict(kimi.mixer_counts) == {"mla": 61} and kimi.moe_shared_d_ff
    mla, moe, shared, mlp = (n[p][0] + n[p][1] for p in ("mla", "moe", "shared_expert", "mlp"))
    bf16 = 61 * mla + kimi.n_moe_layers * (moe + experts + shared) + kimi.n_mlp_layers * mlp
    int4 = dataclasses.replace(kimi, precision="bf16", moe_precision="int4")
    assert sil.vllm_eager_launches(int4, 2) == sil.vllm_eager_launches(kimi, 2) == bf16
    # bf16 linears and weight-only experts: fewer launches than SGLang's block-fp8 count
    assert sil.vllm_eager_launches(int4, 2) < 0.8 * sil.eager_launches(int4)
    fp8 = dataclasses.replace(kimi, precision="fp8", moe_precision="fp8-block")
    linears = 61 * n["mla"][1] + kimi.n_moe_layers * n["shared_expert"][1]
    linears += kimi.n_mlp_layers * n["mlp"][1]
    assert sil.vllm_eager_launches(fp8, 2) == bf16 + linears + 2 * kimi.n_moe_layers


def test_vllm_launch_counts_follow_tensor_parallelism():
    """At tp 1 vLLM's all-reduces are no launches; above it MiniMax-M2's q/k norms over
    all heads all-reduce their variances in every attention layer (two launches more)."""
    n, drop = sil.VLLM_EAGER_LAUNCHES, sil.VLLM_ALL_REDUCES
    kimi = get_model("kimi-k2.5")
    one, two = sil.vllm_eager_launches(kimi, 1), sil.vllm_eager_launches(kimi, 2)
    assert two - one == kimi.n_moe_layers * drop["moe"] + kimi.n_mlp_layers * drop["mlp"]
    assert sil.vllm_eager_launches(kimi, 8) == two
    minimax = get_model("minimax-m2.5")
    assert minimax.qk_norm_across_heads and not kimi.qk_norm_across_heads
    layers = minimax.mixer_counts["attention"]
    tp1, tp4 = sil.vllm_eager_launches(minimax, 1), sil.vllm_eager_launches(minimax, 4)
    assert tp4 - tp1 == minimax.n_moe_layers * drop["moe"] + layers * sil.VLLM_QK_NORM_ALL_REDUCE
    assert sil.vllm_part_launches(minimax, "attention", 4) == (
        n["attention"][0] + n["attention"][1] * 2 + sil.VLLM_QK_NORM_ALL_REDUCE  # fp8 linears
    )
    # the row's own tensor parallelism prices its eager forward
    row = silicon_row(source=IMAX, model_path="MiniMaxAI/MiniMax-M2.5", system="b200_sxm")
    row = dataclasses.replace(row, backend_version="0.19.0", tp=1)
    for tp, launches in ((1, tp1), (4, tp4)):
        assert sil.eager_prefill_s(dataclasses.replace(row, tp=tp), minimax, "b200") == (
            pytest.approx(sil.VLLM_EAGER_LAUNCH_S["b200"] * launches)
        )


def test_checkpoints_that_keep_attention_unquantised_count_bf16_attention_linears():
    """``nvidia/Kimi-K2.5-NVFP4`` and ``nvidia/MiniMax-M2.5-NVFP4`` leave ``self_attn``
    unquantised: vLLM runs those projections as bf16 linears, one launch each."""
    kimi_fp4 = {"quantization_config": {"ignore": ["language_model.model.layers.0.self_attn*"]}}
    assert sil.attention_unquantised(kimi_fp4, None)
    assert sil.attention_unquantised({}, {"exclude_modules": ["model.layers.0.self_attn*"]})
    fp8 = {"quantization_config": {"modules_to_not_convert": ["gate", "lm_head"]}}
    assert not sil.attention_unquantised(fp8, None)
    assert not sil.attention_unquantised({}, None)
    kimi = dataclasses.replace(get_model("kimi-k2.5"), precision="nvfp4", moe_precision="nvfp4")
    quantised = sil.vllm_part_launches(kimi, "mla", 4)
    kept = sil.vllm_part_launches(kimi, "mla", 4, bf16_attention=True)
    assert quantised - kept == sil.VLLM_EAGER_LAUNCHES["mla"][1]  # one launch less a linear
    assert sil.vllm_part_launches(kimi, "moe", 4, True) == sil.vllm_part_launches(kimi, "moe", 4)
    assert sil.vllm_eager_launches(kimi, 4) - sil.vllm_eager_launches(kimi, 4, True) == (
        61 * sil.VLLM_EAGER_LAUNCHES["mla"][1]
    )


def test_inferencemax_fp4_vllm_rows_read_the_nvfp4_checkpoint_they_served():
    pytest.importorskip("aiconfigurator_core")  # the checkpoints' cached configs
    row = silicon_row(source=IMAX, model_path="MiniMaxAI/MiniMax-M2.5", system="b200_sxm")
    fp4 = dataclasses.replace(row, precision="fp4", backend_version="0.19.0")
    assert sil.inferencemax_served_checkpoint(fp4) == "nvidia/MiniMax-M2.5-NVFP4"
    assert sil.inferencemax_served_checkpoint(dataclasses.replace(fp4, precision="fp8")) is None
    kimi = dataclasses.replace(fp4, model_path="moonshotai/Kimi-K2.5")
    assert sil.inferencemax_served_checkpoint(kimi) == "nvidia/Kimi-K2.5-NVFP4"
    configs = sil.default_configs()
    assert sil.checkpoint_attention_unquantised(configs, "nvidia/MiniMax-M2.5-NVFP4")
    assert sil.checkpoint_attention_unquantised(configs, "nvidia/Kimi-K2.5-NVFP4")
    assert not sil.checkpoint_attention_unquantised(configs, "MiniMaxAI/MiniMax-M2.5")
    assert not sil.checkpoint_attention_unquantised(configs, "nobody/None")
    # planned: the fp4 row's attention linears are one launch each, the fp8 row's two
    plan_fp4 = planned(fp4, isl=1024, osl=1024, concurrency=4, tp=2)
    model = plan_fp4.model
    launches = sil.vllm_eager_launches(model, 2, bf16_attention=True)
    assert launches < sil.vllm_eager_launches(model, 2)
    assert plan_fp4.deployment["eager_prefill_s"] == pytest.approx(
        sil.VLLM_EAGER_LAUNCH_S["b200"] * launches
    )


def test_a_planned_vllm_moe_row_carries_its_graph_size():
    pytest.importorskip("aiconfigurator_core")  # the model's config.json comes from the extra
    row = silicon_row(
        source=IMAX,
        model_path="MiniMaxAI/MiniMax-M2.5",
        system="b200_sxm",
        backend_version="0.19.0",
        precision="fp8",
        gemm_quant_mode="fp8",
        moe_quant_mode="fp8",
        isl=1024,
        osl=1024,
        concurrency=4,
        tp=2,
    )
    plan = planned(row)
    assert plan.deployment["eager_prefill_s"] > 0
    assert plan.deployment["eager_graph_tokens"] == 512


def test_a_mixed_eager_step_also_pays_the_decode_path_host_time():
    pricer = EagerPrefillPricer(ConstantPricer(0.01), 0.02, graph_tokens=512, decode_s=0.005)
    assert pricer.step_time([(1024, 0)], 0, 0) == pytest.approx(0.03)  # prompts alone
    assert pricer.step_time([(1024, 0)], 3, 1000) == pytest.approx(0.035)  # mixed: + decode
    assert pricer.step_time([(256, 0)], 3, 1000) == 0.01  # a graph replays: neither
    assert pricer.step_time([], 64, 1000) == 0.01  # decode steps untouched
    over = EagerPrefillPricer(ConstantPricer(0.01), 0.02, overlap=True, decode_s=0.005)
    assert over.step_time([(1024, 0)], 3, 1000) == pytest.approx(0.025)  # max(kernels, host)
    assert "eager_decode_s" not in EngineConfig().to_dict()
    with pytest.raises(TwinError, match="must be >= 0"):
        EngineConfig.of(eager_decode_s=-1.0)


def _kimi_row(**fields: object) -> sil.SiliconRow:
    base: dict[str, object] = {
        "source": "source_file=2026-04-06.csv; model=Kimi-K2.5; silicon_concurrency=4; "
        "measured=2026-03-27T00:00:00.000Z; wip=False",
        "model_path": "moonshotai/Kimi-K2.5",
        "system": "b200_sxm",
        "backend_version": "0.17.0",
        "precision": "fp4",
        "gemm_quant_mode": "nvfp4",
        "moe_quant_mode": "nvfp4",
        "isl": 1024,
        "osl": 1024,
        "concurrency": 4,
        "tp": 4,
    }
    return silicon_row(**{**base, **fields})


def test_vllm_0_17_mla_rows_on_blackwell_pay_the_decode_path_in_mixed_eager_steps():
    pytest.importorskip("aiconfigurator_core")  # the model's config.json comes from the extra
    from twin.validate.silicon.eager_prefill import (
        VLLM_EAGER_LAUNCH_S,
        VLLM_MLA_DECODE_LAUNCHES,
        vllm_eager_decode_s,
    )

    plan = planned(_kimi_row())
    # 5 launches a layer (mla_attention.py forward_impl's MQA branch), 61 MLA layers
    want = VLLM_EAGER_LAUNCH_S["b200"] * VLLM_MLA_DECODE_LAUNCHES * 61
    assert plan.deployment["eager_decode_s"] == pytest.approx(want)
    assert plan.deployment["eager_graph_tokens"] == 512
    # another release (not read): none; Hopper (FlashMLA / FA MLA decode first) or a
    # model without MLA: none
    assert "eager_decode_s" not in planned(_kimi_row(backend_version="0.19.0")).deployment
    row, model = _kimi_row(), get_model("kimi-k2.5")
    assert vllm_eager_decode_s(row, model, "b200") == pytest.approx(want)
    assert vllm_eager_decode_s(row, model, "h200") == 0.0
    assert vllm_eager_decode_s(row, get_model("qwen3-235b-a22b"), "b200") == 0.0
