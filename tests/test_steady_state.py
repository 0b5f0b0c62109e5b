"""Steady-state verdicts (twin.steady_state) with known answers, alone and in the engine."""

from __future__ import annotations

import numpy as np
import pytest
from test_engine_helpers import ConstantPricer, lindley, run, single_turns

from twin.steady_state import MIN_REQUESTS, OVERLOADED, STABLE, TOO_SHORT, _covered, judge


def _queue(rho: float, n: int, seed: int, deterministic: bool = False):
    """A FCFS single server with mean service 1 s at utilisation ``rho``: arrivals, TTFTs."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / rho, n))
    service = np.ones(n) if deterministic else rng.exponential(1.0, n)
    ttft = lindley(arrivals, service) + service
    return arrivals, ttft


@pytest.mark.parametrize("deterministic", [False, True], ids=["M/M/1", "M/D/1"])
@pytest.mark.parametrize(("rho", "want"), [(0.5, STABLE), (0.8, STABLE), (1.5, OVERLOADED)])
def test_known_queues(rho: float, want: str, deterministic: bool) -> None:
    for seed in range(5):
        arrivals, ttft = _queue(rho, 2000, seed, deterministic)
        v = judge(arrivals, ttft, arrivals + ttft, (0.0, float(arrivals[-1])))
        assert v.verdict == want, (seed, v)
        assert v.requests == 2000


def test_an_overloaded_queue_slopes_at_its_excess_load() -> None:
    # Offered 2x what it serves, a FCFS queue's wait grows at rho - 1 = 1 s per s.
    arrivals, ttft = _queue(2.0, 4000, 1, deterministic=True)
    v = judge(arrivals, ttft, arrivals + ttft, (0.0, float(arrivals[-1])))
    assert v.verdict == OVERLOADED
    assert v.ttft_slope == pytest.approx(1.0, abs=0.05)
    assert v.completion_rate_rps < v.arrival_rate_rps


def test_few_requests_or_no_span_are_too_short() -> None:
    arrivals, ttft = _queue(0.5, MIN_REQUESTS - 1, 0)
    v = judge(arrivals, ttft, arrivals + ttft, (0.0, float(arrivals[-1])))
    assert v.verdict == TOO_SHORT and "at least" in v.reason
    at_once = np.zeros(500)
    assert judge(at_once, at_once + 1, at_once + 2, (0.0, 0.0)).verdict == TOO_SHORT


def test_a_load_still_ramping_up_is_not_called_stable() -> None:
    # Arrivals whose rate triples across the window, served at once (flat TTFT): the
    # latency says nothing yet about the load to come.
    rng = np.random.default_rng(3)
    t = np.sort(np.sqrt(rng.uniform(0, 1, 3000))) * 100.0  # density rising linearly
    v = judge(t, np.full(t.size, 0.01), t + 0.02, (0.0, 100.0))
    assert v.verdict == TOO_SHORT and "still rising" in v.reason
    flat = np.sort(rng.uniform(0, 100, 3000))
    assert judge(flat, np.full(3000, 0.01), flat + 0.02, (0.0, 100.0)).verdict == STABLE


def test_requests_outside_the_window_are_ignored() -> None:
    arrivals, ttft = _queue(0.5, 2000, 2)
    end = float(arrivals[1000])
    v = judge(arrivals, ttft, arrivals + ttft, (0.0, end))
    assert v.requests == 1001
    assert v.window_s == (0.0, end)


@pytest.mark.parametrize(("rate", "want"), [(0.5, STABLE), (1.5, OVERLOADED)])
def test_the_engine_md1_verdicts(tmp_path, rate: float, want: str) -> None:
    # One request per 1-second step (max_running 1, one output token): M/D/1 in the engine.
    path = single_turns(tmp_path / "w.parquet", [None] * 1500)
    summary, _ = run(
        path, ConstantPricer(1.0), max_running=1, policy="vanilla", session_rate=rate, seed=3
    )
    steady = summary["steady_state"]
    assert steady["verdict"] == want, steady
    assert steady["window_s"][0] == 0.0  # no warm-up: from the first arrival (t = 0)
    if want == OVERLOADED:
        assert steady["ttft_slope"] == pytest.approx(rate - 1, abs=0.05)


def test_utilisation_is_measured_after_the_warm_up(tmp_path) -> None:
    # Idle for 50 s, then one 0.5-second request a second: half busy at steady state.
    arrivals = [0.0] + [50.0 + k for k in range(51)]
    path = single_turns(tmp_path / "w.parquet", arrivals)
    pricer = ConstantPricer(0.5)
    cold, _ = run(path, pricer, max_running=1, policy="vanilla")
    warm, _ = run(path, pricer, max_running=1, policy="vanilla", warmup_s=50.0)
    assert warm["utilisation"]["mean"] == pytest.approx(0.5, abs=1e-9)
    # From the first arrival: 51 half-second steps end within the 100-second window.
    assert cold["utilisation"]["mean"] == pytest.approx(51 * 0.5 / 100, abs=1e-9)


def test_waiting_share_is_the_union_of_the_waits() -> None:
    start = np.array([0.0, 1.0, 5.0, 9.5])
    end = np.array([2.0, 3.0, 5.0, 12.0])  # the third never waited
    assert _covered(start, end, 0.0, 10.0) == pytest.approx(3.0 + 0.5)
    arrivals, ttft = _queue(1.5, 2000, 0, deterministic=True)
    waits = ttft - 1.0
    v = judge(arrivals, ttft, arrivals + ttft, (0.0, float(arrivals[-1])), waits)
    assert v.waiting_share == pytest.approx(1.0, abs=0.02)  # overloaded: always a queue
    arrivals, ttft = _queue(0.2, 2000, 0, deterministic=True)
    v = judge(arrivals, ttft, arrivals + ttft, (0.0, float(arrivals[-1])), ttft - 1.0)
    assert v.waiting_share < 0.05
