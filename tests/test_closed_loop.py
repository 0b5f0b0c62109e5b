"""Closed-loop clients (--concurrency), --duration and the summary's SLO section."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from test_engine_helpers import ConstantPricer, run, single_turns, write_rows

from twin.cli.main import run as cli
from twin.engine import EngineConfig
from twin.engine.config import ArrivalConfig, CacheConfig, SchedulerConfig
from twin.engine.run import duration_settings, simulate
from twin.errors import TwinError
from twin.presets import get_model
from twin.slo import parse_slos
from twin.workloads.reader import Workload
from twin.workloads.schema import WorkloadRow


def _in_flight(records) -> int:
    """The most requests in the system at once (arrived, not completed)."""
    events = sorted(
        [(r.arrival_s, 1) for r in records] + [(r.completed_s, -1) for r in records],
        key=lambda e: (e[0], e[1]),  # a completion before an arrival at the same instant
    )
    return int(max(np.cumsum([d for _, d in events])))


@pytest.mark.parametrize("clients", [1, 3])
def test_each_client_sends_its_next_request_when_the_last_completes(tmp_path, clients):
    path = single_turns(tmp_path / "w.parquet", [None] * 30, output_len=4)
    summary, records = run(path, ConstantPricer(1.0), policy="vanilla", concurrency=clients)
    assert len(records) == 30
    assert _in_flight(records) == clients
    # Every arrival after the first wave is some earlier request's completion.
    done = sorted(r.completed_s for r in records)
    later = sorted(r.arrival_s for r in records)[clients:]
    np.testing.assert_allclose(later, done[: len(later)])
    assert summary["config"]["concurrency"] == clients


def test_turns_of_a_session_follow_their_think_time_in_closed_loop(tmp_path):
    rng = np.random.default_rng(0)
    rows = [
        WorkloadRow(
            s,
            t,
            100.0 * s + 10.0 * t,
            None if t == 0 else 2.0,
            rng.integers(0, 999, 8, dtype=np.int32),
            t > 0,
            None,
            2,
        )
        for s in range(4)
        for t in range(3)
    ]
    # Turn 1 and 2 carry open-loop arrival times in the file: closed loop ignores them.
    path = write_rows(tmp_path / "w.parquet", rows)
    _, records = run(path, ConstantPricer(0.5), policy="vanilla", concurrency=1)
    recs = sorted(records, key=lambda r: r.arrival_s)
    assert [r.session_id for r in recs] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    for prev, nxt in itertools.pairwise(recs):
        gap = nxt.arrival_s - prev.completed_s
        assert gap == pytest.approx(2.0 if nxt.turn else 0.0)


def test_concurrency_until_stops_new_sessions(tmp_path):
    path = single_turns(tmp_path / "w.parquet", [None] * 100, output_len=2)
    _, records = run(path, ConstantPricer(1.0), policy="vanilla", concurrency=2, until_s=10.0)
    assert max(r.arrival_s for r in records) <= 10.0
    assert 10 <= len(records) < 100


def test_concurrency_refuses_a_rate(tmp_path):
    path = single_turns(tmp_path / "w.parquet", [None] * 3)
    with pytest.raises(TwinError, match="--concurrency"):
        run(path, ConstantPricer(1.0), concurrency=2, session_rate=1.0)


def test_duration_sets_the_arrival_cut_and_a_warm_up():
    assert duration_settings({}, 100.0) == {"until_s": 100.0, "warmup_s": 20.0}
    assert duration_settings({"warmup_s": 5.0}, 100.0)["warmup_s"] == 5.0
    with pytest.raises(TwinError, match="--until-s"):
        duration_settings({"until_s": 5.0}, 100.0)
    with pytest.raises(TwinError, match="--warmup-s"):
        duration_settings({"warmup_s": 100.0}, 100.0)


def test_the_slo_section_reads_the_same_percentiles_and_counts_goodput(tmp_path):
    path = single_turns(tmp_path / "w.parquet", [None] * 400, output_len=3)
    slos = parse_slos(["p50_ttft<=1500ms", "p95_e2e<=100s", "p90_tpot<=1s"])
    records = []
    summary = simulate(
        Workload.open(path),
        get_model("tiny-hybrid"),
        ConstantPricer(1.0),
        EngineConfig(
            cache=CacheConfig(policy="vanilla"),
            scheduling=SchedulerConfig(max_running=1),
            arrivals=ArrivalConfig(session_rate=0.5, seed=2),
        ),
        on_record=records.append,
        slos=slos,
    )
    slo = summary.slo
    assert slo is not None and summary.steady_state is not None
    ttft = np.array([r.ttft_s for r in records])
    assert slo.targets[0].value_ms == pytest.approx(
        np.percentile(ttft.astype(np.float32), 50) * 1e3, rel=1e-6
    )
    good = sum(r.ttft_s <= 1.5 and r.e2e_s <= 100 and r.tpot_s <= 1.0 for r in records)
    assert slo.attainment == pytest.approx(good / len(records))
    assert slo.goodput_rps == pytest.approx(good / summary.throughput.window_s)
    assert slo.met == (summary.steady_state.verdict == "stable" and slo.targets_met)


def test_simulate_cli_prints_the_verdict_and_each_slo(tmp_path, capsys):
    out = tmp_path / "o"
    rc = cli(["simulate", "--slo", "p95_ttft<=500ms", "--slo", "p99_e2e<=60s", "--out", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    assert "steady state:" in printed
    assert "SLO P95 TTFT <= 500 ms" in printed and "SLO P99 E2E <= 60000 ms" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert [t["slo"] for t in summary["slo"]["targets"]] == ["p95_ttft<=500ms", "p99_e2e<=60000ms"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--slo", "p95_ttft<=1ms", "--slo", "p95_ttft<=2ms"], "already has a target"),
        (["--slo", "p95_foo<=1ms"], "METRIC one of"),
        (["--concurrency", "0"], "--concurrency"),
        (["--duration", "-1"], "--duration"),
        (["--concurrency", "2", "--session-rate", "1"], "--concurrency"),
    ],
)
def test_simulate_cli_refuses_bad_load_flags(tmp_path, capsys, args, says):
    rc = cli(["simulate", *args, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert says in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o" / "summary.json").exists()


@pytest.mark.parametrize("shape", [0.25, 4.0])
def test_burstiness_draws_gamma_session_starts(tmp_path, shape):
    path = single_turns(tmp_path / "w.parquet", [None] * 4000)
    _, records = run(
        path, ConstantPricer(1e-4), policy="vanilla", session_rate=2.0, burstiness=shape, seed=1
    )
    gaps = np.diff(sorted(r.arrival_s for r in records))
    assert gaps.mean() == pytest.approx(0.5, rel=0.1)
    # Gamma gaps of shape k have a squared coefficient of variation of 1/k.
    assert gaps.var() / gaps.mean() ** 2 == pytest.approx(1 / shape, rel=0.15)


def test_burstiness_needs_a_session_rate(tmp_path):
    path = single_turns(tmp_path / "w.parquet", [0.0, 1.0])
    with pytest.raises(TwinError, match="--burstiness"):
        run(path, ConstantPricer(1.0), burstiness=0.5)
