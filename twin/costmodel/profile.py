"""``Profile``: the fitted latency models of one device, with where they came from.

A profile is JSON (schema below) so that ``twin cost`` and the cost model read
it without torch. ``source`` says how it was made:

- ``measured``: kernels timed on the device by ``twin calibrate``;
- ``transferred``: a measured profile rescaled to another GPU's datasheet peaks;
- ``datasheet``: a roofline with documented default efficiencies (uncalibrated).

Schema::

    {"schema": 1, "gpu": "h100", "device": "NVIDIA H100 80GB HBM3",
     "source": "measured" | "datasheet" | "transferred", "transferred_from": null,
     "dtype": "bfloat16", "provenance": {"date": ..., "torch": ..., ...},
     "peaks": {"flops": ..., "mem_bw": ..., "host_bw": ..., "interconnect_bw": ...,
               "allreduce_latency_s": ...},
     "kernels": {"gemm": {"model": "roofline", "params": {...},
                          "heldout_median_rel_err": 0.04, "heldout_max_rel_err": 0.12,
                          "n_shapes": 36, "n_heldout": 9}, ...},
     "table_releases": {"moe_fp8": {"default": "0.24.0",
                                    "fits": {"0.19.0": {<a kernel fit>}}}, ...}}

``table_releases`` (only where a family's kernel table differs by engine release: a
profile from NVIDIA's tables, ``twin calibrate --from aiconfigurator``) holds each
family's fit from the other releases' tables; ``kernels`` holds the ``default``
release's (the newest). :meth:`Profile.at_release` prices a release
(``twin.costmodel.table_release``). An all-reduce family may also hold, under the key
``unfused_fits`` (never under ``fits``), the fits of tables that time the un-fused op's
own algorithm picks (``twin.calibration.aic_collectives.UNFUSED_TWOSHOT_TABLES``): only
a layout running its all-reduces un-fused reads them
(:meth:`Profile.with_unfused_allreduce`); ``fits`` and ``kernels`` price every layout.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from twin.atomic import write_text_atomic
from twin.costmodel.collective_families import is_allreduce_kernel
from twin.costmodel.engine_kernels import release_kernel, table_kernel
from twin.costmodel.fit_upgrade import (
    name_launch_coefficient,
    stale_launch_coefficient,
    upgrade_fit,
)
from twin.costmodel.formulas import MOE_VARIANTS, check_params, get_formula
from twin.costmodel.kernel_formula import FLOOR_PARAM, MAX_LINES, line_params
from twin.costmodel.moe_layout import group_tied_table
from twin.costmodel.series_term import SeriesError, SeriesTerm
from twin.costmodel.table_release import pick_for_kernel, pick_version
from twin.errors import TwinError
from twin.limits import check_json_depth

SCHEMA_VERSION = 1
# ``TableReleases.unfused_fits``' JSON key: a key of its own, so a reader of ``fits``
# never takes an un-fused table for one every layout runs.
UNFUSED_FITS_KEY = "unfused_fits"
# ``mixed``: the families come from different places; each fit says where.
SOURCES = ("measured", "datasheet", "transferred", "mixed")


REQUIRED_PEAKS = ("flops", "mem_bw", "host_bw")

# Physical ranges of the numbers a profile holds, checked on load (issue 32): a NaN, a
# negative or a 1e300 reaches the cost model as NaN or negative latencies otherwise.
# Peaks by the unit their name ends in, each bound far above any device: FLOP/s under
# 1e17 (GB300's dense FP4 is 1.5e16), bytes/s under 1e14 (HBM at 8e12 B/s on B200, NVLink
# 5 at 1.8e12), a device memory under 1e13 bytes (288 GB on B300; a GB200 NVL72 rack holds
# 1.35e13 in all), a latency under one second.
PEAK_RANGES: tuple[tuple[str, float, str], ...] = (
    ("flops", 1e17, "FLOP/s"),
    ("_bw", 1e14, "B/s"),
    ("_bytes", 1e13, "bytes"),
    ("_s", 1.0, "s"),
)
# The fit parameters of ``twin.costmodel.kernel_formula`` (t = t0 + smax_p(F / (eff_flops *
# peak) + sum c_j x_j, B / (eff_bytes * peak))). None may be negative: t0 is a launch's
# fixed time (negative: a small kernel takes negative time); eff_* divide the peaks (zero:
# infinite time; negative: negative time); each c_j multiplies a feature that grows with
# tokens and context (negative: a latency that falls with work, and goes negative on a
# large shape); p is the smooth-max exponent, between max(a, b) and a + b only for p >= 1.
# The upper bounds are the fitter's own box (twin.calibration.fit: t0 <= 10 s, eff <= 4,
# p <= 20), widened: a second per unit of any feature is no GPU kernel, and an efficiency
# of 1e-6 (a millionth of the peak) is no kernel either.
PARAM_RANGES: dict[str, tuple[float, float, str]] = {
    "t0_s": (0.0, 10.0, "s"),
    "eff_flops": (1e-6, 10.0, "(a fraction of the FLOP/s peak)"),
    "eff_bytes": (1e-6, 10.0, "(a fraction of the bandwidth peak)"),
    "p": (1.0, 100.0, "(the smooth-max exponent)"),
    FLOOR_PARAM: (0.0, 10.0, "s"),  # a floor the work hides under (``KernelFormula.floor``)
}
# A several-line formula's later lines (``KernelFormula.lines``): as the first's.
PARAM_RANGES.update(
    {
        name: PARAM_RANGES[first]
        for i in range(2, MAX_LINES + 1)
        for name, first in zip(line_params(i), line_params(1), strict=True)
    }
)
COEF_RANGE = (0.0, 1.0, "s per unit of its feature")
MAX_OVERHEAD_S = 10.0  # a layer's host overhead, seconds


class _Bad(Exception):
    """A profile field out of range: ``str`` is ``path: what`` (the caller adds the file)."""

    def __init__(self, path: str, what: str) -> None:
        super().__init__(f"{path}: {what}")


def _number(value: Any, path: str) -> float:
    """A JSON number (not a bool, not a string) as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Bad(path, f"must be a number (got {type(value).__name__} {value!r:.40})")
    try:
        return float(value)
    except OverflowError:  # an integer past a double's range
        raise _Bad(path, "must be finite (got an integer past 1e308)") from None


def _whole(value: Any, path: str) -> int:
    """A non-negative whole number (a count)."""
    v = _number(value, path)
    if not (math.isfinite(v) and v >= 0 and v == int(v)):
        raise _Bad(path, f"must be a whole number >= 0 (got {value!r})")
    return int(v)


def _in_range(v: float, path: str, low: float, high: float, unit: str, low_open: bool) -> None:
    if not math.isfinite(v):
        raise _Bad(path, f"must be finite (got {v!r})")
    if (v <= low if low_open else v < low) or v > high:
        lo = f"> {low:g}" if low_open else f">= {low:g}"
        raise _Bad(path, f"must be {lo} and <= {high:g} {unit} (got {v!r})")


def check_peak(name: str, v: float) -> None:
    """One peak: finite, positive (a latency may be 0), within its unit's bound."""
    for suffix, high, unit in PEAK_RANGES:
        if name.endswith(suffix):
            _in_range(v, f"peaks.{name}", 0.0, high, unit, low_open=suffix != "_s")
            return
    _in_range(v, f"peaks.{name}", 0.0, math.inf, "", low_open=True)


def check_fit(name: str, fit: KernelFit, formula_params: tuple[str, ...]) -> None:
    """A kernel fit's parameters and held-out errors (field paths under ``kernels.NAME``)."""
    where = f"kernels.{name}"
    for key, v in fit.params.items():
        path = f"{where}.params.{key}"
        if key not in formula_params:
            raise _Bad(path, f"not a parameter of {fit.model} (has {', '.join(formula_params)})")
        low, high, unit = PARAM_RANGES.get(key, COEF_RANGE)
        _in_range(v, path, low, high, unit, low_open=False)
    for key in ("heldout_median_rel_err", "heldout_p90_rel_err", "heldout_max_rel_err"):
        v = getattr(fit, key)
        if v is not None and not (math.isfinite(v) and v >= 0):
            raise _Bad(f"{where}.{key}", f"must be finite and >= 0, or null (got {v!r})")


@dataclass
class KernelFit:
    """One kernel's fitted model and how well it predicts shapes it was not fitted on."""

    model: str
    params: dict[str, float]
    heldout_median_rel_err: float | None = None
    heldout_max_rel_err: float | None = None
    n_shapes: int = 0
    n_heldout: int = 0
    note: str = ""
    heldout_p90_rel_err: float | None = None
    # Rows refused as physically impossible for the device (faster than its peaks).
    n_flagged: int = 0
    # Where this family's numbers come from when it differs per family (see
    # twin.costmodel.provenance): {"source": "measured" | "datasheet" | ..., "label": ...}.
    provenance: dict[str, Any] = field(default_factory=dict)
    # A fused-MoE family's per-shape term (twin.costmodel.series_term); None: none.
    series: SeriesTerm | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (``note``, p90, flagged rows, provenance and the per-shape
        term only when set)."""
        out: dict[str, Any] = {
            "model": self.model,
            "params": dict(self.params),
            "heldout_median_rel_err": self.heldout_median_rel_err,
            "heldout_max_rel_err": self.heldout_max_rel_err,
            "n_shapes": self.n_shapes,
            "n_heldout": self.n_heldout,
        }
        if self.heldout_p90_rel_err is not None:
            out["heldout_p90_rel_err"] = self.heldout_p90_rel_err
        if self.n_flagged:
            out["n_flagged"] = self.n_flagged
        if self.provenance:
            out["provenance"] = dict(self.provenance)
        if self.note:
            out["note"] = self.note
        if self.series is not None:
            out["series"] = self.series.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "kernel") -> KernelFit:
        """Inverse of ``to_dict``; every number checked for its JSON type (``where``: the
        field path of this fit, e.g. ``kernels.gemm``, for the error)."""
        _object(data, where)
        _object(data["params"], f"{where}.params")
        series = None
        if data.get("series") is not None:
            try:
                series = SeriesTerm.from_dict(data["series"])
            except SeriesError as bad:
                raise TwinError(f"{where}.series{bad}") from None
        return cls(
            model=_text(data["model"], f"{where}.model"),
            params={k: _number(v, f"{where}.params.{k}") for k, v in data["params"].items()},
            heldout_median_rel_err=_opt_float(data, "heldout_median_rel_err", where),
            heldout_max_rel_err=_opt_float(data, "heldout_max_rel_err", where),
            n_shapes=_whole(data.get("n_shapes", 0), f"{where}.n_shapes"),
            n_heldout=_whole(data.get("n_heldout", 0), f"{where}.n_heldout"),
            note=str(data.get("note", "")),
            heldout_p90_rel_err=_opt_float(data, "heldout_p90_rel_err", where),
            n_flagged=_whole(data.get("n_flagged", 0), f"{where}.n_flagged"),
            provenance=dict(_object(data.get("provenance") or {}, f"{where}.provenance")),
            series=series,
        )


@dataclass
class TableReleases:
    """One kernel family's fits from the tables of engine releases other than the
    ``default`` one (whose fit is the profile's ``kernels`` entry), by release."""

    default: str
    fits: dict[str, KernelFit]
    # False: the ``default`` release (and every release it prices) has no table of this
    # family, so ``kernels`` has no entry for it and only ``fits``' releases price it
    # (SGLang's MLA module tables, collected up to 0.5.10: ``calibration.aic_mla``).
    default_fit: bool = True
    # An all-reduce family's fits, by release, from tables that time the op un-fused
    # where the engine's fused op runs another algorithm
    # (``calibration.aic_collectives.UNFUSED_TWOSHOT_TABLES``): read only for a layout
    # whose all-reduces run un-fused (:meth:`Profile.with_unfused_allreduce`), never by
    # :meth:`Profile.at_release`. Written under the JSON key ``unfused_fits`` (absent
    # when empty), so a reader of ``fits`` alone never prices a release with them.
    unfused_fits: dict[str, KernelFit] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"default": self.default}
        if not self.default_fit:
            out["default_fit"] = False
        out["fits"] = {k: f.to_dict() for k, f in self.fits.items()}
        if self.unfused_fits:
            out[UNFUSED_FITS_KEY] = {k: f.to_dict() for k, f in self.unfused_fits.items()}
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str) -> TableReleases:
        _object(data, where)
        fits = _object(data.get("fits"), f"{where}.fits")
        # Absent: none; present, an object (``null`` or a list is a malformed file).
        unfused = _object(data.get(UNFUSED_FITS_KEY, {}), f"{where}.{UNFUSED_FITS_KEY}")
        default_fit = data.get("default_fit", True)
        if not isinstance(default_fit, bool):
            raise TwinError(f"{where}.default_fit: must be true or false (got {default_fit!r})")
        return cls(
            default=_text(data.get("default"), f"{where}.default"),
            fits={k: KernelFit.from_dict(v, f"{where}.fits.{k}") for k, v in fits.items()},
            default_fit=default_fit,
            unfused_fits={
                k: KernelFit.from_dict(v, f"{where}.{UNFUSED_FITS_KEY}.{k}")
                for k, v in unfused.items()
            },
        )


@dataclass
class Profile:
    """Fitted kernel models of one device; see the module docstring for the schema."""

    gpu: str  # registry name: a100, h100, ..., cpu
    device: str  # the device's own name (or the datasheet's)
    source: str  # measured | datasheet | transferred
    peaks: dict[str, float]
    kernels: dict[str, KernelFit]
    provenance: dict[str, Any] = field(default_factory=dict)
    transferred_from: str | None = None
    dtype: str = "bfloat16"
    # Host overhead per layer kind beyond the kernels (calibration.overhead):
    # {"mode": "add" | "max", "model": ..., "seconds": {"attention": s, ...}}; None: not measured.
    layer_overhead: dict[str, Any] | None = None
    # Per kernel family, its fits from other engine releases' tables (module docstring).
    table_releases: dict[str, TableReleases] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:
            self._check_numbers()
        except _Bad as bad:
            raise TwinError(f"profile {self.gpu!r}: {bad}") from None
        if self.source not in SOURCES:
            raise TwinError(
                f"profile {self.gpu!r}: source must be one of {', '.join(SOURCES)} "
                f"(got {self.source!r})"
            )
        if self.source == "transferred" and not self.transferred_from:
            raise TwinError(
                f"profile {self.gpu!r}: a transferred profile must say transferred_from"
            )
        for key in REQUIRED_PEAKS:
            if self.peaks.get(key) is None:
                raise TwinError(f"profile {self.gpu!r}: peaks.{key}: missing (a positive peak)")
        fits = list(self.kernels.items())
        for name, rel in self.table_releases.items():
            if rel.default_fit and name not in self.kernels:
                raise TwinError(
                    f"profile {self.gpu!r}: table_releases.{name}: no kernel {name!r} to vary"
                )
            fits += [(name, f) for f in [*rel.fits.values(), *rel.unfused_fits.values()]]
            if rel.unfused_fits and not is_allreduce_kernel(name):
                raise TwinError(
                    f"profile {self.gpu!r}: table_releases.{name}.{UNFUSED_FITS_KEY}: only "
                    "an all-reduce family has un-fused fits"
                )
            shared = sorted(set(rel.unfused_fits) & {*rel.fits, rel.default})
            if shared:
                raise TwinError(
                    f"profile {self.gpu!r}: table_releases.{name}.{UNFUSED_FITS_KEY}: "
                    f"release {shared[0]} is a table every layout reads too"
                )
        for name, fit in fits:
            formula = get_formula(name)
            upgrade_fit(fit, formula)
            name_launch_coefficient(name, fit, formula)
            if fit.model != formula.model_name_of(fit.params):
                raise TwinError(
                    f"profile {self.gpu!r}, kernel {name!r}: model {fit.model!r} "
                    f"is not this version's {formula.model_name_of(fit.params)!r}"
                )
            try:
                check_fit(name, fit, formula.params_of(fit.params))
            except _Bad as bad:
                raise TwinError(f"profile {self.gpu!r}: {bad}") from None
            check_params(name, fit.params)
            if fit.series is not None and name not in MOE_VARIANTS:
                raise TwinError(
                    f"profile {self.gpu!r}, kernel {name!r}: series: only a fused-MoE "
                    "family takes a per-shape term"
                )
            peak = formula.flops_peak
            if formula.uses_flops and peak not in ("flops", "fp32_flops"):
                v = self.peaks.get(peak)
                if v is None or not math.isfinite(v) or v <= 0:
                    raise TwinError(
                        f"profile {self.gpu!r}, kernel {name!r}: needs a positive peak "
                        f"{peak!r} (got {v!r})"
                    )

    def _check_numbers(self) -> None:
        """Every peak and host overhead finite and within its physical range (the fits are
        checked per kernel, after their formula is known)."""
        for key, v in self.peaks.items():
            check_peak(key, v)
        if self.layer_overhead is not None:
            for kind, v in self.layer_overhead["seconds"].items():
                _in_range(
                    v, f"layer_overhead.seconds.{kind}", 0.0, MAX_OVERHEAD_S, "s", low_open=False
                )

    def table_picks(
        self, release: str | None, group_limited: bool = False, unfused_allreduce: bool = False
    ) -> dict[str, str]:
        """Per kernel family whose table differs by engine release, the release of the
        table that prices ``release`` (:func:`~twin.costmodel.table_release.pick_version`:
        the newest at or before it, among the tables timing the kernel the release runs
        where that is known, :meth:`_pick`; ``release`` empty: each family's default, the
        newest). ``group_limited`` (a model routing within its best expert groups,
        :func:`~twin.costmodel.moe_layout.group_limited`): a fused-MoE family's tables
        timed at the collectors' group tie are passed over where one of the same kernel
        is not (:func:`~twin.costmodel.moe_layout.group_tied_table`), release empty too.
        A family whose default release has no table of it (``TableReleases.default_fit``)
        is left out where that default is picked. ``unfused_allreduce`` (a layout running
        its all-reduces un-fused): the all-reduce families pick among their
        ``TableReleases.unfused_fits`` too (:meth:`with_unfused_allreduce`)."""
        picks = {}
        for name, rel in self.table_releases.items():
            untie = group_limited and name in MOE_VARIANTS
            unfused = unfused_allreduce and bool(rel.unfused_fits)
            chosen = self._pick(name, rel, release, untie, unfused) if release or untie else None
            chosen = chosen or rel.default
            if chosen != rel.default or rel.default_fit:  # a family it has no table of: none
                picks[name] = chosen
        return picks

    def _pick(
        self,
        name: str,
        rel: TableReleases,
        release: str | None,
        untie: bool = False,
        unfused: bool = False,
    ) -> str | None:
        """The table of family ``name`` that prices ``release``: the rule of
        :func:`~twin.costmodel.table_release.pick_for_kernel` over each table's kernel
        (its fit's ``kernel_source``, :func:`~twin.costmodel.engine_kernels.table_kernel`)
        and the kernel the release runs on this GPU
        (:func:`~twin.costmodel.engine_kernels.release_kernel`; the engine is the fits'
        ``framework``). ``untie``: where that table was timed at the group tie, the same rule
        among the tables of its ``kernel_source`` that were not, if any. ``unfused``: the
        un-fused op's tables (``TableReleases.unfused_fits``) are among the candidates."""
        fits = {**rel.fits, **(rel.unfused_fits if unfused else {})}
        if rel.default_fit and name in self.kernels:
            fits[rel.default] = self.kernels[name]
        engine = next((str(f.provenance.get("framework", "")) for f in fits.values()), "")
        timed = {
            v: table_kernel(engine, str(f.provenance.get("kernel_source", "")))
            for v, f in fits.items()
        }
        timed.setdefault(rel.default, None)
        chosen = pick_for_kernel(timed, release, release_kernel(engine, name, self.gpu, release))
        if not untie or chosen is None or not group_tied_table(engine, chosen):
            return chosen
        source = {v: f.provenance.get("kernel_source") for v, f in fits.items()}
        clear = [
            v for v in fits if source[v] == source.get(chosen) and not group_tied_table(engine, v)
        ]
        return pick_version(clear, release) or chosen

    def at_release(self, release: str | None, group_limited: bool = False) -> Profile:
        """This profile pricing engine release ``release`` for a model whose routing is
        ``group_limited`` or not: each family with fits from several releases' tables
        takes the fit of :meth:`table_picks`; itself when no family changes."""
        if not (release or group_limited) or not self.table_releases:
            return self
        kernels = dict(self.kernels)
        for name, chosen in self.table_picks(release, group_limited).items():
            if chosen != self.table_releases[name].default:
                kernels[name] = self.table_releases[name].fits[chosen]
        return replace(self, kernels=kernels)

    def with_unfused_allreduce(self, release: str | None) -> Profile:
        """This profile (as :meth:`at_release` left it) for a layout whose all-reduces
        run un-fused (no norm inside them: ``KernelLayout.norm_in_allreduce`` false), at
        engine release ``release``: each all-reduce family with un-fused fits
        (``TableReleases.unfused_fits``) takes the table :meth:`table_picks` picks with
        them among the candidates where that is one of them; every other family, and
        every family where the pick is a table :meth:`at_release` reads too, as it is
        (the pick over more tables that lands on one of the fewer is that one's pick:
        the newest at or before ``release``, else the oldest). Itself when nothing
        changes (no release, or no un-fused fits)."""
        if not release or not any(r.unfused_fits for r in self.table_releases.values()):
            return self
        kernels = dict(self.kernels)
        for name, chosen in self.table_picks(release, unfused_allreduce=True).items():
            rel = self.table_releases[name]
            if chosen in rel.unfused_fits:
                kernels[name] = rel.unfused_fits[chosen]
        if kernels == self.kernels:
            return self
        return replace(self, kernels=kernels)

    def with_marlin_experts(self, family: str) -> Profile:
        """This profile with fused-MoE family ``family`` run by vLLM's Marlin MoE kernel:
        its fit becomes the profile's Marlin WNA16 fit (the family whose table's kernel is
        :data:`~twin.costmodel.engine_kernels.MARLIN_WNA16`, at the profile's default
        tables) with its compute term slower by ``MARLIN_EXPERT_SCALE`` (``eff_flops``
        over the factor). That fit's per-shape term is another model's and is dropped.
        An mxfp4 family's fit carries the padded shape the kernel runs the experts at
        (:data:`~twin.costmodel.engine_kernels.MARLIN_MXFP4_PAD`, provenance
        ``moe_pad_hidden`` / ``moe_pad_width``: ``MoePricing`` prices it).
        One line where the profile has no such fit or the GPU no factor."""
        from twin.costmodel.engine_kernels import (
            MARLIN_EXPERT_SCALE,
            MARLIN_MXFP4_PAD,
            MARLIN_WNA16,
        )

        scale = MARLIN_EXPERT_SCALE.get((family, self.gpu))
        marlin = next(
            (
                fit
                for fit in self.kernels.values()
                if table_kernel(
                    str(fit.provenance.get("framework", "")),
                    str(fit.provenance.get("kernel_source", "")),
                )
                == MARLIN_WNA16
            ),
            None,
        )
        if scale is None or marlin is None or family not in self.kernels:
            raise TwinError(
                f"Marlin {family} experts: profile {self.gpu!r} has "
                + ("no Marlin fused-MoE fit" if marlin is None else f"no Marlin {family} timing")
                + f" (priced on {', '.join(sorted({g for _, g in MARLIN_EXPERT_SCALE}))})"
            )
        params = {**marlin.params, "eff_flops": marlin.params["eff_flops"] / scale}
        label = str(marlin.provenance.get("label", ""))
        # vLLM pads the mxfp4 experts' shape for Marlin (MARLIN_MXFP4_PAD); another Marlin
        # family (int4 WNA16) keeps the model's
        pad = (
            {"moe_pad_hidden": MARLIN_MXFP4_PAD[0], "moe_pad_width": MARLIN_MXFP4_PAD[1]}
            if family == "moe_mxfp4"
            else {}
        )
        fit = replace(
            marlin,
            params=params,
            series=None,
            provenance={
                **marlin.provenance,
                "label": f"{label}, compute x {scale:g} (Marlin {family}: MARLIN_EXPERT_SCALE)",
                **pad,
            },
        )
        return replace(self, kernels={**self.kernels, family: fit})

    def with_experts_fit(self, family: str, kernel: str, why: str) -> Profile:
        """This profile with fused-MoE family ``family`` priced by its fit ``kernel``, another
        kernel of the same experts that prices with the same features and peak
        (``moe_families.moe_mxfp8_activation_kernel``: the mxfp8-activation kernel of the mxfp4
        experts). One line naming ``why`` (the setting that asked for it) where the
        profile has no such fit."""
        if family not in self.kernels or kernel not in self.kernels:
            has = ", ".join(sorted(k for k in self.kernels if k.startswith("moe"))) or "none"
            raise TwinError(
                f"{why}: profile {self.gpu!r} has no {kernel} fit (its fused-MoE fits: {has})"
            )
        return replace(self, kernels={**self.kernels, family: self.kernels[kernel]})

    # ------------------------------------------------------------ display
    @property
    def provenance_label(self) -> str:
        """One line saying where the numbers come from, shown by every output: the
        mixture per kernel family when the families differ."""
        if any(fit.provenance for fit in self.kernels.values()):
            return self.provenance_mixture()
        return self.profile_label()

    def profile_label(self) -> str:
        """Where the whole profile comes from (families without their own provenance)."""
        if self.source == "measured":
            date = self.provenance.get("date", "undated")
            return f"measured on {self.device}, {date}"
        if self.source == "transferred":
            return f"transferred from {self.transferred_from}"
        if self.source == "mixed":
            return "mixed (see each kernel family)"
        return "datasheet roofline (uncalibrated)"

    def provenance_mixture(self) -> str:
        """Per kernel family, e.g. "attention: measured (vLLM 0.24.0 FA3, H100 SXM5); SSM
        scan: datasheet" (``twin.costmodel.provenance``)."""
        from twin.costmodel.provenance import mixture  # late: provenance imports this module

        return mixture(self)

    def precisions(self) -> list[str]:
        """The ``--precision`` values this profile has a GEMM fit for, bf16 first."""
        from twin.precision import WEIGHT_FORMATS  # late: twin.precision is model-side

        return [f.name for f in WEIGHT_FORMATS.values() if f.kernel in self.kernels]

    def heldout_summary(self) -> dict[str, dict[str, float | int | None]]:
        """Held-out errors by kernel, as printed by ``twin calibrate``."""
        return {
            name: {
                "median": fit.heldout_median_rel_err,
                "p90": fit.heldout_p90_rel_err,
                "max": fit.heldout_max_rel_err,
                "flagged": fit.n_flagged,
                "n_shapes": fit.n_shapes,
                "n_heldout": fit.n_heldout,
            }
            for name, fit in self.kernels.items()
        }

    # ------------------------------------------------------------ I/O
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict in the documented schema."""
        out = {
            "schema": SCHEMA_VERSION,
            "gpu": self.gpu,
            "device": self.device,
            "source": self.source,
            "transferred_from": self.transferred_from,
            "provenance_label": self.provenance_label,
            "dtype": self.dtype,
            "provenance": self.provenance,
            "peaks": self.peaks,
            "kernels": {k: v.to_dict() for k, v in self.kernels.items()},
        }
        if self.layer_overhead is not None:
            out["layer_overhead"] = self.layer_overhead
        if self.table_releases:
            out["table_releases"] = {k: v.to_dict() for k, v in self.table_releases.items()}
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "profile") -> Profile:
        """Inverse of ``to_dict``; a ``TwinError`` naming ``where`` on a malformed one."""
        try:
            if data.get("schema", SCHEMA_VERSION) != SCHEMA_VERSION:
                raise TwinError(
                    f"{where}: schema {data.get('schema')!r} is not "
                    f"{SCHEMA_VERSION}; re-run twin calibrate"
                )
            # Parsed in the order the fields were always checked (a file with several faults
            # names the same first one), then the fits' launch names, before the profile's own
            # checks rename them (``fit_upgrade.name_launch_coefficient``).
            peaks = _object(data["peaks"], "peaks")
            raw_kernels = _object(data["kernels"], "kernels")
            gpu = _text(data["gpu"], "gpu")
            device = _text(data["device"], "device")
            source = _text(data["source"], "source")
            numbers = {k: _number(v, f"peaks.{k}") for k, v in peaks.items() if v is not None}
            kernels = {k: KernelFit.from_dict(v, f"kernels.{k}") for k, v in raw_kernels.items()}
            provenance = dict(_object(data.get("provenance") or {}, "provenance"))
            transferred = data.get("transferred_from")
            transferred_from = (
                None if transferred is None else _text(transferred, "transferred_from")
            )
            dtype = _text(data.get("dtype", "bfloat16"), "dtype")
            overhead = _overhead(data.get("layer_overhead"))
            releases = {
                k: TableReleases.from_dict(v, f"table_releases.{k}")
                for k, v in _object(data.get("table_releases") or {}, "table_releases").items()
            }
            for name, fit in kernels.items():
                stale_launch_coefficient(name, fit, f"kernels.{name}")
            for name, rel in releases.items():
                for release, fit in rel.fits.items():
                    stale_launch_coefficient(name, fit, f"table_releases.{name}.fits.{release}")
            return cls(
                gpu=gpu,
                device=device,
                source=source,
                peaks=numbers,
                kernels=kernels,
                provenance=provenance,
                transferred_from=transferred_from,
                dtype=dtype,
                layer_overhead=overhead,
                table_releases=releases,
            )
        except _Bad as bad:
            raise TwinError(f"{where}: {bad}") from None
        except TwinError as err:
            # The checks name the profile by its gpu field; the file says it better.
            text = re.sub(r"^profile '[^']*'(: |, )", "", str(err))
            raise TwinError(f"{where}: {text}") from None
        except KeyError as err:
            raise TwinError(f"{where}: not a valid profile (field {err} missing)") from None
        except (TypeError, ValueError, AttributeError) as err:
            raise TwinError(f"{where}: not a valid profile ({type(err).__name__}: {err})") from None

    def save(self, path: str | Path) -> Path:
        """Write atomically as indented JSON; returns the path."""
        path = Path(path)
        write_text_atomic(path, json.dumps(self.to_dict(), indent=2) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path, drop: Callable[[str], bool] | None = None) -> Profile:
        """Read a profile file; ``drop``: families left out, in ``kernels`` and
        ``table_releases``, before anything is checked (``twin calibrate --refit``'s,
        whose fits may be of a formula this version no longer reads)."""
        path = Path(path)
        try:
            text = path.read_text()
            check_json_depth(text, str(path))
            data = json.loads(text)
        except FileNotFoundError:
            raise TwinError(f"{path}: no such profile file") from None
        except (OSError, ValueError) as err:  # ValueError: bad JSON, or not UTF-8 (a binary file)
            raise TwinError(f"{path}: cannot read profile ({err})") from None
        if not isinstance(data, dict):
            raise TwinError(f"{path}: not a valid profile (expected a JSON object)")
        if drop is not None:
            for part in ("kernels", "table_releases"):
                if isinstance(data.get(part), dict):
                    data[part] = {k: v for k, v in data[part].items() if not drop(k)}
        return cls.from_dict(data, where=str(path))


def _overhead(data: Any) -> dict[str, Any] | None:
    """A ``layer_overhead`` entry, checked: a mode and non-negative seconds per layer kind."""
    if data is None:
        return None
    _object(data, "layer_overhead")
    mode, seconds = data["mode"], _object(data["seconds"], "layer_overhead.seconds")
    if mode not in ("add", "max"):
        raise _Bad("layer_overhead.mode", f"must be add or max (got {mode!r:.40})")
    out = {k: _number(v, f"layer_overhead.seconds.{k}") for k, v in seconds.items()}
    return {**data, "seconds": out}


def _object(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Bad(path, f"must be a JSON object (got {type(value).__name__})")
    return value


def _text(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise _Bad(path, f"must be a string (got {type(value).__name__})")
    return value


def _opt_float(data: dict[str, Any], key: str, where: str) -> float | None:
    v = data.get(key)
    return None if v is None else _number(v, f"{where}.{key}")
