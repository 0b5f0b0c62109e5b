"""``twin plan --rate R`` (issue 37): open-loop requests per second as the third kind of
load, the workload's arrival times scaled to R as ``twin simulate --request-rate`` runs
them (one implementation): the bound reads R, the answer's command reproduces it, and
bad or clashing loads are one line."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from test_bad_input import assert_clean_error

from twin.cli.main import run
from twin.reports.plan import plan


def test_a_plan_at_a_request_rate_reproduces(tmp_path: Path, monkeypatch) -> None:
    """tiny-transformer on H200 under vLLM: 2,000 single-turn 2,048-token requests whose
    generated (Poisson) arrivals are scaled to 15,000 requests/s: one replica is
    overloaded, the plan sizes it, and the winner's command (``--request-rate``) gives the
    plan's P95 TTFT to the digit."""
    monkeypatch.setenv("TWIN_PROFILES_DIR", str(tmp_path / "profiles"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    w = tmp_path / "w.parquet"
    args = ["workload", "generate", "fixed", "--isl", "2048", "--osl", "8", "-n", "2000"]
    assert run([*args, "--session-rate", "1", "-o", str(w)]) == 0
    found = plan(
        w,
        tmp_path / "plan",
        model="tiny-transformer",
        slos=["p95_ttft<=0.7ms"],
        rate=15000.0,
        gpus=["h200"],
        engines=["vllm"],
        tp=[1],
        seeds=1,
    )
    assert found.load.request_rate == 15000.0 and found.load.session_rate is None
    assert found.load.label().startswith("15000 requests/s")
    win = found.winner
    assert win is not None and win.replicas is not None and win.replicas > 1
    # The bound read the rate: 15,000 requests/s x the tokens a request (2,048 + 7).
    assert win.bound.startswith(f"{win.lower_bound}: 1.5e+04 requests/s x 2,055 tokens")
    assert 1 < win.lower_bound <= win.replicas
    # One replica fewer misses (the search probed it).
    fewer = win.trial(win.replicas - 1)
    assert fewer is not None and not fewer.meets
    words = shlex.split(found.simulate_command(win))
    assert words[words.index("--request-rate") + 1] == "15000"
    assert "--session-rate" not in words
    assert run(words[1:]) == 0
    summary = json.loads((tmp_path / "winner" / "summary.json").read_text())
    trial = win.trial(win.replicas)
    assert trial is not None and trial.ttft_p95_ms is not None
    assert 1e3 * summary["ttft_s"]["p95"] == pytest.approx(trial.ttft_p95_ms, rel=1e-9)
    doc = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert doc["load"]["request_rate"] == 15000.0
    # The frontier against throughput per GPU: the meeting deployments (3 and 4
    # replicas) serve the same load, so the cheaper one serves more tokens a GPU and
    # alone is on it; its command reproduces the tokens per second it reports.
    met = [t for t in win.trials if t.meets]
    assert len(met) >= 2
    front = found.frontier_throughput()
    assert [(f.candidate, f.replicas) for f in front] == [(win.candidate, win.replicas)]
    assert front[0].output_tokens_per_s == pytest.approx(
        summary["throughput"]["output_tokens_per_s"]
    )
    assert front[0].tokens_per_s_per_gpu == pytest.approx(
        summary["throughput"]["output_tokens_per_s"] / win.replicas
    )
    for t in met:  # no meeting deployment is both cheaper and serves more a GPU
        per = (t.output_tokens_per_s or 0) / t.replicas
        assert win.cost(t.replicas) >= front[0].usd_per_hour
        assert per <= (front[0].tokens_per_s_per_gpu or 0) + 1e-9
    point = doc["frontier_throughput"][0]
    assert point["replicas"] == win.replicas and point["output_tokens_per_s_per_gpu"] > 0
    assert point["simulate_command"] == found.simulate_command(win, "frontier")
    assert all("simulate_command" in f for f in doc["frontier"])
    md = (tmp_path / "plan" / "report.md").read_text()
    assert "## Pareto frontier: cost vs throughput per GPU" in md
    assert found.simulate_command(win, "frontier") in md


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--rate", "2", "--session-rate", "1"], "--rate and --session-rate"),
        (["--rate", "2", "--concurrency", "4"], "--rate and --concurrency"),
        (["--rate", "0"], "--rate"),
        (["--rate", "nan"], "--rate"),
    ],
)
def test_bad_rates_are_one_line(capsys, tmp_path: Path, extra: list[str], needle: str) -> None:
    argv = ["plan", "--slo", "p95_ttft<=1s", *extra, "--out", str(tmp_path / "o")]
    assert_clean_error(capsys, argv, tmp_path, needle)


def test_a_file_without_arrival_times_cannot_be_scaled(capsys, tmp_path: Path) -> None:
    w = tmp_path / "w.parquet"
    assert run(["workload", "generate", "fixed", "-n", "1", "-o", str(w)]) == 0
    capsys.readouterr()
    argv = ["plan", str(w), "--slo", "p95_ttft<=1s", "--rate", "2", "--out", str(tmp_path / "o")]
    assert_clean_error(capsys, argv, tmp_path, "--rate: ")
