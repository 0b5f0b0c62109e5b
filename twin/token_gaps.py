"""Inter-token latency (ITL): every gap between two consecutive output tokens, binned.

- :class:`TokenGaps`: a fixed-size log-binned histogram of gap seconds with integer
  weights (a decode step of ``b`` sequences is ``b`` gaps of the same length); the mean
  exact from running sums, the percentiles from the bins (:meth:`TokenGaps.stats`, the
  summary's latency dict).
- :class:`StepGaps`: what a replica's scheduler records as steps end, binned in bulk.
  A step's tokens come out together, so the gaps of a whole decode run are its step
  durations, known from the run's cumulative step ends. The scheduler lends this
  class's buffer to its decode runs (:meth:`StepGaps.buffer`) for their ends, records
  a run or a step in O(1) (a few values appended), and the pending steps are binned
  with numpy once the buffer fills: no Python loop over steps, no object per token.

numpy only; the engine (:mod:`twin.engine.batching`) feeds it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from twin.metrics import PERCENTILES

# Bins: 2**SUB_BITS per octave, found from the float64's bits (the exponent and the
# mantissa's top SUB_BITS bits; ``math.frexp`` for one value). A bin [lo, lo (1 + 2**-8))
# at worst (the first of an octave) is 0.39% wide, and its midpoint stands for every
# value in it, so a value read back is within half that, 1/512 = 0.195% of the exact one.
# A percentile interpolates between two order statistics (``np.percentile``'s linear
# method) each read back within 0.195%, so it is within 0.195% too: under the 0.5% the
# summary promises, with margin. (7 bits would give 0.39%, closer to the bound; 8 costs
# 80 KB a replica.)
SUB_BITS = 8
_SUB = 1 << SUB_BITS
_SHIFT = 52 - SUB_BITS
# The range binned: 2**LOW_EXP (60 ns) to 2**HIGH_EXP seconds (18 hours); a gap outside
# it counts in the first or last bin (and reads back as that bin's midpoint).
LOW_EXP = -24
HIGH_EXP = 16
NBINS = (HIGH_EXP - LOW_EXP) * _SUB
_BASE = (1023 + LOW_EXP) << SUB_BITS  # the bits >> _SHIFT of 2**LOW_EXP
# Bound on a reported percentile's relative error (gaps within the range).
REL_ERROR = 1.0 / (2 * _SUB)


def _midpoints() -> np.ndarray:
    i = np.arange(NBINS)
    octave = np.ldexp(1.0, LOW_EXP + i // _SUB)
    sub = i % _SUB
    return octave * (1.0 + (sub + 0.5) / _SUB)


_MID = _midpoints()


def bin_of(seconds: float) -> int:
    """The bin of one gap (the same as :meth:`TokenGaps.add_many`'s, from the bits)."""
    if not seconds < math.inf:  # infinite, NaN: the last bin, as their bits say
        return NBINS - 1
    if not seconds > 0.0:  # zero, negative
        return 0
    m, e = math.frexp(seconds)  # seconds = m 2**e, m in [0.5, 1)
    i = (e - 1 - LOW_EXP) * _SUB + int(m * (2 * _SUB)) - _SUB
    return 0 if i < 0 else NBINS - 1 if i >= NBINS else i


class TokenGaps:
    """Gap seconds in :data:`NBINS` log bins with integer weights (module docstring)."""

    __slots__ = ("counts", "n", "total_s")

    def __init__(self) -> None:
        self.counts = np.zeros(NBINS, np.int64)
        self.n = 0  # gaps counted
        self.total_s = 0.0  # their sum (the exact mean)

    def add(self, seconds: float, count: int = 1) -> None:
        """``count`` gaps of ``seconds`` each."""
        if count:
            self.counts[bin_of(seconds)] += count
            self.n += count
            self.total_s += seconds * count

    def add_many(self, durations: np.ndarray, count: int | np.ndarray = 1) -> None:
        """Each of ``durations`` ``count`` times (a number, or one per duration)."""
        d = np.ascontiguousarray(durations, np.float64)
        if not d.size:
            return
        w = np.broadcast_to(np.asarray(count, np.float64), d.shape)
        self._bin(d, w)
        self.n += round(float(w.sum()))
        self.total_s += float(np.dot(d, w))

    def _bin(self, d: np.ndarray, w: np.ndarray) -> None:
        """Count ``w[i]`` (whole numbers as floats) in the bin of ``d[i]`` (C-contiguous
        float64), from the bits; the sums are the caller's."""
        idx = d.view(np.int64) >> _SHIFT
        lo = int(idx.min())
        idx -= lo
        binned = np.bincount(idx, weights=w)  # bins lo .. the highest used
        first = lo - _BASE
        if first < 0 or first + len(binned) > NBINS:  # outside the range: the end bins
            at = np.clip(np.arange(first, first + len(binned)), 0, NBINS - 1)
            binned = np.bincount(at, weights=binned, minlength=NBINS)
            first = 0
        self.counts[first : first + len(binned)] += binned.astype(np.int64)  # exact sums

    def merge(self, other: TokenGaps) -> TokenGaps:
        """Add ``other``'s gaps to these; return self."""
        self.counts += other.counts
        self.n += other.n
        self.total_s += other.total_s
        return self

    @classmethod
    def merged(cls, parts: list[TokenGaps]) -> TokenGaps:
        """One histogram of all of ``parts``' gaps (``parts`` are left as they are)."""
        out = cls()
        for part in parts:
            out.merge(part)
        return out

    def percentile(self, q: float) -> float:
        """``np.percentile``'s linear interpolation over every gap, each read back as its
        bin's midpoint (within :data:`REL_ERROR` of the exact value); NaN when empty."""
        return float(self._percentiles([q])[0])

    def _percentiles(self, qs: list[float]) -> np.ndarray:
        n = int(self.counts.sum())
        if not n:
            return np.full(len(qs), math.nan)
        cum = np.cumsum(self.counts)
        out = np.empty(len(qs))
        for k, q in enumerate(qs):
            h = (n - 1) * q / 100.0
            lo = math.floor(h)
            frac = h - lo
            a = _MID[int(np.searchsorted(cum, lo, side="right"))]
            if frac and lo + 1 < n:
                b = _MID[int(np.searchsorted(cum, lo + 1, side="right"))]
                out[k] = a + frac * (b - a)
            else:
                out[k] = a
        return out

    def stats(self) -> dict[str, float | None]:
        """``twin.metrics``' latency dict: ``mean`` (exact) and ``p5`` ... ``p99`` (binned);
        None where there is no gap."""
        if not self.n:
            return {"mean": None, **{f"p{p}": None for p in PERCENTILES}}
        qs = self._percentiles(list(PERCENTILES))
        return {
            "mean": self.total_s / self.n,
            **{f"p{p}": float(v) for p, v in zip(PERCENTILES, qs, strict=True)},
        }

    def to_dict(self) -> dict[str, Any]:
        """The non-empty bins (index: count), the count and the sum (tests, debugging)."""
        nz = np.flatnonzero(self.counts)
        return {
            "bins": dict(zip(nz.tolist(), self.counts[nz].tolist(), strict=True)),
            "n": self.n,
            "total_s": self.total_s,
        }


class StepGaps:
    """A scheduler's step gaps, pending in bulk until binned into :attr:`hist`.

    Each record is a *segment* of consecutive steps run by the same ``batch`` of
    decoding sequences, every one of which gets a token at each step's end, so a
    segment is ``batch`` gaps per step; ``extra`` seconds (checkpoint copies,
    write-back) after its last step lengthen that step's gaps. A segment's steps are
    given by their ends counted from its start, in :attr:`ends` (a decode run writes
    them there itself, :meth:`buffer`), or in closed form (``alpha + beta i`` seconds
    for step i from 0, :meth:`affine`). Segments lie one after another in :attr:`ends`;
    at least ``run_steps`` places stay free after the last, and past that the pending
    steps are binned (:meth:`flush`): a record costs a few appends, a pending step
    about 10 ns when binned.
    """

    __slots__ = ("_affine", "_affine_steps", "_limit", "_segments", "ends", "hist", "off")

    def __init__(self, run_steps: int, slots: int = 4) -> None:
        """``run_steps``: the most steps one decode run writes; ``slots``: the buffer holds
        that many runs' worth (binned about once per ``slots - 1`` of them at worst)."""
        self.hist = TokenGaps()
        self.ends = np.empty(slots * run_steps, np.float64)
        self._limit = (slots - 1) * run_steps
        self.off = 0  # where the next segment starts in ``ends``
        self._segments: list[int] = []  # (steps, batch) flat, one pair a segment
        self._affine: list[float] = []  # (alpha, beta, steps, batch, extra) flat
        self._affine_steps = 0

    def buffer(self) -> np.ndarray:
        """Where the next run writes its step ends (``run_steps`` places at least)."""
        return self.ends[self.off :]

    def step(self, seconds: float, batch: int) -> None:
        """One step of ``seconds`` (its extra included) for ``batch`` decoding sequences."""
        off = self.off
        self.ends[off] = seconds
        self._segments.extend((1, batch))
        self.off = off = off + 1
        if off > self._limit:
            self.flush()

    def run(self, steps: int, batch: int, extra: float) -> None:
        """The first ``steps`` steps of the run that wrote its ends at :meth:`buffer`."""
        off = self.off + steps
        if extra:
            self.ends[off - 1] += extra
        self._segments.extend((steps, batch))
        self.off = off
        if off > self._limit:
            self.flush()

    def affine(self, alpha: float, beta: float, steps: int, batch: int, extra: float) -> None:
        """``steps`` steps of ``alpha + beta i`` seconds (i from 0), as :meth:`run`."""
        self._affine.extend((alpha, beta, steps, batch, extra))
        self._affine_steps += steps
        if self._affine_steps > self._limit:
            self.flush()

    def flush(self) -> TokenGaps:
        """Bin every pending step; return :attr:`hist`."""
        hist = self.hist
        n = self.off
        if n:
            seg = np.array(self._segments, np.int64).reshape(-1, 2)
            steps, batch = seg[:, 0], seg[:, 1].astype(np.float64)
            last = np.cumsum(steps) - 1
            start = last - (steps - 1)
            ends = self.ends[:n]
            d = np.empty(n)
            d[0] = ends[0]
            np.subtract(ends[1:], ends[:-1], out=d[1:])
            d[start] = ends[start]  # a segment's first end is its first step's duration
            hist._bin(d, np.repeat(batch, steps))
            hist.n += int(np.dot(seg[:, 0], seg[:, 1]))
            hist.total_s += float(np.dot(batch, ends[last]))  # each segment's whole time
            self._segments.clear()
            self.off = 0
        if self._affine:
            aff = np.array(self._affine, np.float64).reshape(-1, 5)
            steps = aff[:, 2].astype(np.int64)
            first = np.cumsum(steps) - steps
            i = np.arange(int(steps.sum())) - np.repeat(first, steps)
            d = np.repeat(aff[:, 0], steps) + np.repeat(aff[:, 1], steps) * i
            d[first + steps - 1] += aff[:, 4]
            hist.add_many(d, np.repeat(aff[:, 3], steps))
            self._affine.clear()
            self._affine_steps = 0
        return hist
