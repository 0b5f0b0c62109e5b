"""InferenceMAX's Kimi-K2.5 fp4 B200 vLLM script passes no ``--enable-expert-parallel``:
its ``{ tp: 4, ep: 4 }`` runs split every expert over the four ranks (MoE TP 4), not the
experts (``twin.validate.silicon.inferencemax_vllm``)."""

from __future__ import annotations

import dataclasses

import pytest
from silicon_rows import planned, silicon_row

from twin.validate import silicon as sil
from twin.validate.silicon.inferencemax import inferencemax_layout
from twin.validate.silicon.inferencemax_vllm import inferencemax_vllm_script_layout

CSV = "source_file=2026-04-06.csv; model=Kimi-K2.5; silicon_concurrency=16; measured="


def _kimi(day: str | None, **fields: object) -> sil.SiliconRow:
    source = CSV + (f"{day}T00:00:00.000Z; wip=False" if day else "")
    base = {"source": source, "model_path": "moonshotai/Kimi-K2.5", "system": "b200_sxm"}
    base.update(backend_version="0.17.0", isl=1024, osl=1024, concurrency=16)
    # the CSV's form of the configuration's { tp: 4, ep: 4 } (inferencemax_layout)
    base.update(tp=4, attention_dp=1, moe_tp=1, moe_ep=4)
    return silicon_row(**{**base, **fields})


def test_the_b200_fp4_script_runs_tensor_parallel_experts():
    # every version of the script, and the gap-analysis copies with no day
    for day in ("2026-03-11", "2026-03-27", "2026-04-20", None):
        row = inferencemax_vllm_script_layout(_kimi(day))
        assert (row.tp, row.moe_tp, row.moe_ep) == (4, 4, 1)
        assert "no --enable-expert-parallel" in row.csv_layout
        assert row.csv_layout.endswith(
            "tp_size 4, attention_dp_size 1, moe_tp_size 1, moe_ep_size 4"
        )  # the CSV's columns, as written
    # the 2026-04-06.csv's form of { tp: 4, ep: 4 }, read by inferencemax_layout first:
    # the columns as that CSV wrote them are kept
    written = _kimi("2026-03-27", attention_dp=4, moe_ep=16)
    row = inferencemax_vllm_script_layout(inferencemax_layout(written))
    assert (row.tp, row.attention_dp, row.moe_tp, row.moe_ep) == (4, 1, 4, 1)
    assert row.csv_layout.endswith(written.layout_columns)


def test_rows_whose_script_was_not_found_keep_the_csv_layout():
    kept = (
        _kimi("2026-04-03", system="b300_sxm"),  # before any B300 Kimi script
        _kimi("2026-03-27", precision="int4"),  # another script
        _kimi("2026-03-27", moe_tp=4, moe_ep=1),  # tensor-parallel already
        dataclasses.replace(
            _kimi("2026-03-27"), source="x; measured=2026-03-27"
        ),  # not InferenceMAX
    )
    for row in kept:
        assert inferencemax_vllm_script_layout(row) is row


def test_a_planned_b200_fp4_row_prices_tensor_parallel_experts():
    pytest.importorskip("aiconfigurator_core")
    assert planned(_kimi("2026-03-27")).ep == 4  # the CSV's layout
    plan = planned(inferencemax_vllm_script_layout(_kimi("2026-03-27")))
    assert (plan.tp, plan.ep) == (4, 1)


def test_b200_fp4_rows_before_the_kv_flag_ran_fp8_kv_all_the_same():
    # kimik2.5_fp4_b200.sh names --kv-cache-dtype fp8 only from 6c3acebfa (2026-04-20);
    # before, vLLM 0.17.0 resolved ``auto`` from nvidia/Kimi-K2.5-NVFP4's kv_cache_scheme
    # (utils/torch_utils.py resolve_kv_cache_dtype_string): fp8 either way
    pytest.importorskip("aiconfigurator_core")
    from twin.validate.silicon.inferencemax_vllm import inferencemax_vllm_default_kv

    for day in ("2026-03-11", "2026-03-27", "2026-04-20"):
        row = _kimi(day, precision="fp4", gemm_quant_mode="nvfp4", moe_quant_mode="nvfp4")
        assert not inferencemax_vllm_default_kv(row)
        assert planned(row).model_fields["kv_dtype"] == "fp8"
