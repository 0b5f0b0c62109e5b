"""Refitting one of NVIDIA's installed aiconfigurator kernel families in a test (the
``aic`` extra): the family read, its impossible rows set aside, the fit and its held-out
errors checked against issue 34's kernel targets."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from twin.calibration.aic_import import split_impossible
from twin.calibration.fit import fit_kernel
from twin.costmodel.profile import KernelFit


def refit_family(
    families: Iterable[Any], kernel: str, peaks: Any
) -> tuple[list[dict[str, Any]], KernelFit]:
    """(the rows fitted, the fit) of the ``kernel`` family among ``families`` (a reader's
    output, e.g. ``aic_mla.kernel_rows``) on ``peaks``."""
    fam = next(f for f in families if f.kernel == kernel)
    rows, _ = split_impossible(fam.kernel, fam.rows, peaks)
    return rows, fit_kernel(fam.kernel, rows, peaks)


def assert_heldout(fit: KernelFit, median: float | None, p90: float) -> None:
    """``fit``'s held-out median error at most ``median`` (unchecked where None) and its
    P90 at most ``p90``."""
    if median is not None:
        assert fit.heldout_median_rel_err is not None and fit.heldout_median_rel_err <= median
    assert fit.heldout_p90_rel_err is not None and fit.heldout_p90_rel_err <= p90
