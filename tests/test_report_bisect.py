"""--bisect: the sustainable rate narrowed between the swept rates (reports.bisect)."""

from __future__ import annotations

from typing import Any

import pytest

import twin.reports.bisect as bisect
from twin.errors import TwinError
from twin.reports.sweep import Point, SweepOutcome, SweepSpec, grid
from twin.slo import parse_slos

SLOS = parse_slos(["p95_ttft<=500ms"])
SPEC = SweepSpec(workload="w.parquet", model="tiny-hybrid", workload_sha256="x", profile_label="l")


def _row(p: Point, limit: float) -> dict[str, Any]:
    ok = p.session_rate <= limit
    return {
        "key": SPEC.key(p),
        "policy": p.policy,
        "session_rate": p.session_rate,
        "cache_gb": p.cache_gb,
        "seed": p.seed,
        "replicas": 1,
        "tp": 1,
        "ttft_p95_ms": 100.0 if ok else 5000.0,
        "verdict": "stable" if ok else "overloaded",
    }


@pytest.fixture
def fake_sweep(monkeypatch):
    """Points pass below a limit per policy; count the points run."""
    limits = {"marconi": 7.3, "vllm+": 2.2}
    ran: list[Point] = []

    def run_sweep(spec, points, out, **_):
        ran.extend(points)
        return SweepOutcome([_row(p, limits[p.policy]) for p in points], len(points), 0)

    monkeypatch.setattr(bisect, "run_sweep", run_sweep)
    return limits, ran


def test_bisection_brackets_each_limit_within_the_tolerance(fake_sweep, tmp_path):
    limits, ran = fake_sweep
    points = grid([10.0], ["marconi", "vllm+"], [1.0, 4.0, 16.0], seeds=2)
    rows = [_row(p, limits[p.policy]) for p in points]
    brackets, added = bisect.bisect_rates(SPEC, points, rows, SLOS, tmp_path, 0.05)
    found = {b.policy: b for b in brackets}
    for policy, limit in limits.items():
        b = found[policy]
        assert b.passes <= limit < b.fails
        assert b.fails / b.passes <= 1.05
        assert b.steps >= 3
    assert len(added) == len(ran) and all(p.seed in (0, 1) for p in ran)  # every seed


def test_no_bracket_when_every_or_no_swept_rate_passes(fake_sweep, tmp_path):
    limits, ran = fake_sweep
    points = grid([10.0], ["marconi", "vllm+"], [3.0, 5.0], seeds=1)
    rows = [_row(p, limits[p.policy]) for p in points]
    brackets, _ = bisect.bisect_rates(SPEC, points, rows, SLOS, tmp_path, 0.05)
    found = {b.policy: b for b in brackets}
    assert found["marconi"].fails is None and found["marconi"].passes == 5.0
    assert found["vllm+"].passes is None and found["vllm+"].fails == 3.0
    assert "every swept rate passes" in found["marconi"].label()
    assert not ran


def test_bad_tolerance_is_refused(tmp_path):
    with pytest.raises(TwinError, match="--bisect"):
        bisect.bisect_rates(SPEC, [], [], SLOS, tmp_path, 0.0)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--session-rates", "1,2", "--bisect", "0.05"], "needs --slo"),
        (["--slo", "p95_ttft<=1s", "--bisect", "0.05"], "needs --session-rates"),
        (["--session-rates", "1,2", "--slo", "p95_ttft<=1s", "--bisect", "2"], "fraction"),
    ],
)
def test_the_flag_is_checked_before_any_work(tmp_path, capsys, args, says):
    from twin.cli.main import run
    from twin.workloads.examples import example_path

    rc = run(["report", "capacity", str(example_path("chat")), *args, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and says in err, err
    assert not (tmp_path / "o" / "results.parquet").exists()
