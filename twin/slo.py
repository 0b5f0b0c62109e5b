"""Service-level objectives: latency targets on percentiles, and goodput.

One SLO is ``pNN_METRIC <= VALUE(ms|s)`` (``p95_ttft<=500ms``): the NN-th
percentile of a latency over the measured requests must not exceed the value.
The metrics are the ones serving benchmarks report (``vllm bench serve``,
genai-perf/AIPerf):

- ``ttft``: time to first token, per request;
- ``tpot``: time per output token after the first, per request (its mean gap);
- ``itl``: inter-token latency, per gap between two output tokens of any request;
- ``e2e``: end-to-end latency, per request.

A list of SLOs is met when every one is. *Goodput* is the rate of requests
that meet every per-request threshold at once (TTFT, TPOT, end to end; ITL is
a per-gap distribution, not a per-request value), as ``vllm bench serve
--goodput`` counts it (vLLM 0.11, ``benchmarks/benchmark_serving.py``: a request
is good when each of its metrics is within its target); DistServe (Zhong et
al., OSDI 2024) calls the largest rate at which the SLOs hold the goodput, which
``twin report capacity`` finds by sweeping the rate.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from twin.errors import TwinError

METRICS = ("ttft", "tpot", "itl", "e2e")
# Metrics with one value per request (goodput's per-request test).
PER_REQUEST = ("ttft", "tpot", "e2e")
LABELS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "E2E"}

_SLO = re.compile(
    r"^\s*p(\d{1,2})_(ttft|tpot|itl|e2e)\s*(<=|<)\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s)\s*$",
    re.IGNORECASE,
)
EXAMPLE = "e.g. 'p95_ttft<=500ms', 'p99_tpot<=50ms', 'p95_itl<=80ms' or 'p99_e2e<=20s'"


@dataclass(frozen=True)
class Slo:
    """A latency target on one percentile: ``percentile-th metric <= threshold_ms``."""

    percentile: int
    metric: str  # one of METRICS
    threshold_ms: float

    @property
    def column(self) -> str:
        """The results-table column holding this percentile (``ttft_p95_ms``)."""
        return f"{self.metric}_p{self.percentile}_ms"

    @property
    def summary_key(self) -> str:
        """The summary's latency dict this percentile comes from (``ttft_s``)."""
        return f"{self.metric}_s"

    @property
    def text(self) -> str:
        """The canonical spelling, as the flag takes it (``p95_ttft<=500ms``)."""
        return f"p{self.percentile}_{self.metric}<={self.threshold_ms:g}ms"

    def met_by(self, value_ms: float | None) -> bool:
        """Whether a measured percentile meets the target (no value never does)."""
        return value_ms is not None and value_ms <= self.threshold_ms

    @property
    def label(self) -> str:
        """``P95 TTFT``: the percentile and metric, without the threshold."""
        return f"P{self.percentile} {LABELS[self.metric]}"

    def __str__(self) -> str:
        return f"{self.label} <= {self.threshold_ms:g} ms"


def parse_slo(text: str, flag: str = "--slo") -> Slo:
    """Parse ``p95_ttft<=500ms`` (ms or s); one clear error naming ``flag`` otherwise."""
    m = _SLO.match(text or "")
    if m is None:
        raise TwinError(
            f"{flag} {text!r}: expected pNN_METRIC<=VALUE(ms|s) with METRIC one of "
            f"{', '.join(METRICS)}, {EXAMPLE}"
        )
    pct, metric, value, unit = int(m[1]), m[2].lower(), float(m[4]), m[5].lower()
    if not 1 <= pct <= 99:
        raise TwinError(f"{flag} {text!r}: the percentile must be 1 to 99")
    threshold = value * (1e3 if unit == "s" else 1.0)
    if not (math.isfinite(threshold) and threshold > 0):
        raise TwinError(f"{flag} {text!r}: the threshold must be a positive number")
    return Slo(pct, metric, threshold)


def parse_slos(texts: Iterable[str], flag: str = "--slo") -> tuple[Slo, ...]:
    """Every ``--slo`` given, in order; the same percentile of a metric twice is refused
    (two thresholds for one number would silently keep one of them)."""
    out: list[Slo] = []
    for text in texts:
        slo = parse_slo(text, flag)
        for seen in out:
            if (seen.metric, seen.percentile) == (slo.metric, slo.percentile):
                raise TwinError(
                    f"{flag} {text!r}: {slo.label} already has a "
                    f"target ({seen.text}); give each percentile once"
                )
        out.append(slo)
    return tuple(out)


def good_requests(
    slos: Sequence[Slo], ttft_s: np.ndarray, tpot_s: np.ndarray, e2e_s: np.ndarray
) -> np.ndarray:
    """Per request: whether it meets every per-request threshold of ``slos``.

    A request with one output token has no TPOT (NaN) and meets any TPOT target,
    as in ``vllm bench serve`` (it has no gap to be late).
    """
    values = {"ttft": ttft_s, "tpot": tpot_s, "e2e": e2e_s}
    good = np.ones(len(ttft_s), bool)
    for slo in slos:
        if slo.metric not in PER_REQUEST:
            continue
        x = values[slo.metric].astype(np.float64)
        good &= np.isnan(x) | (x * 1e3 <= slo.threshold_ms)
    return good
