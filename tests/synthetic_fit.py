"""A kernel family fitted on timings its own model prices at known coefficients."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from twin.calibration.fit import fit_params, predict_rows
from twin.costmodel import latency as lat
from twin.costmodel.features import Features


def refit_truth(
    kernel: str,
    truth: dict[str, float],
    peaks: dict[str, float],
    features: Iterable[Features],
    rel: float = 0.02,
) -> dict[str, float]:
    """The coefficients ``fit_params`` finds on rows of ``features`` timed by ``kernel``'s
    model at ``truth`` on ``peaks``, asserted to price every row within ``rel``."""
    rows = []
    for flops, nbytes, extras in features:
        t = lat.predict(kernel, truth, peaks, flops, nbytes, extras)
        rows.append({"flops": flops, "bytes": nbytes, **extras, "median_s": t})
    fitted = fit_params(kernel, rows, peaks)
    pred = predict_rows(kernel, fitted, peaks, rows)
    y = np.array([r["median_s"] for r in rows])
    assert np.max(np.abs(pred / y - 1.0)) < rel
    return fitted
