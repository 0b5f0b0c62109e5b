"""The expert layout a fused-MoE fit prices a model's experts at (twin.costmodel.moe_layout):
SGLang's EP runs of a group-limited model (DeepSeek) at the TP layout of the same GPUs,
every other model, engine and layout at its own."""

from __future__ import annotations

import dataclasses

import pytest

from twin.costmodel import CostModel
from twin.costmodel.moe_layout import group_limited, priced_ep
from twin.costmodel.profile_store import resolve_profile
from twin.hf_keys import ConfigKeys
from twin.hf_moe import deepseek_v3
from twin.precision import with_precision
from twin.presets import get_model

SGLANG = "sglang_flashinfer_trtllm_moe"


def test_deepseek_routes_within_four_of_eight_groups_and_kimi_does_not() -> None:
    assert group_limited(get_model("deepseek-r1"))
    assert group_limited(get_model("deepseek-v3"))
    assert not group_limited(get_model("kimi-k2.5"))
    assert not group_limited(get_model("glm-5"))


def test_the_config_reader_takes_the_groups_with_transformers_defaults() -> None:
    base = {
        "num_hidden_layers": 4,
        "first_k_dense_replace": 1,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "q_lora_rank": 16,
        "kv_lora_rank": 16,
        "qk_nope_head_dim": 8,
        "qk_rope_head_dim": 8,
        "v_head_dim": 8,
        "intermediate_size": 128,
        "n_routed_experts": 16,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "vocab_size": 100,
    }
    fields = deepseek_v3(ConfigKeys(base, "cfg"))
    assert (fields["moe_n_group"], fields["moe_topk_group"]) == (8, 4)
    fields = deepseek_v3(ConfigKeys({**base, "n_group": 1, "topk_group": 1}, "cfg"))
    assert (fields["moe_n_group"], fields["moe_topk_group"]) == (1, 1)


def test_only_sglangs_kernel_prices_a_group_limited_ep_run_as_tp() -> None:
    r1, kimi = get_model("deepseek-r1"), get_model("kimi-k2.5")
    assert priced_ep(r1, 4, 4, SGLANG) == 1
    assert priced_ep(r1, 8, 8, SGLANG) == 1
    assert priced_ep(r1, 4, 1, SGLANG) == 1
    assert priced_ep(r1, 4, 4, "moe_torch_flow_cutlass") == 4
    assert priced_ep(kimi, 4, 4, SGLANG) == 4
    odd = dataclasses.replace(r1, moe_d_ff=2050)  # 2050 / 4 does not split evenly
    assert priced_ep(odd, 4, 4, SGLANG) == 4


def _decode_moe(model: object, engine: str, tp: int, ep: int) -> float:
    cm = CostModel(model, resolve_profile("b200", None, engine), tp=tp, ep=ep)  # type: ignore[arg-type]
    cost = cm.decode([1024] * 32, breakdown=True)
    return float(cost.by_kernel["moe"])  # type: ignore[union-attr]


def test_sglang_prices_deepseeks_ep_experts_as_the_tp_layout_of_the_same_gpus() -> None:
    r1 = with_precision(get_model("deepseek-r1"), "nvfp4", None)
    ep4, tp4 = _decode_moe(r1, "sglang", 4, 4), _decode_moe(r1, "sglang", 4, 1)
    assert ep4 == tp4 > 0.0
    # Kimi-K2.5 (plain top-k): its EP rows are balanced, its EP run keeps them.
    kimi = with_precision(get_model("kimi-k2.5"), "nvfp4", None)
    assert _decode_moe(kimi, "sglang", 4, 4) != _decode_moe(kimi, "sglang", 4, 1)
    # TensorRT-LLM's CUTLASS table keeps its EP rows for DeepSeek.
    trt = (_decode_moe(r1, "trtllm", 4, 4), _decode_moe(r1, "trtllm", 4, 1))
    assert trt[0] != pytest.approx(trt[1], rel=1e-6)


def test_the_provenance_says_the_experts_take_the_tp_layout() -> None:
    r1 = with_precision(get_model("deepseek-r1"), "nvfp4", None)
    cm = CostModel(r1, resolve_profile("b200", None, "sglang"), tp=4, ep=4)
    assert "TP layout" in cm.provenance
    cm = CostModel(r1, resolve_profile("b200", None, "sglang"), tp=4, ep=1)
    assert "TP layout" not in cm.provenance


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"moe_n_group": 0}, "'moe_n_group' must be at least 1"),
        ({"moe_n_group": 7}, "'moe_n_group' must divide moe_n_experts"),
        ({"moe_topk_group": 9}, "'moe_topk_group' must be 1 to moe_n_group"),
        ({"moe_topk_group": 0}, "'moe_topk_group' must be 1 to moe_n_group"),
    ],
)
def test_expert_groups_out_of_range_are_refused(fields: dict[str, int], message: str) -> None:
    from twin.errors import TwinError

    with pytest.raises(TwinError, match=message):
        dataclasses.replace(get_model("deepseek-v3"), **fields)
