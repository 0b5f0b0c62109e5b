"""Measure a device end to end: check it, sweep, fit, write the profile and raw parquet.

Also derives a profile by ``--transfer-from``. ``twin calibrate`` is a thin view
of these two functions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twin.atomic import OutputSet
from twin.calibration.device import DeviceInfo, check_requested, import_torch, provenance
from twin.calibration.fit import HOLDOUT_SHARE, fit_all, pooled_heldout
from twin.calibration.kernels import DEFAULT_SHAPE_MODEL, LEVELS, SweepContext
from twin.calibration.sweep import measure_ceilings, run_sweep, sweep_size, write_raw
from twin.calibration.transfer import transfer_profile
from twin.costmodel.profile import Profile
from twin.costmodel.profile_store import load_profile, profile_path
from twin.errors import TwinError, expect_one_of
from twin.hardware import DEFAULT_ALLREDUCE_LATENCY_S, get_gpu
from twin.model import ModelSpec
from twin.presets import resolve_model

# Most bytes one shape's buffers may take on the CPU: small for the test suite's
# tiny sweep (every fresh page costs a fault on a virtual machine).
CPU_MEM_CAP = {"tiny": 128 << 20, "quick": 512 << 20, "full": 1 << 30}


@dataclass
class CalibrationResult:
    """What a calibration wrote."""

    profile: Profile
    profile_path: Path
    raw_path: Path | None
    n_rows: int = 0
    skipped: list[str] = field(default_factory=list)


def raw_path_for(profile_file: Path) -> Path:
    """The raw parquet beside a profile: ``h100.json`` -> ``h100.parquet``."""
    return profile_file.with_suffix(".parquet")


def calibrate(
    gpu: str,
    level: str = "full",
    out: str | Path | None = None,
    model: str | ModelSpec = DEFAULT_SHAPE_MODEL,
    seed: int = 0,
    kernels: Sequence[str] | None = None,
    threads: int = 1,
    progress: Callable[[int], Any] | None = None,
    overhead: bool = False,
    model_only: bool = False,
) -> CalibrationResult:
    """Time the kernels on the visible device, which must be ``gpu``; fit and save.

    ``progress(total)`` is called once with the number of shapes and must return
    an ``advance(n)`` callable (``twin calibrate`` passes a progress bar).
    ``threads`` is torch's CPU thread count while timing: 1 by default, because on
    this project's 2-vCPU virtual machines a second thread's wake-up stalls whole
    milliseconds (seen: 0.2 ms GEMMs timed at 8 or 16 ms with 2 threads, never
    with 1), which no fit survives. ``overhead`` also measures the per-layer host
    overhead of ``model``'s layers (:mod:`calibration.overhead`); ``model_only`` sweeps
    only the shapes ``model`` runs (Vidur's per-model operator profiles), for a
    profile that prices that model best and others not at all.
    """
    expect_one_of(level, LEVELS, "--level")
    if kernels and out is None:
        raise TwinError(
            "--kernels makes a partial profile, which the cost model cannot use: "
            "give --out PATH so that the shipped profile stays whole"
        )
    if threads < 1:
        raise TwinError(f"--threads must be at least 1 (got {threads})")
    if out is not None and raw_path_for(Path(out)) == Path(out):  # the pair is one set
        raise TwinError(f"--out {out}: name the profile *.json (its raw table goes beside it)")
    torch = import_torch(f"--gpu {gpu}")
    device = check_requested(gpu, torch)
    saved_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    warm = _keep_heap_warm(True) if device.kind == "cpu" else False
    try:
        result = _calibrate(
            torch, device, gpu, level, out, model, seed, kernels, progress, overhead, model_only
        )
    finally:
        torch.set_num_threads(saved_threads)
        if warm:
            _keep_heap_warm(False)
    return result


def _keep_heap_warm(on: bool) -> bool:
    """Make glibc reuse freed memory instead of mapping fresh pages (Linux only).

    By default glibc serves allocations over 32 MB with mmap and returns them on
    free, so every call of a kernel with a large temporary page-faults its whole
    output again: on this project's virtual machines that made a 128 MB RMSNorm
    4x slower than its memory traffic. A GPU's caching allocator avoids the same
    effect, so the CPU run does too, and restores glibc's defaults afterwards.
    """
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        m_trim_threshold, m_mmap_max = -1, -4  # from glibc's malloc.h
        if on:
            return bool(libc.mallopt(m_mmap_max, 0) and libc.mallopt(m_trim_threshold, 1 << 40))
        # glibc's defaults: 65536 mmaps, a 128 KB trim threshold.
        return bool(libc.mallopt(m_mmap_max, 65536) and libc.mallopt(m_trim_threshold, 128 << 10))
    except (OSError, AttributeError):
        return False


def _calibrate(
    torch: Any,
    device: DeviceInfo,
    gpu: str,
    level: str,
    out: str | Path | None,
    model: str | ModelSpec,
    seed: int,
    kernels: Sequence[str] | None,
    progress: Callable[[int], Any] | None,
    overhead: bool,
    model_only: bool,
) -> CalibrationResult:
    spec_model = model if isinstance(model, ModelSpec) else resolve_model(model)
    cuda = device.kind == "cuda"
    torch.manual_seed(seed)
    ctx = SweepContext(
        torch=torch,
        device=device.kind,
        # GPUs serve in bf16. This CPU has no fast bf16 matmul, so CPU runs use fp32.
        dtype=torch.bfloat16 if cuda else torch.float32,
        dtype_bytes=2 if cuda else 4,
        level=level,
        model=spec_model,
        seed=seed,
        model_only=model_only,
        cache_bytes=_cache_bytes(torch, cuda),
        mem_cap_bytes=int(min(8 << 30, 0.2 * (device.total_memory or 0)))
        if cuda
        else CPU_MEM_CAP[level],
        sms=get_gpu(device.gpu).sm_count if cuda and device.gpu is not None else None,
    )
    ceilings = measure_ceilings(ctx)
    advance = progress(sweep_size(ctx, kernels)) if progress else None
    rows, skipped = run_sweep(ctx, kernels, advance)
    if not rows:
        raise TwinError(f"twin calibrate --gpu {gpu}: no shape could be timed ({skipped[:1]})")

    assert device.gpu is not None  # check_requested refuses unknown devices
    if cuda:
        # Efficiencies are fractions of the datasheet peaks, so that --transfer-from
        # can swap in another GPU's datasheet; the measured ceilings go in provenance.
        peaks = get_gpu(device.gpu).peaks()
    else:
        peaks = {
            "flops": ceilings["matmul_flops"],
            "mem_bw": ceilings["copy_bw_read_plus_write"],
            "host_bw": ceilings["h2d_bw"],
            "allreduce_latency_s": DEFAULT_ALLREDUCE_LATENCY_S,
        }
    fits = fit_all(rows, peaks, HOLDOUT_SHARE, seed)
    prov = provenance(torch, device)
    prov.update(
        level=level,
        shape_model=spec_model.name,
        model_shapes_only=model_only,
        seed=seed,
        holdout_share=HOLDOUT_SHARE,
        heldout_all_kernels=pooled_heldout(rows, fits, peaks, HOLDOUT_SHARE, seed),
        measured_ceilings=ceilings,
        peaks_source=(
            "datasheet (twin/hardware.py)"
            if cuda
            else "measured ceilings of this CPU (matmul, memcpy)"
        ),
        implementations=dict(sorted(ctx.notes.items())),
        skipped_shapes=skipped,
    )
    if not cuda:
        prov["allocator"] = "glibc mmap disabled while timing (see harness._keep_heap_warm)"
        prov["note"] = (
            "CPU run in float32: host and device are one memory, so the "
            "h2d/d2h copies are memcpys and the scan is the PyTorch SSD reference"
        )
    profile = Profile(
        gpu=device.gpu,
        device=device.name,
        source="measured",
        peaks=peaks,
        kernels=fits,
        provenance=prov,
        dtype=str(ctx.dtype).replace("torch.", ""),
    )
    if overhead:
        from twin.calibration.overhead import measure_layer_overhead

        profile.layer_overhead = measure_layer_overhead(spec_model, profile, device.kind)
    target = Path(out) if out is not None else profile_path(device.gpu)
    raw = raw_path_for(target)
    profile.provenance["raw"] = raw.name
    # The profile and its raw table as one set (twin.atomic): never a new table beside an
    # old profile, whatever fails or is killed on the way.
    with OutputSet(target.parent, [raw.name, target.name], "twin calibrate", None) as outputs:
        write_raw(rows, outputs.path(raw.name))
        profile.save(outputs.path(target.name))
    return CalibrationResult(profile, target, raw, len(rows), skipped)


def transfer(gpu: str, source: str | Path, out: str | Path | None = None) -> CalibrationResult:
    """Derive ``gpu``'s profile from the measured profile at ``source``; no device needed."""
    if gpu in ("auto", "cpu"):
        raise TwinError(
            f"--transfer-from needs a GPU name for --gpu (got {gpu!r}), e.g. --gpu a100"
        )
    src = load_profile(source)
    derived = transfer_profile(src, gpu, source_path=source)
    target = Path(out) if out is not None else profile_path(derived.gpu)
    derived.save(target)
    return CalibrationResult(derived, target, None)


def _cache_bytes(torch: Any, cuda: bool) -> int:
    """L2 size on a GPU (twice it is rotated through); a 32 MB LLC guess on a CPU."""
    if cuda:
        props = torch.cuda.get_device_properties(0)
        return int(getattr(props, "L2_cache_size", 50 << 20) or (50 << 20))
    return 32 << 20  # this machine kind's L3 (lscpu); larger caches only make it safer
