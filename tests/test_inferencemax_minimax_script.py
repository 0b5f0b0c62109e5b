"""InferenceMAX's MiniMax-M2.5 fp8 vLLM scripts before they named their KV cache and
expert parallelism: vLLM's ``--kv-cache-dtype auto`` (the checkpoint's bf16) and the
experts split over the TP ranks at ``EP_SIZE`` 1 (``twin.validate.silicon.
inferencemax_vllm``)."""

from __future__ import annotations

import dataclasses

import pytest
from silicon_rows import MINIMAX_DUMP, minimax_row, planned

from twin.validate import silicon as sil
from twin.validate.silicon.inferencemax_vllm import (
    inferencemax_vllm_default_kv,
    inferencemax_vllm_script_layout,
)

DUMP = MINIMAX_DUMP.format(32)
# the script's fp8 row at tp 2 as the CSV writes its layout (MoE TP 2, no EP)
SCRIPT = {"backend_version": "0.17.0", "gemm_quant_mode": "fp8", "moe_quant_mode": "fp8"}
SCRIPT.update(tp=2, moe_tp=2, moe_ep=1)


def _minimax(day: str, **fields: object) -> sil.SiliconRow:
    return minimax_row(day, 32, **{**SCRIPT, **fields})


def test_the_b200_script_before_its_flags_day_names_no_kv_dtype_and_splits_the_experts():
    before = _minimax("2026-03-11")
    assert inferencemax_vllm_default_kv(before)
    split = inferencemax_vllm_script_layout(before)
    assert (split.tp, split.moe_tp, split.moe_ep) == (2, 1, 2)
    assert "EP_SIZE 1" in split.csv_layout
    # from d172646bd (2026-04-02): --kv-cache-dtype fp8, and EP only above EP_SIZE 1
    after = _minimax("2026-04-06", backend_version="0.19.0")
    assert not inferencemax_vllm_default_kv(after)
    assert inferencemax_vllm_script_layout(after) is after
    # a row that names its own layout, or no day, or fp4, or B300: unchanged
    assert (
        inferencemax_vllm_script_layout(dataclasses.replace(before, moe_ep=2, moe_tp=1)).moe_ep == 2
    )
    assert inferencemax_vllm_script_layout(dataclasses.replace(before, source=DUMP)).moe_ep == 1
    assert not inferencemax_vllm_default_kv(_minimax("2026-03-11", precision="fp4"))
    assert not inferencemax_vllm_default_kv(_minimax("2026-04-17", system="b300_sxm"))


def test_the_h200_script_names_no_kv_dtype_and_turns_ep_on_from_its_third_version():
    first = _minimax("2026-03-01", system="h200_sxm", backend_version="0.16.0", tp=4, moe_tp=4)
    assert inferencemax_vllm_default_kv(first)
    assert inferencemax_vllm_script_layout(first) is first  # a36346339: no EP flag
    later = _minimax("2026-03-28", system="h200_sxm", backend_version="0.18.0", tp=8, moe_tp=8)
    assert inferencemax_vllm_default_kv(later)
    assert inferencemax_vllm_script_layout(later).moe_ep == 8


def test_a_planned_row_of_the_early_b200_script_runs_a_bf16_cache():
    pytest.importorskip("aiconfigurator_core")  # the model's config.json comes from the extra
    plan = planned(inferencemax_vllm_script_layout(_minimax("2026-03-11")))
    assert "bf16 KV" in plan.precision and "vllm's --kv-cache-dtype auto" in plan.precision
    assert plan.ep == 2
    later = planned(_minimax("2026-04-06", backend_version="0.19.0"))
    assert "fp8 KV" in later.precision and later.ep == 1
    # another collection's vLLM row keeps the pairing (no script read)
    other = planned(_minimax("2026-03-11", source="aiperf", backend_version="0.12.0"))
    assert "fp8 KV" in other.precision and "aiconfigurator's pairing" in other.precision
