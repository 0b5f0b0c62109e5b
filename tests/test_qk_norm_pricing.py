"""MiniMax-M2's q/k RMSNorms over all heads (``ModelSpec.qk_norm_across_heads``): read
from the config, and priced per attention layer as vLLM runs them
(``twin.costmodel.dense_pricing.DensePricing._qk_norm``): two element-wise passes over
q and k around an all-reduce of two fp32 variances a token under TP, one pass on one GPU."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from twin.costmodel import CostModel
from twin.costmodel.profile_store import load_profile
from twin.hf_config import from_hf_config
from twin.presets import get_model

HF = Path(__file__).parent / "data" / "hf_configs"


def test_the_config_says_whether_the_norm_spans_the_heads(tmp_path: Path) -> None:
    assert from_hf_config(HF / "minimax-m2.5.json").qk_norm_across_heads  # the default
    data = json.loads((HF / "minimax-m2.5.json").read_text())
    for changes in ({"qk_norm_type": "per_head"}, {"use_qk_norm": False}):
        path = tmp_path / "config.json"
        path.write_text(json.dumps({**data, **changes}))
        assert not from_hf_config(path).qk_norm_across_heads
    assert not get_model("qwen3-235b-a22b").qk_norm_across_heads  # per-head norms: not this


@pytest.mark.parametrize("tp", [1, 4])
def test_each_attention_layer_pays_the_passes_and_the_all_reduce(tp: int) -> None:
    with_norm = get_model("minimax-m2.5")
    without = dataclasses.replace(with_norm, qk_norm_across_heads=False)
    profile = load_profile("b200", "vllm")
    contexts = [2048] * 4
    a = CostModel(with_norm, profile, tp).decode(contexts, breakdown=True)
    b = CostModel(without, profile, tp).decode(contexts, breakdown=True)
    cm = CostModel(with_norm, profile, tp)
    elem = cm._k["elementwise"]
    width = (48 // tp + max(8 // tp, 1)) * 128  # this rank's q and k heads
    scale = elem(0.0, 2 * 2.0 * 4 * width)  # 4 tokens, bf16, read and written
    extra_elem = scale if tp == 1 else scale + elem(0.0, 2 * 4 * width)
    extra_ar = 0.0 if tp == 1 else cm._allreduce_bytes(4 * 2 * 4.0)  # 2 fp32 a token
    layers = with_norm.n_attention_layers
    got = {
        k: a.items["attention"].get(k, 0.0) - b.items["attention"].get(k, 0.0)
        for k in a.items["attention"]
    }
    assert got["elementwise"] == pytest.approx(layers * extra_elem, rel=1e-9)
    assert got.get("allreduce", 0.0) == pytest.approx(layers * extra_ar, rel=1e-9, abs=1e-15)
    assert a.total_s - b.total_s == pytest.approx(layers * (extra_elem + extra_ar), rel=1e-9)
    # The all-reduce of a few bytes costs its latency: about the fit's floor.
    if tp > 1:
        assert extra_ar > 0
        assert extra_ar < cm._allreduce(4)


@pytest.mark.parametrize("name,tp", [("qwen3-32b", 2), ("qwen3-235b-a22b", 4)])
def test_tensorrt_llm_qwen3_pays_one_pass_over_q_and_k(name: str, tp: int) -> None:
    """``KernelLayout.qk_norm_rope_pass``: TensorRT-LLM's ``fused_qk_norm_rope``, one
    element-wise pass an attention layer over this rank's q and k, no all-reduce."""
    from twin.costmodel.kernel_layout import KernelLayout

    base = get_model(name)
    with_pass = KernelLayout(qk_norm_rope_pass=True)
    profile = load_profile("h100", "trtllm")
    a = CostModel(base, profile, tp, kernel_layout=with_pass).decode([1024] * 8, breakdown=True)
    b = CostModel(base, profile, tp).decode([1024] * 8, breakdown=True)
    cm = CostModel(base, profile, tp)
    width = (base.n_heads // tp + max(base.n_kv_heads // tp, 1)) * base.head_dim
    one = cm._k["elementwise"](0.0, 2 * 2.0 * 8 * width)
    layers = base.n_attention_layers
    got = a.items["attention"]["elementwise"] - b.items["attention"]["elementwise"]
    assert got == pytest.approx(layers * one, rel=1e-9)
    assert a.items["attention"]["allreduce"] == b.items["attention"]["allreduce"]
    assert a.total_s - b.total_s == pytest.approx(layers * one, rel=1e-9)


def test_the_engine_rule_is_qwen3_only() -> None:
    """TensorRT-LLM's rule (``twin.engine.kernel_layouts_trtllm``): Qwen3 and Qwen3-MoE, as a
    preset or under their Hugging Face ids; not Qwen3.5, Qwen3-Next or Llama."""
    from twin.engine.kernel_layouts_trtllm import trtllm_kernel_layout, trtllm_qk_norm_rope_pass

    assert trtllm_qk_norm_rope_pass(get_model("qwen3-32b"))
    assert trtllm_qk_norm_rope_pass(get_model("qwen3-235b-a22b"))
    hf = dataclasses.replace(get_model("qwen3-32b"), name="nvidia/Qwen3-32B-NVFP4")
    assert trtllm_qk_norm_rope_pass(hf)
    assert not trtllm_qk_norm_rope_pass(get_model("qwen3.5-397b-a17b"))
    next80 = dataclasses.replace(get_model("qwen3.5-397b-a17b"), name="Qwen/Qwen3-Next-80B-A3B")
    assert not trtllm_qk_norm_rope_pass(next80)  # GDN layers: modules of its own
    assert not trtllm_qk_norm_rope_pass(get_model("llama-3.1-8b"))
    assert trtllm_kernel_layout(get_model("qwen3-32b"), "", 1, 1, 1, "").qk_norm_rope_pass
