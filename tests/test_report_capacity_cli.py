"""Issue 30 through `twin report capacity`: several SLOs, --json, verdicts in the tables,
the per-point table without --slo, the routing hint, progress, --engine and --duration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from report_helpers import judge_steady_state
from test_bad_input import assert_clean_error

from twin.cli import common
from twin.cli.main import run
from twin.engine import build_run
from twin.errors import TwinError
from twin.reports import capacity
from twin.reports.render import MD_FILE
from twin.reports.sweep import Point, SweepSpec, resolve, run_point
from twin.workloads.examples import example_path

WORKLOAD = example_path("system-prompt")
SMALL = ["report", "capacity", str(WORKLOAD), "-m", "tiny-hybrid", "--cache-gb", "0.002"]


def test_two_slos_json_verdicts_and_goodput(tmp_path: Path, monkeypatch, capsys) -> None:
    judge_steady_state(monkeypatch)
    out = tmp_path / "cap"
    argv = [*SMALL, "--policies", "marconi", "--session-rates", "1,3", "--out", str(out)]
    slos = ["--slo", "p95_ttft<=1s", "--slo", "p99_tpot<=1s"]
    assert run([*argv, *slos, "--json"]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)  # the whole of stdout is one JSON document
    assert "2 point(s) simulated" in captured.err
    assert doc["slos"] == ["p95_ttft<=1000ms", "p99_tpot<=1000ms"]
    assert set(doc) >= {"recommendations", "rows", "sustainable", "infeasible", "verdicts"}
    (rec1, _) = sorted(doc["recommendations"], key=lambda r: r["session_rate"])
    assert rec1["meets"] and rec1["cache_gb"] == 0.002 and rec1["verdict"] == "stable"
    assert set(rec1["values_ms"]) == set(doc["slos"])
    assert rec1["binding_target"] in doc["slos"]
    assert [r["verdict"] for r in doc["rows"]] == ["stable", "stable"]
    for r in doc["rows"]:
        # every request of these light loads is good: goodput is the throughput
        assert r["goodput_rps"] == pytest.approx(r["throughput_rps"])
        assert r["goodput_slo"] == "p95_ttft<=1000ms;p99_tpot<=1000ms"
        assert "ttft_quantiles_ms" not in r  # the figures' digests stay out
    (load,) = doc["sustainable"]
    assert load["bound"] == "at least" and load["rate"] == 3.0
    assert doc["infeasible"] == []
    md = (out / MD_FILE).read_text()
    assert "P95 TTFT <= 1000 ms and P99 TPOT <= 1000 ms" in md
    assert "| verdict |" in md and "| stable |" in md and "goodput (req/s)" in md

    # Another SLO list on the same folder: nothing re-simulated, goodput unknown, said once.
    assert run([*argv, "--slo", "p95_ttft<=2s"]) == 0
    captured = capsys.readouterr()
    assert "0 point(s) simulated, 2 found" in captured.err
    notes = [line for line in captured.err.splitlines() if line.startswith("note: goodput")]
    assert len(notes) == 1 and "2 point(s)" in notes[0]
    assert "smallest cache meeting P95 TTFT <= 2000 ms (stable)" in captured.out
    assert "marconi meets P95 TTFT <= 2000 ms" in captured.out
    assert "goodput unknown" in (out / MD_FILE).read_text()


def test_without_slo_a_per_point_table_the_routing_hint_and_whole_progress(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    monkeypatch.setattr(common, "PLAIN_PROGRESS_EVERY_S", 0.0)
    argv = [*SMALL, "--policies", "vllm+", "--session-rates", "2", "-r", "1,2"]
    assert run([*argv, "--out", str(tmp_path / "o")]) == 0
    captured = capsys.readouterr()
    for col in ("policy", "verdict", "P95 TTFT (ms)", "P95 TPOT (ms)", "token hit", "req/s"):
        assert col in captured.out
    # The engine's own verdict (or its absence, read as too short to tell) is shown.
    assert "stable" in captured.out or "too short to tell" in captured.out
    hints = [line for line in captured.err.splitlines() if line.startswith("hint:")]
    assert len(hints) == 1 and "--router session-affinity or prefix-aware" in hints[0]
    lines = [line for line in captured.err.splitlines() if line.startswith("points:")]
    assert lines and lines[-1].startswith("points: 2/2 (100%)")
    for line in lines:  # the count and the percentage agree on every line
        done, pct = line.split()[1].split("/")[0], line.split("(")[1].split("%")[0]
        assert (int(pct) == 100) == (done == "2"), line
    # One replica, or a router that keeps sessions together: no hint.
    again = [*argv[:-2], "--router", "session-affinity", "-r", "2", "-o", str(tmp_path / "a")]
    assert run(again) == 0
    assert "hint:" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--slo", "p95_ttft<=1s", "--slo", "p95_ttft<=2s"], "P95 TTFT already has a target"),
        (["--slo", "p75_ttft<=1s"], "the sweep records ttft at p5, p50, p90, p95, p99 only"),
        (["--slo", "p95_latency<=1s"], "METRIC one of ttft, tpot, itl, e2e"),
        (["--engine", "nope"], "--engine 'nope'"),
        (["--duration", "0"], "--duration"),
        (["--warmup-s", "-1"], "--warmup-s"),
        (["--duration", "60"], "--duration: needs --session-rates"),
    ],
)
def test_bad_flags_are_one_line_before_any_work(
    tmp_path: Path, capsys, extra: list[str], needle: str
) -> None:
    assert_clean_error(capsys, [*SMALL, *extra, "--out", str(tmp_path / "x")], tmp_path, needle)


# --- --engine: the mode twin simulate runs -------------------------------------------------


def test_engine_runs_the_mode_twin_simulate_runs(tmp_path: Path, capsys) -> None:
    spec = resolve(SweepSpec(str(WORKLOAD), "tiny-hybrid", gpu="h100", engine="sglang"))
    plain = resolve(SweepSpec(str(WORKLOAD), "tiny-hybrid", gpu="h100"))
    point = Point(0.002, "marconi", 2.0, 0)
    # `twin simulate --engine sglang -p marconi --cache-gb 0.002 --session-rate 2`:
    want = build_run(
        WORKLOAD,
        model="tiny-hybrid",
        gpu="h100",
        engine="sglang",
        cache_gb=0.002,
        policy="marconi",
        policy_options={},
        session_rate=2.0,
        seed=0,
    )
    assert spec.config(point, want.profile) == want.config
    assert want.config.scheduling.preemption == "retract"  # SGLang's, not the paper's recompute
    assert spec.key(point) != plain.key(point)
    assert spec.profile_label == want.profile.provenance_label  # priced by SGLang's kernels
    # Without --policies, --engine sweeps the mode itself (its policy in its pool).
    out = tmp_path / "e"
    argv = ["report", "capacity", str(WORKLOAD), "-m", "tiny-hybrid", "--engine", "vllm"]
    assert run([*argv, "--session-rates", "2", "--json", "--out", str(out)]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["policy"] == "vllm" and row["cache_gb"] > 10  # the shared pool's size


# --- --duration: plumbing to the engine's build_run ----------------------------------------


def test_duration_settings_reach_build_run_and_the_key(tmp_path: Path, monkeypatch) -> None:
    got = capacity._duration_settings(600.0, [1.0, 2.0], tmp_path)
    assert got == {"duration_s": 600.0, "workload_cache": str(tmp_path / "workloads")}
    with pytest.raises(TwinError, match="needs --session-rates"):
        capacity._duration_settings(600.0, [None], tmp_path)
    # Both go to build_run; the duration is in the key, the cache folder is not.
    point = Point(0.002, "marconi", 1.0, 0)

    def spec(*settings: tuple[str, object]) -> SweepSpec:
        return SweepSpec(str(WORKLOAD), "tiny-hybrid", settings=settings)

    timed = spec(("duration_s", 600.0), ("workload_cache", "W"))
    assert timed.key(point) == spec(("duration_s", 600.0), ("workload_cache", "V")).key(point)
    assert timed.key(point) != spec(("duration_s", 300.0)).key(point) != spec().key(point)
    args = timed.fields(point)
    assert (args.get("duration_s"), args.get("workload_cache")) == (600.0, "W")
    assert timed.config(point) == spec().config(point)  # the arrival cut is build_run's
    assert timed.base_config() == spec().base_config()
    seen: dict = {}

    def fake_build_run(*args, **kwargs):
        seen.update(kwargs)
        raise RuntimeError("stop")

    monkeypatch.setattr("twin.reports.sweep.build_run", fake_build_run)
    with pytest.raises(RuntimeError, match="stop"):
        run_point(timed, point)
    assert (seen["duration_s"], seen["workload_cache"], seen["session_rate"]) == (600.0, "W", 1.0)


def test_duration_runs_every_rate_for_the_same_time(tmp_path: Path, monkeypatch, capsys) -> None:
    # 300 one-request sessions: 4 sessions/s for 100 s needs the workload stretched.
    out = tmp_path / "d"
    argv = [*SMALL, "--policies", "vllm+", "--session-rates", "1,4", "--duration", "100"]
    assert run([*argv, "--json", "--out", str(out)]) == 0
    rows = sorted(json.loads(capsys.readouterr().out)["rows"], key=lambda r: r["session_rate"])
    assert rows[1]["requests_measured"] > 2 * rows[0]["requests_measured"]
    assert any((out / "workloads").iterdir())  # the longer workload, kept for reruns
