"""The largest session rate meeting the SLOs at steady state, found by bisection.

A swept curve says only that the limit lies between two swept rates.
``twin report capacity --bisect`` narrows that bracket per (replicas, cache,
policy): it starts from the largest swept rate that meets every target with
a stable steady state below the first that does not (the same walk as
:func:`reports.load.max_sustainable_rate`), runs the geometric midpoint (load
is compared in ratios), keeps the half that still brackets the limit, and
stops when the bracket's ratio is within ``1 + tol``. Every combination steps
together, so one step is one batch of sweep points (run in parallel, stored in
``results.parquet`` like any other point: a rerun resumes).

A rate that fails is one the planner must not run at; what is returned is the
largest rate *found* to pass, and the smallest found to fail.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twin.errors import TwinError
from twin.reports.analysis import aggregate
from twin.reports.sweep import INFEASIBLE_COLUMN, Point, SweepSpec, run_sweep
from twin.reports.verdicts import meets
from twin.slo import Slo

# Significant digits of a bisected rate: keeps point keys and labels readable (a
# 5% bracket needs two; four leave room for tight tolerances).
RATE_DIGITS = 4
# Steps per combination at most (a 16x bracket reaches 5% in about 6).
MAX_STEPS = 12


@dataclass(frozen=True)
class RateBracket:
    """Where the sustainable rate of one (replicas, cache, policy) lies."""

    policy: str
    cache_gb: float
    replicas: int | None
    passes: float | None  # the largest rate found to meet every target, stable
    fails: float | None  # the smallest rate above it found not to
    steps: int  # bisection steps run

    def label(self) -> str:
        if self.passes is None:
            return f"below {self.fails:.4g} sessions/s (the smallest swept rate fails)"
        if self.fails is None:
            return f">= {self.passes:.4g} sessions/s (every swept rate passes)"
        return f"{self.passes:.4g}-{self.fails:.4g} sessions/s"


def _round(rate: float) -> float:
    return float(f"{rate:.{RATE_DIGITS}g}")


def _bracket(cells: list[dict[str, Any]], slos: Sequence[Slo]) -> tuple[float | None, float | None]:
    """(last passing rate, first failing rate) walking the rates upwards."""
    last = None
    for cell in sorted(cells, key=lambda c: c["session_rate"]):
        if not meets(cell, slos):
            return last, cell["session_rate"]
        last = cell["session_rate"]
    return last, None


def bisect_rates(
    spec: SweepSpec,
    points: list[Point],
    rows: list[dict[str, Any]],
    slos: Sequence[Slo],
    out: str | Path,
    tol: float,
    **sweep: Any,
) -> tuple[list[RateBracket], list[dict[str, Any]]]:
    """Bisect the sustainable rate of every (replicas, cache, policy) of ``points``.

    ``rows`` are the rows of ``points``; ``sweep`` goes to :func:`run_sweep` (jobs,
    executor, ...). Returns the brackets and the rows of the points the bisection
    added, so the report shows them too.
    """
    if not (math.isfinite(tol) and tol > 0):
        raise TwinError(f"--bisect {tol!r}: the tolerance must be a positive fraction")
    by_key = {r["key"]: r for r in rows if not r.get(INFEASIBLE_COLUMN)}
    seeds = sorted({p.seed for p in points})
    combos: dict[tuple[int | None, float, str], list[Point]] = {}
    for p in points:
        if p.session_rate is not None:
            combos.setdefault((p.replicas, p.cache_gb, p.policy), []).append(p)

    def cells_at(combo_points: list[Point]) -> list[dict[str, Any]]:
        mine = [by_key[k] for k in (spec.key(p) for p in combo_points) if k in by_key]
        return aggregate(mine, slos)

    state = {combo: _Search(*_bracket(cells_at(ps), slos)) for combo, ps in combos.items()}
    added: list[dict[str, Any]] = []
    for _ in range(MAX_STEPS):
        mids: dict[tuple[int | None, float, str], list[Point]] = {}
        for combo, search in state.items():
            mid = search.midpoint(tol)
            if mid is not None:
                n, cache, policy = combo
                mids[combo] = [Point(cache, policy, mid, s, n) for s in seeds]
        if not mids:
            break
        new_rows = run_sweep(spec, [p for at in mids.values() for p in at], out, **sweep).rows
        added += new_rows
        by_key.update((r["key"], r) for r in new_rows if not r.get(INFEASIBLE_COLUMN))
        for combo, at in mids.items():
            cells = cells_at(at)
            state[combo].update(at[0].session_rate, bool(cells) and meets(cells[0], slos))
    brackets = [
        RateBracket(policy, cache, n, s.passes, s.fails, s.steps)
        for (n, cache, policy), s in state.items()
    ]
    return brackets, added


@dataclass
class _Search:
    """One combination's bracket while it is narrowed."""

    passes: float | None
    fails: float | None
    steps: int = 0

    def midpoint(self, tol: float) -> float | None:
        """The next rate to run; None once the bracket is narrow enough (or absent)."""
        lo, hi = self.passes, self.fails
        if lo is None or hi is None or hi / lo <= 1 + tol:
            return None
        mid = _round(math.sqrt(lo * hi))
        return mid if lo < mid < hi else None  # as narrow as the rates' digits allow

    def update(self, rate: float | None, passed: bool) -> None:
        if passed:
            self.passes = rate
        else:
            self.fails = rate
        self.steps += 1
