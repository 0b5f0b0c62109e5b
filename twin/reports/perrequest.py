"""Compact per-request views of one sweep point: the TTFT CDF and hit rate by input length.

A sweep point can see millions of requests, and results.parquet keeps one row
per point, so each point stores a fixed-size digest instead of its records:
101 TTFT quantiles (0..100 %) and, per log2 input-length bin, the input and
hit token totals. Token totals (not per-bin rates) are stored so seeds can be
pooled exactly: the pooled rate is sum(hit) / sum(input), not a mean of rates.

Given the sweep's SLOs, the digest also counts the *good* requests, those
meeting every per-request threshold (:func:`twin.slo.good_requests`), for the
``goodput_rps`` column: it sees every record, which the summary does not keep.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from twin.metrics import RequestRecord
from twin.slo import Slo, good_requests

QUANTILES = tuple(range(101))  # percent; 101 floats per point
# Upper edges (exclusive) of the input-length bins; the last bin is open-ended.
BIN_EDGES = (1024, 2048, 4096, 8192, 16384, 32768)
BIN_LABELS = ("<1K", "1-2K", "2-4K", "4-8K", "8-16K", "16-32K", ">=32K")

CDF_COLUMN = "ttft_quantiles_ms"
BIN_INPUT_COLUMN = "bin_input_tokens"
BIN_HIT_COLUMN = "bin_hit_tokens"
GOODPUT_COLUMN = "goodput_rps"
GOODPUT_SLO_COLUMN = "goodput_slo"


def slo_key(slos: Sequence[Slo]) -> str:
    """The SLO list a goodput was counted for: canonical texts joined by ``;``."""
    return ";".join(s.text for s in slos)


def length_bin(input_tokens: int) -> int:
    """Index into BIN_LABELS of a request with ``input_tokens`` prompt tokens."""
    for i, edge in enumerate(BIN_EDGES):
        if input_tokens < edge:
            return i
    return len(BIN_EDGES)


class RequestDigest:
    """Accumulates the digest from ``simulate(on_record=...)``; same filter as the summary.

    Warm-up requests (arrival before ``warmup_s``) and rejected ones are left
    out, as in the engine's summary, so the CDF's P95 matches ``ttft_p95_ms``
    and the good requests are counted among the measured ones.
    """

    def __init__(self, warmup_s: float = 0.0, slos: Sequence[Slo] = ()) -> None:
        self.warmup_s = warmup_s
        self.slos = tuple(slos)
        self.ttft_s = array("d")  # 8 bytes a request; the digest itself is fixed-size
        # TPOT and end to end per request, kept only when there are SLOs to count goodput.
        self.tpot_s = array("d")
        self.e2e_s = array("d")
        self.bin_input = [0] * len(BIN_LABELS)
        self.bin_hit = [0] * len(BIN_LABELS)

    def add(self, rec: RequestRecord) -> None:
        if rec.arrival_s < self.warmup_s or rec.rejected:
            return
        self.ttft_s.append(rec.first_token_s - rec.arrival_s)
        if self.slos:
            _, tpot, e2e, _, _ = rec.latencies()
            self.tpot_s.append(tpot)
            self.e2e_s.append(e2e)
        b = length_bin(rec.input_tokens)
        self.bin_input[b] += rec.input_tokens
        self.bin_hit[b] += rec.hit_tokens

    def columns(self) -> dict[str, list[float] | None]:
        """The three list columns of a results row (quantiles None with no measured request)."""
        x = np.frombuffer(self.ttft_s, np.float64)
        x = x[~np.isnan(x)]
        quantiles = [float(v) for v in 1e3 * np.percentile(x, QUANTILES)] if x.size else None
        return {
            CDF_COLUMN: quantiles,
            BIN_INPUT_COLUMN: [float(v) for v in self.bin_input],
            BIN_HIT_COLUMN: [float(v) for v in self.bin_hit],
        }

    def good(self) -> int:
        """Measured requests meeting every per-request threshold of the SLOs."""
        arrays = (np.frombuffer(a, np.float64) for a in (self.ttft_s, self.tpot_s, self.e2e_s))
        return int(np.count_nonzero(good_requests(self.slos, *arrays)))

    def goodput(self, window_s: float) -> dict[str, float | str | None]:
        """The goodput columns: good requests per second of the measured window (the
        summary's throughput window) and the SLO list they were counted for; both
        None without SLOs or without a window."""
        if not self.slos:
            return {GOODPUT_COLUMN: None, GOODPUT_SLO_COLUMN: None}
        rate = self.good() / window_s if window_s > 0 else None
        return {GOODPUT_COLUMN: rate, GOODPUT_SLO_COLUMN: slo_key(self.slos)}


def digest(
    records: Iterable[RequestRecord], warmup_s: float = 0.0
) -> dict[str, list[float] | None]:
    """The digest columns of a record list (tests, and anyone holding records)."""
    d = RequestDigest(warmup_s)
    for rec in records:
        d.add(rec)
    return d.columns()


def _cell(
    rows: list[dict[str, Any]], policy: str, rate: float | None, cache: float
) -> list[dict[str, Any]]:
    return [
        r
        for r in rows
        if r["policy"] == policy and r["session_rate"] == rate and r["cache_gb"] == cache
    ]


def pooled_cdf(
    rows: list[dict[str, Any]], policy: str, rate: float | None, cache: float
) -> list[float] | None:
    """Mean across seeds of each TTFT quantile (quantile averaging keeps the result a
    valid, non-decreasing quantile function); None if no seed row carries the column
    (results written before it existed, or no measured request)."""
    qs = [r[CDF_COLUMN] for r in _cell(rows, policy, rate, cache) if r.get(CDF_COLUMN)]
    if not qs:
        return None
    return [float(v) for v in np.mean(np.asarray(qs, dtype=float), axis=0)]


def pooled_bin_hit_rates(
    rows: list[dict[str, Any]], policy: str, rate: float | None, cache: float
) -> list[float] | None:
    """Hit tokens / input tokens per bin, pooled over seeds; NaN for an empty bin,
    None if no seed row carries the columns."""
    cells = [
        r
        for r in _cell(rows, policy, rate, cache)
        if r.get(BIN_INPUT_COLUMN) and r.get(BIN_HIT_COLUMN)
    ]
    if not cells:
        return None
    inp = np.sum([r[BIN_INPUT_COLUMN] for r in cells], axis=0)
    hit = np.sum([r[BIN_HIT_COLUMN] for r in cells], axis=0)
    return [float(h / i) if i > 0 else math.nan for h, i in zip(hit, inp, strict=True)]
