"""Issue 30, the report side: SLO lists, goodput, steady-state verdicts and the binding
resource, on hand-made rows (the CLI's parts: test_report_capacity_cli)."""

from __future__ import annotations

import math

import pytest
from report_helpers import record

from twin.cli.common import progress_counts
from twin.errors import TwinError
from twin.metrics import RequestRecord
from twin.reports.analysis import (
    METRICS,
    Recommendation,
    aggregate,
    parse_slo,
    parse_slos,
    recommend,
    verdict,
    with_goodput_of,
)
from twin.reports.load import load_verdict, sustainable
from twin.reports.perrequest import RequestDigest
from twin.reports.sweep import Point, PointProgress, SweepSpec, summary_row
from twin.reports.verdicts import (
    DECODE,
    MEMORY,
    OVERLOADED,
    PREFILL,
    QUEUEING,
    RUN_LENGTH,
    STABLE,
    TOO_SHORT,
    binding_resource,
    binding_target,
    meets,
    worst_verdict,
)
from twin.summary import RunSummary

TTFT = parse_slo("p95_ttft<=500ms")
TPOT = parse_slo("p95_tpot<=50ms")


def _cell(policy: str, cache: float, rate: float | None = None, **cols: object) -> dict:
    return {
        "policy": policy,
        "session_rate": rate,
        "cache_gb": cache,
        "seed": 0,
        "verdict": STABLE,
        **cols,
    }


# --- SLOs as a list --------------------------------------------------------------------------


@pytest.mark.parametrize("metric", ["ttft", "tpot", "itl", "e2e"])
@pytest.mark.parametrize("pct", [50, 90, 95, 99])
def test_every_metric_and_percentile_the_sweep_records_can_be_a_target(
    metric: str, pct: int
) -> None:
    slo = parse_slo(f"p{pct}_{metric}<=1s")
    assert slo.column in METRICS


def test_an_unrecorded_percentile_names_what_the_sweep_records() -> None:
    with pytest.raises(TwinError) as err:
        parse_slo("p75_tpot<=50ms")
    assert "--slo 'p75_tpot<=50ms'" in str(err.value)
    assert "tpot at p50, p90, p95, p99 only" in str(err.value)


def test_slo_list_refuses_a_repeated_percentile() -> None:
    assert parse_slos(["p95_ttft<=500ms", "p95_tpot<=50ms"]) == (TTFT, TPOT)
    with pytest.raises(TwinError, match="already has a target"):
        parse_slos(["p95_ttft<=500ms", "p95_ttft<=1s"])


def test_every_target_must_hold_and_the_point_be_stable() -> None:
    rows = [
        # 10 GB meets TTFT but not TPOT; 20 GB meets both but is overloaded; 40 GB meets.
        _cell("marconi", 10, ttft_p95_ms=300.0, tpot_p95_ms=80.0),
        _cell("marconi", 20, ttft_p95_ms=250.0, tpot_p95_ms=30.0, verdict=OVERLOADED),
        _cell("marconi", 40, ttft_p95_ms=400.0, tpot_p95_ms=20.0),
        # vllm+ has no TPOT column at all (a null metric never meets a target).
        _cell("vllm+", 40, ttft_p95_ms=100.0),
    ]
    agg = aggregate(rows, (TTFT, TPOT))
    recs = {r.policy: r for r in recommend(agg, (TTFT, TPOT), 1, 1)}
    m = recs["marconi"]
    assert m.cache_gb == 40 and m.target == TTFT and m.value_ms == 400.0
    assert m.headroom == pytest.approx(0.2)
    assert not recs["vllm+"].meets and recs["vllm+"].target == TPOT
    text = " ".join(verdict(list(recs.values()), (TTFT, TPOT)))
    assert "marconi meets P95 TTFT <= 500 ms and P95 TPOT <= 50 ms with 40 GB" in text
    assert "P95 TTFT 400.0 ms, P95 TPOT 20.0 ms; P95 TTFT binds, 20% under its target" in text
    assert "vllm+: none in the sweep meets them (P95 TPOT no value at 40 GB" in text


def test_the_binding_target_is_the_one_nearest_or_furthest_past_its_threshold() -> None:
    row = {"ttft_p95_ms": 400.0, "tpot_p95_ms": 45.0}  # 80% and 90% of their thresholds
    assert binding_target(row, (TTFT, TPOT)) == TPOT
    row = {"ttft_p95_ms": 900.0, "tpot_p95_ms": 60.0}  # 180% and 120%
    assert binding_target(row, (TTFT, TPOT)) == TTFT


def test_no_fit_names_the_failing_target_and_the_binding_resource() -> None:
    """Not the generic 'larger caches, more replicas or a lower rate': what binds."""
    queued = dict(queue_mean_ms=900.0, prefill_mean_ms=100.0, utilisation=0.97)
    rows = [
        _cell("marconi", 10, 2.0, ttft_p95_ms=3000.0, **queued),
        _cell("marconi", 20, 2.0, ttft_p95_ms=2000.0, **queued),
        _cell("vllm+", 20, 2.0, ttft_p95_ms=1500.0, **queued),
    ]
    recs = recommend(aggregate(rows, (TTFT,)), TTFT, 1, 1)
    assert {r.resource for r in recs} == {QUEUEING}
    text = " ".join(verdict(recs, TTFT))
    assert "marconi P95 TTFT 2,000.0 ms at 20 GB" in text
    assert "The binding resource is queueing: more replicas (--replicas) or a lower" in text
    assert "try larger caches" not in text
    # A prefill longer than the target: more replicas would not help.
    slow = [_cell("marconi", 20, 2.0, ttft_p95_ms=900.0, prefill_p95_ms=700.0)]
    text = " ".join(verdict(recommend(aggregate(slow, (TTFT,)), TTFT, 1, 1), TTFT))
    assert "The binding resource is prefill compute: more GPUs per replica (--tp)" in text
    # Numbers that pass on a run too short to judge: the engine's reason is passed on.
    short = [
        _cell(
            "marconi",
            20,
            2.0,
            ttft_p95_ms=90.0,
            verdict=TOO_SHORT,
            verdict_reason="the request rate is still rising: run longer (--duration).",
        )
    ]
    text = " ".join(verdict(recommend(aggregate(short, (TTFT,)), TTFT, 1, 1), TTFT))
    assert "marconi too short to tell at 20 GB" in text
    assert "The binding resource is run length: a longer run (--duration" in text
    assert "Steady state of marconi at 20 GB: the request rate is still rising" in text


def test_a_cells_verdict_is_its_worst_seed() -> None:
    assert worst_verdict([STABLE, STABLE]) == STABLE
    assert worst_verdict([STABLE, TOO_SHORT]) == TOO_SHORT
    assert worst_verdict([TOO_SHORT, OVERLOADED, STABLE]) == OVERLOADED
    assert worst_verdict([STABLE, None]) == TOO_SHORT  # a row without a verdict
    rows = [
        _cell("marconi", 20, ttft_p95_ms=100.0, verdict_reason="fine"),
        {
            **_cell("marconi", 20, ttft_p95_ms=120.0),
            "seed": 1,
            "verdict": OVERLOADED,
            "verdict_reason": "arrivals outpace completions",
        },
    ]
    (cell,) = aggregate(rows, (TTFT,))
    assert cell["verdict"] == OVERLOADED
    assert cell["verdict_reason"] == "arrivals outpace completions"
    assert not meets(cell, (TTFT,))


def test_sustainable_rate_uses_every_target_and_stable_points_only() -> None:
    rows = [
        # TTFT crosses 500 ms at 3.0, TPOT crosses 50 ms at 2.5: TPOT binds at ~2.5.
        _cell("marconi", 20, 1.0, ttft_p95_ms=100.0, tpot_p95_ms=20.0),
        _cell("marconi", 20, 2.0, ttft_p95_ms=300.0, tpot_p95_ms=40.0),
        _cell("marconi", 20, 4.0, ttft_p95_ms=900.0, tpot_p95_ms=80.0),
        # Every number passes at 4, but the point is overloaded: it fails there.
        _cell("sglang+", 20, 1.0, ttft_p95_ms=100.0, tpot_p95_ms=20.0),
        _cell("sglang+", 20, 2.0, ttft_p95_ms=200.0, tpot_p95_ms=30.0),
        _cell("sglang+", 20, 4.0, ttft_p95_ms=300.0, tpot_p95_ms=40.0, verdict=OVERLOADED),
    ]
    items = {s.policy: s for s in sustainable(aggregate(rows), (TTFT, TPOT))}
    assert items["marconi"].rate == pytest.approx(2.5)
    assert items["marconi"].binding == str(TPOT)
    assert items["sglang+"].rate == 2.0
    assert items["sglang+"].binding == "steady state (overloaded at 4 sessions/s)"
    text = " ".join(load_verdict(list(items.values()), (TTFT, TPOT)))
    assert "(stable points only)" in text
    assert "marconi ~2.5 sessions/s, bound by P95 TPOT <= 50 ms" in text
    assert "sglang+ ~2 sessions/s, bound by steady state (overloaded" in text


# --- the binding resource ---------------------------------------------------------------------


BASE = {
    "verdict": STABLE,
    "ttft_p95_ms": 100.0,
    "tpot_p95_ms": 10.0,
    "prefill_p95_ms": 50.0,
    "queue_mean_ms": 10.0,
    "prefill_mean_ms": 40.0,
    "utilisation": 0.5,
    "preempted_requests": 0,
    "peak_running": 40,
    "max_running": 256,
    "running_pool_peak": 0.3,
}


@pytest.mark.parametrize(
    ("change", "resource"),
    [
        ({}, None),  # meets every target, stable
        # 1. the unqueued prefill alone is longer than the TTFT target
        ({"ttft_p95_ms": 900.0, "prefill_p95_ms": 600.0}, PREFILL),
        # 2. the shared pool preempted requests ...
        ({"ttft_p95_ms": 900.0, "preempted_requests": 12}, MEMORY),
        # ... or running requests filled it below the running cap
        ({"ttft_p95_ms": 900.0, "running_pool_peak": 0.97}, MEMORY),
        # (a full pool at the running cap is the cap, not memory)
        (
            {
                "ttft_p95_ms": 900.0,
                "running_pool_peak": 0.97,
                "peak_running": 256,
                "queue_mean_ms": 800.0,
                "utilisation": 0.95,
            },
            QUEUEING,
        ),
        # 3. TTFT is mostly queue wait on a busy GPU
        ({"ttft_p95_ms": 900.0, "queue_mean_ms": 800.0, "utilisation": 0.95}, QUEUEING),
        ({"queue_mean_ms": 800.0, "verdict": OVERLOADED}, QUEUEING),
        # 4. TPOT fails while TTFT is fine
        ({"tpot_p95_ms": 80.0}, DECODE),
        # 5. what is left: a stable-looking but short run
        ({"verdict": TOO_SHORT}, RUN_LENGTH),
    ],
)
def test_binding_resource_rules(change: dict, resource: str | None) -> None:
    assert binding_resource({**BASE, **change}, (TTFT, TPOT)) == resource


# --- goodput -------------------------------------------------------------------------------


def _rec(ttft: float, tpot: float, out: int = 11, arrival: float = 1.0) -> RequestRecord:
    return record(arrival, ttft, arrival + ttft + tpot * (out - 1), out=out)


def test_the_digest_counts_good_requests_for_goodput() -> None:
    slos = parse_slos(["p95_ttft<=100ms", "p95_tpot<=10ms", "p95_itl<=1ms"])
    d = RequestDigest(warmup_s=0.5, slos=slos)
    for rec in (
        _rec(0.05, 0.005),  # good
        _rec(0.2, 0.005),  # TTFT too long
        _rec(0.05, 0.02),  # TPOT too long
        _rec(0.05, 0.0, out=1),  # one output token: no TPOT, good
        _rec(0.5, 0.5, arrival=0.1),  # warm-up: not measured
    ):
        d.add(rec)
    assert d.good() == 2
    assert d.goodput(4.0) == {
        "goodput_rps": 0.5,
        "goodput_slo": "p95_ttft<=100ms;p95_tpot<=10ms;p95_itl<=1ms",
    }
    assert RequestDigest().goodput(4.0) == {"goodput_rps": None, "goodput_slo": None}


def test_goodput_of_another_slo_list_is_unknown_not_recomputed() -> None:
    rows = [
        {"goodput_rps": 2.0, "goodput_slo": "p95_ttft<=500ms"},
        {"goodput_rps": 3.0, "goodput_slo": "p95_ttft<=500ms;p95_tpot<=50ms"},
        {"goodput_rps": None, "goodput_slo": None},
    ]
    same, stale = with_goodput_of(rows, (TTFT,))
    assert [r["goodput_rps"] for r in same] == [2.0, None, None] and stale == 2
    none, stale = with_goodput_of(rows, ())
    assert [r["goodput_rps"] for r in none] == [None, None, None] and stale == 0


# --- summary rows ---------------------------------------------------------------------------


def _summary(**extra: object) -> RunSummary:
    """A stored summary from before ``itl_s`` and ``p90`` (and the schema keys), read back."""
    lat = {"mean": 0.1, "p5": 0.01, "p50": 0.05, "p95": 0.2, "p99": 0.3}
    rates = {"requests_per_s": 2.0, "output_tokens_per_s": 20.0, "input_tokens_per_s": 200.0}
    return RunSummary.from_dict(
        {
            "throughput": {**rates, "window_s": 10.0},
            "requests": {"total": 20, "measured": 20, "warmup_excluded": 0, "rejected": 0},
            "ttft_s": lat,
            "tpot_s": lat,
            "e2e_s": lat,
            "queue_s": lat,
            "prefill_s": lat,
            "hit": dict.fromkeys(("token_hit_rate", "request_hit_rate"), 0.5)
            | dict.fromkeys(("input_tokens", "hit_tokens", "checkpoints_admitted"), 0),
            "flops": {"prefill_total": 1.0, "saved": 0.4, "saved_fraction": 0.4},
            "utilisation": {"mean": 0.3, "min": 0.3, "max": 0.3},
            "config": {"max_running": 256},
            "sim_end_s": 10.0,
            "memory_budget_bytes": 0,
            "workload": {"path": "w.parquet", "rows": 20, "sessions": 20, "producer": ""},
            **extra,
        }
    )


def test_summary_row_reads_what_the_engine_has_and_nulls_the_rest() -> None:
    spec = SweepSpec(workload="w.parquet", model="tiny-hybrid", slos=("p95_itl<=5ms",))
    point = Point(1.0, "marconi", 2.0, 0)
    old = summary_row(spec, point, _summary())
    assert old["ttft_p95_ms"] == pytest.approx(200.0) and old["ttft_p90_ms"] is None
    assert old["itl_p95_ms"] is None and old["e2e_p99_ms"] == pytest.approx(300.0)
    assert old["verdict"] == TOO_SHORT and "no steady-state verdict" in old["verdict_reason"]
    assert old["preempted_requests"] is None and old["peak_running"] is None
    assert old["binding"] == DECODE  # the ITL target has no value: a decode target fails
    p90 = {"mean": 0.1, "p5": 0.01, "p50": 0.05, "p90": 0.15, "p95": 0.2, "p99": 0.3}
    new = summary_row(
        spec,
        point,
        _summary(
            ttft_s=p90,
            itl_s={**p90, "p95": 0.004},
            preemption={"preempted_requests": 3, "preemptions": 3, "recomputed_tokens": 0},
            replicas=[
                {"pool": {"bytes": 100, "peak_running_bytes": 95, "peak_running_requests": 7}},
                {"pool": {"bytes": 100, "peak_running_bytes": 50, "peak_running_requests": 9}},
            ],
            steady_state={
                "verdict": "stable",
                "reason": "arrivals and completions agree",
                "window_s": [1.0, 9.0],
                "requests": 18,
                **dict.fromkeys(("ttft_slope", "ttft_slope_ci", "ttft_first_s", "ttft_last_s")),
                "arrival_rate_rps": 2.0,
                "completion_rate_rps": 1.98,
            },
        ),
    )
    assert new["ttft_p90_ms"] == pytest.approx(150.0) and new["itl_p95_ms"] == pytest.approx(4.0)
    assert (new["verdict"], new["completion_rate_rps"]) == (STABLE, 1.98)
    assert (new["preempted_requests"], new["peak_running"], new["max_running"]) == (3, 9, 256)
    assert new["running_pool_peak"] == pytest.approx(0.95)
    assert new["binding"] is None  # meets its one target, stable
    assert spec.key(point) == SweepSpec("w.parquet", "tiny-hybrid").key(point)  # no SLOs in it


# --- progress in points ---------------------------------------------------------------------


def test_progress_count_and_percentage_agree() -> None:
    assert progress_counts(5.97, 6) == (5, 99)  # was "5/6 (100%)"
    assert progress_counts(6 - 1e-12, 6) == (6, 100)  # a float sum just short of the total
    assert progress_counts(7.0, 6) == (6, 100)
    assert progress_counts(0.0, 6) == (0, 0)


def test_progress_after_a_point_is_stored_is_dropped() -> None:
    said: list[float] = []
    shares = PointProgress(said.append)
    a, b = Point(1.0, "marconi", None, 0), Point(2.0, "marconi", None, 0)
    shares.partial(a, 0.5)
    shares.partial(a, 0.7)  # capped at 0.95 while running
    shares.done(a)
    shares.partial(a, 0.3)  # a worker's last message, relayed after its row: not counted
    shares.partial(b, 0.2)
    assert math.fsum(said) == pytest.approx(1.2)
    shares.done(b)
    assert math.fsum(said) == pytest.approx(2.0)


def test_recommendation_keeps_its_positional_fields() -> None:
    r = Recommendation("marconi", 1.0, 20.0, 300.0, 2, 2)
    assert (r.meets, r.cache_gb_per_gpu, r.headroom) == (True, 10.0, None)
