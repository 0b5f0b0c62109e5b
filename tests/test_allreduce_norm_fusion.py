"""SGLang's FlashInfer all-reduce fusion (default for its listed models from 0.5.9) runs
each layer's residual add + RMSNorm inside the tensor-parallel all-reduce in steps up to a
size (``KernelLayout.norm_in_allreduce_max_tokens``; the rule
``twin.engine.kernel_layouts_sglang.sglang_allreduce_norm_tokens``; priced by
``DensePricing._norm_in_allreduce``)."""

from __future__ import annotations

import dataclasses

import pytest

from twin.costmodel import CostModel
from twin.costmodel.kernel_layout import KernelLayout
from twin.costmodel.profile_store import load_profile
from twin.engine.kernel_layouts_sglang import sglang_allreduce_norm_tokens, sglang_kernel_layout
from twin.errors import TwinError
from twin.presets import get_model


def test_sglang_fuses_its_listed_models_from_0_5_9() -> None:
    r1 = get_model("deepseek-r1")
    assert sglang_allreduce_norm_tokens(r1, "0.5.9", 8, 1, "h200") == 2048
    assert sglang_allreduce_norm_tokens(r1, "0.5.10.post1", 8, 1, "b300") == 2048
    assert sglang_allreduce_norm_tokens(r1, "0.5.9", 8, 8, "b200") == 0  # DP attention
    assert sglang_allreduce_norm_tokens(r1, "0.5.9", 16, 1, "h200") == 0  # two nodes
    assert sglang_allreduce_norm_tokens(r1, "0.5.6.post2", 8, 1, "h200") == 0  # unread
    assert sglang_allreduce_norm_tokens(r1, "nightly-dev", 8, 1, "b200") == 0
    llama = get_model("llama-3.1-8b")  # not in the list
    assert sglang_allreduce_norm_tokens(llama, "0.5.9", 4, 1, "h200") == 0
    layout = sglang_kernel_layout(r1, "0.5.9", 8, 1, 1, "b200")
    assert layout.norm_in_allreduce and layout.norm_in_allreduce_max_tokens == 2048


def test_sglang_fuses_only_the_listed_architectures() -> None:
    # Qwen3-MoE fuses; Qwen3-Next (``Qwen3NextForCausalLM``, GDN layers) is not listed
    assert sglang_allreduce_norm_tokens(get_model("qwen3-235b-a22b"), "0.5.9", 8, 1, "h200")
    assert not sglang_allreduce_norm_tokens(
        get_model("qwen3-next-80b-a3b"), "0.5.10.post1", 4, 1, "h200"
    )
    r1 = get_model("deepseek-r1")
    # DeepSeek-V3.2's sparse-attention indexer: ``DeepseekV32ForCausalLM``, not listed
    v32 = dataclasses.replace(
        r1, name="deepseek-v3.2", index_n_heads=64, index_head_dim=128, index_topk=2048
    )
    assert not sglang_allreduce_norm_tokens(v32, "0.5.9", 8, 1, "b200")
    # a dense model distilled from R1 (``Qwen2ForCausalLM``): named after R1, no MLA
    distill = dataclasses.replace(get_model("llama-3.1-8b"), name="deepseek-r1-distill-8b")
    assert not sglang_allreduce_norm_tokens(distill, "0.5.9", 8, 1, "b200")


def test_the_norms_leave_only_up_to_the_cap() -> None:
    model = get_model("gpt-oss-120b")
    profile = load_profile("h200", "vllm")
    capped = KernelLayout(norm_in_allreduce=True, norm_in_allreduce_max_tokens=64)
    plain = CostModel(model, profile, 8)
    fused = CostModel(model, profile, 8, kernel_layout=capped)
    small_a = fused.decode([2048] * 32, breakdown=True)
    small_b = plain.decode([2048] * 32, breakdown=True)
    elem = plain._k["elementwise"]
    norm = elem(0.0, 2.0 * (4.0 * 32 * model.d_model + model.d_model))
    for kind in ("attention", "swa", "moe"):
        layers = model.mixer_counts.get(kind, 0) if kind != "moe" else model.n_moe_layers
        drop = small_b.items[kind]["elementwise"] - small_a.items[kind].get("elementwise", 0.0)
        assert drop == pytest.approx(layers * norm, rel=1e-9)  # one norm a layer leaves
        assert small_a.items[kind]["gemm"] == small_b.items[kind]["gemm"]
        assert small_a.items[kind]["allreduce"] == small_b.items[kind]["allreduce"]
    assert small_a.total_s < small_b.total_s
    big = [2048] * 128  # past the cap: priced as without the fusion
    assert fused.decode(big) == plain.decode(big)


def test_mla_layers_lose_their_pre_attention_norm() -> None:
    model = get_model("deepseek-r1")
    profile = load_profile("b200", "sglang")
    layout = KernelLayout(norm_in_allreduce=True)
    a = CostModel(model, profile, 8, kernel_layout=layout).decode([2048] * 4, breakdown=True)
    b = CostModel(model, profile, 8).decode([2048] * 4, breakdown=True)
    elem = CostModel(model, profile, 8)._k["elementwise"]
    d = model.d_model
    norm = elem(0.0, 2.0 * (4.0 * 4 * d + d))
    n_mla = model.mixer_counts["mla"]
    drop = b.items["attention"]["elementwise"] - a.items["attention"]["elementwise"]
    assert drop == pytest.approx(n_mla * norm, rel=1e-9)
    assert a.items["attention"]["allreduce"] == b.items["attention"]["allreduce"]


def test_a_negative_cap_is_refused() -> None:
    with pytest.raises(TwinError):
        KernelLayout(norm_in_allreduce=True, norm_in_allreduce_max_tokens=-1)
