"""vLLM's MiniMax-M2 model file runs the MoE router GEMM in fp32: on CUDA cores at vLLM's
default ``VLLM_FLOAT32_MATMUL_PRECISION=highest``, on TF32 tensor cores under "high",
which InferenceMAX's MiniMax-M2.5 Blackwell scripts export from 2026-04-21
(``twin.engine.kernel_layouts_vllm.vllm_router_precision``, ``KernelLayout.router_precision``,
``MoePricing._router``, ``twin.validate.silicon.inferencemax_vllm``; issue 31)."""

from __future__ import annotations

import dataclasses

import pytest
from silicon_rows import minimax_row

from twin.costmodel import CostModel
from twin.costmodel.kernel_layout import DEFAULT_LAYOUT, KernelLayout
from twin.costmodel.mixer_kernels import fp32_peak, tf32_peak
from twin.costmodel.profile_store import load_profile
from twin.engine.config import EngineConfig
from twin.engine.kernel_layouts_vllm import (
    vllm_kernel_layout,
    vllm_router_precision,
    with_float32_matmul,
)
from twin.engine.run_pricing import kernel_layout_of
from twin.errors import TwinError
from twin.hardware import GPUS
from twin.presets import get_model
from twin.validate import silicon as sil

MINIMAX = dataclasses.replace(
    get_model("minimax-m2.5"), precision="fp8", moe_precision="fp8-block", kv_dtype="fp8"
)


def test_only_minimax_m2_routes_in_fp32_under_vllm() -> None:
    assert vllm_router_precision(MINIMAX, "0.19.0") == "fp32"
    fp32 = vllm_kernel_layout(MINIMAX, "0.16.0", 2, 1, 1, "h200")
    assert with_float32_matmul(fp32, "high").router_precision == "tf32"
    assert with_float32_matmul(fp32, "medium").router_precision == "tf32"
    assert with_float32_matmul(fp32, "highest").router_precision == "fp32"
    assert vllm_router_precision(MINIMAX, "nightly-5b8c30d62b754b57") == "fp32"
    # only the builds whose model file was read (review27's finding: the mode's own build)
    assert vllm_router_precision(MINIMAX, "0.33.0") == ""
    assert vllm_kernel_layout(MINIMAX, "0.33.0", 2, 1, 1, "b200").router_precision == ""
    for other in ("qwen3-235b-a22b", "gpt-oss-120b", "deepseek-v3"):
        assert vllm_router_precision(get_model(other), "0.19.0") == ""
    assert vllm_kernel_layout(get_model("gpt-oss-120b"), "0.19.0", 2, 1, 1, "b200") == (
        DEFAULT_LAYOUT
    )
    assert vllm_kernel_layout(MINIMAX, "0.19.0", 2, 1, 1, "b200").router_precision == "fp32"
    with pytest.raises(TwinError, match="router_precision"):
        KernelLayout(router_precision="fp16")


def test_the_run_takes_tf32_from_the_flag() -> None:
    plain = EngineConfig.of(engine="vllm", engine_build="0.19.0", tp=2)
    assert kernel_layout_of(MINIMAX, plain, "b200").router_precision == "fp32"
    high = dataclasses.replace(
        plain,
        mode=dataclasses.replace(plain.mode, engine_flags={"float32_matmul_precision": "high"}),
    )
    assert kernel_layout_of(MINIMAX, high, "b200").router_precision == "tf32"
    sglang = EngineConfig.of(engine="sglang", tp=2)
    assert kernel_layout_of(MINIMAX, sglang, "b200").router_precision == ""


def test_datasheet_peaks() -> None:
    b200 = load_profile("b200", "vllm")
    assert fp32_peak(b200) == pytest.approx(75e12)
    assert tf32_peak(b200) == pytest.approx(1125e12)
    for gpu in ("h100", "h200"):
        assert GPUS[gpu].fp32_flops == pytest.approx(67e12)
        assert GPUS[gpu].tf32_flops == pytest.approx(494.5e12)


def test_an_fp32_router_costs_its_flops_at_the_cuda_core_peak() -> None:
    b200 = load_profile("b200", "vllm")
    tokens = 2048
    bf16 = CostModel(MINIMAX, b200, 2)
    fp32 = CostModel(MINIMAX, b200, 2, kernel_layout=KernelLayout(router_precision="fp32"))
    tf32 = CostModel(MINIMAX, b200, 2, kernel_layout=KernelLayout(router_precision="tf32"))
    base = bf16.prefill(tokens)
    slow, tensor = fp32.prefill(tokens) - base, tf32.prefill(tokens) - base
    # 2 x 3,072 x 256 FLOPs a token a layer over 62 layers at 75 TFLOP/s: 2.7 ms at the
    # peak; the bf16 GEMM fit's efficiency at this shape makes it ~3.5 ms (a fifth of that
    # is the bf16 GEMM it replaces).
    flops = 2.0 * tokens * MINIMAX.d_model * MINIMAX.moe_n_experts * MINIMAX.n_moe_layers
    assert flops / 75e12 < slow < 1.5 * flops / 75e12
    assert 0.0 < tensor < 0.2 * slow  # TF32 at 1,125 TFLOP/s: half the bf16 rate
    # A decode step of few tokens is byte bound: the fp32 weights' reads, not the FLOPs.
    assert 0.0 < fp32.decode([1024] * 4) - bf16.decode([1024] * 4) < 0.1 * slow


def test_inferencemax_minimax_scripts_export_tf32_from_their_day() -> None:
    def row(day: str, **fields: object) -> sil.SiliconRow:
        return minimax_row(day, 256, **{"backend_version": "0.19.0", **fields})

    assert sil.inferencemax_vllm_float32_precision(row("2026-04-22")) == "high"
    assert sil.inferencemax_vllm_float32_precision(row("2026-04-21", system="b300_sxm")) == "high"
    assert sil.inferencemax_vllm_float32_precision(row("2026-04-17", system="b300_sxm")) is None
    assert sil.inferencemax_vllm_float32_precision(row("2026-04-08", precision="fp4")) is None
    assert sil.inferencemax_vllm_float32_precision(row("2026-03-28", system="h200_sxm")) is None
    assert sil.inferencemax_vllm_float32_precision(row("2026-04-22"), "defaults") is None
    pytest.importorskip("aiconfigurator_core")  # the model's config.json comes from the extra
    after = sil.plan_row(dataclasses.replace(row("2026-04-22"), ttft_ms=1.0, tpot_ms=1.0))
    before = sil.plan_row(dataclasses.replace(row("2026-04-03"), ttft_ms=1.0, tpot_ms=1.0))
    assert not isinstance(after, str) and not isinstance(before, str)
    assert after.deployment["sets"]["float32_matmul_precision"] == "high"
    assert "float32_matmul_precision" not in before.deployment["sets"]
