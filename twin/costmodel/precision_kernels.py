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

from twin import mixers as mx
from twin import precision as px
from twin.costmodel.formulas import MODEL_VARIANTS, PRECISION_VARIANTS
from twin.costmodel.mla_decode_kernels import TRTLLM_MLA_SOURCE
from twin.costmodel.mla_families import MLA_MODULE_GEMMS, SGLANG_MLA_MODULE_TABLES, mla_kernel
from twin.costmodel.moe_families import moe_min_latency_kernel
from twin.costmodel.profile import Profile
from twin.errors import TwinError
from twin.model import ModelSpec

BF16_ATTENTION_NOTE = "bf16-KV kernel (no fp8-KV fit in this profile)"
MOE_AS_GEMM_NOTE = "MoE experts as GEMMs (no fused-MoE fit in this profile)"
SHARED_AS_LINEAR_NOTE = "shared expert as the linear layers' GEMMs (no GEMM fit of its format)"
MLA_AS_GQA_NOTE = "MLA {} priced with GQA kernels (no MLA fit for it in this profile)"
BF16_MLA_NOTE = "bf16-KV MLA kernel (no fp8-KV MLA fit in this profile)"
SGLANG_MODULE_NOTE = "SGLang's MLA module tables, labelled fp8-KV, timed at a bf16 cache"


@dataclass(frozen=True)
class PricedPrecision:
    """The fits one model's precision is priced with on one profile."""

    linear: px.WeightFormat  # the linear layers' format
    expert: px.WeightFormat  # the experts' format
    keys: Mapping[str, str] = field(default_factory=dict)  # family -> the profile key used
    kv_elem_bytes: int = 2  # bytes per K/V element the attention features read
    notes: Mapping[str, str] = field(default_factory=dict)  # group -> remark for the label
    # MLA (``twin.costmodel.mla_pricing``): bytes per latent element its prefill and
    # decode kernels read, and the (activation, weight) operand bytes of its module's
    # GEMMs and of its absorbed BMMs.
    mla_kv_elem_bytes: tuple[int, ...] = (2, 2)
    mla_gemm_bytes: tuple[float, float] = (2.0, 2.0)
    mla_bmm_bytes: tuple[float, float] = (2.0, 2.0)
    # The share of its features' latent bytes the MLA module's decode streams
    # (:func:`module_decode_kv_share`).
    mla_module_kv_share: float = 1.0

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
    fits = "GEMM or fused-MoE fit" if what == "moe_precision" else "GEMM fit"
    return TwinError(
        f"{what} {fmt.name}: profile {profile_name(profile)} has no {fmt.name} {fits}; "
        f"it prices {has}{f' ({why})' if why else ''}"
    )


def priced_precision(model: ModelSpec, profile: Profile) -> PricedPrecision:
    """The fits ``model`` is priced with on ``profile``; a ``TwinError`` when its
    precision has none."""
    from twin.hardware import GPUS

    spec = GPUS.get(profile.gpu)
    if spec is not None:  # a precision the GPU has no tensor cores for: one line
        px.check_runs_on(model, spec)
    linear = px.weight_format(model.precision)
    expert = px.moe_format(model)
    keys: dict[str, str] = {}
    if linear.kernel not in profile.kernels:
        raise refusal(profile, linear, "--precision")
    # The experts' format is priced by its fused-MoE fit or, without one, its GEMM fit:
    # a weight-only format the tables time as fused MoE only (int4) needs the first.
    if model.n_moe_layers and not {expert.kernel, expert.moe_kernel} & set(profile.kernels):
        raise refusal(profile, expert, "moe_precision")
    if linear.bytes_per_param is not None:
        keys["linear"] = linear.kernel
    kv_elem, notes = model.dtype_bytes, {}
    if model.n_moe_layers and expert.bytes_per_param is not None:
        if expert.kernel in profile.kernels:
            keys["expert"] = expert.kernel
        elif model.moe_shared_d_ff:  # no GEMM fit of the experts' format
            notes["shared expert"] = SHARED_AS_LINEAR_NOTE
    if model.n_moe_layers:
        if expert.moe_kernel in profile.kernels:
            keys["moe"] = expert.moe_kernel
            # TensorRT-LLM's min-latency kernel for small steps, where the profile has it
            # (``moe_families.MOE_MIN_LATENCY_MAX_TOKENS``; ``moe_pricing`` picks per step).
            small = moe_min_latency_kernel(expert.table_mode)
            if small in profile.kernels:
                keys["moe_small"] = small
        else:
            notes["GEMM"] = MOE_AS_GEMM_NOTE
    e = float(model.dtype_bytes)
    mla_kv: tuple[int | None, int | None] = (None, None)
    mla_gemm = mla_bmm = (e, e)
    gqa = any(model.mixer_counts.get(k) for k in mx.GQA_KINDS)
    if model.mixer_counts.get("mla"):
        mla_kv, mla_gemm, mla_bmm = _mla_keys(model, profile, linear, keys, notes)
        gqa = gqa or None in mla_kv  # the GQA stand-in prices a phase of MLA's attention
    if model.kv_dtype == "fp8" and gqa:
        if all(key in profile.kernels for key in px.ATTN_FP8_KV.values()):
            keys.update(px.ATTN_FP8_KV)
            kv_elem = px.KV_FP8_BYTES
        else:
            notes["attention"] = BF16_ATTENTION_NOTE
    return PricedPrecision(
        linear,
        expert,
        keys,
        kv_elem,
        notes,
        # the GQA stand-in reads what attention reads
        mla_kv_elem_bytes=tuple(kv_elem if k is None else k for k in mla_kv),
        mla_gemm_bytes=mla_gemm,
        mla_bmm_bytes=mla_bmm,
        mla_module_kv_share=module_decode_kv_share(model, profile, keys),
    )


def module_decode_kv_share(model: ModelSpec, profile: Profile, keys: Mapping[str, str]) -> float:
    """The share of its features' latent bytes an fp8 cache's decode streams where
    SGLang's module fit prices it: that fit timed a bf16 cache as fp8 features
    (:func:`_timed_at_bf16`: ``e`` bytes an element counted as ``KV_FP8_BYTES``), and the
    fp8 cache's decode kernel reads one byte an element (SGLang 0.5.9
    ``layers/attention/trtllm_mla_backend.py``: ``forward_decode`` passes the fp8 cache
    to ``trtllm_batch_decode_with_kv_cache_mla`` as stored, the query quantised to fp8),
    so the KV stream is ``KV_FP8_BYTES / e`` of the fitted one. 1 elsewhere: a bf16
    cache, a fit timed at its own cache, and FlashInfer's MLA (Hopper's tables), whose
    0.5.9 ``flashinfer_mla_backend.py`` ``forward_decode`` casts the fp8 layer buffer
    ``.to(q.dtype)`` before its kernel reads it as bf16. The prefill's stream is the
    decompressed K/V (bf16 whatever the cache) and keeps the fitted bytes."""
    key = keys.get("mla_module_decode")
    if model.kv_dtype != "fp8" or key is None or not _timed_at_bf16(profile, key):
        return 1.0
    # SGLang's MLA backend whose decode kernel reads an fp8 cache as stored
    if profile.kernels[key].provenance.get("kernel_source") != TRTLLM_MLA_SOURCE:
        return 1.0
    return px.KV_FP8_BYTES / model.dtype_bytes


def _mla_keys(
    model: ModelSpec,
    profile: Profile,
    linear: px.WeightFormat,
    keys: dict[str, str],
    notes: dict[str, str],
) -> tuple[tuple[int | None, int | None], tuple[float, float], tuple[float, float]]:
    """Add the MLA fits ``model`` takes on ``profile`` to ``keys`` (``mla_pricing``'s
    three ways: the module fits of its GEMM format and KV dtype for both phases; else per
    phase the attention-kernel fit, with the BMM fit for decode; else the GQA stand-in,
    noted). Returns the bytes per latent element each phase's MLA fit reads ((prefill,
    decode); None where the stand-in prices it) and the (activation, weight) operand
    bytes of the module's GEMMs and of the BMMs. An fp8 cache without an fp8-KV MLA fit
    takes the bf16-KV one at its own (bf16) features, as for attention, and the label
    says so. SGLang's module fits (:func:`_timed_at_bf16`) are a bf16-KV pair whatever
    their names say: either cache takes them, an fp8 cache's decode streaming the bytes
    its cache holds where its kernel reads them as stored (:func:`module_decode_kv_share`)
    rather than the 0.5.14 kernel fits of its cache (their decomposed fixed costs priced
    the 0.5.9 B200 fit rows' small batches 3-9% dear: docs/decisions.md, issue 31,
    session 25's SGLang DeepSeek step)."""
    e = model.dtype_bytes
    quantised = linear.bytes_per_param is not None
    gemm_bytes = px.gemm_operand_bytes(linear, e) if quantised else (float(e), float(e))
    bmm_bytes = (float(e), float(e))
    has = profile.kernels.__contains__
    kv_modes = ["fp8", "bfloat16"] if model.kv_dtype == "fp8" else ["bfloat16"]
    own_kv = kv_modes[0]

    def kv_bytes(kv: str) -> int:
        if kv != own_kv:
            notes["MLA attention"] = BF16_MLA_NOTE
        return px.KV_FP8_BYTES if kv == "fp8" else e

    if linear.table_mode in MLA_MODULE_GEMMS:
        # SGLang's module fits say fp8-KV but timed a bf16 cache
        # (``mla_families.SGLANG_MLA_MODULE_TABLES``): they are a bf16-KV pair, priced at the
        # features they were fitted with (``calibration.aic_mla.wideep_rows``: fp8
        # bytes), so the price is the rows' own.
        sglang = {f: mla_kernel(f, linear.table_mode, "fp8") for f in _MODULE}
        timed_bf16 = all(_timed_at_bf16(profile, k) for k in sglang.values())
        for kv in kv_modes:
            pair = {f: mla_kernel(f, linear.table_mode, kv) for f in _MODULE}
            if all(map(has, pair.values())) and not (kv == "fp8" and timed_bf16):
                keys.update(pair)
                return (kv_bytes(kv), kv_bytes(kv)), gemm_bytes, bmm_bytes
        # Both caches take them (the module SGLang 0.5.9/0.5.10 runs: ``trtllm_mla`` for
        # DeepSeek-V3 on SM100, FlashInfer on Hopper by the scripts' flag); an fp8
        # cache's decode at its own stream (``PricedPrecision.mla_module_kv_share``).
        if timed_bf16:
            keys.update(sglang)
            notes["MLA attention"] = SGLANG_MODULE_NOTE
            return (px.KV_FP8_BYTES, px.KV_FP8_BYTES), gemm_bytes, bmm_bytes
    kv_elem: list[int | None] = [None, None]
    for i, family in enumerate(_KERNELS):
        for kv in kv_modes:
            key = mla_kernel(family, kv=kv)
            if has(key):
                keys[family] = key
                kv_elem[i] = kv_bytes(kv)
                break
    # The absorbed BMMs follow the kv_b projection's format: fp8 for a quantised
    # checkpoint, else bf16 (aiconfigurator's ``mla_bmm_quant_mode``,
    # ``sdk/models/deepseek.py``); a bf16 BMM fit stands in for a missing fp8 one.
    bmm_mode = "fp8" if quantised else "bfloat16"
    for mode in dict.fromkeys((bmm_mode, "bfloat16")):
        key = mla_kernel("mla_bmm", mode)
        if has(key):
            keys["mla_bmm"] = key
            fmt = px.WEIGHT_FORMATS[px.TABLE_MODES[mode]]
            if fmt.bytes_per_param is not None:
                bmm_bytes = px.gemm_operand_bytes(fmt, e)
            break
    stand_in = [p for p, k in zip(("prefill", "decode"), kv_elem, strict=True) if k is None]
    if stand_in:
        notes["attention"] = MLA_AS_GQA_NOTE.format(" and ".join(stand_in))
    return (kv_elem[0], kv_elem[1]), gemm_bytes, bmm_bytes


_MODULE = ("mla_module_prefill", "mla_module_decode")


def _timed_at_bf16(profile: Profile, key: str) -> bool:
    """Whether ``profile`` has the fit ``key`` from SGLang's module tables (its
    provenance's tables), which time a bf16 cache whatever their label says."""
    fit = profile.kernels.get(key)
    tables = fit.provenance.get("tables", []) if fit is not None else []
    names = set(SGLANG_MLA_MODULE_TABLES.values())
    return bool(tables) and all(str(t).rsplit("/", 1)[-1] in names for t in tables)


_KERNELS = ("mla_prefill", "mla_decode")


def provenance_label(model: ModelSpec, profile: Profile) -> str:
    """The label of a run of ``model`` on ``profile``: the profile's own for a bf16 model
    (every existing output's bytes), else the mixture of the fits that price it, the bf16
    GEMM named as the LM head's."""
    # A profile without per-family provenance (a datasheet or own-GPU one) has one label;
    # a MoE model on a fitted one names how its experts are priced.
    per_family = any(fit.provenance for fit in profile.kernels.values())
    by_kind = model.n_moe_layers or model.mixer_counts.get("mla")
    if px.is_default(model) and not (by_kind and per_family):
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
    "BF16_MLA_NOTE",
    "MLA_AS_GQA_NOTE",
    "MOE_AS_GEMM_NOTE",
    "SGLANG_MODULE_NOTE",
    "PricedPrecision",
    "module_decode_kv_share",
    "no_fp4",
    "priced_precision",
    "profile_name",
    "provenance_label",
    "refusal",
    "sweep_label",
]
