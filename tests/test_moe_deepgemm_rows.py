"""vLLM 0.12.0's block-fp8 experts on Hopper: DeepGEMM's contiguous grouped GEMM at every
step size, each expert reached padded to 128 rows (``twin.engine.kernel_layouts_vllm.
vllm_kernel_layout``, ``MoePricing._moe_padded_rows``; issues 31, 33)."""

from __future__ import annotations

import dataclasses

import pytest

from twin.costmodel import CostModel
from twin.costmodel.kernel_layout import KernelLayout
from twin.costmodel.profile_store import load_profile
from twin.engine.kernel_layouts_vllm import vllm_kernel_layout
from twin.errors import TwinError
from twin.presets import get_model

QWEN3 = dataclasses.replace(
    get_model("qwen3-235b-a22b"), precision="fp8", moe_precision="fp8-block", kv_dtype="fp8"
)
PADDED = KernelLayout(moe_rows_per_expert=128, moe_pads_every_expert=True)


def test_vllm_0_12_0_pads_below_moe_tp_8_only() -> None:
    assert vllm_kernel_layout(QWEN3, "0.12.0", 2, 1, 1, "h200") == PADDED
    assert vllm_kernel_layout(QWEN3, "0.12.0", 2, 1, 1, "b200") == PADDED  # SM 10.0
    # The replica's GPUs are the MoE's TP (dp x each rank's tp, ``layout_for``'s ``tp``):
    # 4 GPUs as 2 data-parallel ranks keep DeepGEMM, 8 turn it off.
    assert vllm_kernel_layout(QWEN3, "0.12.0", 4, 2, 1, "h200").moe_rows_per_expert == 128
    assert vllm_kernel_layout(QWEN3, "0.12.0", 8, 2, 1, "h200").moe_rows_per_expert == 0
    assert vllm_kernel_layout(QWEN3, "0.12.0", 8, 1, 1, "h200").moe_rows_per_expert == 0
    assert vllm_kernel_layout(QWEN3, "0.19.0", 2, 1, 1, "h200").moe_rows_per_expert == 0
    llama = get_model("llama-3-8b")
    assert vllm_kernel_layout(llama, "0.12.0", 2, 1, 1, "h200").moe_rows_per_expert == 0


def test_expert_parallelism_keeps_deepgemm_at_8_gpus() -> None:
    # vLLM 0.12.0 ``FusedMoEParallelConfig.make``: with EP the MoE's TP size is 1.
    assert vllm_kernel_layout(QWEN3, "0.12.0", 8, 1, 8, "h200") == PADDED
    two_ranks = vllm_kernel_layout(QWEN3, "0.12.0", 4, 2, 8, "h200")
    assert two_ranks.moe_rows_per_expert == 128
    assert two_ranks.dense_ffn_on_rank  # data-parallel attention's own rule, beside it


def test_neither_on_a_gpu_deepgemm_skips_nor_for_other_experts() -> None:
    # B300: compute capability 10.3; an unknown GPU; bf16 experts.
    assert vllm_kernel_layout(QWEN3, "0.12.0", 2, 1, 1, "b300").moe_rows_per_expert == 0
    assert vllm_kernel_layout(QWEN3, "0.12.0", 2, 1, 1, "").moe_rows_per_expert == 0
    bf16 = get_model("qwen3-235b-a22b")
    assert vllm_kernel_layout(bf16, "0.12.0", 4, 1, 1, "h200").moe_rows_per_expert == 0
    with pytest.raises(TwinError, match="moe_rows_per_expert"):
        KernelLayout(moe_rows_per_expert=-1)


def test_a_launch_streams_128_rows_of_every_expert_held() -> None:
    h200 = load_profile("h200", "vllm")
    plain, padded = CostModel(QWEN3, h200, 2), CostModel(QWEN3, h200, 2, kernel_layout=PADDED)
    rows, active = 16 * 8.0, 60.0
    assert plain._moe_padded_rows(rows, active, 128.0) == (rows, 0.0)
    # vLLM 0.12.0 ``compute_aligned_M``: 128 routed rows + 128 experts x 127, rounded up to
    # 128, is 16,384 rows: 60 x 128 computed (the experts reached), the rest streamed.
    assert padded._moe_padded_rows(rows, active, 128.0) == (7_680, 16_384 - 7_680)
    # A prefill's 40,000 rows computed; 40,000 + 16,256 rounded up to 56,320 streamed.
    assert padded._moe_padded_rows(40_000.0, active, 128.0) == (40_000, 16_320)
    # Only the experts a launch reaches (TensorRT-LLM 1.1's masked layout on B200).
    reached = CostModel(QWEN3, h200, 2, kernel_layout=KernelLayout(moe_rows_per_expert=128))
    assert reached._moe_padded_rows(rows, active, 128.0) == (active * 128, 0.0)
    assert reached._moe_padded_rows(40_000.0, active, 128.0) == (40_000.0, 0.0)
    # Under expert parallelism a rank holds 128 / 4 experts: 128 + 4,064 -> 4,224 rows.
    ep4 = CostModel(QWEN3, h200, 4, ep=4, kernel_layout=PADDED)
    assert ep4._moe_padded_rows(rows, 20.0, 32.0) == (2_560, 4_224 - 2_560)
    held: list[float] = []  # and the layer's price passes it the rank's 32
    padded_rows = ep4._moe_padded_rows
    ep4._moe_padded_rows = lambda r, a, h: held.append(h) or padded_rows(r, a, h)  # type: ignore[method-assign]
    ep4.decode([4000] * 8)
    assert held and set(held) == {32.0}
    # A decode step pays for the padded rows, and hardly moves with the batch (the measured
    # 0.12.0 TPOT at tp 2: 51-59 ms at 4-20 clients, where the routed rows alone price
    # 24-50).
    assert padded.decode([4000] * 16) > 1.2 * reached.decode([4000] * 16)
    grows = padded.decode([4000] * 16) / padded.decode([4000] * 4)
    assert grows < 1.4 < 2.0 < reached.decode([4000] * 16) / reached.decode([4000] * 4)


def test_streamed_rows_move_bytes_not_flops() -> None:
    from twin.costmodel.moe_features import moe_sums

    # activations at 4 bytes an element, as the H200 vLLM fp8-block fit reads them: the
    # quantised values between the GEMMs are still written at fp8's one byte
    args = (4096, 768, 2, 2, 4.0, 1.0)
    flops, nbytes, weights = moe_sums(256.0, 2.0, *args)
    f2, b2, w2 = moe_sums(256.0, 2.0, *args, streamed=256.0, tile_m=128)
    assert (f2, w2) == (flops, weights)
    # 256 rows in and out more, two blocks' B tiles (one expert's weights each), and the
    # activation between the GEMMs: 1,536 wide in, 768 out and back in (bf16), 768 fp8 out
    # with their scales (one fp32 a group of 128).
    expert = 4096 * (2 * 768 + 768)
    between = 256 * (2 * (2 * 768 + 2 * 768) + 768 * (1 + 4 / 128))
    moved = 4 * 256 * (4096 + 768) + 2 * 256 * (2 * 768 + 4096)
    assert b2 - nbytes == moved + 2 * expert + between


def test_the_run_lays_out_the_profiles_gpu_and_ep() -> None:
    from twin.engine.config import EngineConfig
    from twin.engine.run_pricing import kernel_layout_of

    config = EngineConfig.of(engine="vllm", engine_build="0.12.0", tp=2)
    assert kernel_layout_of(QWEN3, config, "h200") == PADDED
    assert kernel_layout_of(QWEN3, config, "b300").moe_rows_per_expert == 0
    ep8 = EngineConfig.of(engine="vllm", engine_build="0.12.0", tp=8, ep=8)
    assert kernel_layout_of(QWEN3, ep8, "h200") == PADDED
