"""TensorRT-LLM's Llama under TP runs each layer's residual add + RMSNorm inside its
all-reduces, and with NVFP4 weights the next GEMM's input quantisation too
(``KernelLayout.norm_in_allreduce``; ``twin.costmodel.dense_pricing.DensePricing
._norm_in_allreduce``; the engine's rule ``twin.engine.kernel_layouts
.trtllm_norm_in_allreduce``, for ``twin simulate --engine trtllm`` and the rows alike)."""

from __future__ import annotations

import dataclasses

import pytest

from twin.costmodel import CostModel
from twin.costmodel.kernel_layout import DEFAULT_LAYOUT, KernelLayout
from twin.costmodel.profile_store import load_profile
from twin.engine.config import EngineConfig
from twin.engine.kernel_layouts_trtllm import trtllm_norm_in_allreduce
from twin.engine.run_pricing import kernel_layout_of
from twin.presets import get_model

FUSED = KernelLayout(norm_in_allreduce=True, allreduce_quantises_input=True)


@pytest.mark.parametrize("precision", ["nvfp4", "fp8"])
def test_the_norms_leave_and_nvfp4_gemms_quantise_nothing(precision: str) -> None:
    base = dataclasses.replace(get_model("llama-3.1-70b"), precision=precision)
    profile = load_profile("b200", "trtllm")
    contexts = [2048] * 4
    a = CostModel(base, profile, 4, kernel_layout=FUSED).decode(contexts, breakdown=True)
    b = CostModel(base, profile, 4).decode(contexts, breakdown=True)
    cm = CostModel(base, profile, 4)
    elem, d, layers = cm._k["elementwise"], base.d_model, base.n_attention_layers
    norm = elem(0.0, 2.0 * (4.0 * 4 * d + d))
    quant = elem(0.0, 4 * d * (2 + 0.5 + 1 / 16)) if precision == "nvfp4" else 0.0
    attn = {
        k: b.items["attention"][k] - a.items["attention"].get(k, 0.0) for k in b.items["attention"]
    }
    mlp = {k: b.items["mlp"][k] - a.items["mlp"].get(k, 0.0) for k in b.items["mlp"]}
    assert attn["elementwise"] == pytest.approx(layers * norm, rel=1e-9)  # no norm left
    assert mlp["elementwise"] == pytest.approx(layers * norm, rel=1e-9)  # SwiGLU stays
    assert attn["gemm"] == pytest.approx(layers * quant, rel=1e-9, abs=1e-15)
    assert mlp["gemm"] == pytest.approx(layers * quant, rel=1e-9, abs=1e-15)
    assert attn["allreduce"] == mlp["allreduce"] == 0.0  # the fused kernel: the same fit


def test_gpt_oss_norms_leave_its_gemms_unchanged() -> None:
    base = get_model("gpt-oss-120b")
    fused = KernelLayout(norm_in_allreduce=True)
    profile = load_profile("b200", "trtllm")
    a = CostModel(base, profile, 2, kernel_layout=fused).decode([2048] * 4, breakdown=True)
    b = CostModel(base, profile, 2).decode([2048] * 4, breakdown=True)
    for kind in ("attention", "swa", "moe"):
        assert "elementwise" not in a.items[kind]  # its norms were its only passes
        assert a.items[kind]["gemm"] == b.items[kind]["gemm"]
        assert a.items[kind]["allreduce"] == b.items[kind]["allreduce"]
    assert a.total_s < b.total_s


def test_one_gpu_keeps_its_norms() -> None:
    base = dataclasses.replace(get_model("llama-3.1-70b"), precision="nvfp4")
    profile = load_profile("b200", "trtllm")
    a = CostModel(base, profile, 1, kernel_layout=FUSED).decode([2048] * 4)
    assert a == CostModel(base, profile, 1).decode([2048] * 4)


def test_the_engine_rule() -> None:
    big = get_model("llama-3.1-70b")
    assert trtllm_norm_in_allreduce(big, tp=4, dp=1) == (True, True)
    assert trtllm_norm_in_allreduce(big, tp=1, dp=1) == (False, False)  # no TP
    assert trtllm_norm_in_allreduce(big, tp=8, dp=8) == (False, False)  # attention DP
    small = get_model("llama-3.1-8b")  # hidden 4,096: the release keeps its norms apart
    assert small.d_model == 4096
    assert trtllm_norm_in_allreduce(small, tp=2, dp=1) == (False, False)
    assert trtllm_norm_in_allreduce(get_model("gpt-oss-120b"), tp=2, dp=1) == (True, False)
    assert trtllm_norm_in_allreduce(get_model("qwen3-32b"), tp=4, dp=1) == (False, False)
    # A config read under its Hugging Face id is recognised as the preset is.
    hf = dataclasses.replace(big, name="meta-llama/Llama-3.1-70B")
    assert trtllm_norm_in_allreduce(hf, tp=4, dp=1) == (True, True)


def test_the_run_takes_the_engine_modes_layout() -> None:
    """``twin simulate --engine trtllm`` and the silicon rows price with the one rule:
    the run's engine mode chooses the layout, other engines keep the default."""
    big = get_model("llama-3.1-70b")
    assert kernel_layout_of(big, EngineConfig.of(engine="trtllm", tp=4), "") == FUSED
    assert kernel_layout_of(big, EngineConfig.of(engine="trtllm", tp=1), "") == DEFAULT_LAYOUT
    assert kernel_layout_of(big, EngineConfig.of(engine="vllm", tp=4), "") == DEFAULT_LAYOUT
    assert kernel_layout_of(big, EngineConfig.of(tp=4), "") == DEFAULT_LAYOUT  # the paper's world


def test_twin_cost_takes_the_engine_modes_layout() -> None:
    """``twin cost --engine trtllm`` prices the newest build's layout, as ``twin simulate``."""
    from twin.cli.cost import _kernel_layout

    big = get_model("llama-3.1-70b")
    assert _kernel_layout(big, "trtllm", 4, 1, 1, "") == FUSED
    assert _kernel_layout(big, None, 4, 1, 1, "") == DEFAULT_LAYOUT  # no --engine: the default
    assert _kernel_layout(big, "vllm", 4, 1, 1, "") == DEFAULT_LAYOUT
