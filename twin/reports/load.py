"""Behaviour under load: the knee of P95 TTFT vs session rate and the maximum sustainable rate.

Both need two or more swept session rates and are computed per (policy, cache
size) on the seed-aggregated table of :func:`reports.analysis.aggregate`. A
rate is sustained when every SLO is met *and* the steady state there is
stable: an overloaded or too-short point is a failure at its rate.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from twin.reports.analysis import Slo, slo_text
from twin.reports.verdicts import STABLE, failing, verdict_of

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
    # What ends the sustainable range: the target that fails first above ``rate`` (its
    # text, ``P95 TTFT <= 500 ms``), or ``steady state (overloaded at 4 sessions/s)``
    # where the first failing rate meets every target but is not stable; None where
    # every swept rate passes.
    binding: str | None = None

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


def sustainable(agg: list[dict[str, Any]], slos: Slo | Sequence[Slo]) -> list[Sustainable]:
    """Per (policy, cache): the max sustainable rate under every target of ``slos``
    (stable points only) and the P95 TTFT knee.

    Each target's rate is :func:`max_sustainable_rate` on its own curve with the
    points that are not stable as failures (null values); the sustainable rate is
    the smallest of them, and that target (or the steady state) binds.
    Empty unless two or more session rates were swept.
    """
    targets = (slos,) if isinstance(slos, Slo) else tuple(slos)
    by: dict[tuple[str, float], list[dict[str, Any]]] = defaultdict(list)
    for a in agg:
        if a["session_rate"] is not None:
            by[(a["policy"], a["cache_gb"])].append(a)
    out = []
    for (policy, cache), cells in by.items():
        if len(cells) < 2 or not targets:
            continue
        cells = sorted(cells, key=lambda c: c["session_rate"])
        rate, bound, binding = _limit(cells, targets)
        k = knee([(c["session_rate"], c["ttft_p95_ms"]) for c in cells])
        low = high = None
        if all(c.get(f"{s.column}_ci") is not None for c in cells for s in targets):
            # The rate with each cell's values moved up (low) or down (high) by their intervals.
            low, high = _limit(cells, targets, +1.0)[0], _limit(cells, targets, -1.0)[0]
        out.append(Sustainable(policy, cache, rate, bound, k, low, high, binding))
    out.sort(key=lambda s: (s.cache_gb, s.policy))
    return out


def _curve(
    cells: list[dict[str, Any]], slo: Slo, shift: float = 0.0
) -> list[tuple[float, float | None]]:
    """(rate, value) of one target; a point that is not stable has no value (it fails)."""
    return [
        (
            c["session_rate"],
            None
            if c.get(slo.column) is None or verdict_of(c) != STABLE
            else c[slo.column] + shift * (c.get(f"{slo.column}_ci") or 0.0),
        )
        for c in cells
    ]


def _limit(
    cells: list[dict[str, Any]], targets: tuple[Slo, ...], shift: float = 0.0
) -> tuple[float | None, str, str | None]:
    """The sustainable rate, how it was obtained, and what binds (see :class:`Sustainable`)."""
    per = [(max_sustainable_rate(_curve(cells, s, shift), s.threshold_ms), s) for s in targets]

    def lowest(x: tuple[tuple[float | None, str], Slo]) -> float:
        return -1.0 if x[0][0] is None else x[0][0]

    (rate, bound), _ = min(per, key=lowest)
    if bound == "at least":
        return rate, bound, None
    # The first failing rate (one exists unless every rate passes): the targets it
    # misses bind, the lowest rate first; if it misses none, its steady state binds.
    first = next(c for c in cells if verdict_of(c) != STABLE or failing(c, targets))
    missed = failing(first, targets)
    if not missed:
        return (
            rate,
            bound,
            (f"steady state ({verdict_of(first)} at {first['session_rate']:g} sessions/s)"),
        )
    return rate, bound, str(min((x for x in per if x[1] in missed), key=lowest)[1])


def load_verdict(items: list[Sustainable], slos: Slo | Sequence[Slo]) -> list[str]:
    """One sentence at the largest cache: each policy's sustainable rate and what binds
    it; the best first."""
    if not items:
        return []
    targets = (slos,) if isinstance(slos, Slo) else tuple(slos)
    top = max(s.cache_gb for s in items)
    at = sorted(
        (s for s in items if s.cache_gb == top),
        key=lambda s: -(s.rate if s.rate is not None else -1.0),
    )
    parts = []
    for s in at:
        text = f"{s.policy} {s.label()}"
        if s.binding is not None:
            text += f", bound by {s.binding}"
        if s.knee is not None:
            text += f" (P95 TTFT knee at {s.knee:g} sessions/s)"
        parts.append(text)
    line = (
        f"Under {slo_text(targets)} (stable points only) at {top:g} GB of cache, "
        "the maximum sustainable load is: " + "; ".join(parts) + "."
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


LOAD_HEAD = [
    "policy",
    "cache (GB)",
    "max sustainable rate",
    "bound by",
    "P95 TTFT knee (sessions/s)",
]


def load_rows(items: list[Sustainable]) -> list[list[str]]:
    return [
        [
            s.policy,
            f"{s.cache_gb:g}",
            s.label(),
            s.binding or "-",
            "none in the sweep" if s.knee is None else f"{s.knee:g}",
        ]
        for s in items
    ]
