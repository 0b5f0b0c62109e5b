"""Pipeline parallelism as an axis of ``twin plan`` (issue 37): the layouts with stages,
a candidate's GPUs (tp x pp) and cost, the bound's slowest-stage price, the reproduce
command, the combinations the engine refuses skipped and counted, and a small plan."""

from __future__ import annotations

import shlex
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from test_bad_input import assert_clean_error

from twin.cli.main import run
from twin.costmodel.profile_store import resolve_profile
from twin.engine import make_pricer
from twin.engine.config import ClusterConfig, DisaggConfig, EngineConfig, PipelineConflict
from twin.errors import TwinError
from twin.parallel import Layout
from twin.presets import resolve_model
from twin.reports.parallel_axes import (
    PipelineBoundPricer,
    bound_pricer,
    layout_flags,
    layout_settings,
    lone_decode_s,
    parallel_layouts,
)
from twin.reports.plan import plan
from twin.reports.plan_bound import cheapest_token_s
from twin.reports.plan_result import Candidate, CandidateResult
from twin.reports.sweep import RESULTS_FILE


def test_layouts_gain_stages() -> None:
    llama, tiny = resolve_model("llama-3-8b"), resolve_model("tiny-transformer")
    got, dropped = parallel_layouts(llama, [1, 2], [1], [1], [1, 2])
    assert got == [Layout(1), Layout(1, pp=2), Layout(2), Layout(2, pp=2)]
    assert dropped == []
    # auto: one stage or two; the default (1,) is the layouts of before.
    assert parallel_layouts(llama, [4], [1], [1], None)[0] == [Layout(4), Layout(4, pp=2)]
    assert parallel_layouts(llama, [4], [1], [1])[0] == [Layout(4)]
    # More stages than layers: left out with a note at one tp, refused when no tp takes it.
    with pytest.raises(TwinError, match=r"--pp 8: no layout of --tp 1 can take it .*layer"):
        parallel_layouts(tiny, [1], [1], [1], [1, 8])


def test_a_pipelined_candidate_counts_tp_x_pp_gpus() -> None:
    plain = Candidate("h100", "vllm", 2, "auto")
    piped = Candidate("h100", "vllm", 2, "auto", pp=2)
    assert piped.parallel == Layout(2, pp=2)
    assert piped.gpus_per_replica == 4 and plain.gpus_per_replica == 2
    assert CandidateResult(piped, 3.0).cost(3) == 3 * 4 * 3.0
    assert piped.label == "h100 vllm tp2 pp2 shared pool"
    assert plain.label == "h100 vllm tp2 shared pool"
    assert piped.to_dict()["pp"] == 2 and plain.to_dict()["pp"] == 1
    assert piped.splits == 1 and plain.splits == 0
    # Settings and flags name pp only above 1 (a plain candidate's sweep keys unchanged).
    assert layout_settings(plain.parallel) == (("tp", 2),)
    assert layout_settings(piped.parallel) == (("tp", 2), ("pp", 2))
    assert layout_flags(piped.parallel) == ["--pp", "2"] and layout_flags(plain.parallel) == []


def test_the_bound_prices_the_slowest_stage() -> None:
    model, profile = resolve_model("llama-3-8b"), resolve_profile("h100", None, "vllm")
    pricer = bound_pricer(model, profile, Layout(1, pp=2), "vllm")
    assert isinstance(pricer, PipelineBoundPricer)
    shape = ([(2048, 0)], 0, 0)
    stages = pricer.pipeline.stage_times(*shape)
    assert pricer.step_time(*shape) == max(stages) < pricer.pipeline.step_time(*shape)
    # A lone decode step crosses every stage: the TPOT check reads the whole pipeline.
    assert lone_decode_s(pricer) == pricer.pipeline.step_time([], 1, 1) > pricer.step_time([], 1, 1)
    # Each stage holds about half the layers: the cheapest price per token of the
    # two-stage replica is well under one GPU's, above a quarter of it.
    one = cheapest_token_s(make_pricer(model, profile, 1), 8192, 256)
    two = cheapest_token_s(pricer, 8192, 256)
    assert one / 4 < two < 0.75 * one
    assert lone_decode_s(make_pricer(model, profile, 1)) == pytest.approx(
        make_pricer(model, profile, 1).step_time([], 1, 1)
    )


def test_the_engines_refusals_are_counted_reasons() -> None:
    """The engine configuration says what a pipeline conflicts with (a structured error,
    not a sentence to parse); its other refusals are plain one-line errors."""
    with pytest.raises(PipelineConflict) as caught:
        EngineConfig(
            cluster=ClusterConfig(pp=2, replicas=2),
            disagg=DisaggConfig(prefill_workers=1, decode_workers=1),
        )
    assert caught.value.conflict == "disaggregated pools"
    assert str(caught.value) == "--pp 2: not modelled with disaggregated pools yet"
    with pytest.raises(PipelineConflict) as caught:
        EngineConfig(cluster=ClusterConfig(pp=2, tp=2, dp_attention=2))
    assert caught.value.conflict == "--dp-attention"
    with pytest.raises(TwinError) as other:
        EngineConfig(cluster=ClusterConfig(pp=0))
    assert not isinstance(other.value, PipelineConflict)


def test_a_plan_over_stages(tmp_path: Path, monkeypatch) -> None:
    """tiny-transformer on H200 at 15,000 sessions/s for 0.15 s: tp 1 and pp 1/2 under
    vLLM, aggregated and 1P1D. The 1P1D pipelined candidate is skipped (the engine does
    not model it) with a counted note; the others are searched, a pipelined one costing
    two GPUs a replica; its reproduce command carries --pp."""
    monkeypatch.setenv("TWIN_PROFILES_DIR", str(tmp_path / "profiles"))
    w = tmp_path / "w.parquet"
    args = ["workload", "generate", "fixed", "--isl", "2048", "--osl", "8", "-n", "100"]
    assert run([*args, "--session-rate", "1", "-o", str(w)]) == 0
    found = plan(
        w,
        tmp_path / "plan",
        model="tiny-transformer",
        slos=["p95_ttft<=0.7ms"],
        session_rate=15000.0,
        duration_s=0.15,
        gpus=["h200"],
        engines=["vllm"],
        tp=[1],
        pp=["1", "2"],
        layouts=["agg", "1p1d"],
        seeds=1,
    )
    labels = {c.candidate.label: c for c in found.candidates}
    assert set(labels) == {
        "h200 vllm tp1 shared pool",
        "h200 vllm tp1 pp2 shared pool",
        "h200 vllm tp1 shared pool 1P1D",
    }
    assert any(
        n.startswith("1 pipelined candidate(s) skipped: --pp with disaggregated pools")
        for n in found.notes
    )
    piped = labels["h200 vllm tp1 pp2 shared pool"]
    assert piped.candidate.gpus_per_replica == 2
    if piped.replicas is not None:
        assert piped.gpus == 2 * piped.replicas
        assert piped.usd_per_hour == pytest.approx(2 * piped.replicas * piped.usd_per_gpu_hour)
    ran = [t for t in piped.trials]
    assert ran, "the pipelined candidate was searched"
    cmd = shlex.split(found.simulate_command(piped))
    assert cmd[cmd.index("--pp") + 1] == "2"
    rows = pq.read_table(tmp_path / "plan" / RESULTS_FILE).to_pylist()
    assert len(rows) >= len(ran)
    doc = found.to_dict()
    assert doc["schema_version"] == 8
    assert {c["pp"] for c in doc["candidates"]} == {1, 2}


@pytest.mark.parametrize("bad", ["0", "1,auto", "x"])
def test_a_bad_pp_is_one_line(capsys, tmp_path: Path, bad: str) -> None:
    argv = ["plan", "--slo", "p95_ttft<=1s", "--pp", bad, "--out", str(tmp_path / "o")]
    assert_clean_error(capsys, argv, tmp_path, "--pp")


def test_capacity_counts_tp_x_pp_gpus(tmp_path: Path, capsys) -> None:
    """``twin report capacity --pp 2``: a replica is tp x pp GPUs in the aggregate, the
    recommendations, the per-GPU cache and the report's cluster line."""
    import json

    w = tmp_path / "w.parquet"
    args = ["workload", "generate", "fixed", "--isl", "512", "--osl", "8", "-n", "40"]
    assert run([*args, "--session-rate", "20", "-o", str(w)]) == 0
    capsys.readouterr()
    out = tmp_path / "cap"
    argv = ["report", "capacity", str(w), "-m", "tiny-transformer", "--gpu", "h200"]
    argv += ["--engine", "vllm", "--tp", "2", "--pp", "2", "--replicas", "1,2"]
    argv += ["--cache-gb", "auto", "--slo", "p95_ttft<=1s", "--json", "--out", str(out)]
    assert run(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sorted((a["replicas"], a["pp"], a["gpus"]) for a in doc["aggregate"]) == [
        (1, 2, 4),
        (2, 2, 8),
    ]
    assert all(a["cache_gb_per_gpu"] == a["cache_gb"] / 4 for a in doc["aggregate"])
    assert sorted((r["gpus"], r["tp"], r["pp"]) for r in doc["recommendations"]) == [
        (4, 2, 2),
        (8, 2, 2),
    ]
    assert "1, 2 replicas (swept) x tp 2 x pp 2 = 4, 8 GPUs" in (out / "report.md").read_text()
    # The rows ran with two stages (the point's key differs from a one-stage sweep's).
    keys = {r["key"] for r in pq.read_table(out / RESULTS_FILE).to_pylist()}
    one = tmp_path / "one"
    argv1 = [a if a != str(out) else str(one) for a in argv]
    argv1[argv1.index("--pp") + 1] = "1"
    assert run(argv1) == 0
    assert not keys & {r["key"] for r in pq.read_table(one / RESULTS_FILE).to_pylist()}
