"""Fitting a fused-MoE family's per-shape term (``twin.costmodel.series_term``).

After the family's formula is fitted (``twin.calibration.fit.fit_kernel``), each series of
its fit split (one shape and layout of NVIDIA's ``moe_perf`` rows) gets a correction of
the formula's log time, piecewise linear in log tokens between ``series_term.KNOTS``:
least squares of the residuals ``log(measured / formula)`` of that series' fit rows on the
knots' hat functions, with a ridge of ``RIDGE`` toward zero, so that a series with few
rows, or rows that agree with the formula, stays near the formula. The held-out rows are
priced with it afterwards; they never enter it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from twin.calibration.fit import HOLDOUT_SHARE, predict_rows, quantiles, split_holdout
from twin.costmodel.profile import KernelFit
from twin.costmodel.series_term import KNOTS, MAX_LOG_SCALE, SHAPE_FIELDS, SeriesTerm, series_key

# The ridge on the knot values, in units of one row's squared log residual: chosen with
# the knots on an inner split of the fit rows (0.3 against 1.0; docs/decisions.md, issue 34).
RIDGE = 0.3


def row_key(row: dict[str, Any]) -> str:
    """The series of a fitting row (its ``shape``)."""
    shape = row["shape"]
    return series_key(*(int(shape[f]) for f in SHAPE_FIELDS))


def _hats(log_t: np.ndarray, log_knots: np.ndarray) -> np.ndarray:
    """Each row's weights on the knots: linear between its two knots, flat outside."""
    x = np.clip(log_t, log_knots[0], log_knots[-1])
    j = np.clip(np.searchsorted(log_knots, x, side="right") - 1, 0, len(log_knots) - 2)
    w = (x - log_knots[j]) / (log_knots[j + 1] - log_knots[j])
    out = np.zeros((len(x), len(log_knots)))
    out[np.arange(len(x)), j] = 1.0 - w
    out[np.arange(len(x)), j + 1] += w
    return out


def fit_series(
    rows: Sequence[dict[str, Any]], log_resid: np.ndarray, knots: Sequence[int] = KNOTS
) -> dict[str, tuple[float, ...]]:
    """Per series of ``rows``, its knot values (rounded to 0.001, as the profile stores
    them) from ``log_resid`` = log(measured / formula) of each row."""
    log_knots = np.log(np.asarray(knots, dtype=float))
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault(row_key(r), []).append(i)
    ridge = RIDGE * np.eye(len(log_knots))
    out: dict[str, tuple[float, ...]] = {}
    for key in sorted(groups):
        idx = groups[key]
        b = _hats(np.log([float(rows[i]["shape"]["t"]) for i in idx]), log_knots)
        c = np.linalg.solve(b.T @ b + ridge, b.T @ log_resid[idx])
        c = np.clip(np.round(c, 3), -MAX_LOG_SCALE, MAX_LOG_SCALE)
        out[key] = tuple(float(v) + 0.0 for v in c)  # + 0.0: no -0.0
    return out


def log_factors(term: SeriesTerm | None, rows: Sequence[dict[str, Any]]) -> np.ndarray:
    """Each row's log correction under ``term`` (0 for a series it has no entry of)."""
    out = np.zeros(len(rows))
    if term is None:
        return out
    for n, r in enumerate(rows):
        coefs = term.coefficients(row_key(r))
        if coefs is not None:
            out[n] = term.log_factor(coefs, float(r["shape"]["t"]))
    return out


def attach_series(
    fit: KernelFit,
    kernel: str,
    rows: Sequence[dict[str, Any]],
    peaks: dict[str, float],
    share: float = HOLDOUT_SHARE,
    seed: int = 0,
) -> None:
    """Give ``fit`` (``fit_kernel``'s, on ``rows`` with ``share`` and ``seed``) its
    per-shape term from its own fit split, and make its held-out errors the priced ones
    (formula x term); the formula's alone stay in the term."""
    train, held = split_holdout(len(rows), share, seed)
    y = np.array([float(r["median_s"]) for r in rows])
    pred = predict_rows(kernel, fit.params, peaks, rows)
    log_resid = np.log(y / pred)
    term = SeriesTerm(
        fit_series([rows[i] for i in train], log_resid[train]),
        formula_heldout_median_rel_err=fit.heldout_median_rel_err,
        formula_heldout_p90_rel_err=fit.heldout_p90_rel_err,
    )
    fit.series = term
    if held:
        held_rows = [rows[i] for i in held]
        priced = pred[held] * np.exp(log_factors(term, held_rows))
        med, p90, mx = quantiles(np.abs(priced - y[held]) / y[held])
        fit.heldout_median_rel_err, fit.heldout_p90_rel_err, fit.heldout_max_rel_err = med, p90, mx


__all__ = ["RIDGE", "attach_series", "fit_series", "log_factors", "row_key"]
