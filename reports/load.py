"""Behaviour under load: the knee of P95 TTFT vs session rate and the maximum sustainable rate.

Both need two or more swept session rates and are computed per (policy, cache
size) on the seed-aggregated table of :func:`reports.analysis.aggregate`.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from reports.analysis import Slo

# Knee rule: the first swept rate after which P95 TTFT grows more than KNEE_ELASTICITY
# times faster than the load in relative terms, i.e. ln(p2/p1) / ln(r2/r1) > 2 on a
# segment between consecutive swept rates. A relative (log-log) slope is used because
# it does not depend on the unit of the rate: "2x per unit rate" would call the same
# curve a knee or not depending on sessions/s vs sessions/min.
KNEE_ELASTICITY = 2.0
# Two policies' sustainable rates tie when their seed intervals overlap; with
# one seed (no interval) when they are within this fraction of the larger. 5%
# is a judgement call: single-seed Poisson runs of a few hundred sessions move
# the interpolated rate by a few percent from seed to seed.
TIE_FRACTION = 0.05


def knee(curve: list[tuple[float, float]]) -> float | None:
    """The knee rate of ``(rate, p95_ms)`` points (any order); None if there is none."""
    pts = sorted((r, v) for r, v in curve if v is not None and v > 0 and r > 0)
    for (r1, v1), (r2, v2) in itertools.pairwise(pts):
        if r2 > r1 and math.log(v2 / v1) / math.log(r2 / r1) > KNEE_ELASTICITY:
            return r1
    return None


@dataclass(frozen=True)
class Sustainable:
    """The largest load meeting the SLO for one policy at one cache size."""

    policy: str
    cache_gb: float
    rate: float | None  # None: even the smallest swept rate misses the SLO
    bound: str  # "interpolated", "at least" (every swept rate passes) or "below"
    knee: float | None
    # The rate with the SLO metric at the ends of its 95% seed interval (None with one seed).
    rate_low: float | None = None
    rate_high: float | None = None

    def label(self) -> str:
        if self.rate is None:
            return "below the smallest swept rate"
        prefix = ">= " if self.bound == "at least" else "~" if self.bound == "interpolated" else ""
        return f"{prefix}{self.rate:.3g} sessions/s"


def max_sustainable_rate(
    curve: list[tuple[float, float | None]], threshold: float
) -> tuple[float | None, str]:
    """Largest rate meeting ``value <= threshold``, with how it was obtained.

    Walk the rates upwards to the first failing one (a null value, i.e. no
    measured request, fails). If it is the first rate: (None, "below"). If
    none fails: (largest rate, "at least"). Otherwise interpolate linearly
    between the last passing and the first failing rate to the SLO crossing.
    A pass after a failure (noise) is ignored: the first failure is the limit.
    """
    pts = sorted(curve, key=lambda p: p[0])
    if not pts:
        return None, "below"
    for i, (rate, value) in enumerate(pts):
        if value is not None and value <= threshold:
            continue
        if i == 0:
            return None, "below"
        r0, v0 = pts[i - 1]
        assert v0 is not None
        if value is None or value == v0:
            return r0, "interpolated"
        return r0 + (threshold - v0) / (value - v0) * (rate - r0), "interpolated"
    return pts[-1][0], "at least"


def sustainable(agg: list[dict[str, Any]], slo: Slo) -> list[Sustainable]:
    """Per (policy, cache): the max sustainable rate under ``slo`` and the P95 TTFT knee.

    Empty unless two or more session rates were swept.
    """
    by: dict[tuple[str, float], list[dict[str, Any]]] = defaultdict(list)
    for a in agg:
        if a["session_rate"] is not None:
            by[(a["policy"], a["cache_gb"])].append(a)
    out = []
    for (policy, cache), cells in by.items():
        if len(cells) < 2:
            continue
        rate, bound = max_sustainable_rate(
            [(c["session_rate"], c[slo.column]) for c in cells], slo.threshold_ms
        )
        k = knee([(c["session_rate"], c["ttft_p95_ms"]) for c in cells])
        low = high = None
        cis = [c[f"{slo.column}_ci"] for c in cells if c.get(f"{slo.column}_ci") is not None]
        if len(cis) == len(cells):
            low, high = _shifted_rate(cells, cis, slo, +1.0), _shifted_rate(cells, cis, slo, -1.0)
        out.append(Sustainable(policy, cache, rate, bound, k, low, high))
    out.sort(key=lambda s: (s.cache_gb, s.policy))
    return out


def _shifted_rate(
    cells: list[dict[str, Any]], cis: list[float], slo: Slo, sign: float
) -> float | None:
    """The sustainable rate with each cell's SLO metric moved ``sign`` x its seed interval."""
    curve = [
        (c["session_rate"], None if c[slo.column] is None else c[slo.column] + sign * ci)
        for c, ci in zip(cells, cis, strict=True)
    ]
    return max_sustainable_rate(curve, slo.threshold_ms)[0]


def load_verdict(items: list[Sustainable], slo: Slo) -> list[str]:
    """One sentence at the largest cache: each policy's sustainable rate; the best first."""
    if not items:
        return []
    top = max(s.cache_gb for s in items)
    at = sorted(
        (s for s in items if s.cache_gb == top),
        key=lambda s: -(s.rate if s.rate is not None else -1.0),
    )
    parts = []
    for s in at:
        text = f"{s.policy} {s.label()}"
        if s.knee is not None:
            text += f" (P95 TTFT knee at {s.knee:g} sessions/s)"
        parts.append(text)
    line = (
        f"Under {slo} at {top:g} GB of cache, the maximum sustainable load is: "
        + "; ".join(parts)
        + "."
    )
    best = at[0]
    if best.rate is not None:
        tied = [s for s in at[1:] if _tied(best, s)]
        if tied:
            names = ", ".join(s.policy for s in [best, *tied])
            how = (
                "their seed intervals overlap"
                if best.rate_low is not None
                else f"within {TIE_FRACTION:.0%}, one seed"
            )
            line += f" {names} tie ({how}): none sustains clearly more load."
        else:
            line += f" {best.policy} sustains the most load."
    return [line]


def _tied(best: Sustainable, other: Sustainable) -> bool:
    """Whether ``other`` cannot be told apart from ``best`` (rules at ``TIE_FRACTION``)."""
    if other.rate is None or best.rate is None:
        return False
    if best.rate_low is not None and other.rate_high is not None:
        return other.rate_high >= best.rate_low
    return best.rate - other.rate <= TIE_FRACTION * best.rate


LOAD_HEAD = ["policy", "cache (GB)", "max sustainable rate", "P95 TTFT knee (sessions/s)"]


def load_rows(items: list[Sustainable]) -> list[list[str]]:
    return [
        [
            s.policy,
            f"{s.cache_gb:g}",
            s.label(),
            "none in the sweep" if s.knee is None else f"{s.knee:g}",
        ]
        for s in items
    ]
