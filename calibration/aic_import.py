"""``twin calibrate --from aiconfigurator``: fit the twin's kernel models to NVIDIA's tables.

For one GPU and one engine: read every kernel family the tables cover
(``calibration.aic_tables``), refuse the rows that are physically impossible for
the device (faster than its peak FLOP/s or its memory/link bandwidth: an
L2-resident small GEMM timed back to back, say), fit each family's model on a
seeded three quarters of the remaining shapes, and write the held-out median,
P90 and max relative error, the flagged count and the rows' provenance into each
family. Families the tables lack (the Mamba2 scan and state update, element-wise
passes, copies) keep the GPU's datasheet model, labelled ``datasheet``; a
measured family can replace them later with ``twin calibrate --merge``.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from calibration.aic_tables import (
    ENGINE_NAMES,
    PACKAGE,
    FamilyRows,
    installed_version,
    read_families,
)
from calibration.datasheet import datasheet_profile
from calibration.fit import HOLDOUT_SHARE, fit_kernel
from twin.costmodel import formulas as fm
from twin.costmodel.profile import KernelFit, Profile
from twin.errors import TwinError
from twin.hardware import get_gpu

# Slack on the peaks before a row counts as impossible: datasheet peaks are
# rounded and boost clocks run a few percent above base.
PEAK_SLACK = 1.05
# Shapes a family is fitted on, where the table sweeps wider than serving needs:
# GEMMs whose output and reduction widths are both >= 1024 (every projection of the
# preset models; the tables' 32-512-wide products follow cuBLAS's small-kernel
# choices, which one roofline cannot follow). Rows outside are counted, not fitted.
DOMAINS: dict[str, Callable[[dict[str, Any]], bool]] = {
    "gemm": lambda shape: shape["n"] >= 1024 and shape["k"] >= 1024,
}


@dataclass
class ImportResult:
    """A fitted profile and what the import did per family."""

    profile: Profile
    families: list[str] = field(default_factory=list)
    datasheet_families: list[str] = field(default_factory=list)


def impossible(kernel: str, row: dict[str, Any], peaks: dict[str, float]) -> str | None:
    """Why ``row`` is faster than the device can be (None if it is possible)."""
    f = fm.get_formula(kernel)
    t = float(row["median_s"])
    if f.uses_flops and row["flops"] / t > PEAK_SLACK * peaks["flops"]:
        return "above peak FLOP/s"
    if row["bytes"] / t > PEAK_SLACK * peaks[f.bytes_peak]:
        return f"above peak {f.bytes_peak}"
    return None


def split_impossible(
    kernel: str, rows: Sequence[dict[str, Any]], peaks: dict[str, float]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(possible rows, flagged rows)."""
    ok: list[dict[str, Any]] = []
    flagged: list[dict[str, Any]] = []
    for r in rows:
        (flagged if impossible(kernel, r, peaks) else ok).append(r)
    return ok, flagged


def family_label(fam: FamilyRows, device: str) -> str:
    """E.g. "measured (vLLM 0.24.0 vllm_flash_attn_fa3, H100 SXM5)"."""
    # causal_conv1d_fn / causal_conv1d_update: one CUDA extension, named once.
    kernel = fam.kernel_source.removesuffix("_fn").removesuffix("_update")
    who = " ".join(x for x in (fam.framework, fam.version, kernel) if x)
    return f"measured ({who}, {device})"


def fit_family(
    fam: FamilyRows, peaks: dict[str, float], device: str, seed: int = 0
) -> KernelFit | None:
    """The family's fit with its provenance; None if every row was impossible."""
    inside = DOMAINS.get(fam.kernel, lambda shape: True)
    rows = [r for r in fam.rows if inside(r["shape"])]
    ok, flagged = split_impossible(fam.kernel, rows, peaks)
    if not ok:
        return None
    fit = fit_kernel(fam.kernel, ok, peaks, HOLDOUT_SHARE, seed)
    fit.n_flagged = len(flagged)
    fit.provenance = {
        "source": "measured",
        "label": family_label(fam, device),
        "database": f"{PACKAGE} {installed_version()}",
        "framework": fam.framework,
        "version": fam.version,
        "kernel_source": fam.kernel_source,
        "device": fam.device,
        "tables": fam.tables,
        "rows_outside_domain": len(fam.rows) - len(rows),
    }
    return fit


def import_profile(
    gpu: str,
    engine: str,
    seed: int = 0,
    root: Path | None = None,
    progress: Callable[[int], Callable[[int], None]] | None = None,
) -> ImportResult:
    """Fit ``gpu``'s profile for ``engine``'s kernels from the installed tables."""
    spec = get_gpu(gpu)
    families = read_families(gpu, engine, root)
    if not families:
        raise TwinError(f"--gpu {gpu} --engine {engine}: the tables have no kernel rows")
    base = datasheet_profile(spec.name)
    peaks = base.peaks
    advance = progress(len(families)) if progress else None
    kernels: dict[str, KernelFit] = {}
    for fam in families:
        fit = fit_family(fam, peaks, spec.display_name, seed)
        if fit is not None:
            kernels[fam.kernel] = fit
        if advance:
            advance(1)
    measured = list(kernels)
    datasheet = [k for k in fm.KERNELS if k not in kernels]
    for name in datasheet:
        fit = base.kernels[name]
        fit.provenance = {"source": "datasheet", "label": "datasheet"}
        kernels[name] = fit
    order = [*fm.KERNELS, *(k for k in kernels if k not in fm.KERNELS)]
    profile = Profile(
        gpu=spec.name,
        device=spec.display_name,
        source="mixed",
        peaks=peaks,
        kernels={k: kernels[k] for k in order if k in kernels},
        provenance={
            "date": _dt.date.today().isoformat(),
            "database": f"{PACKAGE} {installed_version()}",
            "engine": engine,
            "engine_name": ENGINE_NAMES.get(engine, engine),
            "database_device": next((f.device for f in families if f.device), ""),
            "method": "twin calibrate --from aiconfigurator: bf16 rows, impossible rows "
            f"flagged and excluded, {HOLDOUT_SHARE:.0%} of shapes held out (seed {seed})",
            "peaks_source": spec.source,
        },
    )
    return ImportResult(profile, measured, datasheet)


__all__ = ["ImportResult", "fit_family", "import_profile", "impossible", "split_impossible"]
