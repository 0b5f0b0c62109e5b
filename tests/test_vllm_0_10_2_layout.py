"""vLLM 0.10.2, the image of InferenceMAX's Llama-3.1-70B fp8 vLLM rows: NCCL above the
custom all-reduce's size limit (``KernelLayout.custom_allreduce_size_limit``) and the
static fp8 activation scale fused before the GEMM (``KernelLayout.fp8_static_activation``);
``twin.engine.kernel_layouts_vllm.VLLM_STATIC_FP8_BUILDS``, ``twin.validate.silicon
.inferencemax_vllm.inferencemax_vllm_build``."""

from __future__ import annotations

import dataclasses

import pytest
from silicon_rows import silicon_row

from twin.costmodel import CostModel
from twin.costmodel import collective_families as colf
from twin.costmodel import features as ft
from twin.costmodel import latency as lat
from twin.costmodel.kernel_layout import KernelLayout
from twin.costmodel.profile_store import load_profile
from twin.engine.kernel_layouts_vllm import vllm_kernel_layout
from twin.presets import get_model
from twin.validate.silicon.deployment import engine_build

DUMP = "db-dump/2026-04-27; config_id=1; silicon_concurrency=8; measured=2025-10-01"
LIMIT = KernelLayout(custom_allreduce_size_limit=True)
STATIC = KernelLayout(fp8_static_activation=True)


def _llama(**fields: object) -> object:
    base = dict(source=DUMP, model_path="meta-llama/Llama-3.1-70B", backend_version="")
    base.update(precision="fp8", gemm_quant_mode="fp8", moe_quant_mode=None, tp=8)
    base.update(fields)
    return silicon_row(**base)


def test_the_rows_ran_0_10_2() -> None:
    assert engine_build(_llama()) == "0.10.2"  # type: ignore[arg-type]
    assert engine_build(_llama(backend_version="0.19.0")) == "0.19.0"  # type: ignore[arg-type]
    assert engine_build(_llama(precision="fp4")) == ""  # type: ignore[arg-type]
    assert engine_build(_llama(system="mi355x")) == ""  # type: ignore[arg-type]
    llama = get_model("llama-3.1-70b")
    layout = vllm_kernel_layout(llama, "0.10.2", 8, 1, 1, "")
    assert layout.custom_allreduce_size_limit and layout.fp8_static_activation
    assert not vllm_kernel_layout(llama, "0.19.0", 8, 1, 1, "").fp8_static_activation


def _allreduce(gpu: str, tp: int, tokens: int, layout: KernelLayout | None = None) -> float:
    model = get_model("llama-3.1-70b")
    cm = CostModel(model, load_profile(gpu, "vllm"), tp, kernel_layout=layout or KernelLayout())
    return cm._allreduce(tokens)


def test_hopper_tp8_runs_nccl_from_256_kib() -> None:
    profile = load_profile("h200", "vllm")
    fit = profile.kernels[colf.nccl_allreduce_kernel(8)]
    nccl = lat.compile_fast(colf.nccl_allreduce_kernel(8), fit.params, profile.peaks)
    # 16 tokens x 8,192 x 2 bytes = 256 KiB: not below the limit, NCCL's
    flops, ring, _ = ft.allreduce_features(16 * 8192 * 2, 8)
    assert _allreduce("h200", 8, 16, LIMIT) == pytest.approx(nccl(flops, ring), rel=1e-12)
    assert _allreduce("h200", 8, 16, LIMIT) > 2 * _allreduce("h200", 8, 16)
    assert _allreduce("h200", 8, 15, LIMIT) == _allreduce("h200", 8, 15)  # custom below
    assert _allreduce("h200", 4, 64, LIMIT) == _allreduce("h200", 4, 64)  # 32 MiB at tp 4
    assert _allreduce("b200", 8, 64, LIMIT) == _allreduce("b200", 8, 64)  # not listed


def test_static_fp8_takes_the_dynamic_quant_floor_off() -> None:
    """The fused static scale takes off, per GEMM, the table's quantisation launch (the floor
    gap) and its pass (vllmq39: the dynamic per-token pass's bytes at the fixed rate)."""
    fp8 = dataclasses.replace(get_model("llama-3.1-70b"), precision="fp8")
    profile = load_profile("h200", "vllm")
    fit = profile.kernels["gemm_fp8"].params
    gap = fit["t0_s"] - profile.kernels["gemm"].params["t0_s"]
    assert gap > 0 and fit["c_act_quant_bytes"] > 0
    a = CostModel(fp8, profile, 1, kernel_layout=STATIC).decode([2048] * 4, breakdown=True)
    b = CostModel(fp8, profile, 1).decode([2048] * 4, breakdown=True)
    gemms = sum(b.items[k]["gemm"] - a.items[k]["gemm"] for k in b.items if "gemm" in b.items[k])
    launches = 4 * fp8.n_attention_layers  # qkv, o_proj, gate_up, down a layer
    d = fp8.d_model  # the inputs of qkv, gate_up (d) and o (heads x head_dim), down (d_ff)
    inputs = (d, d, fp8.n_heads * fp8.head_dim, fp8.mlp_d_ff)
    dyn = ft.act_quant_scheme(ft.VLLM_CUTLASS_FP8_SOURCE)
    passes = fp8.n_attention_layers * sum(ft.act_quant_bytes(4, k, 2, dyn) for k in inputs)
    assert gemms == pytest.approx(launches * gap + passes * fit["c_act_quant_bytes"], rel=1e-6)
    bf16 = get_model("llama-3.1-70b")  # a bf16 model's GEMMs are untouched
    assert CostModel(bf16, profile, 1, kernel_layout=STATIC).decode([2048] * 4) == CostModel(
        bf16, profile, 1
    ).decode([2048] * 4)
