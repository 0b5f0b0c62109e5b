"""``twin calibrate``: time kernels on this machine's device, or derive a profile from one."""

from __future__ import annotations

import contextlib
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from twin.calibration.device import CHOICES
from twin.calibration.kernels import DEFAULT_SHAPE_MODEL, LEVELS
from twin.cli import checks
from twin.cli.common import comma_list, console, print_json, progress_bar
from twin.costmodel.formulas import FORMULAS, KERNELS
from twin.costmodel.kernel_sources import DEFAULT_ENGINE, KERNEL_SOURCES, get_kernel_source
from twin.costmodel.profile import Profile
from twin.costmodel.profile_store import profile_path
from twin.errors import TwinError, expect_one_of
from twin.hardware import GPUS
from twin.limits import MAX_JOBS
from twin.presets import resolve_model

if TYPE_CHECKING:
    from twin.calibration.harness import CalibrationResult

# The harness (numpy, pyarrow, the fits) is imported where a command runs it: ``twin
# calibrate --help`` imports none of it (issue 33).


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _summary(result: CalibrationResult) -> dict[str, Any]:
    p = result.profile
    return {
        "gpu": p.gpu,
        "device": p.device,
        "source": p.source,
        "provenance_label": p.provenance_label,
        "profile": str(result.profile_path),
        "raw": str(result.raw_path) if result.raw_path else None,
        "shapes_timed": result.n_rows,
        "skipped": result.skipped,
        "heldout": p.heldout_summary(),
        "heldout_all_kernels": p.provenance.get("heldout_all_kernels"),
    }


def _show(result: CalibrationResult) -> None:
    p = result.profile
    console.print(f"[bold]{p.gpu}[/]: {p.provenance_label}", highlight=False)
    flagged = sum(fit.n_flagged for fit in p.kernels.values())
    if flagged:
        console.print(
            f"{flagged} rows faster than the device's peaks were flagged and left out of the fits",
            highlight=False,
        )
    table = Table(title="Held-out relative error of the fitted kernel models")
    table.add_column("kernel", no_wrap=True)
    for col in ("shapes", "flagged", "held out", "median err", "P90 err", "max err"):
        table.add_column(col, justify="right")
    table.add_column("source")
    for name, fit in p.kernels.items():
        table.add_row(
            name,
            str(fit.n_shapes),
            str(fit.n_flagged),
            str(fit.n_heldout),
            _pct(fit.heldout_median_rel_err),
            _pct(fit.heldout_p90_rel_err),
            _pct(fit.heldout_max_rel_err),
            str(fit.provenance.get("source") or p.source),
        )
    console.print(table)
    pooled = p.provenance.get("heldout_all_kernels") or {}
    if pooled.get("n"):
        console.print(
            f"All kernels: median {_pct(pooled['median'])}, max {_pct(pooled['max'])} "
            f"over {pooled['n']} held-out shapes",
            highlight=False,
        )
    if p.source == "transferred":
        console.print("Errors are the source profile's fits; the transfer itself is unmeasured.")
    for note in result.skipped:
        console.print(f"skipped: {note}", highlight=False)
    console.print(
        f"wrote {result.profile_path}" + (f" and {result.raw_path}" if result.raw_path else ""),
        highlight=False,
    )


def calibrate(
    gpu: str | None = typer.Option(
        None, "--gpu", help=f"Device to calibrate: {', '.join(CHOICES)}."
    ),
    source: str | None = typer.Option(
        None,
        "--from",
        help="Fit to public measured tables instead of timing this machine: "
        "'aiconfigurator' (NVIDIA's kernel database; needs the twin\\[aic] extra).",
    ),
    engine: str = typer.Option(
        DEFAULT_ENGINE,
        "--engine",
        help=f"With --from: whose kernels, one of {', '.join(KERNEL_SOURCES)}.",
    ),
    keep_fits: Path | None = typer.Option(
        None,
        "--keep-fits",
        help="With --from: keep every family this profile of the same GPU and engine "
        "already fits, byte for byte, and fit only the ones it lacks (e.g. the precision "
        "families; --out may be the same file).",
    ),
    refit: str | None = typer.Option(
        None,
        "--refit",
        help="With --keep-fits: comma-separated families to fit again all the same, each "
        "with its variants (moe: moe, moe_fp8, ...; mla: every MLA family), every other "
        "family kept byte for byte.",
    ),
    merge: list[Path] | None = typer.Option(
        None,
        "--merge",
        help="A profile to merge per kernel family; repeat it (two or more) and give --out. "
        "The first profile that measured a family wins.",
    ),
    quick: bool = typer.Option(False, "--quick", help="Reduced sweep (CI: under a minute)."),
    level: str | None = typer.Option(
        None, "--level", help=f"Sweep size, one of {', '.join(LEVELS)} (overrides --quick)."
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        "-o",
        help="Profile JSON to write (the raw parquet goes beside it). "
        "Default: <gpu>.json in your profile folder ($TWIN_PROFILES_DIR, else "
        "~/.local/share/twin/profiles), which --gpu <gpu> then finds first; "
        "never the installed package.",
    ),
    transfer_from: Path | None = typer.Option(
        None,
        "--transfer-from",
        help="Derive the --gpu profile from this measured profile by scaling to the "
        "target's datasheet peaks, instead of measuring.",
    ),
    model: str = typer.Option(
        DEFAULT_SHAPE_MODEL,
        "--model",
        help="Preset (or Hugging Face config.json) whose projection shapes the GPU GEMM grid uses.",
    ),
    kernels: str | None = typer.Option(
        None, "--kernels", help=f"Comma-separated subset of: {', '.join(KERNELS)} (default all)."
    ),
    seed: int = typer.Option(
        0, "--seed", min=0, help="Seed of inputs, shape samples and held-out split."
    ),
    threads: int = typer.Option(
        1, "--threads", min=1, max=MAX_JOBS, help="CPU threads while timing."
    ),
    overhead: bool = typer.Option(
        False,
        "--overhead",
        help="Also measure the host overhead per layer of --model's layers, run by the "
        "reference executor (what validation compares against).",
    ),
    model_only: bool = typer.Option(
        False,
        "--model-shapes-only",
        help="Sweep only the shapes --model runs (a per-model profile: best for that model, "
        "not meant for others).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON summary instead of tables."),
) -> None:
    """Time the kernels on this machine's device and fit a latency profile.

    Refuses when the visible device is not the one asked for; then run it on
    that GPU, derive a profile with --transfer-from, or fit NVIDIA's public
    tables with --from aiconfigurator.

    Examples:

      twin calibrate --gpu cpu --quick --out /tmp/cpu.json

      twin calibrate --from aiconfigurator --gpu h100 --engine sglang --out /tmp/h100-sglang.json

      twin calibrate --from aiconfigurator --gpu h100 --out /tmp/h100.json

      twin calibrate --from aiconfigurator --gpu h100 --engine sglang \\
        --keep-fits /tmp/h100-sglang.json --out /tmp/h100-sglang-kept.json

      twin calibrate --from aiconfigurator --gpu h100 --engine sglang \\
        --keep-fits /tmp/h100-sglang.json --refit moe --out /tmp/h100-sglang-moe.json

      twin calibrate --merge /tmp/h100.json --merge /tmp/h100-sglang.json --out /tmp/m.json

      twin calibrate --gpu h100

      twin calibrate --gpu cpu --quick --model tiny-hybrid --overhead --out /tmp/tiny.json

      twin calibrate --gpu a100 --out /tmp/a100.json \\
        --transfer-from twin/calibration/validation/gpu_stage2/h100.json
    """
    from twin.calibration.harness import calibrate as run_calibration
    from twin.calibration.harness import transfer as run_transfer

    # Which of the four ways, then every flag checked against it before any work: a flag
    # the chosen way does not read is refused rather than silently ignored.
    given = {
        "--gpu": gpu is not None,
        "--from": source is not None,
        "--engine": engine != DEFAULT_ENGINE,
        "--keep-fits": keep_fits is not None,
        "--refit": refit is not None,
        "--transfer-from": transfer_from is not None,
        "--quick": quick,
        "--level": level is not None,
        "--model": model != DEFAULT_SHAPE_MODEL,
        "--kernels": kernels is not None,
        "--seed": seed != 0,
        "--threads": threads != 1,
        "--overhead": overhead,
        "--model-shapes-only": model_only,
    }
    if merge:
        _only(given, "--merge", set())
        _merge(merge, out, gpu, source, as_json)
        return
    if gpu is None:
        raise TwinError("--gpu is required (or --merge A.json --merge B.json --out P.json)")
    gpu = gpu.lower()
    if out is not None:
        checks.out_file("--out", out)
    if source is not None:
        _only(given, "--from", {"--gpu", "--from", "--engine", "--keep-fits", "--refit", "--seed"})
        _from_tables(source, gpu, engine, out, seed, as_json, keep_fits, _refit_names(refit))
        return
    expect_one_of(gpu, CHOICES, "--gpu")
    if transfer_from is not None:
        _only(given, "--transfer-from", {"--gpu", "--transfer-from"})
        if out is not None:
            checks.not_an_input("--out", out, transfer_from)
        result = run_transfer(gpu, transfer_from, out)
    else:
        measure = {"--gpu", "--quick", "--level", "--model", "--kernels", "--seed", "--threads"}
        _only(given, "timing this machine", measure | {"--overhead", "--model-shapes-only"})
        chosen = level or ("quick" if quick else "full")
        expect_one_of(chosen, LEVELS, "--level")
        subset = _kernel_names(kernels)
        try:  # a bad name or config file, before the device is timed
            shapes = resolve_model(model)
        except TwinError as err:
            raise TwinError(f"--model {model}: {err}") from None
        if out is not None:
            if out.suffix == ".parquet":  # the raw table's name: the pair is one set
                raise TwinError(
                    f"--out {out}: name the profile *.json (its raw table goes beside it)"
                )
            raw = out.with_suffix(".parquet")
            checks.out_file("--out", raw)
            inputs = [Path(model)] if Path(model).suffix == ".json" else []
            checks.not_an_input("--out", out, *inputs)
            checks.not_an_input("--out", raw, *inputs)
        with contextlib.ExitStack() as stack:

            def progress(total: int) -> Any:
                return stack.enter_context(progress_bar(f"calibrating {gpu}", total))

            result = run_calibration(
                gpu,
                chosen,
                out,
                model=shapes,
                seed=seed,
                kernels=subset,
                threads=threads,
                progress=progress,
                overhead=overhead,
                model_only=model_only,
            )
    _report(result, as_json)


def _only(given: dict[str, bool], way: str, allowed: set[str]) -> None:
    """Refuse a flag given that ``way`` (a flag, or a phrase) does not read."""
    extra = [flag for flag, on in given.items() if on and flag not in allowed and flag != way]
    if extra:
        with_what = f"with {way}" if way.startswith("--") else f"when {way}"
        raise TwinError(f"{extra[0]}: not read {with_what}; drop it")


def _kernel_names(kernels: str | None) -> list[str] | None:
    """``--kernels a,b``: known kernel names, no empty or repeated entry."""
    if kernels is None:
        return None
    unknown = f"expected some of {', '.join(KERNELS)}"
    return list(_name_list("--kernels", kernels, KERNELS, unknown, "a kernel"))


def refit_families() -> frozenset[str]:
    """What ``--refit`` takes: every family (``formulas.FORMULAS``' keys) and every group
    of them named by a key's leading ``_``-separated words (``mla`` covers every MLA
    family, ``mla_module`` the modules: ``aic_import.refit_matches``)."""
    words = (k.split("_") for k in FORMULAS)
    return frozenset("_".join(w[:i]) for w in words for i in range(1, len(w) + 1))


def _refit_names(refit: str | None) -> tuple[str, ...]:
    """``--refit moe,mla_bmm``: known family or group names (:func:`refit_families`),
    none empty or repeated."""
    if refit is None:
        return ()
    unknown = "not a kernel family (e.g. moe, mla, mla_bmm)"
    return _name_list("--refit", refit, refit_families(), unknown, "a family")


def _name_list(
    option: str, value: str, known: Collection[str], unknown: str, what: str
) -> tuple[str, ...]:
    """A comma-separated list of names from ``known``, each refusal one line: an empty
    entry, an unknown name (``unknown`` says what was expected), a name given twice."""
    names = comma_list(option, value)
    strange = [n for n in names if n not in known]
    if strange:
        raise TwinError(f"{option} {strange[0]!r}: {unknown}")
    if len(set(names)) != len(names):
        raise TwinError(f"{option} {value!r}: {what} named twice")
    return tuple(names)


def _from_tables(
    source: str,
    gpu: str,
    engine: str,
    out: Path | None,
    seed: int,
    as_json: bool,
    keep_fits: Path | None = None,
    refit: tuple[str, ...] = (),
) -> None:
    """``--from aiconfigurator``: fit the GPU's profile to NVIDIA's tables for ``engine``."""
    from twin.calibration.harness import CalibrationResult

    if source.lower() != "aiconfigurator":
        raise TwinError(f"--from {source!r}: the one table source is 'aiconfigurator'")
    if refit and keep_fits is None:
        raise TwinError("--refit: names families of the --keep-fits profile; give --keep-fits")
    from twin.calibration.aic_import import (  # late: reads parquet with pyarrow
        import_profile,
        refit_matches,
    )

    if gpu not in GPUS:
        raise TwinError(f"--gpu {gpu!r}: the tables are of GPUs; expected one of {', '.join(GPUS)}")
    kernels = get_kernel_source(engine)
    keep = None
    if keep_fits is not None:
        checks.in_file("--keep-fits", keep_fits, "profile")
        # The refitted families are dropped unread: their fits may be of an older formula.
        keep = Profile.load(keep_fits, drop=lambda k: refit_matches(k, refit) if refit else False)
    with contextlib.ExitStack() as stack:

        def progress(total: int) -> Any:
            label = f"fitting {gpu} ({kernels.display} kernels)"
            return stack.enter_context(progress_bar(label, total))

        fitted = import_profile(
            gpu, kernels.name, seed=seed, progress=progress, keep=keep, refit=refit
        )
    target = out if out is not None else profile_path(f"{gpu}-{kernels.name}")
    fitted.save(target)
    _report(CalibrationResult(fitted, target, None), as_json)


def _merge(
    paths: list[Path], out: Path | None, gpu: str | None, source: str | None, as_json: bool
) -> None:
    """``--merge A.json --merge B.json --out P.json``."""
    from twin.calibration.harness import CalibrationResult
    from twin.calibration.merge import merge_profiles

    if gpu is not None or source is not None:
        raise TwinError("--merge takes profile files only: drop --gpu / --from")
    if out is None:
        raise TwinError("--merge needs --out P.json (the shipped profiles are not overwritten)")
    if len(paths) < 2:
        raise TwinError("--merge: give two or more profiles (--merge A.json --merge B.json)")
    checks.out_file("--out", out)
    checks.not_an_input("--out", out, *paths)
    for path in paths:
        checks.in_file("--merge", path, "profile")
    merged = merge_profiles([Profile.load(p) for p in paths], [str(p) for p in paths])
    merged.save(out)
    _report(CalibrationResult(merged, out, None), as_json)


def _report(result: CalibrationResult, as_json: bool) -> None:
    if as_json:
        print_json(_summary(result))
    else:
        _show(result)
