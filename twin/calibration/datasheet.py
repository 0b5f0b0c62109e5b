"""Datasheet profiles: a roofline at documented default efficiencies, until a GPU is measured.

These ship as ``twin/calibration/profiles/<gpu>-datasheet.json`` with ``source: datasheet`` and
are labelled "datasheet roofline (uncalibrated)" wherever they are used. Each
default below says where it comes from; "assumed" means no measurement backs it.
Regenerate the files with ``python -m twin.calibration.datasheet``.
"""

from __future__ import annotations

from pathlib import Path

from twin.costmodel.formulas import FORMULAS, KERNELS
from twin.costmodel.kernel_sources import DATASHEET
from twin.costmodel.mixer_kernels import _P, _T0
from twin.costmodel.profile import KernelFit, Profile
from twin.costmodel.profile_store import PROFILES_DIR
from twin.errors import TwinError
from twin.hardware import GPUS, get_gpu

DEFAULTS: dict[str, dict[str, float]] = {
    # 0.8 x datasheet: an 8192^3 bf16 matmul ran at 798 of 989 TFLOP/s (0.81) on the
    # lent H100 (gpu_datasheets.md); model-sized GEMMs are smaller, so assumed 0.7.
    # No wave term (``features.gemm_wave_k``): a datasheet has no tile costs to read.
    "gemm": {
        "t0_s": _T0,
        "eff_flops": 0.7,
        "eff_bytes": 0.8,
        "p": _P,
        "c_weight_elems": 0.0,
        "c_wave_k": 0.0,
    },
    # FlashAttention-2 forward reaches 50-73% of A100 peak (Dao 2023, arXiv 2307.08691,
    # sec. 4.1): 0.5 for the low end over varied shapes; softmax folded into the FLOPs.
    "attn_prefill": {
        "t0_s": 2 * _T0,
        "eff_flops": 0.5,
        "eff_bytes": 0.6,
        "p": _P,
        "c_score_elems": 0.0,
        "c_tiles": 0.0,
    },
    # Decode attention streams the KV cache: assumed 0.6 of HBM bandwidth (a single
    # query per sequence leaves part of the chip idle without split-KV). No wave term
    # (``features.attn_decode_waves_d``): a datasheet has no launch costs to read.
    "attn_decode": {
        "t0_s": 2 * _T0,
        "eff_flops": 0.3,
        "eff_bytes": 0.6,
        "p": _P,
        "c_score_elems": 0.0,
        "c_tiles": 0.0,
        "c_waves_d": 0.0,
    },
    # mamba_chunk_scan_combined runs five Triton kernels (chunk cumsum, chunk state,
    # state passing, bmm, chunk scan; mamba_ssm/ops/triton/ssd_combined.py): 5 x t0.
    # Efficiencies assumed: its matmuls are small (chunk x d_state).
    "ssm_scan": {"t0_s": 5 * _T0, "eff_flops": 0.3, "eff_bytes": 0.5, "p": _P, "c_chunks": 0.0},
    "ssm_step": {"t0_s": _T0, "eff_flops": 0.1, "eff_bytes": 0.5, "p": _P},  # assumed
    # Depthwise conv runs on CUDA cores, not tensor cores: FLOP efficiency against the
    # tensor peak is small (assumed 0.05); it is memory-bound in practice.
    "conv1d": {
        "t0_s": _T0,
        "eff_flops": 0.05,
        "eff_bytes": 0.6,
        "p": _P,
        "c_seq_channels": 0.0,
        "c_unaligned_ctas": 0.0,
    },
    "elementwise": {"t0_s": _T0, "eff_bytes": 0.7},  # assumed
    # A device copy ran at 3.0 of 3.35 TB/s (read + write) on the lent H100: 0.9.
    "copy_d2d": {"t0_s": 2 * _T0, "eff_bytes": 0.9},
    # Pinned PCIe copies: assumed 0.8 of the per-direction link rate.
    "copy_h2d": {"t0_s": 2 * _T0, "eff_bytes": 0.8},
    "copy_d2h": {"t0_s": 2 * _T0, "eff_bytes": 0.8},
}


def datasheet_profile(gpu: str) -> Profile:
    """The uncalibrated roofline profile of a known GPU."""
    spec = get_gpu(gpu)
    kernels = {
        name: KernelFit(
            model=FORMULAS[name].model_name,
            params=dict(DEFAULTS[name]),
            note="datasheet default, not measured",
        )
        for name in KERNELS
    }
    return Profile(
        gpu=spec.name,
        device=spec.display_name,
        source="datasheet",
        peaks=spec.peaks(),
        kernels=kernels,
        provenance={
            "peaks_source": spec.source,
            "efficiencies_source": "twin/calibration/datasheet.py DEFAULTS (documented there)",
        },
    )


def write_datasheet_profiles() -> list[Path]:
    """Write a datasheet profile for every known GPU; never over a measured one."""
    written = []
    for name in GPUS:
        path = PROFILES_DIR / f"{name}-{DATASHEET}.json"
        if path.exists():
            try:
                keep = Profile.load(path).source != "datasheet"
            except TwinError:
                keep = False  # an older schema or a broken file: replace it
            if keep:
                continue  # a measured or transferred profile is better than ours
        written.append(datasheet_profile(name).save(path))
    return written


if __name__ == "__main__":
    for p in write_datasheet_profiles():
        print(p)
