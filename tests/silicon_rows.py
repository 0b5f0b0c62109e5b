"""One measured row of ``silicon_sample.csv`` for a test: every field empty but those given."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from twin.validate import silicon as sil


def silicon_row(**fields: Any) -> sil.SiliconRow:
    """A ``SiliconRow``: an aggregated vLLM 0.16.0 row of gpt-oss-120b on H200 in fp4 (the
    fields a row is planned from), every other field None, ``fields`` over them."""
    base: dict[str, Any] = {f.name: None for f in dataclasses.fields(sil.SiliconRow)}
    base.update(id="r", source="", backend="vllm", backend_version="0.16.0", mode="agg")
    base.update(model_path="openai/gpt-oss-120b", system="h200_sxm", precision="fp4")
    base.update(gemm_quant_mode="nvfp4", moe_quant_mode="nvfp4", copy_in_fit=False)
    base.update(csv_layout="")
    base.update(fields)
    return sil.SiliconRow(**base)


# The InferenceMAX dump's source of a MiniMax-M2.5 row at ``{}`` clients (:func:`minimax_row`).
MINIMAX_DUMP = "db-dump/2026-04-27; config_id=691; silicon_concurrency={}; measured="


def minimax_row(day: str, concurrency: int, **fields: Any) -> sil.SiliconRow:
    """An InferenceMAX MiniMax-M2.5 fp8 row on B200 (vLLM, :func:`silicon_row`'s release)
    of ``concurrency`` clients at 1,024 / 1,024 tokens, measured on ``day``, ``fields``
    over it."""
    source = f"{MINIMAX_DUMP.format(concurrency)}{day}T00:00:00.000Z; workflow_run_id=799"
    base = {"source": source, "model_path": "MiniMaxAI/MiniMax-M2.5", "system": "b200_sxm"}
    base.update(precision="fp8", isl=1024, osl=1024, concurrency=concurrency)
    return silicon_row(**{**base, **fields})


def deepseek_row(day: str, concurrency: int, **fields: Any) -> sil.SiliconRow:
    """An InferenceMAX DeepSeek-R1 fp8 row of SGLang on B200 (2026-04-06.csv, no release
    named) of ``concurrency`` clients at 1,024 / 1,024 tokens on 8 GPUs, measured on
    ``day``, ``fields`` over it (``csv``: another file of the collection)."""
    csv = fields.pop("csv", "2026-04-06.csv")
    source = f"source_file={csv}; model=DeepSeek-R1; silicon_concurrency={concurrency}; "
    base = {"source": f"{source}measured={day}T00:00:00.000Z; wip=False", "backend": "sglang"}
    base.update(backend_version="", model_path="deepseek-ai/DeepSeek-R1", system="b200_sxm")
    base.update(precision="fp8", isl=1024, osl=1024, concurrency=concurrency, tp=8)
    return silicon_row(**{**base, **fields})


def planned(row: sil.SiliconRow, **fields: Any) -> sil.RowPlan:
    """``row``'s plan, ``fields`` over it (measured at 1 ms TTFT and TPOT unless they say):
    the test fails where the row is refused; skipped without the ``aic`` extra (the plan
    reads the package's configs)."""
    pytest.importorskip("aiconfigurator_core")
    plan = sil.plan_row(dataclasses.replace(row, **{"ttft_ms": 1.0, "tpot_ms": 1.0, **fields}))
    assert not isinstance(plan, str), plan
    return plan
