"""A decode run: the next k pure-decode steps of a batch, timed in one go.

While no sequence prefills and none can be admitted, nothing can change the
batch before the next completion, so the scheduler
(:class:`twin.engine.batching.ContinuousBatching`) prices the next k steps at
once and waits for them, interrupted only by an arrival. :class:`DecodeRun`
answers when each of those steps ends, in closed form when the pricer is affine
in the context, else from the cumulative step prices, which it asks the pricer
for lazily, a chunk at a time (an arrival cuts about half the runs short, and
the steps after the cut are never run, so they are never priced): summed here
from the step prices, or written by the pricer's compiled filler
(``PricerBase.decode_ends``, an optional fast path).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Sequence
from itertools import accumulate

import numpy as np

# Steps priced per decode run: an interrupted run wastes the pricing of its
# remaining steps, an uninterrupted long decode costs one event per run; the
# cap doubles while runs go uninterrupted and falls back after an interruption.
MIN_RUN_STEPS = 256
MAX_RUN_STEPS = 4096
# Steps priced at first when a run may be interrupted; each later chunk doubles the
# steps priced so far (a wait each). The chat benchmark's runs have a median of 28
# steps; fewer wastes less pricing on runs cut short, but adds waits to long runs;
# 32, 64 and 128 measured within noise of each other there, 16 slower.
FIRST_CHUNK_STEPS = 64

# ``price(first, n)``: the durations of steps ``first`` to ``first + n - 1`` of the run.
StepPrices = Callable[[int, int], Sequence[float] | np.ndarray]
# ``fill(ends, first, n)``: writes those steps' ends into ``ends`` (``twin.engine.cost``'s
# ``EndsFiller``).
StepEnds = Callable[[np.ndarray, int, int], None]


class DecodeRun:
    """When each of ``k`` pure-decode steps ends, counted from the run's start.

    Affine pricers give step i (0-based) ``alpha + beta i`` seconds, so the
    end of step m is ``m alpha + beta m (m-1) / 2`` and the step in flight at
    any moment solves a quadratic: no per-step work at all. Other pricers give
    ``price`` or ``fill``, and ``ends[:priced]`` holds the cumulative durations of
    the steps priced so far (summed left to right, as ``np.cumsum``).
    """

    __slots__ = ("_fill", "_price", "alpha", "beta", "capped", "ends", "k", "priced")

    def __init__(
        self,
        k: int,
        alpha: float = 0.0,
        beta: float = 0.0,
        price: StepPrices | None = None,
        capped: bool = False,
        fill: StepEnds | None = None,
        ends: np.ndarray | None = None,
    ) -> None:
        """``ends``: a float64 buffer of at least ``k`` to write the step ends into (the
        scheduler's, reused run after run: its runs never overlap), else one of its own."""
        self.k, self.alpha, self.beta, self.capped = k, alpha, beta, capped
        self._price, self._fill = price, fill
        if price is None and fill is None:
            self.ends: np.ndarray | None = None
        elif ends is None:
            self.ends = np.empty(k, np.float64)
        else:
            assert len(ends) >= k
            self.ends = ends
        # Steps whose end is known (all ``k`` in closed form).
        self.priced = k if self.ends is None else 0

    def price_next(self, steps: int | None = None) -> float:
        """Price the next chunk (``steps`` more, or as many as priced so far, at least
        ``FIRST_CHUNK_STEPS``, up to ``k``); return the end of the last step priced."""
        ends = self.ends
        if ends is None:
            return self.end(self.k)
        done = self.priced
        n = min(max(FIRST_CHUNK_STEPS, done) if steps is None else steps, self.k - done)
        if n > 0:
            if self._fill is not None:
                self._fill(ends, done, n)
            else:
                assert self._price is not None
                durations = self._price(done, n)
                if isinstance(durations, np.ndarray):
                    durations = durations.tolist()
                # Running sums left to right, continuing from the last end: np.cumsum's.
                sums = (
                    accumulate(durations, initial=float(ends[done - 1]))
                    if done
                    else accumulate(durations)
                )
                if done:
                    next(sums)  # the initial value itself
                ends[done : done + n] = list(sums)
            self.priced = done = done + n
        return float(ends[done - 1])

    def end(self, m: int) -> float:
        """Seconds from the run's start to the end of its m-th step (priced already)."""
        if self.ends is not None:
            return float(self.ends[m - 1]) if m else 0.0
        return m * self.alpha + self.beta * (m * (m - 1) // 2)

    def step_ends(self, m: int) -> np.ndarray:
        """The ends of the first ``m`` steps (priced already), :meth:`end`'s values."""
        if self.ends is not None:
            return np.array(self.ends[:m])
        i = np.arange(1, m + 1, dtype=np.int64)
        ends: np.ndarray = i * self.alpha + self.beta * (i * (i - 1) // 2)
        return ends

    def steps_to_reach(self, elapsed: float) -> int:
        """Steps that end by the first step boundary at or after ``elapsed`` (at least 1),
        among those priced."""
        if self.ends is not None:
            priced = self.priced
            m = bisect_left(self.ends, elapsed, 0, priced) + 1  # np.searchsorted(side="left")
            return min(max(m, 1), priced)
        a, b = self.alpha, self.beta
        if b > 0:
            h = a - b / 2
            m = math.ceil((-h + math.sqrt(h * h + 2 * b * elapsed)) / b)
        else:
            m = math.ceil(elapsed / a) if a > 0 else 1
        m = min(max(m, 1), self.k)
        # The root is exact up to rounding; settle it against end() itself.
        while m > 1 and self.end(m - 1) >= elapsed:
            m -= 1
        while m < self.k and self.end(m) < elapsed:
            m += 1
        return m
