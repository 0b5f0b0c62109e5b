"""TensorRT-LLM's fp8 rows that name an unquantised checkpoint ran the model's own FP8
repository (issue 31): Qwen3-32B's H100 1.0.0rc3 rows are priced block-fp8."""

from __future__ import annotations

from typing import Any

import pytest
from silicon_rows import silicon_row

from twin.validate import silicon as sil
from twin.validate.silicon.precision import served_fp8_checkpoint

# Qwen/Qwen3-32B-FP8's quantization_config (as aiconfigurator-core 0.12.0 caches it).
QWEN_FP8 = {
    "quant_method": "fp8",
    "fmt": "e4m3",
    "activation_scheme": "dynamic",
    "weight_block_size": [128, 128],
}


def _row(**fields: Any) -> sil.SiliconRow:
    """A TensorRT-LLM 1.0.0rc3 Qwen3-32B fp8 row on H100, as the CSV writes it."""
    qwen = {"model_path": "Qwen/Qwen3-32B", "backend": "trtllm", "backend_version": "1.0.0rc3"}
    fp8 = {"system": "h100_sxm", "precision": "fp8", "gemm_quant_mode": "fp8"}
    return silicon_row(**{**qwen, **fp8, "moe_quant_mode": "fp8", **fields})


def _precision(row: sil.SiliconRow, served: dict[str, Any] | None, own: bool = True) -> Any:
    return sil.row_precision(row, {"torch_dtype": "bfloat16"}, own, None, "h100", served)


def test_trtllm_fp8_columns_of_an_unquantised_checkpoint_price_the_served_block_fp8() -> None:
    got = _precision(_row(), {"quantization_config": QWEN_FP8})
    assert isinstance(got, sil.RowPrecision)
    assert (got.weights, got.moe, got.kv) == ("fp8-block", None, "fp8")
    assert got.label == "fp8-block, fp8 KV"
    assert "-FP8 repository" in got.why
    per_tensor = {k: v for k, v in QWEN_FP8.items() if k != "weight_block_size"}
    # the columns stand: a per-tensor served checkpoint, none cached, another backend,
    # a stand-in config (not the row's own checkpoint)
    for row, served, own in (
        (_row(), {"quantization_config": per_tensor}, True),
        (_row(), None, True),
        (_row(backend="vllm"), {"quantization_config": QWEN_FP8}, True),
        (_row(), {"quantization_config": QWEN_FP8}, False),
    ):
        got = _precision(row, served, own)
        assert isinstance(got, sil.RowPrecision)
        assert got.weights == "fp8"


def test_the_served_checkpoint_is_read_for_trtllm_fp8_rows_only() -> None:
    pytest.importorskip("aiconfigurator_core")  # its cached model configs
    configs = sil.default_configs()
    served = served_fp8_checkpoint(_row(), configs)
    assert served is not None
    assert served["quantization_config"]["weight_block_size"] == [128, 128]
    assert served_fp8_checkpoint(_row(backend="sglang"), configs) is None
    assert served_fp8_checkpoint(_row(gemm_quant_mode="nvfp4", precision="fp4"), configs) is None
    assert served_fp8_checkpoint(_row(model_path="Qwen/Qwen3-32B-FP8"), configs) is None
