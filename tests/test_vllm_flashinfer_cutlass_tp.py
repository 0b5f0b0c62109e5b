"""vLLM 0.16.0's block-fp8 experts on Hopper run FlashInfer's CUTLASS fused MoE under
tensor parallelism, paying its cost for every expert held on the GPU
(``twin.engine.kernel_layouts_vllm.vllm_flashinfer_cutlass_tp_s``, ``KernelLayout.
moe_layer_extra_s``, ``MoePricing._moe_fused``; issue 31)."""

from __future__ import annotations

import dataclasses

import pytest

from twin.costmodel import CostModel
from twin.costmodel.kernel_layout import KernelLayout
from twin.costmodel.profile_store import load_profile
from twin.engine.config import EngineConfig
from twin.engine.kernel_layouts_vllm import FLASHINFER_CUTLASS_EXPERT_S, vllm_kernel_layout
from twin.engine.run_pricing import kernel_layout_of
from twin.errors import TwinError
from twin.presets import get_model

MINIMAX = dataclasses.replace(
    get_model("minimax-m2.5"), precision="fp8", moe_precision="fp8-block", kv_dtype="bf16"
)
# MiniMax-M2's vLLM layout with nothing but its fp32 router (test_vllm_fp32_router).
ROUTER_ONLY = KernelLayout(router_precision="fp32")


def test_0_16_0_under_moe_tp_pays_the_experts_it_holds_beyond_the_ep_layout() -> None:
    layout = vllm_kernel_layout(MINIMAX, "0.16.0", 4, 1, 1, "h200")
    # 256 experts on every GPU at moe_tp 4; the Triton price of moe_tp 4 stands for 64.
    assert layout.moe_layer_extra_s == pytest.approx(0.224e-6 * 256 * 0.75)
    assert FLASHINFER_CUTLASS_EXPERT_S["h200"] == 0.224e-6
    h100 = vllm_kernel_layout(MINIMAX, "0.16.0", 8, 1, 1, "h100").moe_layer_extra_s
    assert h100 == pytest.approx(0.239e-6 * 256 * 7 / 8)


def test_data_parallel_attention_holds_the_experts_over_dp_x_tp_ranks() -> None:
    # Without expert parallelism vLLM's MoE runs at tensor-parallel size dp x tp
    # (``FusedMoEParallelConfig.make``): a replica of 8 GPUs (``layout_for``'s ``tp``) as 4
    # ranks of attention TP 2, each GPU holding all 256 experts at MoE TP 8, not 32.
    layout = vllm_kernel_layout(MINIMAX, "0.16.0", 8, 4, 1, "h200")
    assert layout.moe_layer_extra_s == pytest.approx(0.224e-6 * 256 * 7 / 8)
    assert layout.dense_ffn_on_rank
    assert vllm_kernel_layout(MINIMAX, "0.16.0", 8, 4, 8, "h200").moe_layer_extra_s == 0.0


def test_nothing_where_the_release_layout_or_gpu_runs_another_kernel() -> None:
    # Expert parallelism (the EP table's own layout), one GPU, 0.18.0 (Triton first for
    # TP on Hopper), Blackwell, an unread release.
    assert vllm_kernel_layout(MINIMAX, "0.16.0", 4, 1, 4, "h200") == ROUTER_ONLY
    assert vllm_kernel_layout(MINIMAX, "0.16.0", 1, 1, 1, "h200") == ROUTER_ONLY
    assert vllm_kernel_layout(MINIMAX, "0.18.0", 4, 1, 1, "h200") == ROUTER_ONLY
    assert vllm_kernel_layout(MINIMAX, "0.16.0", 4, 1, 1, "b200") == ROUTER_ONLY
    assert vllm_kernel_layout(MINIMAX, "0.17.0", 4, 1, 1, "h200") == ROUTER_ONLY
    # Other experts' formats: per-tensor fp8, Kimi-K2.5's int4 (Marlin).
    tensor = dataclasses.replace(MINIMAX, moe_precision="fp8")
    assert vllm_kernel_layout(tensor, "0.16.0", 4, 1, 1, "h200") == ROUTER_ONLY
    kimi = dataclasses.replace(get_model("kimi-k2.5"), precision="int4")
    assert vllm_kernel_layout(kimi, "0.16.0", 8, 1, 1, "h200").moe_layer_extra_s == 0.0
    with pytest.raises(TwinError, match="moe_layer_extra_s"):
        KernelLayout(moe_layer_extra_s=-1e-6)


def test_a_decode_step_pays_it_once_an_moe_layer() -> None:
    h200 = load_profile("h200", "vllm")
    layout = vllm_kernel_layout(MINIMAX, "0.16.0", 4, 1, 1, "h200")
    plain = CostModel(MINIMAX, h200, 4, kernel_layout=ROUTER_ONLY)
    fi = CostModel(MINIMAX, h200, 4, kernel_layout=layout)
    extra = MINIMAX.n_moe_layers * layout.moe_layer_extra_s
    for batch in (4, 32):
        contexts = [1536] * batch
        assert fi.decode(contexts) - plain.decode(contexts) == pytest.approx(extra, rel=1e-9)
    assert 2.5e-3 < extra < 2.8e-3  # 62 layers x 43 us


def test_the_run_lays_out_the_rows_build() -> None:
    tp4 = EngineConfig.of(engine="vllm", engine_build="0.16.0", tp=4)
    assert kernel_layout_of(MINIMAX, tp4, "h200").moe_layer_extra_s > 0.0
    ep4 = EngineConfig.of(engine="vllm", engine_build="0.16.0", tp=4, ep=4)
    assert kernel_layout_of(MINIMAX, ep4, "h200").moe_layer_extra_s == 0.0
    later = EngineConfig.of(engine="vllm", engine_build="0.18.0", tp=4)
    assert kernel_layout_of(MINIMAX, later, "h200").moe_layer_extra_s == 0.0
