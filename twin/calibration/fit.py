"""Fit each kernel's latency model (twin.costmodel.formulas) to its timings with scipy.

The residual is the log of predicted over measured time, so every shape counts by
its relative error whether it takes 5 us or 50 ms, and a soft-L1 loss keeps one
noisy timing from pulling the fit. Parameters are fitted in log space (all are
positive and span many decades) from a few starting points; the best is kept.
A seeded share of the shapes is held out: the fit never sees them, and their
median and max relative errors go into the profile.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from twin.costmodel.formulas import get_formula
from twin.costmodel.profile import KernelFit

HOLDOUT_SHARE = 0.25  # a quarter of the shapes is kept out of the fit
MIN_SHAPES_FOR_HOLDOUT = 6


def _columns(kernel: str, rows: Sequence[dict[str, Any]]) -> tuple[np.ndarray, ...]:
    f = get_formula(kernel)
    flops = np.array([float(r["flops"]) for r in rows])
    nbytes = np.array([float(r["bytes"]) for r in rows])
    extras = np.array([[float(r[x]) for x in f.features] for r in rows]).reshape(len(rows), -1)
    y = np.array([float(r["median_s"]) for r in rows])
    return flops, nbytes, extras, y


def _model(
    kernel: str,
    theta: np.ndarray,
    peaks: dict[str, float],
    flops: np.ndarray,
    nbytes: np.ndarray,
    extras: np.ndarray,
) -> np.ndarray:
    """Vectorised formula at parameters ``theta`` (in ``param_names`` order)."""
    f = get_formula(kernel)
    if f.lines > 1:  # the least of the lines (``KernelFormula.lines``)
        t0s, effs = theta[0::2, None], theta[1::2, None]
        return np.min(t0s + nbytes[None, :] / (effs * peaks[f.bytes_peak]), axis=0)
    t0 = theta[0]
    if not f.uses_flops:  # extras add to the byte time (the all-to-all's)
        n = extras.shape[1]
        t = t0 + nbytes / (theta[1] * peaks[f.bytes_peak]) + extras @ theta[2 : 2 + n]
        # A floor the work hides under (``KernelFormula.floor``): the last parameter.
        return np.maximum(t, theta[2 + n]) if f.floor else t
    ef, eb, p = theta[1], theta[2], theta[3]
    n_in = len(f.extras)  # the compute side's extras; the serial ones after them
    a = flops / (ef * peaks[f.flops_peak])
    if n_in:
        a = a + extras[:, :n_in] @ theta[4 : 4 + n_in]
    b = nbytes / (eb * peaks[f.bytes_peak])
    m = np.maximum(np.maximum(a, b), 1e-300)
    t = t0 + m * ((a / m) ** p + (b / m) ** p) ** (1.0 / p)
    if f.serial:
        t = t + extras[:, n_in:] @ theta[4 + n_in : 4 + len(f.features)]
    return np.maximum(t, theta[4 + len(f.features)]) if f.floor else t


def _starts(
    kernel: str,
    peaks: dict[str, float],
    flops: np.ndarray,
    nbytes: np.ndarray,
    extras: np.ndarray,
    y: np.ndarray,
) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """Starting points and log-space bounds from the data's own scale."""
    f = get_formula(kernel)
    if f.lines > 1:
        return _line_starts(f.lines, float(np.min(y)))
    t0 = max(0.5 * float(np.min(y)), 1e-9)
    # The efficiency each shape would need if it were all FLOPs (bytes): the best
    # shapes bound it from below; their upper quantile is a fair start.
    eb = float(np.quantile(nbytes / (peaks[f.bytes_peak] * y), 0.9))
    eb = min(max(eb, 1e-4), 2.0)
    cs = []
    for j in range(extras.shape[1]):
        x = extras[:, j]
        pos = x > 0
        cs.append(0.1 * float(np.median(y[pos] / x[pos])) if pos.any() else 1e-15)
    lo = [1e-10]
    hi = [10.0]
    starts: list[list[float]] = []
    if f.uses_flops:
        ef = float(np.quantile(flops / (peaks[f.flops_peak] * y), 0.9))
        ef = min(max(ef, 1e-4), 2.0)
        lo += [1e-5, 1e-5, 1.0]
        hi += [4.0, 4.0, 20.0]
        for p in (1.5, 4.0):
            for scale in (1.0, 0.5):
                starts.append([t0, ef * scale, eb * scale, p, *cs])
    else:
        lo += [1e-5]
        hi += [4.0]
        starts += [[t0, eb, *cs], [t0 * 0.2, eb * 0.5, *cs]]
    for c in cs:
        lo.append(max(c, 1e-30) * 1e-9)
        hi.append(max(c, 1e-30) * 1e4)
    if f.floor:  # each start twice: the floor at the fastest row, and out of the way
        lo.append(1e-10)
        hi.append(10.0)
        floor = float(np.min(y))
        starts = [[*s, v] for s in starts for v in (floor, 1e-9)]
    lo_a, hi_a = np.log(np.array(lo)), np.log(np.array(hi))
    return [np.clip(np.log(np.array(s)), lo_a, hi_a) for s in starts], lo_a, hi_a


def _line_starts(lines: int, fastest: float) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """Starting points and log-space bounds of a formula of several lines
    (``KernelFormula.lines``): the first line's latency at or under the fastest row's and
    each later line slower to start and faster per byte, at a few bandwidth scales (the
    fit need not keep that order: a line may end up never the least)."""
    lo = np.log(np.array([1e-10, 1e-5] * lines))
    hi = np.log(np.array([10.0, 4.0] * lines))
    starts = []
    for t0 in (0.5 * fastest, fastest):
        for eff in (0.1, 0.5, 1.0):
            for step in (2.0, 5.0):
                s = [
                    v
                    for i in range(lines)
                    for v in (t0 * (step * 3 ** (i - 1) if i else 1.0), eff * (i + 1) / lines)
                ]
                starts.append(np.clip(np.log(np.array(s)), lo, hi))
    return starts, lo, hi


def fit_params(
    kernel: str, rows: Sequence[dict[str, Any]], peaks: dict[str, float]
) -> dict[str, float]:
    """Least-squares parameters of ``kernel``'s model on ``rows`` (needs >= 1 row)."""
    if not rows:
        raise ValueError(f"no timings to fit {kernel}")
    f = get_formula(kernel)
    flops, nbytes, extras, y = _columns(kernel, rows)
    starts, lo, hi = _starts(kernel, peaks, flops, nbytes, extras, y)
    log_y = np.log(y)
    # Coefficients held at a fixed physical rate (``KernelFormula.fixed_rates``): out of
    # the search, their log values put back into every evaluation.
    names = list(f.param_names)
    fixed = {names.index(f"c_{x}"): -math.log(peaks[peak]) for x, peak in f.fixed_rates}
    free = np.array([i for i in range(len(names)) if i not in fixed], dtype=int)
    whole = np.zeros(len(names))
    for i, v in fixed.items():
        whole[i] = v

    def full(u: np.ndarray) -> np.ndarray:
        out = whole.copy()
        out[free] = u
        return out

    def resid(u: np.ndarray) -> np.ndarray:
        return np.log(_model(kernel, np.exp(full(u)), peaks, flops, nbytes, extras)) - log_y

    starts = [s[free] for s in starts]
    lo, hi = lo[free], hi[free]

    from scipy.optimize import least_squares  # late: scipy costs every command ~0.6 s

    best = None
    for u0 in starts:
        res = least_squares(
            resid, u0, bounds=(lo, hi), loss="soft_l1", f_scale=0.05, method="trf", max_nfev=4000
        )
        if best is None or res.cost < best.cost:
            best = res
    assert best is not None
    theta = np.exp(full(best.x))
    for name, rate in f.fixed_coefficients(peaks).items():  # not its log's round trip
        theta[names.index(name)] = rate
    if f.lines > 1:  # the lines stored by latency (a stable order for the same prices)
        pairs = sorted(zip(theta[0::2], theta[1::2], strict=True))
        theta = np.array([v for pair in pairs for v in pair])
    return {name: float(v) for name, v in zip(f.param_names, theta, strict=True)}


def predict_rows(
    kernel: str, params: dict[str, float], peaks: dict[str, float], rows: Sequence[dict[str, Any]]
) -> np.ndarray:
    """Predicted seconds of ``rows`` (vectorised; same formula as ``latency.predict``)."""
    f = get_formula(kernel)
    flops, nbytes, extras, _ = _columns(kernel, rows)
    theta = np.array([params[n] for n in f.params_of(params)])
    return _model(kernel, theta, peaks, flops, nbytes, extras)


def relative_errors(
    kernel: str, params: dict[str, float], peaks: dict[str, float], rows: Sequence[dict[str, Any]]
) -> np.ndarray:
    """|predicted - measured| / measured for each row."""
    y = np.array([float(r["median_s"]) for r in rows])
    return np.abs(predict_rows(kernel, params, peaks, rows) - y) / y


def quantiles(rel_err: np.ndarray) -> tuple[float, float, float]:
    """Median, P90 and max of relative errors."""
    return (
        float(np.median(rel_err)),
        float(np.quantile(rel_err, 0.9)),
        float(np.max(rel_err)),
    )


def split_holdout(
    n: int, share: float = HOLDOUT_SHARE, seed: int = 0
) -> tuple[list[int], list[int]]:
    """Indices (train, held out); nothing is held out below ``MIN_SHAPES_FOR_HOLDOUT``."""
    order = list(np.random.default_rng(seed).permutation(n))
    if n < MIN_SHAPES_FOR_HOLDOUT:
        return sorted(order), []
    k = max(2, math.floor(n * share))
    return sorted(order[k:]), sorted(order[:k])


def fit_kernel(
    kernel: str,
    rows: Sequence[dict[str, Any]],
    peaks: dict[str, float],
    share: float = HOLDOUT_SHARE,
    seed: int = 0,
) -> KernelFit:
    """Fit on the training shapes, report the held-out errors."""
    train_idx, held_idx = split_holdout(len(rows), share, seed)
    train = [rows[i] for i in train_idx]
    held = [rows[i] for i in held_idx]
    params = fit_params(kernel, train, peaks)
    med = mx = p90 = None
    if held:
        med, p90, mx = quantiles(relative_errors(kernel, params, peaks, held))
    train_err = relative_errors(kernel, params, peaks, train)
    note = f"train median rel err {float(np.median(train_err)):.3f}"
    return KernelFit(
        model=get_formula(kernel).model_name,
        params=params,
        heldout_median_rel_err=med,
        heldout_max_rel_err=mx,
        n_shapes=len(rows),
        n_heldout=len(held),
        note=note,
        heldout_p90_rel_err=p90,
    )


def fit_all(
    rows: Sequence[dict[str, Any]],
    peaks: dict[str, float],
    share: float = HOLDOUT_SHARE,
    seed: int = 0,
) -> dict[str, KernelFit]:
    """One fit per kernel present in ``rows`` (registry order)."""
    by_kernel: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_kernel.setdefault(str(r["kernel"]), []).append(r)
    return {k: fit_kernel(k, v, peaks, share, seed) for k, v in by_kernel.items()}


def pooled_heldout(
    rows: Sequence[dict[str, Any]],
    fits: dict[str, KernelFit],
    peaks: dict[str, float],
    share: float = HOLDOUT_SHARE,
    seed: int = 0,
) -> dict[str, float | int | None]:
    """Median and max relative error over every kernel's held-out shapes together."""
    by_kernel: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_kernel.setdefault(str(r["kernel"]), []).append(r)
    errs: list[float] = []
    for kernel, krows in by_kernel.items():
        _, held_idx = split_holdout(len(krows), share, seed)
        if held_idx and kernel in fits:
            held = [krows[i] for i in held_idx]
            errs.extend(relative_errors(kernel, fits[kernel].params, peaks, held).tolist())
    if not errs:
        return {"median": None, "max": None, "n": 0}
    return {"median": float(np.median(errs)), "max": float(np.max(errs)), "n": len(errs)}


__all__ = [
    "fit_all",
    "fit_kernel",
    "fit_params",
    "pooled_heldout",
    "predict_rows",
    "quantiles",
    "relative_errors",
    "split_holdout",
]
