"""Derive a profile for a GPU we cannot measure from one we did measure.

The fitted efficiencies are fractions of the measured device's peaks, so they
carry over: the target's profile keeps them (and the smooth-max exponent) and
swaps in the target's datasheet peaks. Launch overheads are host/driver time
and are kept as measured. The extra per-score and per-chunk coefficients are
seconds of arithmetic, so they are scaled by the ratio of the FLOP peaks (a
first-order assumption: softmax and state passing speed up with the chip); a per-SM one
(a count of waves over the SMs) by the ratio of one SM's peaks.
The result is labelled ``transferred from <gpu>`` wherever it is shown.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

from twin.costmodel.formulas import get_formula
from twin.costmodel.profile import KernelFit, Profile
from twin.errors import TwinError
from twin.hardware import SM_COUNTS, get_gpu

# The coefficients that are one SM's time a unit of work rather than the whole GPU's: those
# of a count of waves over the SMs, each wave about one CTA's time on one SM: the GEMM's
# k-steps on the busiest SM of its waves (``features.gemm_wave_k``), the absorbed BMMs' and
# the MLA prefill kernel's waves (``mla_bmm.mla_bmm_features``,
# ``mla_prefill_waves``), the BMMs' small-tile waves and the MLA decode launch's waves
# (``mla_decode_kernels.mla_decode_launch``), the causal conv1d update's waves of CTAs
# (``ssm_features.conv1d_features``), the attention decode launch's waves x head dim
# (``features.attn_decode_waves_d``, ``flashinfer_decode_waves``: ``c_waves_d``,
# ``c_flashinfer_waves``) or TensorRT-LLM Hopper's XQA
# CTAs (``c_xqa_ctas``, one CTA's time). One SM's speed is the GPU's peak over its SMs, so these
# scale by the FLOP ratio times the SM ratio.
PER_SM_COEFFICIENTS = (
    "c_wave_k",
    "c_waves",
    "c_small_waves",
    "c_launch_waves",
    "c_cta_waves",
    "c_waves_d",
    "c_flashinfer_waves",
    "c_xqa_ctas",
)


def transfer_profile(
    source: Profile, target_gpu: str, source_path: str | Path | None = None
) -> Profile:
    """A profile for ``target_gpu`` scaled from the measured ``source``."""
    if source.source != "measured":
        where = f" ({source_path})" if source_path else ""
        raise TwinError(
            f"--transfer-from needs a measured profile, but {source.gpu}{where} is "
            f"{source.provenance_label}; measure one with twin calibrate on a GPU first"
        )
    spec = get_gpu(target_gpu)
    peaks = spec.peaks()
    flop_ratio = source.peaks["flops"] / peaks["flops"]
    target_sms, source_sms = spec.sm_count, SM_COUNTS.get(source.gpu)
    sm_ratio = target_sms / source_sms if target_sms and source_sms else 1.0
    kernels: dict[str, KernelFit] = {}
    for name, fit in source.kernels.items():
        needs = get_formula(name).flops_peak
        if needs in ("fp8_flops", "fp4_flops"):  # a precision variant (twin.precision)
            if not spec.low_precision_peaks().get(needs):
                continue  # the target has no such tensor cores: it cannot price it
            peaks[needs] = spec.low_precision_peaks()[needs]
        params = dict(fit.params)
        # A coefficient at a fixed physical rate is the target's rate, not a scaled one.
        fixed = get_formula(name).fixed_coefficients(peaks)
        for key in params:
            if key in fixed:
                params[key] = fixed[key]
            elif key.startswith("c_"):
                params[key] *= flop_ratio * (sm_ratio if key in PER_SM_COEFFICIENTS else 1.0)
        kernels[name] = KernelFit(
            model=fit.model,
            params=params,
            # The source's held-out errors say how well the shape fits; they do not
            # bound the transfer error, which nothing here measures.
            heldout_median_rel_err=fit.heldout_median_rel_err,
            heldout_max_rel_err=fit.heldout_max_rel_err,
            n_shapes=fit.n_shapes,
            n_heldout=fit.n_heldout,
            note=f"transferred from {source.gpu}: held-out errors are the source's",
        )
    return Profile(
        gpu=spec.name,
        device=spec.display_name,
        source="transferred",
        transferred_from=source.gpu,
        peaks=peaks,
        kernels=kernels,
        dtype=source.dtype,
        # Host overhead is the host's and the framework's, not the GPU's: kept as measured.
        layer_overhead=source.layer_overhead,
        provenance={
            "transferred_from": source.gpu,
            "transferred_from_device": source.device,
            "transferred_from_label": source.provenance_label,
            "transferred_from_path": str(source_path) if source_path else None,
            "source_provenance": source.provenance,
            "date": _dt.date.today().isoformat(),
            "method": "efficiencies kept, datasheet peaks of the target, "
            "extra coefficients scaled by the FLOP-peak ratio",
        },
    )
