"""Is a run at steady state? The verdict every capacity statement rests on.

A fixed workload pushed through an overloaded server still ends, and its
latencies look finite: they only measure how long the run was. What tells an
overloaded run apart is the trend. In a FCFS queue offered rho = lambda / mu
times the work it can serve (rho > 1), a request arriving t seconds into the
overload finds lambda t / mu seconds of work arrived and t done, and waits
about (rho - 1) t: time to first token grows *linearly with the arrival time*,
at a dimensionless slope equal to the excess of the load over capacity. In a
stable queue it has no trend.

:func:`judge` measures that slope over the measured window (requests arriving
from the end of the warm-up to the end of the arrivals). Requests are cut
into :data:`BATCHES` batches by arrival time (batch means, the standard
remedy for autocorrelated queue output; Law and Kelton, *Simulation Modeling
and Analysis*, ch. 9.5.3); the batch means of TTFT are regressed on the
batches' mean arrival times (``scipy.stats.linregress``), with a 95%
t-interval on the slope:

- ``overloaded``: the slope is above :data:`MIN_SLOPE` beyond its interval
  *and* TTFT grew over the window by more than its level in the first batch
  (it at least doubled): a trend that is both significant and material;
- ``stable``: the interval's upper end is at most :data:`MIN_SLOPE`, or even
  that upper slope would add less than the first batch's level over the window;
- ``too short to tell``: neither (a trend the run is too short to confirm or
  rule out), or fewer than :data:`MIN_REQUESTS` requests in the window.

The offered load must itself be steady for ``stable``: multi-turn sessions
accumulate (a chat session lasts minutes, each sending a turn every few
seconds), so the request rate climbs for about one session lifetime after
the first start. While the batch arrival counts still rise (by more than
:data:`MAX_RAMP` from the first batch to the last, beyond their interval) a
flat TTFT says nothing about the load to come, and the run is ``too short to
tell``. ``overloaded`` needs no such check: the load only rises during the
ramp, so a queue that grows before its end grows after it too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

STABLE = "stable"
OVERLOADED = "overloaded"
TOO_SHORT = "too short to tell"
VERDICTS = (STABLE, OVERLOADED, TOO_SHORT)

# Batches of the measured window (10 to 30 is the usual range for batch means: Law and
# Kelton ch. 9.5.3; 10 keeps a few hundred requests per batch on a 2,000-request run).
BATCHES = 10
# Fewest non-empty batches for a regression with a usable interval (t with 3 d.o.f.).
MIN_BATCHES = 5
# Fewest measured requests in the window for any verdict but "too short to tell".
MIN_REQUESTS = 100
# TTFT slope (seconds of TTFT per second of arrival time) that counts as a trend: a FCFS
# queue offered 1% more work than it can serve grows its wait at rho - 1 = 0.01 s/s.
MIN_SLOPE = 0.01
# Rise of the request arrival rate over the window (fitted last batch over fitted first)
# beyond which the load is still ramping up. Poisson counts of a few hundred per batch
# move by under 10% (sd 1/sqrt(n)); 25% is well clear of that noise.
MAX_RAMP = 0.25


@dataclass(frozen=True)
class SteadyState:
    """The verdict on one run, with the numbers it came from."""

    verdict: str  # one of VERDICTS
    reason: str  # one sentence: why
    window_s: tuple[float, float]  # arrivals measured: [warm-up end, end of arrivals]
    requests: int  # measured requests arriving in the window
    ttft_slope: float | None  # seconds of TTFT per second of arrival time
    ttft_slope_ci: float | None  # half-width of its 95% interval
    ttft_first_s: float | None  # mean TTFT of the first batch
    ttft_last_s: float | None  # mean TTFT of the last batch
    arrival_rate_rps: float | None  # measured arrivals in the window per second
    completion_rate_rps: float | None  # their completions within the window per second
    # Share of the window in which some measured request waited to be admitted: the
    # headroom signal of continuous batching, where the GPU is busy whenever anything
    # decodes (busy time reads near 100% long before the queue builds).
    waiting_share: float | None = None

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["window_s"] = list(self.window_s)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SteadyState:
        """The inverse of :meth:`to_dict` (a stored summary's ``steady_state``)."""
        names = {f.name for f in fields(cls)}
        kept = {k: v for k, v in d.items() if k in names}
        return cls(**{**kept, "window_s": tuple(d["window_s"])})


def judge(
    arrival_s: np.ndarray,
    ttft_s: np.ndarray,
    completed_s: np.ndarray,
    window_s: tuple[float, float],
    queue_s: np.ndarray | None = None,
) -> SteadyState:
    """The steady-state verdict on requests arriving in ``window_s`` (module docstring).

    The arrays hold one value per measured request (any order); requests
    arriving outside the window are ignored. ``queue_s`` (each request's wait
    for admission) gives :attr:`SteadyState.waiting_share`.
    """
    t0, t1 = window_s
    arrival = np.asarray(arrival_s, np.float64)
    inside = (arrival >= t0) & (arrival <= t1)
    arrival = arrival[inside]
    ttft = np.asarray(ttft_s, np.float64)[inside]
    completed = np.asarray(completed_s, np.float64)[inside]
    n = int(arrival.size)
    span = t1 - t0
    rates: tuple[float | None, float | None, float | None] = (None, None, None)
    if span > 0 and n:
        waiting = None
        if queue_s is not None:
            waits = np.asarray(queue_s, np.float64)[inside]
            waiting = _covered(arrival, arrival + waits, t0, t1) / span
        rates = (n / span, int((completed <= t1).sum()) / span, waiting)

    def verdict(
        name: str,
        reason: str,
        slope: float | None = None,
        ci: float | None = None,
        first: float | None = None,
        last: float | None = None,
    ) -> SteadyState:
        return SteadyState(name, reason, (t0, t1), n, slope, ci, first, last, *rates)

    if span <= 0:
        return verdict(TOO_SHORT, "the arrivals span no time (every request arrives at once)")
    if n < MIN_REQUESTS:
        return verdict(
            TOO_SHORT,
            f"{n} measured request(s) arrive in the window; at least {MIN_REQUESTS} are needed "
            "(a longer --duration or a shorter --warmup-s)",
        )
    edges = np.linspace(t0, t1, BATCHES + 1)
    batch = np.clip(np.searchsorted(edges, arrival, side="right") - 1, 0, BATCHES - 1)
    counts = np.bincount(batch, minlength=BATCHES)
    used = counts > 0
    if int(used.sum()) < MIN_BATCHES:
        return verdict(
            TOO_SHORT, f"arrivals fill only {int(used.sum())} of {BATCHES} batches of the window"
        )
    centre = np.bincount(batch, arrival, BATCHES)[used] / counts[used]
    mean = np.bincount(batch, ttft, BATCHES)[used] / counts[used]
    from scipy import stats  # late: scipy.stats costs every command ~0.4 s to import

    fit = stats.linregress(centre, mean)
    dof = len(mean) - 2
    ci = float(stats.t.ppf(0.975, dof) * fit.stderr)
    slope = float(fit.slope)
    first, last = float(mean[0]), float(mean[-1])
    growth, growth_high = slope * span, (slope + ci) * span
    args = (slope, ci, first, last)
    if slope - ci > MIN_SLOPE and growth > first:
        return verdict(
            OVERLOADED,
            f"TTFT grows with arrival time at {slope:.3g} s/s (95% interval +-{ci:.2g}) and "
            f"went from {_ms(first)} to {_ms(last)} over the window: requests arrive faster "
            "than they are served",
            *args,
        )
    ramp = _ramp(np.arange(BATCHES)[used], counts[used].astype(np.float64), stats)
    if ramp is not None:
        return verdict(
            TOO_SHORT,
            f"the request rate is still rising over the window ({ramp:+.0%} from its first "
            "batch to its last: sessions are still accumulating), so the load has not "
            "settled: run longer (--duration) or leave the ramp out (--warmup-s)",
            *args,
        )
    if slope + ci <= MIN_SLOPE or growth_high <= first:
        return verdict(
            STABLE,
            f"TTFT shows no material trend over {n:,} requests (slope {slope:.2g} s/s, 95% "
            f"interval +-{ci:.2g})",
            *args,
        )
    return verdict(
        TOO_SHORT,
        f"TTFT may be trending (slope {slope:.3g} s/s, 95% interval +-{ci:.2g}) but the window "
        "is too short to tell: run longer (--duration)",
        *args,
    )


def _ramp(batch: np.ndarray, counts: np.ndarray, stats: Any) -> float | None:
    """The fitted rise of the arrival counts from the first batch to the last, when it
    is significant and above :data:`MAX_RAMP`; None when the load is steady."""
    fit = stats.linregress(batch, counts)
    ci = float(stats.t.ppf(0.975, len(counts) - 2) * fit.stderr)
    start = float(fit.intercept + fit.slope * batch[0])
    rise = float(fit.slope) * float(batch[-1] - batch[0])
    if start <= 0 or float(fit.slope) - ci <= 0 or rise <= MAX_RAMP * start:
        return None
    return rise / start


def _covered(start: np.ndarray, end: np.ndarray, t0: float, t1: float) -> float:
    """Seconds of [t0, t1] covered by the union of the intervals [start, end]."""
    keep = end > start
    order = np.argsort(start[keep], kind="stable")
    lo, hi = np.clip(start[keep][order], t0, t1), np.clip(end[keep][order], t0, t1)
    if not lo.size:
        return 0.0
    # Running maximum of the ends: an interval adds only what sticks out past it.
    reach = np.maximum.accumulate(hi)
    prior = np.concatenate(([lo[0]], reach[:-1]))
    return float(np.maximum(hi - np.maximum(lo, prior), 0.0).sum())


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms" if math.isfinite(seconds) else "-"
