"""The limits and harness a measured row's server ran with (issue 31,
``twin.validate.silicon``): aiconfigurator's generated limits, InferenceMAX's client and
scripts, the deployment's token budget, MTP's acceptance across engines."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from silicon_small import CONFIGS, _inferencemax_r1, _rows

from twin.engine.modes import get_mode
from twin.engine.run import build_run
from twin.errors import TwinError
from twin.presets import get_model
from twin.validate import silicon as sil
from twin.validate.silicon import harness as sil_harness


# ------------------------------------------------------------------ the rows' deployment
def test_deployment_is_aiconfigurators_benchmark_rule() -> None:
    """aiconfigurator 0.12.0 ``generator/rule_plugin/benchmark/{vllm,trtllm}.rule``, agg:
    ``max_num_tokens = max_batch_size + isl + 1500`` (TensorRT-LLM rounded up to 32-token
    blocks), ``max_batch_size`` the row's batch size. Worked by hand for c = 8, 1,024
    tokens: 8 + 1,024 + 1,500 = 2,532; 2,560 in whole 32-token blocks."""
    row = replace(_rows()["tiny_h100_vllm_agg_64x8_c2_tp1"], isl=1024, concurrency=8, batch_size=8)
    assert sil.deployment(row, "vllm") == {
        "sets": {"max_num_batched_tokens": "2532", "max_num_seqs": "8"}
    }
    # ... and the templates' free_gpu_memory_fraction default(0.80).
    trt = {"max_batched_tokens": 2560, "max_running": 8, "memory_utilization": 0.8}
    assert sil.aiconfigurator_deployment(row, "trtllm") == trt
    assert sil.deployment(row, "trtllm", "aiconfigurator-all") == trt
    # Applied where the fit rows say the rows ran with it: vLLM's, and TensorRT-LLM's
    # with its overlap scheduler modelled (decisions.md).
    assert sil.deployment(row, "trtllm") == trt
    assert sil.deployment(row, "trtllm", "defaults") == {}
    # SGLang's generated limits apply from 0.5.6.post2 on only (the next test).
    assert sil.deployment(row, "sglang") == {}
    assert sil.deployment(row, "vllm", "defaults") == {}
    # The batch size column wins over the concurrency (they are equal on every bf16 row).
    assert sil.aiconfigurator_deployment(replace(row, batch_size=16), "trtllm")["max_running"] == 16
    with pytest.raises(TwinError, match="deployment 'x'"):
        sil.deployment(row, "vllm", "x")
    plan = sil.plan_row(_rows()["tiny_h100_vllm_agg_64x8_c2_tp1"], CONFIGS)
    assert isinstance(plan, sil.RowPlan)
    assert plan.deployment == {"sets": {"max_num_batched_tokens": "1566", "max_num_seqs": "2"}}
    plan = sil.plan_row(_rows()["tiny_h100_vllm_agg_64x8_c2_tp1"], CONFIGS, "defaults")
    assert isinstance(plan, sil.RowPlan) and plan.deployment == {}


def test_the_inferencemax_collection_runs_with_its_own_harness(tmp_path: Path) -> None:
    """A row of the "2026-04-06.csv" collection is measured by InferenceMAX's client:
    10 x c measured requests after 2 x c warm-ups, lengths uniform in [0.8 x, 1 x], and
    its scripts' server limits (vLLM 8,192 tokens / 512 sequences; TensorRT-LLM 16,384
    tokens for Llama-3.1-70B); other rows keep aiconfigurator's harness."""
    rows = _rows()
    base = rows["tiny_h100_vllm_agg_64x8_c2_tp1"]
    assert sil.harness_of(base) is sil.AIPERF
    imax = replace(base, source="source_file=2026-04-06.csv; model=x; silicon_concurrency=2")
    assert sil.harness_of(imax) is sil.INFERENCEMAX
    # the same pipeline's other dumps (they share measurements with it)
    for source in (
        "source_file=2026-03-25.csv; model=x; silicon_concurrency=2",
        "db-dump/2026-04-27; config_id=1; silicon_concurrency=2",
    ):
        assert sil.harness_of(replace(base, source=source)) is sil.INFERENCEMAX
    assert sil.harness_of(replace(base, source="x; db-dump/2026")) is sil.AIPERF
    plan = sil.plan_row(imax, CONFIGS)
    assert isinstance(plan, sil.RowPlan)
    assert (plan.warmup, plan.requests, plan.range_ratio) == (0, 20, 0.8)
    assert plan.deployment == {"sets": {"max_num_batched_tokens": "8192", "max_num_seqs": "512"}}
    llama = replace(imax, model_path="meta-llama/Llama-3.1-70B")
    assert sil.deployment(llama, "trtllm") == {"max_batched_tokens": 16384}
    r1 = replace(imax, model_path="deepseek-ai/DeepSeek-R1", isl=8192, concurrency=32)
    assert sil.deployment(r1, "trtllm") == {"max_batched_tokens": 8320}  # 8,288 -> 64s
    # the db-dump names the same runs by their architecture
    dump = replace(r1, model_path="deepseek-ai/DeepSeek-V3", source="db-dump/2026-04-27; x")
    assert sil.deployment(dump, "trtllm") == {"max_batched_tokens": 8320}
    assert sil.deployment(imax, "trtllm") == sil.deployment(imax, "sglang") == {}
    # the old choice stays one flag away
    assert sil.deployment(imax, "vllm", "aiconfigurator") == sil.aiconfigurator_deployment(
        imax, "vllm"
    )
    # lengths as benchmark_serving.py draws them: uniform integers in [int(0.8 x), x]
    import pyarrow.parquet as pq

    path = sil.write_workload(tmp_path / "w.parquet", 1000, 100, 400, seed=7, range_ratio=0.8)
    table = pq.read_table(path).to_pydict()
    isls = [len(t) for t in table["input_tokens"]]
    osls = table["output_len"]
    assert min(isls) >= 800 and max(isls) <= 1000 and len(set(isls)) > 50
    assert min(osls) >= 80 and max(osls) <= 100 and len(set(osls)) > 10
    exact = pq.read_table(sil.write_workload(tmp_path / "e.parquet", 64, 8, 5, seed=7))
    assert {len(t) for t in exact.column("input_tokens").to_pylist()} == {64}


def test_the_kimi_gap_analysis_rows_are_inferencemax_runs() -> None:
    """``kimi-k2.5-gap-analysis.csv`` rows run InferenceMAX's client and vLLM limits
    (8,192 tokens, 512 sequences), not aiconfigurator's generated ``c + isl + 1500``; in
    the package's CSV each of them equals an InferenceMAX row to its two decimals at the
    same lengths, clients, system, release and layout (the evidence for the rule)."""
    base = _rows()["tiny_h100_vllm_agg_64x8_c2_tp1"]
    gap = replace(base, source="source_file=kimi-k2.5-gap-analysis.csv; silicon_concurrency=2")
    assert sil.harness_of(gap) is sil.INFERENCEMAX
    assert sil.deployment(gap, "vllm") == {
        "sets": {"max_num_batched_tokens": "8192", "max_num_seqs": "512"}
    }
    pytest.importorskip("aiconfigurator_core")
    rows = sil.read_rows()
    gaps = [r for r in rows if "kimi-k2.5-gap-analysis.csv" in r.source]
    assert len(gaps) == 47

    def run(r: sil.SiliconRow) -> tuple[object, ...]:
        layout = (r.tp, r.moe_tp, r.moe_ep, r.attention_dp)
        return (r.isl, r.osl, r.concurrency, r.system, r.backend_version, layout)

    imax = {
        (run(r), round(r.ttft_ms, 2), round(r.tpot_ms, 2))
        for r in rows
        if r.ttft_ms is not None
        and r.tpot_ms is not None
        and "gap-analysis" not in r.source
        and sil.harness_of(r) is sil.INFERENCEMAX
    }
    assert all((run(r), r.ttft_ms, r.tpot_ms) in imax for r in gaps)


def test_the_deployments_budget_splits_a_wave_of_contexts(tmp_path: Path) -> None:
    """Four clients send 1,024-token prompts at once to TensorRT-LLM: under the engine's
    default 8,192 tokens the four contexts run in one iteration (one first-token time);
    under the row's deployment (4 + 1,024 + 1,500 = 2,528 tokens, 79 whole blocks; whole
    contexts) two fit an iteration, so the first tokens come in two waves and the mean
    TTFT grows. A harness that dropped the deployment would see one wave."""
    from twin.metrics import RequestRecord

    path = sil.write_workload(tmp_path / "w.parquet", 1024, 4, 4, seed=1)

    def first_tokens(**kw: object) -> list[float]:
        records: list[RequestRecord] = []
        run = build_run(
            path,
            model="llama-3-8b",
            gpu="h100",
            engine="trtllm",
            concurrency=4,
            frontend_s=0.0,  # all four reach the engine at t = 0
            **kw,
        )
        run.simulate(on_record=records.append)
        return sorted({round(r.first_token_s, 9) for r in records})

    assert len(first_tokens()) == 1
    row = replace(_rows()["tiny_b200_trtllm_agg_128x16_c4_tp1"], isl=1024)
    settings = sil.aiconfigurator_deployment(row, "trtllm")
    assert settings == {"max_batched_tokens": 2528, "max_running": 4, "memory_utilization": 0.8}
    assert len(first_tokens(**settings)) == 2


def test_model_named_matches_a_rows_model_path_by_name() -> None:
    row = replace(
        _rows()["tiny_h200_sglang_agg_64x8_c3_tp2"], model_path="meta-llama/Llama-3.1-70B-FP8"
    )
    assert sil_harness.model_named(row, ("gpt-oss-120b", "llama-3.1-70b")) == "llama-3.1-70b"
    assert sil_harness.model_named(row, {"Llama-3.1-70B": 16384}) == "Llama-3.1-70B"  # either case
    assert sil_harness.model_named(row, ("llama-3.1-8b", "deepseek-r1")) is None
    first = sil_harness.model_named(row, ("llama", "llama-3.1-70b"))
    assert first == "llama"  # the first of the names that matches
    assert sil.select([row], ["LLAMA-3.1-70B"]) == [row]
    assert sil.select([row], ["qwen3"]) == []


def test_inferencemax_mtp_rows_accept_drafts_by_one_rule_across_engines() -> None:
    """Every InferenceMAX -mtp row, SGLang's NEXTN (DeepSeek-R1 fp8 at 2 drafts, Qwen3.5-397B
    fp8 at 3, 0.5.9) and TensorRT-LLM's MTP (DeepSeek-R1, 3 drafts, 1 with attention DP),
    prices its drafts by the one fitted rule: the first draft accepted with one rate, each
    later one (given those before) with another, no higher one (the fit found them equal),
    so the acceptance length is
    ``1 + a + a b + a b^2 ...``, below the MTP default (DeepSeek-V3's second-token
    acceptance); the plain configurations' rows run no drafts."""
    first, later = sil.INFERENCEMAX_MTP_ACCEPTANCE
    assert 0 < later <= first < 1

    def length(drafts: int) -> float:
        return 1 + sum(first * later**i for i in range(drafts))

    qwen35 = replace(get_model("qwen3.5-397b-a17b"), mtp_layers=1)
    r1_model = get_model("deepseek-r1")
    r1 = replace(
        _inferencemax_r1(backend="sglang", backend_version="0.5.9", precision="fp8", tp=8),
        concurrency=256,
    )
    qwen = replace(r1, model_path="Qwen/Qwen3.5-397B-A17B", tp=4, moe_ep=1, concurrency=64)
    unfitted = {
        k: v
        for k, v in sil.deployment(r1, "sglang")["sets"].items()
        if k != "speculative_acceptance"
    }
    default = get_mode("sglang").settings(r1_model, unfitted)["speculative"]
    for row, drafts in ((r1, 2), (qwen, 3)):
        sets = sil.deployment(row, "sglang")["sets"]
        assert sets["speculative_acceptance"] == sil.inferencemax_mtp_acceptance(drafts)
        # the checkpoint's MTP layer (the preset carries none; the scorer reads the config)
        model = r1_model if row is r1 else qwen35
        spec = get_mode("sglang").settings(model, dict(sets))["speculative"]
        assert spec["acceptance_length"] == pytest.approx(length(drafts))
    assert length(2) < default["acceptance_length"]
    plain = sil.deployment(replace(r1, concurrency=64), "sglang")["sets"]
    assert "speculative_acceptance" not in plain
    # TensorRT-LLM's -mtp image (1.2.0rc6.post3): 3 drafts, 1 with attention DP
    trt = _inferencemax_r1(backend="trtllm", backend_version="1.2.0rc6.post3", isl=64)
    for row, drafts in ((trt, 3), (replace(trt, attention_dp=8), 1)):
        spec = sil.inferencemax_speculation(row, r1_model)
        assert spec is not None and spec["num_speculative_tokens"] == drafts
        assert spec["acceptance_length"] == pytest.approx(length(drafts))
