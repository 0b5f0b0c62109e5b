"""SLO lists and goodput (twin.slo)."""

from __future__ import annotations

import numpy as np
import pytest

from twin.errors import TwinError
from twin.slo import Slo, good_requests, parse_slo, parse_slos


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("p95_ttft<=500ms", Slo(95, "ttft", 500.0)),
        ("P99_TPOT < 0.05s", Slo(99, "tpot", 50.0)),
        ("p50_itl<=20ms", Slo(50, "itl", 20.0)),
        ("p90_e2e<=12.5s", Slo(90, "e2e", 12500.0)),
    ],
)
def test_parse(text: str, want: Slo) -> None:
    slo = parse_slo(text)
    assert slo == want
    assert parse_slo(slo.text) == slo  # the canonical spelling parses back


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("p95_latency<=5ms", "METRIC one of ttft, tpot, itl, e2e"),
        ("p0_ttft<=5ms", "1 to 99"),
        ("p95_ttft<=0ms", "positive"),
        ("p95_ttft", "expected pNN_METRIC"),
    ],
)
def test_parse_errors_name_the_flag(text: str, says: str) -> None:
    with pytest.raises(TwinError, match="--slo") as err:
        parse_slo(text)
    assert says in str(err.value)


def test_a_list_keeps_every_target_and_refuses_a_repeat() -> None:
    slos = parse_slos(["p95_ttft<=500ms", "p95_tpot<=50ms", "p99_ttft<=2s"])
    assert [s.column for s in slos] == ["ttft_p95_ms", "tpot_p95_ms", "ttft_p99_ms"]
    with pytest.raises(TwinError, match="already has a target"):
        parse_slos(["p95_ttft<=500ms", "p95_ttft<=400ms"])


def test_good_requests_need_every_per_request_threshold() -> None:
    slos = parse_slos(["p95_ttft<=100ms", "p95_tpot<=10ms", "p95_itl<=1ms"])
    ttft = np.array([0.05, 0.2, 0.05, 0.05])
    tpot = np.array([0.005, 0.005, 0.02, np.nan])  # the last has one output token
    e2e = np.array([1.0, 1.0, 1.0, 1.0])
    # ITL is per gap, not per request: it does not enter the per-request test.
    assert good_requests(slos, ttft, tpot, e2e).tolist() == [True, False, False, True]
