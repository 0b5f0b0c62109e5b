"""The report's per-request views, the load analysis and the ray executor."""

from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path

import pytest
from report_helpers import record
from test_report import CAPACITY
from typer.testing import CliRunner

from twin.cli import app
from twin.errors import TwinError
from twin.metrics import RequestRecord
from twin.reports.analysis import aggregate, parse_slo
from twin.reports.load import knee, load_verdict, max_sustainable_rate, sustainable
from twin.reports.perrequest import (
    BIN_HIT_COLUMN,
    BIN_INPUT_COLUMN,
    BIN_LABELS,
    CDF_COLUMN,
    digest,
    length_bin,
    pooled_bin_hit_rates,
    pooled_cdf,
)
from twin.reports.sweep import SweepSpec, grid, resolve, run_sweep
from twin.workloads.examples import example_path

WORKLOAD = example_path("system-prompt")
STABLE = {"verdict": "stable"}  # hand-made rows: the engine judged every point stable


def _rec(arrival: float, ttft: float, inp: int, hit: int, rejected: bool = False) -> RequestRecord:
    return record(arrival, ttft, arrival + ttft + 1, inp, hit, rejected=rejected)


# --- the per-request digest ----------------------------------------------------------------


def test_length_bins_are_log2() -> None:
    assert [length_bin(n) for n in (1, 1023, 1024, 2047, 2048, 32767, 32768, 10**6)] == [
        0,
        0,
        1,
        1,
        2,
        5,
        6,
        6,
    ]
    assert len(BIN_LABELS) == 7


def test_digest_of_hand_made_records() -> None:
    records = [
        _rec(10.0, 0.010, 500, 100),  # <1K
        _rec(11.0, 0.030, 900, 900),  # <1K
        _rec(12.0, 0.020, 1500, 0),  # 1-2K
        _rec(13.0, 0.040, 40000, 30000),  # >=32K
        _rec(1.0, 9.0, 500, 0),  # warm-up: left out
        _rec(14.0, math.nan, 3000, 0, rejected=True),  # rejected: left out
    ]
    cols = digest(records, warmup_s=5.0)
    assert cols[BIN_INPUT_COLUMN] == [1400, 1500, 0, 0, 0, 0, 40000]
    assert cols[BIN_HIT_COLUMN] == [1000, 0, 0, 0, 0, 0, 30000]
    q = cols[CDF_COLUMN]
    assert q is not None and len(q) == 101
    assert q[0] == pytest.approx(10.0) and q[100] == pytest.approx(40.0)
    assert q[50] == pytest.approx(25.0)  # linear interpolation between 20 and 30 ms
    assert all(a <= b for a, b in itertools.pairwise(q))

    row = {"policy": "p", "session_rate": None, "cache_gb": 1.0, **cols}
    rates = pooled_bin_hit_rates([row], "p", None, 1.0)
    assert rates is not None
    assert rates[0] == pytest.approx(1000 / 1400) and rates[1] == 0.0
    assert rates[6] == pytest.approx(0.75) and math.isnan(rates[2])
    assert all(0 <= r <= 1 for r in rates if not math.isnan(r))


def test_pooling_across_seeds_and_missing_columns() -> None:
    base = {"policy": "p", "session_rate": 2.0, "cache_gb": 1.0}
    a = {
        **base,
        CDF_COLUMN: [1.0, 2.0, 4.0],
        BIN_INPUT_COLUMN: [100.0, 0.0],
        BIN_HIT_COLUMN: [10.0, 0.0],
    }
    b = {
        **base,
        CDF_COLUMN: [3.0, 4.0, 6.0],
        BIN_INPUT_COLUMN: [300.0, 0.0],
        BIN_HIT_COLUMN: [290.0, 0.0],
    }
    old = {**base}  # a row written before the digest columns existed
    assert pooled_cdf([a, b, old], "p", 2.0, 1.0) == [2.0, 3.0, 5.0]
    rates = pooled_bin_hit_rates([a, b, old], "p", 2.0, 1.0)
    assert rates is not None and rates[0] == pytest.approx(300 / 400)  # tokens, not mean
    assert pooled_cdf([old], "p", 2.0, 1.0) is None
    assert pooled_bin_hit_rates([old], "p", 2.0, 1.0) is None


# --- load: knee and max sustainable rate ------------------------------------------------------


def test_max_sustainable_rate_interpolates_to_the_crossing() -> None:
    # passes at 1 and 2 (100, 300 ms), fails at 4 (700 ms): crossing of 500 ms at 3.0
    assert max_sustainable_rate([(4.0, 700.0), (1.0, 100.0), (2.0, 300.0)], 500.0) == (
        pytest.approx(3.0),
        "interpolated",
    )
    assert max_sustainable_rate([(1.0, 100.0), (2.0, 200.0)], 500.0) == (2.0, "at least")
    assert max_sustainable_rate([(1.0, 600.0), (2.0, 900.0)], 500.0) == (None, "below")
    # the first failure bounds it even if a later rate passes again (noise)
    rate, _ = max_sustainable_rate([(1.0, 400.0), (2.0, 600.0), (3.0, 450.0)], 500.0)
    assert rate == pytest.approx(1.5)
    # no measured request at a rate counts as failing
    assert max_sustainable_rate([(1.0, 400.0), (2.0, None)], 500.0) == (1.0, "interpolated")


def test_knee_is_unit_free_log_log_slope() -> None:
    # 1 -> 2: x1.2 (slope 0.26); 2 -> 4: x1.5 (0.58); 4 -> 8: x10 (3.3): knee at 4
    curve = [(1.0, 100.0), (2.0, 120.0), (4.0, 180.0), (8.0, 1800.0)]
    assert knee(curve) == 4.0
    assert knee([(60 * r, v) for r, v in curve]) == 240.0  # same curve per minute
    assert knee([(1.0, 100.0), (2.0, 150.0), (4.0, 250.0)]) is None


def test_sustainable_table_and_verdict() -> None:
    rows = [
        {**STABLE, "policy": p, "session_rate": r, "cache_gb": c, "seed": 0, "ttft_p95_ms": v}
        for p, c, r, v in [
            ("marconi", 20.0, 1.0, 100.0),
            ("marconi", 20.0, 2.0, 200.0),
            ("marconi", 20.0, 4.0, 2000.0),
            ("vllm+", 20.0, 1.0, 300.0),
            ("vllm+", 20.0, 2.0, 700.0),
            ("vllm+", 20.0, 4.0, 9000.0),
            ("vllm+", 5.0, 1.0, 900.0),  # one rate only at 5 GB: no load row
        ]
    ]
    slo = parse_slo("p95_ttft<=500ms")
    items = {(s.policy, s.cache_gb): s for s in sustainable(aggregate(rows), slo)}
    assert set(items) == {("marconi", 20.0), ("vllm+", 20.0)}
    # marconi: 2 + (500-200)/(2000-200)*2 = 2.333; vllm+: 1 + 200/400 = 1.5
    assert items[("marconi", 20.0)].rate == pytest.approx(2 + 1 / 3)
    assert items[("vllm+", 20.0)].rate == pytest.approx(1.5)
    assert items[("marconi", 20.0)].knee == 2.0
    text = " ".join(load_verdict(list(items.values()), slo))
    assert "marconi ~2.33 sessions/s" in text and "vllm+ ~1.5 sessions/s" in text
    assert "marconi sustains the most load" in text


# --- the ray executor ---------------------------------------------------------------------------


def _spec() -> SweepSpec:
    return resolve(SweepSpec(workload=str(WORKLOAD), model="tiny-hybrid", gpu="h100"))


def test_ray_missing_gives_install_hint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    points = grid([0.001], ["vllm+"], [None], 1)
    with pytest.raises(TwinError, match=r"pip install 'twin\[ray\]'"):
        run_sweep(_spec(), points, tmp_path / "r", executor="ray")
    assert not (tmp_path / "r").exists()

    res = CliRunner().invoke(
        app,
        [
            *CAPACITY,
            "--cache-gb",
            "0.001",
            "--policies",
            "vllm+",
            "--executor",
            "ray",
            "--out",
            str(tmp_path / "c"),
        ],
    )
    assert isinstance(res.exception, TwinError)
    assert "pip install 'twin[ray]'" in str(res.exception)
    assert not (tmp_path / "c").exists()


def test_ray_sweep_matches_local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ray = pytest.importorskip("ray")
    # One task in flight at a time: each result refills the window.
    monkeypatch.setattr("twin.reports.ray_executor.MIN_IN_FLIGHT", 1)
    monkeypatch.setattr("twin.reports.ray_executor.TASKS_PER_CPU", 0)
    points = grid([0.001], ["vllm+", "marconi", "sglang+"], [2.0], 1)
    local = run_sweep(_spec(), points, tmp_path / "a")
    try:
        remote = run_sweep(_spec(), points, tmp_path / "b", executor="ray")
    finally:
        ray.shutdown()
    assert remote.rows == local.rows
    assert sum(remote.nodes.values()) == len(points) and local.nodes == {}
    assert run_sweep(_spec(), points, tmp_path / "b", executor="local").computed == 0


def test_close_sustainable_rates_are_a_tie_not_a_winner() -> None:
    # The case: 2.04 vs 2.02 sessions/s on one seed is not a win.
    slo = parse_slo("p95_ttft<=500ms")
    rows = [
        {**STABLE, "policy": p, "session_rate": r, "cache_gb": 20.0, "seed": 0, "ttft_p95_ms": v}
        for p, r, v in [
            ("marconi", 1.0, 100.0),
            ("marconi", 3.0, 900.0),  # crosses 500 ms at 2.0
            ("sglang+", 1.0, 100.0),
            ("sglang+", 3.0, 908.0),  # at 1.98: 1% less
            ("vllm+", 1.0, 300.0),
            ("vllm+", 3.0, 900.0),  # at 1.67: clearly less
        ]
    ]
    text = " ".join(load_verdict(sustainable(aggregate(rows), slo), slo))
    assert "marconi, sglang+ tie" in text and "sustains the most load" not in text
    assert "marconi, sglang+ tie (within 5%, one seed)" in text  # vllm+ is not in the tie


def test_seed_intervals_decide_ties_when_there_are_seeds() -> None:
    slo = parse_slo("p95_ttft<=500ms")

    def cells(policy: str, p95_at_3: list[float]) -> list[dict]:
        return [
            {
                **STABLE,
                "policy": policy,
                "session_rate": r,
                "cache_gb": 20.0,
                "seed": s,
                "ttft_p95_ms": v,
            }
            for s, v3 in enumerate(p95_at_3)
            for r, v in ((1.0, 100.0), (3.0, v3))
        ]

    # Means 900 vs 950 (rates 2.0 vs 1.89, 5.5% apart) but noisy seeds: intervals overlap.
    noisy = cells("marconi", [700.0, 1100.0]) + cells("sglang+", [750.0, 1150.0])
    text = " ".join(load_verdict(sustainable(aggregate(noisy), slo), slo))
    assert "tie (their seed intervals overlap)" in text
    # Tight seeds: the same 1% gap is now a real difference.
    tight = cells("marconi", [900.0, 900.2]) + cells("sglang+", [908.0, 908.2])
    text = " ".join(load_verdict(sustainable(aggregate(tight), slo), slo))
    assert "marconi sustains the most load" in text


def test_p95_vs_load_has_a_log_axis_and_the_slo_line(monkeypatch) -> None:
    import matplotlib.pyplot as plt

    from twin.reports import render_figures

    axes = []
    real = plt.subplots

    def keep(*args, **kwargs):
        fig, ax = real(*args, **kwargs)
        axes.append(ax)
        return fig, ax

    monkeypatch.setattr(render_figures.plt, "subplots", keep)
    rows = [
        {"policy": "marconi", "session_rate": r, "cache_gb": 20.0, "seed": 0, "ttft_p95_ms": v}
        for r, v in ((1.0, 50.0), (2.0, 80.0), (4.0, 9000.0))
    ]
    slo = parse_slo("p95_ttft<=500ms")
    render_figures.fig_ttft_vs_rate(aggregate(rows), None, slo)
    ax = axes[-1]
    assert ax.get_yscale() == "log"
    assert any(
        list(line.get_ydata()) == [500.0, 500.0] and "SLO" in line.get_label()
        for line in ax.get_lines()
    )
