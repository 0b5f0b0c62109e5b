"""Which of a profile's fits price a model's precision (``twin.precision``), or why none can.

A profile carries the bf16 families (``gemm``, ``attn_prefill``, ``attn_decode``) and,
where NVIDIA's tables have the rows, one GEMM fit per quantised weight format
(``gemm_fp8``, ``gemm_fp8_block``, ``gemm_nvfp4``) and attention fits over an fp8 KV
cache (``attn_prefill_fp8kv``, ``attn_decode_fp8kv``), each with its provenance
(``calibration.aic_tables``). For a model:

- its linear layers' GEMMs take the fit of its ``precision``, its experts' the fit of
  their own; a precision the profile has no fit for is refused in one line naming the
  profile and the precisions it has (FP4 on a GPU without FP4 tensor cores, Hopper,
  can never have one);
- with an fp8 KV cache, attention takes the fp8-KV fits and reads 1-byte K/V rows;
  without them it takes the bf16 fits at their own (bf16) features, as measured, and
  the label says so (the twin does not extrapolate a kernel nobody timed);
- the LM head and the MoE router stay bf16 GEMMs (they are not quantised);
- a MoE model's routed experts take the fused-MoE fit of their format (``moe``,
  ``moe_fp8``, ...) where the profile has one, else the GEMM fit, and the label says
  which (``MOE_AS_GEMM_NOTE``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from twin import precision as px
from twin.costmodel.formulas import MODEL_VARIANTS, PRECISION_VARIANTS
from twin.costmodel.profile import Profile
from twin.errors import TwinError
from twin.model import ModelSpec

BF16_ATTENTION_NOTE = "bf16-KV kernel (no fp8-KV fit in this profile)"
MOE_AS_GEMM_NOTE = "MoE experts as GEMMs (no fused-MoE fit in this profile)"


@dataclass(frozen=True)
class PricedPrecision:
    """The fits one model's precision is priced with on one profile."""

    linear: px.WeightFormat  # the linear layers' format
    expert: px.WeightFormat  # the experts' format
    keys: Mapping[str, str] = field(default_factory=dict)  # family -> the profile key used
    kv_elem_bytes: int = 2  # bytes per K/V element the attention features read
    notes: Mapping[str, str] = field(default_factory=dict)  # group -> remark for the label

    @property
    def quantised(self) -> bool:
        """Whether any GEMM runs other than the bf16 fit."""
        return self.linear.bytes_per_param is not None or self.expert.bytes_per_param is not None

    def used(self, profile: Profile) -> set[str]:
        """The profile keys that price the run (for its provenance label)."""
        replaced = {family for family, key in self.keys.items() if key != family}
        out = {k for k in profile.kernels if k not in _VARIANTS and k not in replaced}
        return out | set(self.keys.values())


_VARIANTS = frozenset((*PRECISION_VARIANTS, *MODEL_VARIANTS))


def profile_name(profile: Profile) -> str:
    """``h100-vllm`` for a profile fitted to an engine's tables, else its GPU name."""
    engine = profile.provenance.get("engine")
    return f"{profile.gpu}-{engine}" if engine else profile.gpu


def no_fp4(profile: Profile, fmt: px.WeightFormat) -> str:
    """``H100 SXM5 has no FP4 tensor cores`` when ``fmt`` is FP4 and the profile's GPU has
    none (so no table can ever give it a fit), else ``""``."""
    from twin.hardware import GPUS

    spec = GPUS.get(profile.gpu)
    if fmt.fp4 and spec is not None and not spec.fp4_flops:
        return f"{spec.display_name} has no FP4 tensor cores"
    return ""


def refusal(profile: Profile, fmt: px.WeightFormat, what: str = "--precision") -> TwinError:
    """One line: the profile cannot price ``fmt``, what it can, and why where it is FP4 on
    a GPU without FP4 tensor cores."""
    why = no_fp4(profile, fmt)
    has = ", ".join(profile.precisions()) or "none"
    return TwinError(
        f"{what} {fmt.name}: profile {profile_name(profile)} has no {fmt.name} GEMM fit; "
        f"it prices {has}{f' ({why})' if why else ''}"
    )


def priced_precision(model: ModelSpec, profile: Profile) -> PricedPrecision:
    """The fits ``model`` is priced with on ``profile``; a ``TwinError`` when its
    precision has none."""
    linear = px.weight_format(model.precision)
    expert = px.moe_format(model)
    keys: dict[str, str] = {}
    for fmt, what in ((linear, "--precision"), (expert, "moe_precision")):
        if what == "moe_precision" and not model.n_moe_layers:
            continue
        if fmt.kernel not in profile.kernels:
            raise refusal(profile, fmt, what)
    if linear.bytes_per_param is not None:
        keys["linear"] = linear.kernel
    if model.n_moe_layers and expert.bytes_per_param is not None:
        keys["expert"] = expert.kernel
    kv_elem, notes = model.dtype_bytes, {}
    if model.n_moe_layers:
        if expert.moe_kernel in profile.kernels:
            keys["moe"] = expert.moe_kernel
        else:
            notes["GEMM"] = MOE_AS_GEMM_NOTE
    if model.kv_dtype == "fp8" and model.n_attention_layers:
        if all(key in profile.kernels for key in px.ATTN_FP8_KV.values()):
            keys.update(px.ATTN_FP8_KV)
            kv_elem = px.KV_FP8_BYTES
        else:
            notes["attention"] = BF16_ATTENTION_NOTE
    return PricedPrecision(linear, expert, keys, kv_elem, notes)


def provenance_label(model: ModelSpec, profile: Profile) -> str:
    """The label of a run of ``model`` on ``profile``: the profile's own for a bf16 model
    (every existing output's bytes), else the mixture of the fits that price it, the bf16
    GEMM named as the LM head's."""
    # A profile without per-family provenance (a datasheet or own-GPU one) has one label;
    # a MoE model on a fitted one names how its experts are priced.
    per_family = any(fit.provenance for fit in profile.kernels.values())
    if px.is_default(model) and not (model.n_moe_layers and per_family):
        return profile.provenance_label
    priced = priced_precision(model, profile)
    from twin.costmodel.provenance import mixture  # late: provenance imports profile

    groups = {"gemm": "LM head"} if priced.quantised else {}
    return mixture(profile, priced.used(profile), groups, priced.notes)


def sweep_label(
    model: ModelSpec, fallback: str, gpu: str | None, path: str | None, kernels: str | None
) -> str:
    """A sweep's provenance line: ``fallback`` (the profile's own label) for a bf16 model,
    else :func:`provenance_label` on the profile ``gpu`` / ``path`` / the kernel family
    ``kernels`` (an engine mode's ``kernels``: the caller resolves the mode)."""
    if px.is_default(model):
        return fallback
    from pathlib import Path

    from twin.costmodel.profile_store import resolve_profile

    prof = resolve_profile(gpu, Path(path) if path else None, kernels)
    return provenance_label(model, prof)


__all__ = [
    "BF16_ATTENTION_NOTE",
    "MOE_AS_GEMM_NOTE",
    "PricedPrecision",
    "no_fp4",
    "priced_precision",
    "profile_name",
    "provenance_label",
    "refusal",
    "sweep_label",
]
