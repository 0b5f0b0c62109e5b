"""Reading a kernel fit written under an older form of its formula, at the same prices.

A formula gains features, a floor or lines over time (``KernelFormula``); a fit written
before is read with zero coefficients for what it lacks (:func:`upgrade_fit`). The
attention decode families' launch coefficient is named by the launch rule of the kernel
each table timed (``KernelFormula.aliases``, ``features.launch_coefficient``): a fit
written under another name of the same slot is renamed (:func:`name_launch_coefficient`),
and one whose name no longer says what it was fitted to is refused
(:func:`stale_launch_coefficient`). ``Profile`` applies these to every fit it holds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twin.costmodel import features as ft
from twin.costmodel.collective_families import family
from twin.costmodel.formulas import get_formula
from twin.costmodel.kernel_formula import FLOOR, FLOOR_PARAM, KernelFormula, line_params
from twin.errors import TwinError

if TYPE_CHECKING:
    from twin.costmodel.profile import KernelFit


def upgrade_fit(fit: KernelFit, formula: KernelFormula) -> None:
    """Read a fit written before its formula gained extra features: the new features
    get a zero coefficient, a new floor (``KernelFormula.floor``) a zero floor, and a
    one-line fit of a formula that now has several lines that line repeated, so the fit
    predicts exactly what it did. The names are as the fit names its coefficients
    (``KernelFormula.model_name_of``)."""
    current = formula.model_name_of(fit.params)
    old, new = fit.model.split("+"), current.split("+")
    if formula.lines > 1 and old == ["bandwidth"]:
        # One line written before the formula had several (``KernelFormula.lines``): every
        # later line a copy of it, so the least of them is the line it was.
        for i in range(2, formula.lines + 1):
            for name, first in zip(line_params(i), line_params(1), strict=True):
                if first in fit.params:
                    fit.params.setdefault(name, fit.params[first])
        fit.model = current
        return
    if old == new or old[0] != new[0] or not set(old[1:]) <= set(new[1:]):
        return
    for extra in new[1:]:
        fit.params.setdefault(FLOOR_PARAM if extra == FLOOR else f"c_{extra}", 0.0)
    fit.model = current


def _launch_rule(name: str, fit: KernelFit) -> str:
    """The decode launch rule of fit ``name`` from its ``provenance``
    (``features.decode_launch_rule``)."""
    src = fit.provenance or {}
    return ft.decode_launch_rule(
        name,
        str(src.get("framework", "")),
        str(src.get("device", "")),
        str(src.get("kernel_source", "")),
    )


def stale_launch_coefficient(name: str, fit: KernelFit, where: str) -> None:
    """Refuse an SGLang FlashInfer attention decode fit read from a file under the launch
    coefficient's slot name ``c_waves_d``: written before attnfix39 (session 39) it was fitted
    to FA3's grid, between then and session 40 to FlashInfer's, so the name no longer says
    which (review39's first item); a fit made since is written ``c_flashinfer_waves``
    (``features.launch_coefficient``). ``twin calibrate ... --refit attn_decode`` refits it."""
    try:
        formula = get_formula(name)
    except TwinError:
        return  # an unknown family: the profile's own check names it
    if not formula.aliases or ft.WAVES_COEFFICIENT not in fit.params:
        return
    if _launch_rule(name, fit) == ft.FLASHINFER_GRID_RULE:
        raise TwinError(
            f"{where}: an SGLang FlashInfer decode fit names its launch coefficient "
            f"{ft.WAVES_COEFFICIENT}, fitted to FA3's grid before session 39 and to "
            f"FlashInfer's after; refit the family (twin calibrate --from aiconfigurator "
            f"--refit {family(name)} ...), whose fit is written {ft.FLASHINFER_COEFFICIENT}"
        )


def name_launch_coefficient(name: str, fit: KernelFit, formula: KernelFormula) -> None:
    """An aliased coefficient (``KernelFormula.aliases``: the attention decode families'
    third) under the name its launch rule gives it (``features.launch_coefficient`` of
    ``features.decode_launch_rule`` of the fit's ``provenance``): a TensorRT-LLM Hopper XQA
    fit written with ``c_waves_d`` reads as ``c_xqa_ctas``, at the same value and position
    (the same prices), and its model name says so (``KernelFormula.model_name_of``:
    ``...+xqa_ctas``; a fit named for either naming of this formula is renamed, any other
    name is left for the check to refuse)."""
    if not formula.aliases:
        return
    want = ft.launch_coefficient(_launch_rule(name, fit))
    # The names this formula's fit may carry now: the slot's (the name every fit of the
    # family had before session 39's review; a fit saved since attnfix39 carries it with
    # ``c_xqa_ctas``) and the one its coefficients give.
    named = {formula.model_name, formula.model_name_of(fit.params)}
    for a, b in formula.aliases:
        old = b if want == a else a if want == b else None
        if old is not None and old in fit.params and want not in fit.params:
            fit.params = {(want if k == old else k): v for k, v in fit.params.items()}
    if fit.model in named:
        fit.model = formula.model_name_of(fit.params)


__all__ = ["name_launch_coefficient", "stale_launch_coefficient", "upgrade_fit"]
