"""A decode run: the next k pure-decode steps of a batch, timed in one go.

While no sequence prefills and none can be admitted, nothing can change the
batch before the next completion, so the scheduler
(:class:`twin.engine.batching.ContinuousBatching`) prices the next k steps at
once and waits for them with one timeout. :class:`DecodeRun` answers when each
of those steps ends, in closed form when the pricer is affine in the context.
"""

from __future__ import annotations

import math

import numpy as np

# Steps priced per decode run: an interrupted run wastes the pricing of its
# remaining steps, an uninterrupted long decode costs one event per run; the
# cap doubles while runs go uninterrupted and falls back after an interruption.
MIN_RUN_STEPS = 256
MAX_RUN_STEPS = 4096


class DecodeRun:
    """When each of ``k`` pure-decode steps ends, counted from the run's start.

    Affine pricers give step i (0-based) ``alpha + beta i`` seconds, so the
    end of step m is ``m alpha + beta m (m-1) / 2`` and the step in flight at
    any moment solves a quadratic: no per-step work at all. Other pricers give
    the cumulative ``ends`` array.
    """

    __slots__ = ("alpha", "beta", "capped", "ends", "k")

    def __init__(
        self,
        k: int,
        alpha: float = 0.0,
        beta: float = 0.0,
        ends: np.ndarray | None = None,
        capped: bool = False,
    ) -> None:
        self.k, self.alpha, self.beta, self.ends, self.capped = k, alpha, beta, ends, capped

    def end(self, m: int) -> float:
        """Seconds from the run's start to the end of its m-th step."""
        if self.ends is not None:
            return float(self.ends[m - 1]) if m else 0.0
        return m * self.alpha + self.beta * (m * (m - 1) // 2)

    def steps_to_reach(self, elapsed: float) -> int:
        """Steps that end by the first step boundary at or after ``elapsed`` (at least 1)."""
        if self.ends is not None:
            m = int(np.searchsorted(self.ends, elapsed, side="left")) + 1
            return min(max(m, 1), self.k)
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
