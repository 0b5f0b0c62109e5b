"""vLLM's fp8 rows of a block-scaled checkpoint run block-scaled experts (issue 31): the
silicon rows' reading and what it does to a prefill's MoE price."""

from __future__ import annotations

import dataclasses
from typing import Any

from silicon_rows import silicon_row

from twin.costmodel import CostModel
from twin.costmodel.profile_store import resolve_profile
from twin.presets import get_model
from twin.validate import silicon as sil

# MiniMaxAI/MiniMax-M2.5's quantization_config (as aiconfigurator-core 0.12.0 caches it).
MINIMAX_QUANT = {
    "quant_method": "fp8",
    "fmt": "float8_e4m3fn",
    "activation_scheme": "dynamic",
    "weight_block_size": [128, 128],
    "modules_to_not_convert": ["gate", "e_score_correction_bias", "lm_head"],
}


def _row(**fields: Any) -> sil.SiliconRow:
    """A vLLM 0.19.0 MiniMax-M2.5 fp8 row on B200."""
    minimax = {"model_path": "MiniMaxAI/MiniMax-M2.5", "backend_version": "0.19.0"}
    fp8 = {"system": "b200_sxm", "precision": "fp8", "gemm_quant_mode": "fp8"}
    return silicon_row(**{**minimax, **fp8, "moe_quant_mode": "fp8", **fields})


def _precision(row: sil.SiliconRow, quant: dict[str, Any], own: bool = True) -> sil.RowPrecision:
    got = sil.row_precision(row, {"quantization_config": quant}, own, None, "b200")
    assert isinstance(got, sil.RowPrecision)
    return got


def test_vllm_fp8_columns_of_a_block_scaled_checkpoint_price_block_experts() -> None:
    got = _precision(_row(), MINIMAX_QUANT)
    assert (got.weights, got.moe, got.kv) == ("fp8", "fp8-block", "fp8")
    assert got.label == "fp8, fp8-block experts, fp8 KV"
    assert "weight_block_size" in got.why
    # the columns stand where the checkpoint is per-tensor, or is not the row's own
    per_tensor = {k: v for k, v in MINIMAX_QUANT.items() if k != "weight_block_size"}
    assert _precision(_row(), per_tensor).moe is None
    assert _precision(_row(), MINIMAX_QUANT, own=False).moe is None
    # other backends are not read here: their columns stand
    for backend in ("sglang", "trtllm"):
        assert _precision(_row(backend=backend), MINIMAX_QUANT).moe is None
    # columns that already name another experts' mode keep it
    assert _precision(_row(moe_quant_mode="nvfp4"), MINIMAX_QUANT).moe == "nvfp4"


def test_block_experts_price_a_minimax_prefill_from_the_block_table() -> None:
    """NVIDIA's B200 vLLM 0.19.0 fused-MoE table at MiniMax-M2.5's shape (3,072 x 1,536,
    256 experts, top 8, TP 2) times fp8_block experts 1.4x / 2.2x per-tensor fp8's at
    1,024 / 8,192 tokens (0.660 / 2.486 ms against 0.478 / 1.132): the prefill's experts
    follow, a decode step's (where the two tables are within 20%) much less. Priced at
    0.17.0, which reads those Triton rows (0.19.0 itself runs block-fp8 experts with
    FlashInfer's TRT-LLM-gen kernel on B200: ``engine_kernels.RELEASE_KERNELS``)."""
    prof = resolve_profile("b200", None, "vllm").at_release("0.17.0")
    base = get_model("minimax-m2.5")
    fp8 = dataclasses.replace(base, precision="fp8", kv_dtype="fp8")
    block = dataclasses.replace(fp8, moe_precision="fp8-block")

    def moe_s(model: Any, tokens: int) -> float:
        step = CostModel(model, prof, 2).prefill(tokens, 0, breakdown=True)
        return float(step.items["moe"]["moe"])

    for tokens, low in ((1024, 1.3), (8192, 1.8)):
        assert moe_s(block, tokens) > low * moe_s(fp8, tokens)
    decode_fp8 = CostModel(fp8, prof, 2).decode([2048] * 4)
    decode_block = CostModel(block, prof, 2).decode([2048] * 4)
    assert isinstance(decode_fp8, float) and isinstance(decode_block, float)
    assert decode_block < 1.25 * decode_fp8
