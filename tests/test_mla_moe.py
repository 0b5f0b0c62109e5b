"""MLA and MoE at scale (issue 34): known answers from the published configs.

DeepSeek-V3's config.json (deepseek-ai/DeepSeek-V3, as cached by aiconfigurator-core
0.12.0): hidden 7168, 61 layers, first_k_dense_replace 3, 256 routed experts top-8, 1
shared expert, moe_intermediate_size 2048, intermediate_size 18432, q_lora_rank 1536,
kv_lora_rank 512, qk_rope 64, qk_nope 128, v_head 128, 128 heads, vocab 129280. Its
model card: 671B parameters in the main model, 685B with the 14B MTP module.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from twin import mixers as mx
from twin.cache.kinds import KindBytes
from twin.errors import TwinError
from twin.model import ModelSpec
from twin.parallel import Layout, kv_bytes_per_token_per_gpu, weight_bytes_per_gpu
from twin.presets import get_model

DSV3 = get_model("deepseek-v3")
# One MLA layer's projections, by hand: q_a, q_b, kv_a_proj_with_mqa, kv_b_proj, o_proj.
MLA_LINEAR = (
    7168 * 1536 + 1536 * 128 * (128 + 64) + 7168 * (512 + 64) + 512 * 128 * (128 + 128)
) + 128 * 128 * 7168


def test_deepseek_v3_parameters_match_the_model_card() -> None:
    assert mx.linear_params(DSV3, "mla") == MLA_LINEAR == 187_105_280
    assert mx.params(DSV3, "mla") == MLA_LINEAR + 1536 + 512 + 7168  # q_a, kv_a, pre-norm
    assert abs(DSV3.n_params / 671e9 - 1) < 0.001
    assert abs((DSV3.n_params + DSV3.mtp_params) / 685e9 - 1) < 0.001
    assert DSV3.n_mlp_layers == 3 and DSV3.n_moe_layers == 58 and DSV3.n_attention_layers == 61
    assert DSV3.pattern == "3 mla/mlp, 58 mla/moe"


def test_mla_kv_is_one_latent_per_token_and_layer() -> None:
    assert DSV3.kv_bytes_per_token == 61 * (512 + 64) * 2
    fp8 = dataclasses.replace(DSV3, kv_dtype="fp8")
    assert fp8.kv_bytes_per_token == 61 * 576
    # The cache treats MLA as full attention: every prefix token's latent is needed.
    kinds = KindBytes(DSV3)
    assert kinds.full_kv_per_token == DSV3.kv_bytes_per_token and kinds.window is None


def test_q_lora_rank_zero_is_one_q_proj() -> None:
    plain = dataclasses.replace(DSV3, name="plain-q", q_lora_rank=0)
    assert mx.linear_params(DSV3, "mla") - mx.linear_params(plain, "mla") == (
        7168 * 1536 + 1536 * 128 * 192 - 7168 * 128 * 192
    )


def test_mla_prefill_is_the_decompressed_form_and_additive() -> None:
    n, c = 100, 900
    keys = (c + n) * (c + n + 1) // 2 - c * (c + 1) // 2
    proj = 2 * n * MLA_LINEAR - 2 * n * 512 * 128 * 256  # kv_b runs on the latents below
    decompress = 2 * n * 512 * 128 * (128 + 128)
    attend = 2 * 128 * (192 + 128) * keys  # QK^T at nope + rope, AV at v, per head
    assert mx.prefill_flops(DSV3, "mla", n, c) == proj + decompress + attend
    whole = DSV3.prefill_flops(300, 0).total
    assert whole == DSV3.prefill_flops(120, 0).total + DSV3.prefill_flops(180, 120).total


def test_mla_decode_is_the_absorbed_form() -> None:
    c = 4095
    token = 2 * MLA_LINEAR - 2 * 512 * 128 * 256  # q, kv_a, o_proj (no kv_b)
    absorb = 2 * 128 * 512 * (128 + 128)  # W_UK into the query, W_UV on the output
    attend = 2 * 128 * (2 * 512 + 64) * (c + 1)  # QK^T at 512 + 64, AV at 512
    assert mx.decode_flops(DSV3, "mla", c) == token + absorb + attend
    # Other kinds decode as a prefill of one token.
    llama = get_model("llama-3.1-8b")
    assert llama.decode_flops(c) == llama.prefill_flops(1, c)
    # Per key, the absorbed form does 1088/320 = 3.4x the decompressed form's work.
    step = DSV3.decode_flops(c + 1)["attention"] - DSV3.decode_flops(c)["attention"]
    assert step == 61 * 2 * 128 * 1088


def test_mla_needs_its_dims() -> None:
    with pytest.raises(TwinError, match="'kv_lora_rank' must be positive for a model with mla"):
        dataclasses.replace(DSV3, name="bad", kv_lora_rank=0)


def test_cost_model_prices_mla() -> None:
    from twin.costmodel.model import CostModel
    from twin.costmodel.profile_store import load_profile

    # priced since the MLA tables were mapped (tests/test_mla_pricing.py)
    assert CostModel(DSV3, load_profile("h100"), tp=8).decode([1024] * 4) > 0


@pytest.mark.parametrize(
    ("name", "published", "source"),
    [
        ("deepseek-v3", 671e9, "DeepSeek-V3 model card"),
        ("glm-5", 744e9, "GLM-5 model card"),
        ("minimax-m2.5", 229e9, "MiniMax-M2.5 model card"),
        ("gpt-oss-120b", 116.83e9, "gpt-oss model card, arXiv 2508.10925"),
        ("qwen3-235b-a22b", 235e9, "Qwen3 model card"),
        ("qwen3.5-397b-a17b", 397e9, "Qwen3.5 model card"),
        ("llama-3.1-70b", 70.55e9, "Llama 3.1 70B safetensors metadata"),
        ("llama-3.1-8b", 8.03e9, "Llama 3.1 8B safetensors metadata"),
        ("qwen3-32b", 32.8e9, "Qwen3-32B model card"),
    ],
)
def test_presets_parameters_within_one_percent(name: str, published: float, source: str) -> None:
    assert abs(get_model(name).n_params / published - 1) < 0.01, source


def test_gpt_oss_120b_checkpoint_bytes() -> None:
    # gpt-oss model card (arXiv 2508.10925): a 60.8 GiB checkpoint, mxfp4 experts.
    assert abs(get_model("gpt-oss-120b").weight_bytes / (60.8 * 2**30) - 1) < 0.01


# ------------------------------------------------------------------ parallel layouts
def test_layout_without_dp_splits_all_weights_evenly() -> None:
    fp8_block = 1 + 4 / 128**2
    for name in ("llama-3.1-70b", "deepseek-v3", "qwen3.5-397b-a17b"):
        m = get_model(name)
        layouts = (Layout(8), Layout(8, ep=8), Layout(8, ep=2)) if m.n_moe_layers else (Layout(8),)
        # but MLA's q_a/kv_a projection and its two norms, whole on every rank
        linear, norms = mx.mla_replicated_params(m) if m.mixer_counts.get("mla") else (0, 0)
        whole = 61 * (linear * fp8_block + norms * 2) if linear else 0
        for layout in layouts:
            got = weight_bytes_per_gpu(m, layout)
            assert abs(got - (m.weight_bytes - whole) / 8 - whole) <= 1, (name, layout)


def test_attention_dp_replicates_the_attention_side() -> None:
    g = DSV3.param_groups
    fp8_block = 1 + 4 / 128**2
    attention = g["mixer_linear"] * fp8_block + (g["mixer_other"] + g["other"]) * 2
    ffn = (g["mlp_linear"] + g["shared_experts"] + g["routed_experts"]) * fp8_block
    got = weight_bytes_per_gpu(DSV3, Layout(8, ep=8, dp=8))
    assert math.isclose(got, attention + ffn / 8, rel_tol=1e-12)  # attention TP 1: all whole
    assert got > weight_bytes_per_gpu(DSV3, Layout(8, ep=8))


def test_kv_per_gpu_mla_is_not_split_by_heads() -> None:
    assert kv_bytes_per_token_per_gpu(DSV3, Layout(8)) == DSV3.kv_bytes_per_token
    llama = get_model("llama-3.1-70b")
    assert kv_bytes_per_token_per_gpu(llama, Layout(8)) == llama.kv_bytes_per_token / 8
    # Attention DP 2 over 8 GPUs: 4-way attention TP, 2 of the 8 KV heads per GPU.
    assert kv_bytes_per_token_per_gpu(llama, Layout(8, dp=2)) == llama.kv_bytes_per_token / 4


@pytest.mark.parametrize(
    ("name", "layout", "message"),
    [
        ("deepseek-v3", Layout(6, ep=6), "--ep 6 does not divide the 256 routed experts"),
        ("llama-3.1-70b", Layout(6), "--tp 6 = 6 does not divide the 64 attention heads"),
        ("kimi-k2.5", Layout(8, dp=2, ep=8), None),
        ("llama-3.1-70b", Layout(8, ep=8), "--ep 8: model 'llama-3.1-70b' has no MoE layers"),
        ("glm-5", Layout(6, dp=2), "--tp 6 / --dp-attention 2 = 3 does not divide the 64"),
    ],
)
def test_layouts_a_model_cannot_take_are_refused(
    name: str, layout: Layout, message: str | None
) -> None:
    m = get_model(name)
    if message is None:
        weight_bytes_per_gpu(m, layout)
        return
    with pytest.raises(TwinError, match=message) as err:
        weight_bytes_per_gpu(m, layout)
    assert "\n" not in str(err.value)


def test_layout_flags_must_divide_tp() -> None:
    with pytest.raises(TwinError, match="--ep 3 must divide --tp 8"):
        Layout(8, ep=3)
    with pytest.raises(TwinError, match="--dp-attention must be a positive integer"):
        Layout(8, dp=0)


def test_model_without_parts_round_trips() -> None:
    d = DSV3.to_dict()
    assert d["mtp_params"] == DSV3.mtp_params
    assert ModelSpec.from_dict(d) == DSV3
