"""TensorRT-LLM's Llama under TP runs each layer's residual add + RMSNorm inside its
all-reduces, and with NVFP4 weights the next GEMM's input quantisation too
(``ModelSpec.norm_in_allreduce``; ``twin.costmodel.dense_pricing.DensePricing
._norm_in_allreduce``; the rows' rule ``twin.validate.silicon.kernel_layout
.trtllm_norm_in_allreduce``)."""

from __future__ import annotations

import dataclasses

import pytest

from twin.costmodel import CostModel
from twin.costmodel.profile_store import load_profile
from twin.presets import get_model
from twin.validate.silicon.kernel_layout import trtllm_norm_in_allreduce
from twin.validate.silicon.rows import read_rows


@pytest.mark.parametrize("precision", ["nvfp4", "fp8"])
def test_the_norms_leave_and_nvfp4_gemms_quantise_nothing(precision: str) -> None:
    base = dataclasses.replace(get_model("llama-3.1-70b"), precision=precision)
    fused = dataclasses.replace(base, norm_in_allreduce=True, allreduce_quantises_input=True)
    profile = load_profile("b200", "trtllm")
    contexts = [2048] * 4
    a = CostModel(fused, profile, 4).decode(contexts, breakdown=True)
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
    fused = dataclasses.replace(base, norm_in_allreduce=True)
    profile = load_profile("b200", "trtllm")
    a = CostModel(fused, profile, 2).decode([2048] * 4, breakdown=True)
    b = CostModel(base, profile, 2).decode([2048] * 4, breakdown=True)
    for kind in ("attention", "swa", "moe"):
        assert "elementwise" not in a.items[kind]  # its norms were its only passes
        assert a.items[kind]["gemm"] == b.items[kind]["gemm"]
        assert a.items[kind]["allreduce"] == b.items[kind]["allreduce"]
    assert a.total_s < b.total_s


def test_one_gpu_keeps_its_norms() -> None:
    base = dataclasses.replace(get_model("llama-3.1-70b"), precision="nvfp4")
    fused = dataclasses.replace(base, norm_in_allreduce=True)
    profile = load_profile("b200", "trtllm")
    a = CostModel(fused, profile, 1).decode([2048] * 4)
    assert a == CostModel(base, profile, 1).decode([2048] * 4)


def test_the_rows_rule() -> None:
    pytest.importorskip("aiconfigurator_core")  # the rows come from the installed aic extra
    rows = read_rows()
    llama70 = next(r for r in rows if r.backend == "trtllm" and "Llama-3.1-70B" in r.model_path)
    big = get_model("llama-3.1-70b")
    assert trtllm_norm_in_allreduce(llama70, big, tp=4, dp=1) == (True, True)
    assert trtllm_norm_in_allreduce(llama70, big, tp=1, dp=1) == (False, False)  # no TP
    assert trtllm_norm_in_allreduce(llama70, big, tp=8, dp=8) == (False, False)  # attention DP
    small = get_model("llama-3.1-8b")  # hidden 4,096: the release keeps its norms apart
    assert small.d_model == 4096
    assert trtllm_norm_in_allreduce(llama70, small, tp=2, dp=1) == (False, False)
    vllm = dataclasses.replace(llama70, backend="vllm")
    assert trtllm_norm_in_allreduce(vllm, big, tp=4, dp=1) == (False, False)
    oss = next(r for r in rows if r.backend == "trtllm" and "gpt-oss" in r.model_path)
    assert trtllm_norm_in_allreduce(oss, get_model("gpt-oss-120b"), tp=2, dp=1) == (True, False)
    qwen = next(r for r in rows if r.backend == "trtllm" and "Qwen3-32B" in r.model_path)
    assert trtllm_norm_in_allreduce(qwen, get_model("qwen3-32b"), tp=4, dp=1) == (False, False)
