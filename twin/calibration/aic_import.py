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

Where a family's table differs by engine release (vLLM 0.19.0's fused-MoE rows next to
0.24.0's, say), the family is fitted from every release's table: ``kernels`` holds the
newest's fit, ``table_releases`` the others' (:func:`release_fits`), and a run of a
release prices each family from its own (``Profile.at_release``).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from twin.calibration import module_floor
from twin.calibration.aic_collectives import unfused_allreduce_rows
from twin.calibration.aic_families import read_families, release_families
from twin.calibration.aic_mla import module_rows
from twin.calibration.aic_tables import (
    ENGINE_NAMES,
    PACKAGE,
    PACKAGE_VERSION,
    SYSTEMS,
    FamilyRows,
    installed_version,
    system_dir,
)
from twin.calibration.datasheet import datasheet_profile
from twin.calibration.fit import HOLDOUT_SHARE, fit_kernel
from twin.calibration.series_fit import attach_series
from twin.costmodel import formulas as fm
from twin.costmodel.profile import KernelFit, Profile, TableReleases
from twin.errors import TwinError
from twin.hardware import get_gpu
from twin.precision import ATTN_FP8_KV, WEIGHT_FORMATS

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


def impossible(kernel: str, row: dict[str, Any], peaks: dict[str, float]) -> str | None:
    """Why ``row`` is faster than the device can be (None if it is possible)."""
    f = fm.get_formula(kernel)
    t = float(row["median_s"])
    if f.uses_flops and row["flops"] / t > PEAK_SLACK * peaks[f.flops_peak]:
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


def _mla_label(key: str) -> str:
    """What an MLA family's label says it measured: its GEMMs' format, an fp8 KV cache."""
    parts = []
    for mode, name in (("_fp8_block", "fp8-block"), ("_nvfp4", "nvfp4"), ("_fp8kv", "")):
        if mode in key and name:
            parts.append(name)
    if key.startswith("mla_bmm_fp8"):
        parts.append("fp8")
    if key.endswith("_fp8kv"):
        parts.append("fp8 KV")
    return ", ".join(parts)


# What a precision family's label says it measured (twin.precision).
PRECISION_LABELS = {
    **{f.kernel: f.name for f in WEIGHT_FORMATS.values() if f.bytes_per_param is not None},
    **{key: "fp8 KV" for key in ATTN_FP8_KV.values()},
    **{key: _mla_label(key) for key in fm.MLA_VARIANTS if _mla_label(key)},
}


def family_label(fam: FamilyRows, device: str) -> str:
    """E.g. "measured (vLLM 0.24.0 vllm_flash_attn_fa3, H100 SXM5)"; a precision family
    says its precision: "measured fp8 (vLLM 0.24.0 CutlassFP8ScaledMMLinearKernel, ...)"."""
    # causal_conv1d_fn / causal_conv1d_update: one CUDA extension, named once.
    kernel = fam.kernel_source.removesuffix("_fn").removesuffix("_update")
    who = " ".join(x for x in (fam.framework, fam.version, kernel) if x)
    what = PRECISION_LABELS.get(fam.kernel)
    return f"measured{' ' + what if what else ''} ({who}, {device})"


def fit_family(
    fam: FamilyRows, peaks: dict[str, float], device: str, seed: int = 0
) -> KernelFit | None:
    """The family's fit with its provenance; None if every row was impossible."""
    # Every GEMM mode (gemm, gemm_fp8, ...) has the same serving domain.
    domain = "gemm" if fam.kernel.startswith("gemm") else fam.kernel
    inside = DOMAINS.get(domain, lambda shape: True)
    rows = [r for r in fam.rows if inside(r["shape"])]
    ok, flagged = split_impossible(fam.kernel, rows, peaks)
    if not ok:
        return None
    fit = fit_kernel(fam.kernel, ok, peaks, HOLDOUT_SHARE, seed)
    if fam.kernel in fm.MOE_VARIANTS:  # the measured shapes' kernel configs
        attach_series(fit, fam.kernel, ok, peaks, HOLDOUT_SHARE, seed)
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
    if fam.sibling:  # series read from the same-silicon sibling (calibration.moe_sibling)
        fit.provenance["sibling_series"] = fam.sibling
    return fit


def reference_fit(
    ref: module_floor.FloorReference, kernel: str, root: Path | None = None, seed: int = 0
) -> tuple[KernelFit, module_floor.Rows] | None:
    """Family ``kernel`` fitted from the module table ``ref`` names, at that GPU's own
    peaks, and that table's rows (None where the database lacks that GPU, table or
    family)."""
    try:
        system = system_dir(ref.gpu, root)
    except TwinError:
        return None
    fams = module_rows(system, ref.engine, ref.release)
    fam = next((f for f in fams if f.kernel == kernel), None)
    if fam is None:
        return None
    spec = get_gpu(ref.gpu)
    peaks = {**datasheet_profile(spec.name).peaks, **spec.low_precision_peaks()}
    fit = fit_family(fam, peaks, spec.display_name, seed)
    return None if fit is None else (fit, fam.rows)


def engine_fit(
    fam: FamilyRows,
    gpu: str,
    engine: str,
    peaks: dict[str, float],
    device: str,
    root: Path | None = None,
    seed: int = 0,
) -> KernelFit | None:
    """``fit_family`` of ``engine``'s family on ``gpu`` with the calibration's rules on
    fitted parameters: vLLM's decode-module floors bounded (``module_floor``)."""
    fit = fit_family(fam, peaks, device, seed)
    if fit is None:
        return None
    return module_floor.apply(
        fit,
        fam.rows,
        gpu,
        engine,
        fam.kernel,
        fam.release,
        lambda ref, k: reference_fit(ref, k, root, seed),
    )


def refit_matches(kernel: str, names: Sequence[str]) -> bool:
    """Whether ``--refit`` ``names`` cover ``kernel``: a name is a family (``moe``) and
    covers its key and every variant key under it (``moe``, ``moe_fp8``, ``moe_nvfp4``)."""
    return any(kernel == n or kernel.startswith(f"{n}_") for n in names)


def without_families(profile: Profile, names: Sequence[str]) -> Profile:
    """``profile`` less the fits ``names`` cover (``refit_matches``), in ``kernels`` and in
    ``table_releases``: what ``--keep-fits`` keeps when ``--refit`` names families."""
    return dataclasses.replace(
        profile,
        kernels={k: f for k, f in profile.kernels.items() if not refit_matches(k, names)},
        table_releases={
            k: r for k, r in profile.table_releases.items() if not refit_matches(k, names)
        },
    )


def import_profile(
    gpu: str,
    engine: str,
    seed: int = 0,
    root: Path | None = None,
    progress: Callable[[int], Callable[[int], None]] | None = None,
    keep: Profile | None = None,
    refit: Sequence[str] = (),
) -> Profile:
    """Fit ``gpu``'s profile for ``engine``'s kernels from the installed tables.

    ``keep`` (``--keep-fits``): a profile of the same GPU and engine whose families are
    kept as they are, byte for byte, with its peaks and provenance; only the families
    it lacks are fitted (how the shipped profiles gained their precision fits without
    a bf16 number changing: a refit reproduces them to ~1e-9 only, the least-squares
    solver's tolerance). ``refit`` (``--refit``): families of ``keep`` fitted again all
    the same (``without_families``; how the fused-MoE fits took a new formula with every
    other family byte for byte).
    """
    spec = get_gpu(gpu)
    if keep is not None and (keep.gpu != spec.name or keep.provenance.get("engine") != engine):
        raise TwinError(
            f"--keep-fits: a profile of {keep.gpu} ({keep.provenance.get('engine')}), "
            f"not of {spec.name} ({engine})"
        )
    if refit and keep is not None:
        keep = without_families(keep, refit)
    families = read_families(gpu, engine, root)
    if not families:
        raise TwinError(f"--gpu {gpu} --engine {engine}: the tables have no kernel rows")
    base = datasheet_profile(spec.name)
    # The datasheet peaks, and the FP8/FP4 tensor-core peaks the precision fits run against.
    peaks = {**(keep.peaks if keep is not None else base.peaks), **spec.low_precision_peaks()}
    advance = progress(len(families)) if progress else None
    kernels: dict[str, KernelFit] = {}
    added: list[str] = []
    for fam in families:
        needs = fm.get_formula(fam.kernel).flops_peak
        if keep is not None and fam.kernel in keep.kernels:
            kernels[fam.kernel] = keep.kernels[fam.kernel]
        elif needs in peaks or not fm.get_formula(fam.kernel).uses_flops:
            fit = engine_fit(fam, gpu, engine, peaks, spec.display_name, root, seed)
            if fit is not None:
                kernels[fam.kernel] = fit
                added.append(fam.kernel)
        if advance:
            advance(1)
    measured = list(kernels)
    datasheet = [k for k in fm.KERNELS if k not in kernels]
    for name in datasheet:
        fit = keep.kernels[name] if keep is not None and name in keep.kernels else None
        if fit is None:
            fit = base.kernels[name]
            fit.provenance = {"source": "datasheet", "label": "datasheet"}
        kernels[name] = fit
    variants = [k for k in kernels if k in (*fm.PRECISION_VARIANTS, *fm.MODEL_VARIANTS)]
    order = [*fm.KERNELS, *(k for k in kernels if k not in fm.KERNELS and k not in variants)]
    order += variants
    used = {k for k in kernels if fm.get_formula(k).flops_peak in ("fp8_flops", "fp4_flops")}
    wanted = {fm.get_formula(k).flops_peak for k in used}
    peaks = {k: v for k, v in peaks.items() if k not in ("fp8_flops", "fp4_flops") or k in wanted}
    provenance: dict[str, Any] = (
        dict(keep.provenance)
        if keep is not None
        else {
            "date": _dt.date.today().isoformat(),
            "database": f"{PACKAGE} {installed_version()}",
            "engine": engine,
            "engine_name": ENGINE_NAMES.get(engine, engine),
            "database_device": next((f.device for f in families if f.device), ""),
            "method": "",
            "peaks_source": spec.source,
        }
    )
    method = (
        "twin calibrate --from aiconfigurator: bf16 rows (weights, activations, KV), and "
        "as families of their own each quantised GEMM mode's rows, the fp8-KV "
        "attention rows, the fused-MoE rows (balanced routing) per expert format and "
        "the MLA rows (attention kernels, BMMs, modules) per GEMM mode and KV dtype;"
        f" impossible rows flagged and excluded, {HOLDOUT_SHARE:.0%} of "
        f"shapes held out (seed {seed})"
    )
    releases = release_fits(gpu, engine, root, set(measured), peaks, spec.display_name, seed, keep)
    # The refitted families whose fits are other releases' only (SGLang's MLA modules).
    refit_releases = [k for k in releases if k not in added and refit_matches(k, refit)]
    if keep is None or added or refit_releases:
        provenance["method"] = method
    if keep is not None and (added or refit_releases):
        entry: dict[str, Any] = {"date": _dt.date.today().isoformat(), "families": added}
        if refit_releases:
            entry["table_releases"] = refit_releases
        if refit:
            entry["refit"] = list(refit)
        before = provenance.get("added")
        # Each regeneration with --keep-fits appends its families (precision, then MoE).
        earlier = [before] if isinstance(before, dict) else list(before or [])
        provenance["added"] = entry if not earlier else [*earlier, entry]
    if used:
        provenance["low_precision_peaks_source"] = (
            f"{PACKAGE} {PACKAGE_VERSION} systems/{SYSTEMS[spec.name]}.yaml fp8_tc_flops / "
            "fp4_tc_flops (twin.hardware.GpuSpec)"
        )
    if releases:
        provenance["table_releases"] = (
            "per kernel family whose table differs by engine release, the fits of the "
            "other releases' tables (twin.costmodel.table_release: a run of release R "
            "prices each family from the newest table at or before R)"
        )
    return Profile(
        gpu=spec.name,
        device=spec.display_name,
        source="mixed",
        peaks=peaks,
        kernels={k: kernels[k] for k in order if k in kernels},
        provenance=provenance,
        table_releases=releases,
    )


def release_fits(
    gpu: str,
    engine: str,
    root: Path | None,
    measured: set[str],
    peaks: dict[str, float],
    device: str,
    seed: int = 0,
    keep: Profile | None = None,
) -> dict[str, TableReleases]:
    """Per measured family whose table differs by engine release
    (``aic_families.release_families``), its fit from each other release's table, and
    for an all-reduce family its fit from each table only an un-fused layout reads
    (``aic_collectives.unfused_allreduce_rows``: ``TableReleases.unfused_fits``); a fit
    ``keep`` already holds for that family and release is kept as it is."""
    default, others = release_families(gpu, engine, root)
    unfused = unfused_allreduce_rows(system_dir(gpu, root), engine)
    newest = {f.kernel for f in read_families(gpu, engine, root)}
    out: dict[str, TableReleases] = {}

    def fitted(tables: dict[str, FamilyRows], kept: dict[str, KernelFit]) -> dict[str, KernelFit]:
        fits: dict[str, KernelFit] = {}
        for version, fam in sorted(tables.items()):
            fit = kept.get(version) or engine_fit(fam, gpu, engine, peaks, device, root, seed)
            if fit is not None:
                fits[version] = fit
        return fits

    # A family only older releases' tables have (no fit in ``kernels``) is kept too.
    kernels = [k for k in others if k in measured or k not in newest]
    kernels += [k for k in unfused if k in measured and k not in kernels]
    for kernel in kernels:
        kept = keep.table_releases.get(kernel) if keep is not None else None
        fits = fitted(others.get(kernel, {}), kept.fits if kept is not None else {})
        apart = fitted(unfused.get(kernel, {}), kept.unfused_fits if kept is not None else {})
        if fits or apart:
            out[kernel] = TableReleases(
                default=default[kernel],
                fits=fits,
                default_fit=kernel in newest,
                unfused_fits=apart,
            )
    return out


__all__ = [
    "engine_fit",
    "fit_family",
    "import_profile",
    "impossible",
    "reference_fit",
    "refit_matches",
    "release_fits",
    "split_impossible",
    "without_families",
]
