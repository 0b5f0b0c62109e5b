"""InferenceMAX's MiniMax-M2.5 fp8 vLLM scripts before they named their KV cache and
expert parallelism: vLLM's ``--kv-cache-dtype auto`` (the checkpoint's bf16) and the
experts split over the TP ranks at ``EP_SIZE`` 1 (``twin.validate.silicon.
inferencemax_vllm``)."""

from __future__ import annotations

import dataclasses

import pytest
from silicon_rows import MINIMAX_DUMP, minimax_row, planned, silicon_row

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


# InferenceMAX's B200 gpt-oss-120b vLLM row as the CSV writes it (2026-04-06.csv: no release)
GPTOSS = "source_file=2026-04-06.csv; model=GPT-OSS-120B; silicon_concurrency=32; measured="


def _gptoss_b200(day: str, **fields: object) -> sil.SiliconRow:
    source = f"{GPTOSS}{day}T00:00:00.000Z; wip=False"
    base = {"source": source, "system": "b200_sxm", "backend_version": "", "tp": 8}
    return silicon_row(**{**base, "isl": 1024, "osl": 1024, "concurrency": 32, **fields})


def test_the_b200_gpt_oss_script_named_no_kv_dtype_before_its_v0_11_2_upgrade():
    # kv-cache-dtype: fp8 came with InferenceX 25506e87c (2025-12-05)
    assert inferencemax_vllm_default_kv(_gptoss_b200("2025-11-02"))
    assert not inferencemax_vllm_default_kv(_gptoss_b200("2026-02-25", backend_version="0.15.1"))
    # the Hopper scripts never name one, but their pairing is bf16 already: not this rule
    assert not inferencemax_vllm_default_kv(_gptoss_b200("2025-11-02", system="h200_sxm"))
    # a row with no day, or another collection's: unchanged
    assert not inferencemax_vllm_default_kv(_gptoss_b200("2025-11-02", source=GPTOSS))
    assert not inferencemax_vllm_default_kv(
        _gptoss_b200("2025-11-02", source="x; measured=2025-11-02")
    )


def test_a_planned_b200_gpt_oss_row_of_november_2025_runs_a_bf16_cache():
    pytest.importorskip("aiconfigurator_core")
    plan = planned(_gptoss_b200("2025-11-02"))
    assert "bf16 KV" in plan.precision and "vllm's --kv-cache-dtype auto" in plan.precision
    assert "fp8 KV" in planned(_gptoss_b200("2026-02-25", backend_version="0.15.1")).precision
