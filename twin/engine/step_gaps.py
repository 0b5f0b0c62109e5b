"""A scheduler's inter-token gaps, recorded a step or a decode run at a time, binned in bulk.

In continuous batching every decoding sequence gets one token at each step's end, so
the gaps a step adds are ``batch`` copies of its duration (plus the checkpoint copies
and write-back the loop adds after it, before the tokens are stamped). A decode run's
step ends are already in an array (``DecodeRun.ends``): :class:`StepGaps` lends the
scheduler the buffer its runs write them into (:attr:`StepGaps.views`), keeps three
numbers per run or mixed step, and bins every pending step into its
:class:`twin.token_gaps.TokenGaps` once the buffer fills, in one compiled call
(:mod:`twin.engine.compiled_gaps`). ``ContinuousBatching.run`` inlines :meth:`step`
and :meth:`run`, keeping the page in a local: it alone calls :meth:`flush` (and resets
its page), the end of a run reads :meth:`histogram`.
"""

from __future__ import annotations

import functools

import numpy as np

from twin.token_gaps import TokenGaps, key_constants

# Runs start on pages of PAGE steps, so each start's view of the buffer is made once
# (a numpy slice a run cost more than the rest of its record); a run wastes half a page
# on average.
PAGE = 32
# Pending numbers (three a record) before they are binned without a run filling the
# buffer (a stretch of mixed steps), and closed-form records' numbers (five each).
KEPT = 3 * 4096
_AFFINE_KEPT = 5 * 1024


@functools.cache
def _pages(run_steps: int) -> list[int]:
    return [-(-m // PAGE) for m in range(run_steps + 1)]


class StepGaps:
    """Pending steps, as records of ``steps, batch, x`` in :attr:`records`: a decode run
    of ``steps`` steps run by ``batch`` decoding sequences (each step ``batch`` gaps), its
    ends (counted from its start) in :attr:`ends` from page :attr:`page` on, its last step
    ``x`` seconds longer (the checkpoint copies, write-back after it); or (``steps`` 0) a
    mixed step of ``x`` seconds. Closed-form runs (``alpha + beta i`` seconds for step i)
    are kept apart."""

    __slots__ = (
        "_affine",
        "_bin_affine",
        "_bin_steps",
        "_keys",
        "_total",
        "ends",
        "hist",
        "limit",
        "page",
        "pages",
        "records",
        "views",
    )

    def __init__(self, run_steps: int, slots: int = 3) -> None:
        """``run_steps``: the most steps one decode run writes; the buffer holds ``slots``
        runs' worth, binned when a run would start in its last."""
        # numba and the kernels load with the first scheduler, not inside a run.
        from twin.engine.compiled_gaps import bin_affine, bin_steps

        self._bin_steps, self._bin_affine = bin_steps, bin_affine
        self.hist = TokenGaps()
        self.ends = np.empty(slots * run_steps, np.float64)
        self.limit = (slots - 1) * run_steps // PAGE  # the last page a run may start on
        self.views = [self.ends[p * PAGE :] for p in range(self.limit + 1)]
        self.page = 0  # where the next run writes its ends
        self.pages = _pages(run_steps)  # a run's pages, by its steps
        self.records: list[float] = []
        self._affine: list[float] = []  # (alpha, beta, steps, batch, extra) of each
        shift, base, _ = key_constants()
        self._keys = (shift, base)
        self._total = np.zeros(1)

    def buffer(self) -> np.ndarray:
        """Where the next run writes its step ends (``run_steps`` places at least)."""
        return self.views[self.page]

    def step(self, seconds: float, batch: int) -> None:
        """One step of ``seconds`` (its extra included) for ``batch`` decoding sequences."""
        self.records.extend((0, batch, seconds))
        if len(self.records) > KEPT:
            self.flush()

    def run(self, steps: int, batch: int, extra: float) -> None:
        """The first ``steps`` steps of the run that wrote its ends at :meth:`buffer`."""
        self.records.extend((steps, batch, extra))
        self.page += self.pages[steps]
        if self.page > self.limit:
            self.flush()

    def affine(self, alpha: float, beta: float, steps: int, batch: int, extra: float) -> None:
        """``steps`` steps of ``alpha + beta i`` seconds (i from 0), as :meth:`run`."""
        self._affine.extend((alpha, beta, steps, batch, extra))
        if len(self._affine) >= _AFFINE_KEPT:
            self._bin(self.hist, [], self._affine)  # the buffer's records stay
            self._affine.clear()

    def flush(self) -> None:
        """Bin every pending step into :attr:`hist`; the buffer starts again at page 0."""
        self._bin(self.hist, self.records, self._affine)
        self.records.clear()
        self._affine.clear()
        self.page = 0

    def histogram(self) -> TokenGaps:
        """Every gap recorded so far, pending ones included (a copy; nothing is flushed,
        so a loop that keeps its own page, as ``ContinuousBatching.run``, is undisturbed)."""
        out = TokenGaps.merged([self.hist])
        self._bin(out, self.records, self._affine)
        return out

    def _bin(self, hist: TokenGaps, records: list[float], affine: list[float]) -> None:
        total = self._total
        shift, base = self._keys
        if records:
            array = np.fromiter(records, np.float64, len(records))
            hist.n += self._bin_steps(self.ends, array, PAGE, hist.counts, shift, base, total)
        if affine:
            array = np.fromiter(affine, np.float64, len(affine))
            hist.n += self._bin_affine(array, hist.counts, shift, base, total)
        hist.total_s += float(total[0])
        total[0] = 0.0
