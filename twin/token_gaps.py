"""Inter-token latency (ITL): every gap between two consecutive output tokens, binned.

- :class:`TokenGaps`: a fixed-size log-binned histogram of gap seconds with integer
  weights (a decode step of ``b`` sequences is ``b`` gaps of the same length); the mean
  exact from running sums, the percentiles from the bins (:meth:`TokenGaps.stats`, the
  summary's latency dict).

numpy only, no engine imports. The engine records its steps' gaps in bulk
(:mod:`twin.engine.step_gaps`) and bins them with :func:`key_constants`' arithmetic.
"""

from __future__ import annotations

import math

import numpy as np

from twin.summary import PERCENTILES

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


def key_constants() -> tuple[int, int, int]:
    """``(shift, base, bins)``: a gap ``d``'s bin is ``(bits(d) >> shift) - base`` clamped
    to ``[0, bins)``, ``bits`` its float64 bits as an int64 (:func:`bin_of`), for code that
    bins on its own (the engine's compiled binning)."""
    return _SHIFT, _BASE, NBINS


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
        keys = d.view(np.int64) >> _SHIFT
        keys -= _BASE
        np.clip(keys, 0, NBINS - 1, out=keys)  # outside the range (or NaN): the end bins
        self.counts += np.bincount(keys, weights=w, minlength=NBINS).astype(np.int64)
        self.n += round(float(w.sum()))
        self.total_s += float(np.dot(d, w))

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
