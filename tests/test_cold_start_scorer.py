"""The scorer's cold-server rule (``harness.cold_server``), the fitted stall of a fresh B200
SGLang DeepSeek server (``inferencemax_sglang.inferencemax_cold_prefix_stall_s``) and the
B200 Docker runner's prompt count (``inferencemax_sglang_rounds``); written by helper
``cold-start`` (session 27, benchmarks/results/cold-start-s27), landed by ``sgl-eos`` on
top of SGLang's ignore-EOS adder."""

from __future__ import annotations

import dataclasses

import pytest
from silicon_rows import deepseek_row

from twin.validate import silicon as sil
from twin.validate.silicon.harness import INFERENCEMAX_WARMUP_FROM, cold_server
from twin.validate.silicon.inferencemax_sglang import (
    inferencemax_cold_prefix_stall_s,
    inferencemax_sglang_rounds,
)


def _row(**changes):
    """An InferenceMAX B200 SGLang DeepSeek-R1 fp8 row measured cold (2025-11-18)."""
    return deepseek_row("2025-11-18", 64, **changes)


def test_only_rows_whose_data_says_no_warm_up_are_cold():
    cold = _row()
    assert cold_server(cold)
    assert inferencemax_cold_prefix_stall_s(cold) == 69.0
    warm_day = cold.source.replace("2025-11-18", INFERENCEMAX_WARMUP_FROM)
    assert not cold_server(dataclasses.replace(cold, source=warm_day))
    undated = "source_file=2026-04-06.csv; model=DeepSeek-R1; silicon_concurrency=64"
    assert not cold_server(dataclasses.replace(cold, source=undated))  # not known: not cold
    aiperf = "source_file=/x/b200_sxm/sglang/0.5.5/DeepSeek-R1.csv; silicon_concurrency=64"
    assert not cold_server(dataclasses.replace(cold, source=aiperf))
    # cold, but no fitted stall: other engines (none seen in their cold rows), other GPUs
    assert inferencemax_cold_prefix_stall_s(_row(backend="trtllm")) == 0.0
    assert inferencemax_cold_prefix_stall_s(_row(backend="vllm")) == 0.0
    assert inferencemax_cold_prefix_stall_s(_row(system="h200_sxm")) == 0.0
    assert inferencemax_cold_prefix_stall_s(_row(model_path="meta-llama/Llama-3.1-70B")) == 0.0


def test_the_docker_runner_s_prompt_count():
    assert inferencemax_sglang_rounds(_row()) == 50  # fp8: deepseek-ai/DeepSeek-R1-0528
    assert inferencemax_sglang_rounds(_row(osl=8192)) == 20
    nov10 = _row(precision="fp4").source.replace("2025-11-18", "2025-11-10")
    assert inferencemax_sglang_rounds(_row(precision="fp4", source=nov10)) is None  # -FP4-V2
    nov02 = nov10.replace("2025-11-10", "2025-11-02")
    assert inferencemax_sglang_rounds(_row(precision="fp4", source=nov02)) == 50
    # From ea181ae6d (2025-12-31) the label named Slurm nodes too; the one SGLang row of
    # those weeks (fit) reads as a Docker node's, to the client's warm-up (d053ae24e)
    dec31 = _row().source.replace("2025-11-18", "2025-12-31")
    assert inferencemax_sglang_rounds(_row(source=dec31, osl=1024)) == 50
    jan20 = _row().source.replace("2025-11-18", "2026-01-20")
    assert inferencemax_sglang_rounds(_row(source=jan20)) == 50
    jan = _row().source.replace("2025-11-18", "2026-01-21")
    assert inferencemax_sglang_rounds(_row(source=jan)) is None  # the launchers' x 50 gone


def test_the_plans_of_the_csv_s_rows_carry_the_stall_only_where_measured_cold():
    """Real rows of the CSV: the November B200 SGLang DeepSeek fp8 row runs its runner's 50
    rounds on a cold server; the same point measured with the client's warm-up (SGLang
    0.5.9, 2026) and a TensorRT-LLM row measured cold run warm, at ten rounds."""
    pytest.importorskip("aiconfigurator_core")
    rows = [
        r
        for r in sil.read_rows()
        if r.model_path == "deepseek-ai/DeepSeek-R1"
        and r.system == "b200_sxm"
        and r.mode == "agg"
        and (r.isl, r.osl, r.concurrency) == (1024, 1024, 64)
    ]

    def plan(backend: str, cold: bool) -> sil.RowPlan:
        row = next(
            r
            for r in rows
            if r.backend == backend and cold_server(r) is cold and r.precision == "fp8"
        )
        got = sil.plan_row(row)
        assert isinstance(got, sil.RowPlan), got
        return got

    sglang_cold = plan("sglang", True)
    assert sglang_cold.deployment.get("cold_prefix_stall_s") == 69.0
    assert sglang_cold.requests == 50 * 64
    for warm in (plan("sglang", False), plan("trtllm", True)):
        assert "cold_prefix_stall_s" not in warm.deployment
        assert warm.requests == 10 * 64
