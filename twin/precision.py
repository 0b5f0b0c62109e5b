"""Precision: what a model's linear layers and KV cache are stored and computed in.

Two independent choices, both fields of ``ModelSpec`` so that every consumer (weight
and KV bytes, the shared pool, the prefix cache, the cost model) reads one answer:

- ``precision`` (``--precision``): the weights and activations of the linear layers,
  i.e. every projection the cost model prices as a GEMM (attention QKV/O, the
  recurrent mixers' projections, MLP and expert matrices). ``moe_precision`` may set
  the experts apart (``None``: they follow ``precision``). Embeddings, the LM head,
  norms, convolution weights, the recurrent mixers' small parameters and the MoE
  router stay at ``dtype_bytes``, as the engines keep them: vLLM's ``Fp8Config``
  quantises ``LinearBase`` layers, ``FusedMoE`` experts and the attention KV only
  (``vllm/model_executor/layers/quantization/fp8.py``, ``get_quant_method``; the
  embedding and ``ParallelLMHead`` are ``VocabParallelEmbedding``s, the router is
  built with ``quant_config=None``, e.g. ``models/deepseek_v2.py``), and NVIDIA's
  ModelOpt checkpoints for TensorRT-LLM exclude ``lm_head`` (``hf_quant_config.json``
  ``exclude_modules``, e.g. ``nvidia/Llama-3.1-70B-Instruct-FP8`` as cached in
  ``aiconfigurator-core`` 0.12.0).
- ``kv_dtype`` (``--kv-dtype``): the KV cache. Recurrent states keep
  ``state_dtype_bytes`` and conv states ``dtype_bytes`` whatever it is.

Bytes per weight (the formats' own definitions; scales included, exact fractions):

- ``bf16``: the model's ``dtype_bytes`` (2: bf16/fp16), the unquantised checkpoint;
- ``fp8``: 1 byte (E4M3; one fp32 scale per tensor or channel, negligible and left
  out): vLLM ``Fp8LinearMethod``;
- ``fp8-block``: 1 byte plus one fp32 scale per 128 x 128 block (``weight_block_size
  [128, 128]``, ``weight_scale_inv`` float32: vLLM ``Fp8LinearMethod.create_weights``,
  DeepSeek-V3's checkpoint format): 1 + 4/16384 bytes;
- ``nvfp4``: 4-bit E2M1 values plus one FP8 (E4M3) scale per 16 values (NVIDIA,
  "Introducing NVFP4 for Efficient and Accurate Low-Precision Inference", NVIDIA
  technical blog, June 2025; the per-tensor fp32 scale is negligible): 1/2 + 1/16;
- ``mxfp4``: 4-bit E2M1 values plus one E8M0 scale per 32 values (OCP Microscaling
  Formats (MX) Specification v1.0, sec. 5): 1/2 + 1/32.
- ``int4``: 4-bit integers plus one bf16 scale per group of 32 (symmetric, no zero
  point): Kimi-K2.5's routed experts, a compressed-tensors ``pack-quantized`` checkpoint
  whose ``config_groups`` weights are ``num_bits`` 4, ``type`` int, ``strategy`` group,
  ``group_size`` 32, ``symmetric`` true (its ``config.json`` as cached in
  ``aiconfigurator-core`` 0.12.0); compressed-tensors stores a group's ``weight_scale``
  in the checkpoint's dtype (bf16): 1/2 + 2/32. The tables' ``int4_wo``.

Activations entering a quantised GEMM: fp8 and fp8-block quantise them to fp8 (W8A8:
vLLM's ``Fp8LinearOp``, DeepGEMM's block kernels), nvfp4 to nvfp4 (W4A4, the tables'
``nvfp4`` GEMM mode; ``nvfp4_wo`` would be weight-only), mxfp4 and int4 keep them in
bf16 (W4A16, aiconfigurator's ``w4a16_mxfp4`` and ``int4_wo``); outputs are bf16 in
every mode; the quantisation of the input is part of the layer (``gemm_operand_bytes``).
A weight-only format's GEMMs run on bf16 tensor cores (the weights are dequantised
before the MMA: ``compute_dtype`` bfloat16 of ``MoEQuantMode.w4a16_mxfp4`` and
``int4_wo`` in aiconfigurator-core 0.12.0 ``sdk/common.py``), so its fits run against
the bf16 peak and it runs on any GPU the engines serve it on (Hopper included).

A KV cache of ``fp8`` holds 1 byte per element (vLLM ``--kv-cache-dtype fp8``,
SGLang ``--kv-cache-dtype fp8_e4m3``, TensorRT-LLM's FP8 KV cache; per-tensor k/v
scales are negligible).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from twin.errors import TwinError

if TYPE_CHECKING:
    from twin.hardware import GpuSpec
    from twin.model import ModelSpec

DEFAULT = "bf16"  # the unquantised model: weights, activations and KV at dtype_bytes


@dataclass(frozen=True)
class WeightFormat:
    """One ``--precision``: how its weights are stored and which GEMM kernels run it."""

    name: str  # the --precision value
    table_mode: str  # the kernel tables' quant mode (gemm_dtype / gemm_quant_mode)
    bytes_per_param: Fraction | None  # None: the model's dtype_bytes (unquantised)
    act_bytes: Fraction | None  # bytes per activation element read; None: dtype_bytes
    flops_peak: str  # the profile peak its tensor-core rate is: flops, fp8_flops, fp4_flops
    fp4: bool = False  # needs FP4 tensor cores (Blackwell)

    @property
    def kernel(self) -> str:
        """The profile key of this precision's GEMM fit (``gemm`` for bf16)."""
        return "gemm" if self.bytes_per_param is None else f"gemm_{self.table_mode}"

    @property
    def moe_kernel(self) -> str:
        """The profile key of this precision's fused-MoE fit (``moe`` for bf16)."""
        return "moe" if self.bytes_per_param is None else f"moe_{self.table_mode}"


WEIGHT_FORMATS: dict[str, WeightFormat] = {
    f.name: f
    for f in (
        WeightFormat("bf16", "bfloat16", None, None, "flops"),
        WeightFormat("fp8", "fp8", Fraction(1), Fraction(1), "fp8_flops"),
        WeightFormat(
            "fp8-block", "fp8_block", Fraction(1) + Fraction(4, 128 * 128), Fraction(1), "fp8_flops"
        ),
        WeightFormat(
            "nvfp4",
            "nvfp4",
            Fraction(1, 2) + Fraction(1, 16),
            Fraction(1, 2) + Fraction(1, 16),
            "fp4_flops",
            fp4=True,
        ),
        WeightFormat("mxfp4", "mxfp4", Fraction(1, 2) + Fraction(1, 32), None, "flops"),
        WeightFormat("int4", "int4_wo", Fraction(1, 2) + Fraction(2, 32), None, "flops"),
    )
}
WEIGHT_PRECISIONS = tuple(WEIGHT_FORMATS)
KV_DTYPES = ("bf16", "fp8")
KV_FP8_BYTES = 1  # bytes per KV element in an fp8 (E4M3) cache
# The profile keys of the attention fits for an fp8 KV cache (``calibration.aic_dense``).
ATTN_FP8_KV = {"attn_prefill": "attn_prefill_fp8kv", "attn_decode": "attn_decode_fp8kv"}

# The tables' quant-mode names (silicon_sample.csv, gemm_dtype) -> --precision.
TABLE_MODES = {f.table_mode: f.name for f in WEIGHT_FORMATS.values()} | {
    "bf16": "bf16",
    "float16": "bf16",
    "fp16": "bf16",
    "fp4": "nvfp4",
}


# The MoE tables' ``moe_dtype`` -> --precision (``w4a16_mxfp4``: mxfp4 weights, bf16
# activations, which is what ``mxfp4`` is here; ``int4_wo``: int4 weights, bf16
# activations).
MOE_TABLE_MODES = {
    "bfloat16": "bf16",
    "fp8": "fp8",
    "fp8_block": "fp8-block",
    "nvfp4": "nvfp4",
    "w4a16_mxfp4": "mxfp4",
    "int4_wo": "int4",
}


def weight_format(name: str, flag: str = "--precision") -> WeightFormat:
    """The format called ``name``; one line naming ``flag`` and the valid values otherwise."""
    try:
        return WEIGHT_FORMATS[str(name).lower()]
    except KeyError:
        raise TwinError(
            f"{flag} {name!r}: expected one of {', '.join(WEIGHT_PRECISIONS)}"
        ) from None


def check_kv_dtype(name: str, flag: str = "--kv-dtype") -> str:
    """``name`` if it is a KV dtype; one line naming ``flag`` and the valid values otherwise."""
    if str(name).lower() not in KV_DTYPES:
        raise TwinError(f"{flag} {name!r}: expected one of {', '.join(KV_DTYPES)}")
    return str(name).lower()


def moe_format(m: ModelSpec) -> WeightFormat:
    """The experts' format: ``moe_precision``, else the model's ``precision``."""
    return weight_format(m.moe_precision or m.precision, "moe_precision")


# Which GPUs have the tensor cores a W8A8 / W4A4 GEMM needs (NVIDIA's architecture
# whitepapers; ``GpuSpec.fp8_flops`` / ``fp4_flops`` are None where there are none).
_TENSOR_CORES = {
    "fp8_flops": ("FP8", "Ada, Hopper and later"),
    "fp4_flops": ("FP4", "Blackwell"),
}


def check_runs_on(m: ModelSpec, gpu: GpuSpec) -> None:
    """Refuse, in one line naming the flag and the GPU, a precision whose GEMMs need tensor
    cores ``gpu`` lacks: fp8 and fp8-block quantise the activations too (W8A8: FP8 tensor
    cores, Ada and Hopper on), nvfp4 likewise (W4A4: FP4 tensor cores, Blackwell). mxfp4
    and int4 are weight-only (W4A16, ``act_bytes`` None) and run on bf16 tensor cores, as
    vLLM runs gpt-oss's mxfp4 experts on Hopper and Ampere
    (``vllm/model_executor/layers/quantization/mxfp4.py``: ``Mxfp4Config``'s minimum
    capability 8.0, Marlin / Triton / FlashInfer SM90 BF16 backends) and int4 experts
    with Marlin (the tables' ``vllm_compressedtensorswna16marlinmoe`` rows on H100/H200)."""
    checks = [(weight_format(m.precision), "--precision")]
    if m.n_moe_layers and m.moe_precision not in (None, m.precision):
        checks.append((moe_format(m), "moe_precision"))
    for fmt, flag in checks:
        if fmt.act_bytes is None or fmt.flops_peak not in _TENSOR_CORES:
            continue
        if getattr(gpu, fmt.flops_peak) is None:
            cores, archs = _TENSOR_CORES[fmt.flops_peak]
            raise TwinError(
                f"{flag} {fmt.name}: {gpu.display_name} has no {cores} tensor cores "
                f"({fmt.name} needs {archs}; model {m.name!r})"
            )


def kv_elem_bytes(m: ModelSpec) -> int:
    """Bytes of one KV element of ``m``: ``dtype_bytes``, or 1 in an fp8 cache."""
    return KV_FP8_BYTES if m.kv_dtype == "fp8" else m.dtype_bytes


def param_bytes(m: ModelSpec, params: int, fmt: WeightFormat) -> Fraction:
    """Bytes of ``params`` weights stored in ``fmt`` (exact)."""
    per = fmt.bytes_per_param
    return Fraction(params * m.dtype_bytes) if per is None else params * per


def weight_bytes(m: ModelSpec, dense_linear: int, moe_linear: int, other: int) -> int:
    """All of ``m``'s weights: its linear layers in ``precision``, its experts in their
    format, everything else at ``dtype_bytes``; rounded up to a whole byte."""
    dense, moe = weight_format(m.precision), moe_format(m)
    if dense.bytes_per_param is None and moe.bytes_per_param is None:
        return (dense_linear + moe_linear + other) * m.dtype_bytes
    total = param_bytes(m, dense_linear, dense) + param_bytes(m, moe_linear, moe)
    return math.ceil(total + other * m.dtype_bytes)


def gemm_operand_bytes(fmt: WeightFormat, e: int) -> tuple[float, float]:
    """Bytes moved per activation element and per weight element by a linear layer of
    ``fmt`` (``e``: the unquantised width); the output is written at ``e``.

    A layer whose activations are quantised quantises its input itself before the
    GEMM (vLLM's ``Fp8LinearOp``: ``scaled_fp8_quant``, then ``cutlass_scaled_mm``; the
    FP4 kernels' ``fp4_quantize``): the bf16 input is read, written at the format's
    width and read back, ``e + 2 x act_bytes`` per element. The kernel tables time the
    layer's ``apply`` with that step; counting it fits them better than the GEMM's own
    operands alone (held-out median error 12.7% against 14.4% for vLLM's fp8 on H100,
    5.3% against 5.9% for TensorRT-LLM's, and so for every quantised family tried).
    Exact binary fractions."""
    act = float(e if fmt.act_bytes is None else e + 2 * fmt.act_bytes)
    weight = float(e if fmt.bytes_per_param is None else fmt.bytes_per_param)
    return act, weight


def is_default(m: ModelSpec) -> bool:
    """Whether ``m`` runs unquantised: bf16 weights and experts, bf16 KV."""
    return m.precision == DEFAULT and m.moe_precision in (None, DEFAULT) and m.kv_dtype == DEFAULT


def describe(m: ModelSpec) -> str:
    """``fp8 weights, fp8 KV`` (experts named when they differ)."""
    text = f"{m.precision} weights"
    if m.n_moe_layers and m.moe_precision not in (None, m.precision):
        text += f", {m.moe_precision} experts"
    return f"{text}, {m.kv_dtype} KV"


def info(m: ModelSpec) -> dict[str, str]:
    """What an output's ``profile`` section says was priced (empty at the default, so
    every bf16 output keeps its bytes)."""
    if is_default(m):
        return {}
    out = {"precision": m.precision, "kv_dtype": m.kv_dtype}
    if m.n_moe_layers and m.moe_precision not in (None, m.precision):
        out["moe_precision"] = str(m.moe_precision)
    return out


def with_precision(m: ModelSpec, precision: str | None, kv_dtype: str | None) -> ModelSpec:
    """``m`` with ``--precision`` / ``--kv-dtype`` applied (``None``: as it is). The
    name is kept: outputs say the precision in their own field."""
    if precision is not None:
        m = dataclasses.replace(m, precision=weight_format(precision).name)
    if kv_dtype is not None:
        m = dataclasses.replace(m, kv_dtype=check_kv_dtype(kv_dtype))
    return m


def model_sets(precision: str | None, kv_dtype: str | None) -> list[str]:
    """``--precision`` / ``--kv-dtype`` as ``--model-set`` entries (for the sweeps, which
    carry a model as a name and its overrides), checked; none for an unset option."""
    out = []
    if precision is not None:
        out.append(f"precision={weight_format(precision).name}")
    if kv_dtype is not None:
        out.append(f"kv_dtype={check_kv_dtype(kv_dtype)}")
    return out


__all__ = [
    "ATTN_FP8_KV",
    "DEFAULT",
    "KV_DTYPES",
    "MOE_TABLE_MODES",
    "TABLE_MODES",
    "WEIGHT_FORMATS",
    "WEIGHT_PRECISIONS",
    "WeightFormat",
    "check_kv_dtype",
    "check_runs_on",
    "describe",
    "gemm_operand_bytes",
    "info",
    "is_default",
    "kv_elem_bytes",
    "model_sets",
    "moe_format",
    "param_bytes",
    "weight_bytes",
    "weight_format",
    "with_precision",
]
