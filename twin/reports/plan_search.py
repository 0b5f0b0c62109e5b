"""How ``twin plan`` finds a candidate's fewest replicas: search strategies, found by name.

A strategy sees the replica counts it asked for and whether each met the SLOs
(every target met at a stable steady state, :func:`reports.verdicts.meets`) and
names the next count to simulate, or ``None`` when it is done. Every
candidate's search steps together with the others' (one batch of points per
step, as :mod:`reports.bisect` does with rates), so a strategy never runs
anything itself. The counts it may ask for lie in ``[lo, hi]``: ``lo`` is the
candidate's analytic lower bound, ``hi`` the budget's cap, which the plan
lowers (:meth:`ReplicaSearch.cap`) as cheaper deployments are found.

- ``bisect`` (the default): an exponential probe from ``lo`` (lo, 2 lo, 4 lo,
  ... then ``hi``) until a count meets the SLOs, then bisection between the
  largest failing count below it and it. Right when meeting the SLOs is
  monotone in the replica count, which P95 latencies at a fixed load are
  expected to be (more replicas, less load each).
- ``linear``: every count from ``lo`` upwards until one meets the SLOs: right
  whatever the shape, and what the plan falls back to when the counts it ran
  show a non-monotone pair (:func:`non_monotone`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar

from twin.errors import expect_one_of

if TYPE_CHECKING:  # annotations only: ``twin plan --help`` lists the searches
    from twin.slo import Slo

# The most replicas a search asks for without --budget-gpus (a judgement call: 64
# replicas of even one GPU is a fleet; the exponential probe reaches it in 7 steps).
MAX_SEARCH_REPLICAS = 64
# A value may rise this much from one replica count to a larger one before the pair
# counts as non-monotone: P95s of two runs with different routing wobble by a few
# percent where latency is already flat in the replica count (a judgement call; seen:
# +1-3% on flat tails of the tiny test space).
MONOTONE_SLACK = 0.05


class ReplicaSearch:
    """One candidate's search over its replica count (subclasses: one strategy each)."""

    name: ClassVar[str]
    description: ClassVar[str]

    def __init__(self, lo: int, hi: int, tried: Mapping[int, bool] | None = None) -> None:
        if lo < 1:
            raise ValueError(f"the lowest replica count is 1 (got {lo})")
        self.lo, self.hi = lo, hi
        self.tried: dict[int, bool] = dict(tried or {})

    def cap(self, hi: int) -> None:
        """Ask for no count above ``hi`` from now on (a cheaper deployment was found)."""
        self.hi = min(self.hi, hi)

    def record(self, replicas: int, passed: bool) -> None:
        self.tried[replicas] = passed

    def next(self) -> int | None:
        """The next replica count to simulate; None when the search is done."""
        raise NotImplementedError

    @property
    def fewest(self) -> int | None:
        """The fewest replicas found to meet the SLOs with every count in [lo, it) failing
        or ruled out (None: no count in [lo, hi] is known to)."""
        passes = sorted(r for r, ok in self.tried.items() if ok)
        return passes[0] if passes else None

    @property
    def pinned(self) -> bool:
        """Whether :attr:`fewest` is known to be the fewest (every count below it, down to
        ``lo``, failed or lies between two failing counts under monotonicity)."""
        best = self.fewest
        if best is None:
            return False
        below = [r for r, ok in self.tried.items() if not ok and r < best]
        return best == self.lo or (bool(below) and max(below) == best - 1)


class ProbeBisect(ReplicaSearch):
    name = "bisect"
    description = "exponential probe from the lower bound, then bisection"

    def next(self) -> int | None:
        best = self.fewest
        if best is None:
            if not self.tried:
                return self.lo if self.lo <= self.hi else None
            top = max(self.tried)
            if top >= self.hi:
                return None
            return min(2 * top, self.hi)
        below = [r for r, ok in self.tried.items() if not ok and r < best]
        low = max(below) if below else self.lo - 1
        # Counts above the cap cost more than a deployment already found: not worth pinning.
        high = min(best, self.hi + 1)
        if high - low <= 1:
            return None
        return (low + high) // 2


class LinearScan(ReplicaSearch):
    name = "linear"
    description = "every replica count from the lower bound upwards"

    def next(self) -> int | None:
        r = self.lo
        while r <= self.hi:
            if r not in self.tried:
                return r
            if self.tried[r]:
                return None
            r += 1
        return None

    @property
    def fewest(self) -> int | None:
        """The first count from ``lo`` upwards that met the SLOs, every one below it run."""
        r = self.lo
        while r in self.tried:
            if self.tried[r]:
                return r
            r += 1
        return None

    @property
    def pinned(self) -> bool:
        return self.fewest is not None


SEARCHES: dict[str, type[ReplicaSearch]] = {s.name: s for s in (ProbeBisect, LinearScan)}
DEFAULT_SEARCH = ProbeBisect.name
FALLBACK = LinearScan.name


def get_search(name: str) -> type[ReplicaSearch]:
    """The strategy called ``name``; a one-line error otherwise."""
    expect_one_of(name, SEARCHES, "--search")
    return SEARCHES[name]


def non_monotone(
    trials: Sequence[tuple[int, bool, Mapping[str, float | None]]], slos: Sequence[Slo]
) -> str | None:
    """Why the runs ``(replicas, met, values by SLO text)`` are not monotone in the replica
    count, or None: a count that met the SLOs below one that did not, or a target's value
    rising by more than :data:`MONOTONE_SLACK` from a count to a larger one."""
    ordered = sorted(trials)
    for i, (r1, ok1, v1) in enumerate(ordered):
        for r2, ok2, v2 in ordered[i + 1 :]:
            if ok1 and not ok2:
                return f"{r1} replica(s) met the SLOs and {r2} did not"
            for slo in slos:
                a, b = v1.get(slo.text), v2.get(slo.text)
                if a is not None and b is not None and b > a * (1 + MONOTONE_SLACK):
                    return f"{slo} rose from {a:,.3g} ms on {r1} replica(s) to {b:,.3g} ms on {r2}"
    return None
