"""The latency model of each kernel, and the FLOPs/bytes features it is fitted on.

One physically-shaped model for every kernel::

    t = t0 + smax_p(F / (eff_flops * flops_peak) + sum_j c_j x_j, B / (eff_bytes * bytes_peak))

``F`` is the FLOPs, ``B`` the fewest bytes the kernel must move, ``t0`` the launch
overhead, ``smax_p(a, b) = (a^p + b^p)^(1/p)`` a smooth maximum (p = 1 is no
overlap at all, large p a hard roofline), and the ``x_j`` extra features a kernel
needs beyond the roofline, on the compute side (they overlap with memory traffic
as arithmetic does): the score elements (query x key pairs x heads) of attention,
whose softmax costs per score and not per FLOP; the chunks x heads of the Mamba2
scan, whose state passing is sequential; and the weight elements of a GEMM, whose
per-panel work (packing, tile edges) makes few-token products slower than their
FLOPs. Every coefficient is non-negative and every feature grows with tokens and
context, so predictions are monotone in both. Byte-only kernels (copies,
element-wise passes) are ``t0 + B / (eff_bytes * bytes_peak)``; the all-reduce's
(``KernelFormula.lines``) the least of a few such lines, one per algorithm the library
chooses among.

Features are additive across the sequences of one batched launch, so a batch of
prefill chunks is priced as one launch with the summed features (one ``t0``).
This module names each kernel's formula (its parameters, its peaks, its extra features)
and checks parameter sets; ``twin.costmodel.features`` computes the features of a shape
and ``twin.costmodel.latency`` evaluates the formula. All three are pure Python: the
cost model and the fitting import them without torch.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from twin.errors import TwinError

# The model-name part and parameter of ``KernelFormula.floor``.
FLOOR = "floor"
FLOOR_PARAM = "floor_s"


def line_params(i: int) -> tuple[str, str]:
    """The latency and efficiency parameters of line ``i`` (1-based) of a byte-only
    formula with several lines (``KernelFormula.lines``): ``t0_s`` and ``eff_bytes`` for
    the first, ``t0_<i>_s`` and ``eff_bytes_<i>`` after it."""
    return ("t0_s", "eff_bytes") if i == 1 else (f"t0_{i}_s", f"eff_bytes_{i}")


# The most lines a formula may have (``KernelFormula.lines``); their parameters' ranges
# (``twin.costmodel.profile.PARAM_RANGES``) are written for these.
MAX_LINES = 3


@dataclass(frozen=True)
class KernelFormula:
    """How one kernel's latency model reads a profile."""

    kernel: str
    bytes_peak: str  # the profile peak the byte time divides by: mem_bw or host_bw
    uses_flops: bool  # False: a pure byte-moving kernel (no FLOP term, no smooth max)
    # Extra linear features, each with a ``c_<name>`` coefficient: on the compute side of a
    # roofline kernel; added to the byte time of a byte-only one (the all-to-all's).
    extras: tuple[str, ...]
    doc: str
    # The peak the FLOP time divides by: tensor-core ``flops``, or ``fp32_flops`` for a
    # kernel that runs on CUDA cores in fp32 (Mamba-1's selective scan).
    flops_peak: str = "flops"
    # Serial extras: linear features priced after the smooth maximum (``t0 + smax_p(...) +
    # sum_k s_k z_k``), work that overlaps neither the math nor the memory stream (the
    # fused MoE's set-up of each expert it touches). Each has a ``c_<name>`` coefficient
    # after the extras'. The scalar and array forms price them (``latency.compile_kernel``,
    # ``compile_fast``, ``compile_many``); the affine form and the decode paths' compiled
    # constants (``latency.kernel_constants``) refuse such a formula.
    serial: tuple[str, ...] = ()
    # Serial features priced at a fixed physical rate rather than a fitted one: (feature,
    # peak) pairs, the feature's ``c_<name>`` held at ``1 / peaks[peak]`` by the fit
    # (``fit.fit_params``) and stored like any other coefficient, so a feature of bytes is
    # priced as a stream at that bandwidth and cannot absorb the rest of the kernel's time.
    fixed_rates: tuple[tuple[str, str], ...] = ()
    # The model name's first part where the smooth maximum's FLOPs and bytes are not the
    # whole kernel's (``""``: ``roofline`` / ``bandwidth``): a fit written when they were
    # is then refused by name (``profile._upgrade`` upgrades only a fit of the same base),
    # not read with coefficients meant for other features.
    base: str = ""
    # A floor: the time is the larger of a fitted ``floor_s`` and the formula, for a call
    # whose small work hides under a wait (the all-to-all's families: the peers' signals,
    # vLLM's host path; the MLA decode kernels: ``MLA_DECODE_FLOOR``). Named ``+floor``
    # last in the model; a fit written without it reads with ``floor_s`` 0
    # (``profile._upgrade``): the same prices. ``latency.compile_kernel`` and
    # ``latency.compile_fast`` of a formula with serial features price it.
    floor: bool = False
    # Lines: a byte-only formula that is the least of this many latency-plus-bandwidth
    # lines, ``min_i(t0_i + B / (eff_bytes_i * peak))`` (parameters :func:`line_params`),
    # one per algorithm a collective library picks among by message size, each at its own
    # latency and bandwidth: the all-reduce's (the custom all-reduce's one-shot and
    # two-shot kernels, NCCL above them; NCCL's own protocols). Named ``min<lines>``; no
    # extras, serial features or floor with it.
    lines: int = 1
    # Coefficients a fit may carry under another name, ``(formula's name, fit's name)``: the
    # attention decode families' third, which prices what the fit's launch rule counts
    # (``features.launch_coefficient``: ``c_xqa_ctas`` on TensorRT-LLM Hopper's XQA fits).
    # Read by position: ``coefficient`` / ``params_of``; the fit's model name carries the
    # name too (``model_name_of``).
    aliases: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not 1 <= self.lines <= MAX_LINES:
            raise ValueError(f"{self.kernel}: lines must be 1..{MAX_LINES} (got {self.lines})")
        if self.lines > 1 and (self.uses_flops or self.features or self.floor):
            raise ValueError(f"{self.kernel}: several lines only for a plain byte-only formula")
        if any(x not in self.serial for x, _ in self.fixed_rates):
            raise ValueError(f"{self.kernel}: a fixed rate only for a serial feature")
        if any(not name.startswith("c_") for pair in self.aliases for name in pair):
            raise ValueError(f"{self.kernel}: an alias only of an extra's coefficient")

    @property
    def model_name(self) -> str:
        """Formula name stored in a profile (a fit whose coefficient carries its alias:
        :meth:`model_name_of`)."""
        return self._model_name(self.features)

    def model_name_of(self, params: dict[str, Any]) -> str:
        """``model_name`` as fit ``params`` name their coefficients: an aliased extra under
        the name the fit carries (``aliases``: an XQA fit's ``c_xqa_ctas`` makes it
        ``roofline+score_elems+tiles+xqa_ctas``), so the name says what each coefficient
        prices."""
        alias = self._aliased(params)
        return self._model_name(
            tuple(alias.get(f"c_{x}", f"c_{x}").removeprefix("c_") for x in self.features)
        )

    def _model_name(self, features: tuple[str, ...]) -> str:
        plain = "roofline" if self.uses_flops else "bandwidth"
        base = self.base or (plain if self.lines == 1 else f"min{self.lines}_{plain}")
        return "+".join((base, *features, *((FLOOR,) if self.floor else ())))

    @property
    def features(self) -> tuple[str, ...]:
        """Every extra feature in parameter order: the compute side's, then the serial."""
        return (*self.extras, *self.serial)

    @property
    def param_names(self) -> tuple[str, ...]:
        """Parameter names in fitting order."""
        if self.lines > 1:
            return tuple(n for i in range(1, self.lines + 1) for n in line_params(i))
        names = ["t0_s"]
        if self.uses_flops:
            names += ["eff_flops", "eff_bytes", "p"]
        else:
            names += ["eff_bytes"]
        return (*names, *(f"c_{x}" for x in self.features), *((FLOOR_PARAM,) if self.floor else ()))

    def params_of(self, params: dict[str, Any]) -> tuple[str, ...]:
        """``param_names`` as fit ``params`` names them: an aliased coefficient under the
        name the fit carries (``aliases``)."""
        alias = self._aliased(params)
        return tuple(alias.get(n, n) for n in self.param_names)

    def _aliased(self, params: dict[str, Any]) -> dict[str, str]:
        """The formula's coefficient names that ``params`` carry under their alias."""
        return {a: b for a, b in self.aliases if b in params and a not in params}

    def fixed_coefficients(self, peaks: dict[str, float]) -> dict[str, float]:
        """The coefficients held at a fixed physical rate (``fixed_rates``) on a device of
        ``peaks``: one over the peak, exactly (the fitter and the transfer to another GPU
        both set them so, never scaling or fitting them)."""
        return {f"c_{x}": 1.0 / peaks[peak] for x, peak in self.fixed_rates}

    def coefficient(self, params: dict[str, Any], feature: str) -> float:
        """Extra ``feature``'s coefficient in fit ``params``, under its own name or its
        alias (``aliases``)."""
        name = f"c_{feature}"
        return float(params[self._aliased(params).get(name, name)])


# Quantised GEMM modes (the tables' names, ``twin.precision.WeightFormat.table_mode``)
# and the peak each runs against: FP8 and FP4 tensor-core rates (GpuSpec.fp8_flops,
# fp4_flops) where the activations are quantised too; the bf16 rate for a weight-only
# format (mxfp4 is W4A16: aiconfigurator-core 0.12.0 ``sdk/common.py``,
# ``w4a16_mxfp4`` has ``compute_dtype`` bfloat16).
PRECISION_GEMMS = {
    "fp8": "fp8_flops",
    "fp8_block": "fp8_flops",
    "nvfp4": "fp4_flops",
    "mxfp4": "flops",
}
# Weight-only formats the tables time as fused MoE only (no GEMM rows on the GPUs the
# twin prices): int4 (W4A16, ``int4_wo``: ``compute_dtype`` bfloat16, ibid.).
MOE_ONLY_MODES = {"int4_wo": "flops"}

# Expert formats of the fused-MoE families: ``moe`` (bf16) and ``moe_<mode>``, the
# tables' quant mode of ``twin.precision.WeightFormat.table_mode``.
MOE_MODES = {"bfloat16": "flops", **PRECISION_GEMMS, **MOE_ONLY_MODES}


# The fused MoE's terms (every fused-MoE family's: the default kernel, TensorRT-LLM's
# min-latency one, the mxfp8-activation one): its extras and its serial feature.
# ``l2_bytes``: a table row's working set read from L2 across the collector's replays
# (``moe_features.moe_features``); zero in a serving step, so a fit written before it reads
# with ``c_l2_bytes`` 0 and prices as it did (``profile._upgrade``). ``large_m_weights``:
# the weights SGLang's large-M default Triton config streams (``moe_features.sglang_large_m``;
# zero for every other kernel); a fit written before it reads ``c_large_m_weights`` 0.
# ``pad_flops`` / ``restream_weights``: the FLOPs of the rows a kernel pads each expert's
# rows with to its token tile, and the weights each further tile of an expert streams
# again (``moe_features.moe_token_tile``: vLLM's Marlin MoE, FlashInfer's TRT-LLM-gen mxfp4;
# zero for every other kernel); a fit written before them reads ``c_pad_flops`` and
# ``c_restream_weights`` 0. ``grid_flops``: the FLOPs SGLang's Triton kernel runs as whole
# waves of its default config's tiles (``moe_features.sglang_grid_flops``; zero for every
# other kernel); a fit written before it reads ``c_grid_flops`` 0. ``routed_passes``: the
# elements vLLM's Triton kernel moves for every routed row beyond the rank's GEMMs (its
# activation over all of them, the remote experts' zero writes under EP: ``moe_features.
# vllm_triton_routed_elems``; zero for every other kernel); a fit written before it reads
# ``c_routed_passes`` 0.
MOE_EXTRAS = (
    "weight_elems",
    "routed_elems",
    "tile_bytes",
    "l2_bytes",
    "large_m_weights",
    "pad_flops",
    "restream_weights",
    "grid_flops",
    "routed_passes",
)
MOE_SERIAL = ("active_experts",)


def _fused_moe(kernel: str, flops_peak: str, description: str) -> KernelFormula:
    """A fused-MoE family's formula: the fused MoE's terms at ``flops_peak``."""
    return KernelFormula(
        kernel, "mem_bw", True, MOE_EXTRAS, description, flops_peak=flops_peak, serial=MOE_SERIAL
    )


def moe_kernel(mode: str) -> str:
    """The profile key of the fused-MoE fit of table mode ``mode`` (``moe`` for bf16)."""
    return "moe" if mode == "bfloat16" else f"moe_{mode}"


# TensorRT-LLM's min-latency fused MoE: a second kernel of the nvfp4 experts, timed by
# NVIDIA's collector as kernel source ``moe_torch_flow_min_latency`` (TensorRT-LLM's
# TRTLLM-gen backend, ``TRTLLMGenFusedMoE``, at every token count: ai-dynamo/aiconfigurator
# ``collector/trtllm/collect_moe.py``, ``moe_backend = 'cutlass' if not min_latency_mode
# else 'trtllm'``, "trtllm gen", from its first commit efcae124c to 095f58a51; B200 and
# GB200 tables of TensorRT-LLM 1.3.0rc20), which
# aiconfigurator 0.12.0 prices a step with when it routes at most 128 tokens, nvfp4,
# gated (its Rust core's ``MoeOp`` silicon query, ``operators/moe.rs``: ``num_tokens <=
# 128 && quant == Nvfp4 && is_gated``, the token count after attention-DP gathering),
# falling back to the default kernel where the table lacks the shape. TensorRT-LLM
# takes its min-latency MoE path on the same kind of step: ``hidden_states.size(0) <=
# 128`` with the post-MoE all-reduce fusion, on Blackwell, quantised (Llama-4,
# ``tensorrt_llm/_torch/models/modeling_llama.py``), and for DeepSeek-V3 the TRTLLM
# backend's nvfp4 MoE with its finalize fused into the all-reduce while the step's tokens
# fit ``MoEAllReduce``'s workspace (``modeling_deepseekv3.py`` ``forward_MoE``, "the two
# min-latency MoE backends"; NVIDIA/TensorRT-LLM at commit 000561df).
MOE_MIN_LATENCY_SOURCE = "moe_torch_flow_min_latency"
MOE_MIN_LATENCY_MODES = {"nvfp4": "fp4_flops"}
MOE_MIN_LATENCY_MAX_TOKENS = 128


def moe_min_latency_kernel(mode: str) -> str:
    """The profile key of the min-latency fused-MoE fit of table mode ``mode``."""
    return f"{moe_kernel(mode)}_min_latency"


# The same TRTLLM-gen rows fitted over every token count the collector timed (up to
# 16,384): the kernel TensorRT-LLM runs at every step when ``moe_config.backend`` is
# ``TRTLLM`` (``twin.engine.modes_trtllm.TRTLLM_MOE``; ``get_moe_cls`` ->
# ``TRTLLMGenFusedMoE``), prefills included. The min-latency fit above, fitted on the
# steps of at most 128 tokens it prices, extrapolates 2-4x slow past 1,024 tokens
# (B200, DeepSeek's shape at MoE TP 8: 0.30 ms a layer at 1,024 tokens and 1.83 at 8,192
# against the table's 0.155 and 0.421).
def moe_trtllm_gen_kernel(mode: str) -> str:
    """The profile key of the TRTLLM-gen fused-MoE fit over every token count of
    table mode ``mode``."""
    return f"{moe_kernel(mode)}_trtllm_gen"


# The mxfp4 experts with their activations quantised to mxfp8 on the way in (FlashInfer's
# TRT-LLM-gen ``trtllm_fp4_block_scale_moe`` fed ``mxfp8_quantize``'s output: vLLM's
# ``SM100_FI_MXFP4_MXFP8_TRTLLM`` / ``FLASHINFER_TRTLLM_MXFP4_MXFP8`` backend on Blackwell,
# the tables' ``w4a8_mxfp4_mxfp8``, ``moe_features.MXFP8_ACTIVATION_MODE``): a second kernel
# of the same weight format, which a run takes only when asked (``twin.engine.modes_vllm``
# ``moe_backend``). Its fit keeps the weight format's features and peak (the bf16 rate, as
# ``mxfp4``'s), so it stands in for that format's fit (``Profile.with_experts_fit``); the
# faster MMAs are in its efficiency.
# Its peak is the weight format's own (``MOE_MODES``), which ``Profile.with_experts_fit``
# relies on.
MOE_MXFP8_ACTIVATION_MODES = {mode: MOE_MODES[mode] for mode in ("mxfp4",)}


def moe_mxfp8_activation_kernel(mode: str) -> str:
    """The profile key of the fused-MoE fit of weight mode ``mode`` with mxfp8
    activations."""
    return f"{moe_kernel(mode)}_mxfp8"


# MLA families (issue 34), from NVIDIA's ``mla`` and ``mla_bmm`` tables
# (``calibration.aic_tables``): the attention kernels alone per phase (``mla_prefill``,
# ``mla_decode``), the absorbed decode's two batched GEMMs (``mla_bmm``), and the whole
# attention module per phase (``mla_module_prefill``, ``mla_module_decode``: every
# projection, the attention and the output, as vLLM's and TensorRT-LLM's module tables
# time it). Keys: ``<family>[_<gemm mode>][_fp8kv]``; the GEMM mode is the module's
# projections' (``MLA_MODULE_GEMMS``) or the BMM's own (``MLA_BMM_MODES``).
MLA_KV = {"bfloat16": "", "fp8": "_fp8kv"}
# ``fp8``: per-tensor fp8 projections; only SGLang's module tables give it (their query
# has no GEMM axis: ``calibration.aic_mla.wideep_rows``).
MLA_MODULE_GEMMS = {"bfloat16": "", "fp8": "_fp8", "fp8_block": "_fp8_block", "nvfp4": "_nvfp4"}
MLA_BMM_MODES = {"bfloat16": "flops", "fp8": "fp8_flops"}
# SGLang's MLA module tables (``calibration.aic_mla.wideep_rows``), per phase. Their rows
# say ``kv_cache_dtype`` fp8, but that is a string the collector writes
# (aiconfigurator ``collector/sglang/collect_wideep_attn.py``, every version from
# 45033ab44 to ced205af0: ``"kv_cache_dtype": "fp8"`` in ``log_perf``), whose
# ``ServerArgs`` names no ``kv_cache_dtype``: SGLang's ``auto``, which
# ``model_executor/model_runner.py`` ``configure_kv_cache_dtype`` (0.5.10 wheel, read)
# makes the model's dtype unless the checkpoint's quantisation config names
# ``kv_cache_quant_algo`` FP8, and DeepSeek-V3's block-fp8 config names none: the rows
# time a **bf16** cache. Their timings agree: H200 0.5.10 flashinfer, 16 heads, 64
# sequences, 2,048 -> 4,096 cached tokens each adds 0.0356 ms, 1,304 bytes a cached
# token at 4.8 TB/s, the bf16 latent row's 1,152, not the fp8 one's 576. The 0.5.9 and
# 0.5.10 collections (every GPU: B200, B300, H100, H200, GB200, GB300) come from its
# successor, ``collector/sglang/collect_mla_module.py`` (754aadc3c, cb4d907c7:
# ``_build_wideep_mla_test_cases``, "Single precision: run with bfloat16, log as
# fp8_block/fp8", ``kv_cache_dtype`` "bfloat16" passed to ``ServerArgs``, "bf16" for
# Blackwell's ``trtllm_mla``, which SGLang 0.5.9/0.5.10 accepts: ``server_args.py``); their
# timings read a bf16 cache on each GPU (``benchmarks/results/sgl-label/kv-bytes.txt``:
# B200/B300 ``trtllm_mla`` 1,526-1,685 bytes a cached token at 8 TB/s, TensorRT-LLM's
# module 1,562-1,692 at a bf16 cache and 693-891 at fp8; H100 1,220-1,314 at 3.35 TB/s,
# TensorRT-LLM 1,191-1,247 / 570-680).
# ``precision_kernels`` prices their fits as a bf16-KV pair (at the features they were
# fitted with); their family names keep the tables' label.
SGLANG_MLA_MODULE_TABLES = {
    "prefill": "wideep_context_mla_perf.parquet",
    "decode": "wideep_generation_mla_perf.parquet",
}
# The module families' serial features (``mla_module.module_attention_split``): the
# attention kernel's KV stream and its FLOPs, priced after the smooth maximum of the
# module's GEMMs; and the name of that smooth maximum (``KernelFormula.base``).
MLA_MODULE_SERIAL = ("attn_kv_bytes", "attn_flops")
# The prefill modules' floor (``KernelFormula.floor``): SGLang's module collector times one
# eager forward of the attention module between two CUDA events, synchronising after each
# (ai-dynamo/aiconfigurator cb4d907c7, the 0.5.9 / 0.5.10 tables,
# ``collector/sglang/collect_mla_module.py`` ``_run_prefill``: no CUDA graph, ``use_module_
# cuda_graph`` is the decode's; 0.5.6.post2's ``collector/sglang/collect_wideep_attn.py``
# times its context rows the same way). The host issues the module's kernels one Python
# call after another and the GPU runs each as it arrives, so the GPU's work hides under the
# host's until it outgrows it: the larger of the two, not their sum. NVIDIA's H200 SGLang
# 0.5.10 flashinfer table, 16 heads, one sequence: 0.59-0.62 ms from 1 to 2,048 prompt
# tokens, then 0.72, 1.17, 2.70 ms at 4,096, 8,192, 16,384; a fit with the host time as its
# launch latency ``t0`` in series (0.55 ms) priced those three 18-23% high (0.87, 1.43,
# 3.30 ms; docs/decisions.md, helper ``mlapre35``). Only SGLang's fits were refitted with
# it; TensorRT-LLM's and vLLM's shipped fits read a zero floor (the same prices) and take a
# fitted floor at their next ``--refit mla_module`` (one refit of h200-trtllm's: a floor near
# its fastest row, held-out error unchanged; session 35's review).
MLA_MODULE_PREFILL_FLOOR = True
# The prefill attention kernel's serial feature: its waves of CTAs over the SMs
# (``mla_features.mla_prefill_waves``), each about one CTA's time.
MLA_PREFILL_SERIAL = ("waves",)
# The attention kernel's bytes read from L2 across its table's CUDA-graph replays
# (``mla_features.kernel_replay_l2``: where the kernel's whole working set fits in
# ``features.REPLAY_L2_SHARE`` of L2, all of it, its HBM bytes then zero; the collectors'
# replays are cited there), on the compute side; a serving step reads from HBM (zero). A
# fit without it reads with ``c_l2_bytes`` 0 (``profile._upgrade``): the same prices.
# ``mla_prefill*`` takes it before its serial ``waves``, ``mla_decode*`` after its launch
# features.
MLA_KERNEL_REPLAY = ("l2_bytes",)
# The decode attention kernel's launch features (``mla_decode_kernels.mla_decode_launch``, the
# split-KV rule of the kernel the table times): its CTAs and their waves on the compute
# side, the keys re-read by a sequence's other CTAs, the split reduction's partial
# outputs and the critical path's keys after the smooth maximum. Zero without a rule; a
# fit of the older ``roofline+tiles+seq_keys`` form reads with zero coefficients: the
# same prices.
MLA_DECODE_LAUNCH = ("launch_ctas", "launch_waves")
# The decode kernels' floor (``KernelFormula.floor``): NVIDIA's TensorRT-LLM decode
# tables on A100 / L40S / RTX PRO 6000 (the FMHA v2 launch,
# ``mla_decode_kernels.kernel_decode_rule``) are flat at 9.5-10 us (L40S) from 1 to 63 cached
# keys at any batch to 16 and heads to 128, then 14, 24, 44, 84 us at 127, 255, 511 and
# 1,023 keys: 78 ns a key over ~4 us, hidden under the ~10 us below ~80 keys (the larger
# of the two, not their sum). A fit without it reads with a zero floor: the same prices.
MLA_DECODE_FLOOR = True
# The decode kernel's keys times its query-row blocks where its block is read
# (``mla_decode_kernels.decode_block_keys``: Hopper SGLang's ``flash_attention`` over an fp8
# cache, 128 rows a block), on the compute side before the launch's; zero elsewhere. A fit
# without it reads with a zero coefficient: the same prices.
MLA_DECODE_BLOCK = ("block_keys",)
MLA_DECODE_SERIAL = ("kv_repeat", "partials", "critical_keys")
# The decode module's features: the module's, with its attention kernel's launch
# (``mla_module.module_decode_features``: the same split rule as ``mla_decode``'s, read
# from the module table's ``kernel_source``) on each side as there. A decode-module fit of
# the older form reads with zero launch coefficients: the same prices.
MLA_MODULE_EXTRAS = ("tiles", "seq_keys")
MLA_MODULE_DECODE_EXTRAS = (*MLA_MODULE_EXTRAS, *MLA_DECODE_LAUNCH)
# The decode module's working set read from L2 across the tables' CUDA-graph replays
# (``mla_module.module_replay_l2``: the whole module's bytes, weights, activations and
# KV, within ``features.REPLAY_L2_SHARE`` of L2), on the compute side, its HBM bytes then
# zero; a serving step reads from HBM (zero). A module fit without it reads with
# ``c_l2_bytes`` 0 (``profile._upgrade``): the same prices. Not read by the prefill
# modules: on their fit rows it measured worse (docs/decisions.md, helper ``mla-module``).
MLA_MODULE_REPLAY = ("l2_bytes",)
MLA_MODULE_DECODE_SERIAL = (*MLA_MODULE_SERIAL, *MLA_DECODE_SERIAL)
# The prefill module's context attention's CTA waves over the SMs after its KV stream and
# FLOPs: the ``mla_prefill`` kernel's serial feature (``MLA_PREFILL_SERIAL``,
# ``mla_module.module_prefill_features``). The module runs that kernel: TensorRT-LLM
# 1.3.0rc20 (the tables' release) ``tensorrt_llm/_torch/modules/attention.py``
# ``MLA.forward_context_default``, taken where the context has no cached prefix (the
# module tables' ``step`` 0), runs kv_b_proj over the new rows, copies k_nope and the
# broadcast k_pe into one K and calls ``self.mha.forward`` (``TrtllmAttention``) with
# ``AttentionInputType.context_only``: the context FMHA NVIDIA's ``context_mla_perf``
# tables time alone, whose fits price each wave of CTAs (docs/decisions.md, issue 34).
# On the module tables' fit rows the feature lowered the fitted error of most families
# (docs/decisions.md, helper ``mlamod37``). A fit without it reads with ``c_waves`` 0
# (``profile._upgrade``): the same prices (SGLang's per-release fits).
MLA_MODULE_PREFILL_SERIAL = (*MLA_MODULE_SERIAL, *MLA_PREFILL_SERIAL)
MLA_MODULE_BASE = "gemms_roofline"
# The absorbed BMMs' compute-side features (``mla_bmm.mla_bmm_features``): the output
# tiles' waves over the SMs, the bytes of a working set that stays in L2 across the
# tables' replays, and the waves of the library's smaller (64 x 64) tiles
# (``mla_bmm.MLA_BMM_SMALL_TILE``); the smooth maximum's bytes are HBM bytes only
# (zero for such a set), so the formula has a name of its own (a ``roofline+weight_elems``
# fit is refused by name). A fit without ``small_waves`` reads with ``c_small_waves`` 0
# (``profile._upgrade``): the same prices.
MLA_BMM_EXTRAS = ("waves", "l2_bytes", "small_waves")
MLA_BMM_BASE = "hbm_roofline"
# The absorbed BMMs' serial feature: the steps of the activation's quantisation kernel
# where the table times one with a serial token loop (``mla_bmm.bmm_quant_steps``:
# TensorRT-LLM's fp8 BMM on SM120); zero elsewhere. And the K-tile steps of one CTA's
# reduction loop (``mla_bmm.bmm_k_steps``: W_UV's k = 512 against W_UK's 128), on the
# critical path beside the throughput terms. A fit without either reads with a zero
# coefficient: the same prices.
MLA_BMM_SERIAL = ("quant_steps", "k_steps")


def mla_kernel(family: str, gemm_mode: str = "bfloat16", kv: str = "bfloat16") -> str:
    """The profile key of an MLA fit: ``family`` (``mla_prefill``, ``mla_decode``,
    ``mla_bmm``, ``mla_module_prefill``, ``mla_module_decode``) at a GEMM mode and a KV
    dtype (the tables' names)."""
    if family == "mla_bmm":
        return family if gemm_mode == "bfloat16" else f"{family}_{gemm_mode}"
    gemm = MLA_MODULE_GEMMS[gemm_mode] if family.startswith("mla_module") else ""
    return f"{family}{gemm}{MLA_KV[kv]}"


# MoE all-to-all (issue 34): the dispatch and the combine of expert parallelism's
# tokens, per DeepEP mode: ``ht`` (high-throughput, "normal": prefill batches) and ``ll``
# (low-latency: decode batches), as NVIDIA's ``moe_a2a_perf`` / ``wideep_deepep_*``
# tables time them (``calibration.aic_a2a``; features ``twin.costmodel.a2a``).
A2A_MODES = ("ht", "ll")
A2A_PHASES = ("dispatch", "combine")


def a2a_kernel(mode: str, phase: str) -> str:
    """The profile key of the all-to-all fit of DeepEP mode ``mode`` (``ht``, ``ll``) and
    ``phase`` (``dispatch``, ``combine``)."""
    return f"a2a_{mode}_{phase}"


# The terms each family adds to its byte time (``twin.costmodel.a2a``, where each is
# read from DeepEP's kernels): the high-throughput kernels' work per token of the rank,
# their hidden elements per token (the 20-SM budget's row copies and reductions), one
# row's (the smallest batch's warp copy) and the rows sent, a token's one per rank it
# reaches (each a warp's slot, copy and metadata: ``a2a.rank_rows``); the low-latency
# dispatch's per local expert, the rows one SM sends in series and the rows one warp of an
# expert's group receives in series (its launch: ``a2a.ll_launch``); the low-latency
# combine's per local expert and the rows one receiving group reduces in series, a token's
# top-k rows one TMA load after another (``a2a.ll_combine_slots``).
A2A_HT_EXTRAS = ("tokens", "token_elems", "row_elems", "rank_rows")
# Every all-to-all family is priced as the larger of a fitted floor and the formula
# (``KernelFormula.floor``, set for each below): the time a small batch's work hides under.
# - In DeepEP's kernels (73b6ea4) each receiver spins until every peer's signal has
#   arrived (``csrc/kernels/internode_ll.cu``: the dispatch's receive waits on
#   ``rdma_recv_count`` per source rank, the combine's on ``rdma_recv_flag``;
#   ``intranode.cu``'s ``notify_dispatch`` and ``barrier_block`` before the channels
#   run), while its own sends proceed: a small batch's sends hide under the slowest
#   peer's arrival, and the time is flat until the work outgrows that wait, then rises
#   (TensorRT-LLM 1.3.0rc11's H100 low-latency dispatch: ~70 us from 8 to 96 tokens).
# - vLLM's high-throughput dispatch adds the host's: its table times the whole
#   ``DeepEPHTPrepareAndFinalize.prepare`` between two CUDA events, eager (aiconfigurator
#   at 7d2513dc2, ``collector/wideep/vllm/collect_moe_a2a.py``), and that call holds the
#   host: ``buffer.dispatch(handle=None)`` without ``num_worst_tokens`` (vLLM 0.24.0
#   ``fused_moe/prepare_finalize/deepep_ht.py``) busy-waits on DeepEP's receive counter
#   until ``notify_dispatch`` has run (DeepEP 73b6ea4 ``csrc/deep_ep.cpp``
#   ``Buffer::intranode_dispatch``), then allocates and launches the rest; the end event
#   passes when the host has recorded it and the kernels before it are done. A serving
#   step's dispatch is the same eager call.
# A table with no such floor fits one below its fastest row, where it never binds.
A2A_EXTRAS = {
    a2a_kernel("ht", "dispatch"): A2A_HT_EXTRAS,
    a2a_kernel("ht", "combine"): A2A_HT_EXTRAS,
    a2a_kernel("ll", "dispatch"): ("local_experts", "sm_row_elems", "group_row_elems"),
    a2a_kernel("ll", "combine"): ("local_experts", "topk_rows"),
}


# The all-reduce families' lines (``KernelFormula.lines``): an all-reduce of B bytes a
# GPU is the least of ``t0_i + 2 (n-1)/n B / (eff_bytes_i * interconnect_bw)`` over the
# algorithms the engine picks among by message size, each with its own latency and
# bandwidth. The engines switch where one algorithm overtakes the next, so the least of
# the lines follows their switches without a threshold table per engine, release, GPU
# and GPU count:
# - SGLang and vLLM's custom all-reduce: the one-shot kernel (every rank reads all its
#   peers' buffers, (n-1) B) below 512 KB at 4 GPUs and 256 KB at 8, at every size at 2;
#   the two-shot kernel (reduce-scatter then all-gather, the ring's bytes) above (vLLM
#   ``csrc/custom_all_reduce.cuh`` ``CustomAllreduce::allreduce``; SGLang's
#   ``sgl-kernel/csrc/allreduce/custom_all_reduce.cuh`` the same rule); NCCL from the
#   custom all-reduce's largest size (SGLang ``distributed/device_communicators/
#   custom_all_reduce.py`` ``_MAX_CAR_SIZE`` 8 MiB on CUDA, called the NCCL crossover
#   there; vLLM ``all_reduce_utils.py`` ``CUSTOM_ALL_REDUCE_MAX_SIZES``, then its
#   symmetric-memory all-reduce to ``SYMM_MEM_ALL_REDUCE_MAX_SIZES``, then NCCL);
# - TensorRT-LLM's ``AllReduceStrategy.AUTO``: one-shot, two-shot (Lamport kernels) or
#   NCCL from its strategy table by size (``thop/allreduceOp.cpp`` ``selectImplementation``;
#   NVIDIA's collector times AUTO with the autotuner off: aiconfigurator
#   ``collector/network/collect_all_reduce.py``);
# - NCCL alone: its tuner prices every algorithm and protocol as a latency plus bytes
#   over a bandwidth and runs the least (``src/graph/tuning.cc`` ``ncclTopoGetAlgoTime``;
#   three protocols: LL, LL128, Simple).
# The one-shot kernel's (n-1) B is n/2 times the ring's bytes at a fixed GPU count (one
# fit per count), so its line's efficiency is fitted on the ring's bytes as the others'.
# Up to three lines, not one per named algorithm: a fit places them where the table bends,
# and on a table with fewer regimes a line may never be the least over the tables' sizes
# (47 of the 211 shipped all-reduce fits; session 35's review), its parameters then
# meaningless on their own. Tables, per family: ``benchmarks/results/ar35-s35/``
# (docs/decisions.md, "Issue 34, step: the all-reduce families as the least of three lines").
ALLREDUCE_LINES = 3

# The dense GEMM families' extras (``gemm`` and each ``gemm_<mode>``), on the compute
# side: the weights streamed (``weight_elems``) and the k-steps on the busiest SM of the
# launch's waves of output tiles (``wave_k``: ``features.gemm_wave_k``, the SMs of
# ``twin.hardware.SM_COUNTS``). NVIDIA's tables step where m crosses a tile multiple and
# run few-CTA launches (small n at a few rows) slower than their bytes at the GPU's
# bandwidth: held out, the median of the 87 shipped GEMM fits' medians 7.7 -> 6.5%
# (docs/decisions.md, "Issue 34, step: the dense GEMMs' waves", helper gemm36). A fit
# written before it loads with ``c_wave_k`` 0: the same prices.
GEMM_EXTRAS = ("weight_elems", "wave_k")
# The per-tensor fp8 GEMM family's serial feature: the bytes of the activation
# quantisation pass a table's call runs before the GEMM (``features.act_quant_bytes``;
# vLLM's tables time a dynamic per-token one, ``features.act_quant_scheme``), priced
# after the smooth maximum, a kernel of its own. Zero on a table that times none; a fit
# written before it reads with ``c_act_quant_bytes`` 0 and prices as it did
# (``profile._upgrade``).
GEMM_FP8_SERIAL = ("act_quant_bytes",)
# ... at a fixed rate, the HBM peak (``KernelFormula.fixed_rates``): the pass is a stream
# over its bytes, not a coefficient the fit may scale (docs/decisions.md, "Issue 34, step:
# vLLM's dynamic fp8 activation quantisation", helper vllmq39).
GEMM_FP8_FIXED = (("act_quant_bytes", "mem_bw"),)

# The attention decode families' extras: the score elements, the (sequence, KV head) tiles,
# and the launch's waves over the SMs times the head dim (``features.attn_decode_waves_d``).
# Held out, measured offline on every shipped profile: the median of the decode medians
# 10.0 -> 8.0%, of the fp8-KV ones 8.0 -> 7.3% (docs/decisions.md, "the decode launch's
# waves x head dim", helpers attn36 / attn38). A fit written before reads ``c_waves_d`` 0
# (``profile._upgrade``): the same prices. The third extra is the launch of the kernel each
# table times (``features.decode_launch_rule``, helper attnfix39): a grid's waves x head dim
# (``c_waves_d``), or on TensorRT-LLM Hopper's XQA fits the XQA side's CTAs, whose coefficient
# is named ``c_xqa_ctas``, and on SGLang's FlashInfer fits FlashInfer's grid's waves x head dim,
# named ``c_flashinfer_waves`` (``ATTN_DECODE_ALIASES``, ``features.launch_coefficient``;
# ``profile._name_launch_coefficient`` renames an XQA fit written with ``c_waves_d``, and a
# FlashInfer one as the fitter writes it; a FlashInfer fit read from a file under ``c_waves_d``
# is refused, ``profile.stale_launch_coefficient``).
ATTN_DECODE_EXTRAS = ("score_elems", "tiles", "waves_d")
ATTN_DECODE_ALIASES = (("c_waves_d", "c_xqa_ctas"), ("c_waves_d", "c_flashinfer_waves"))

# NCCL's all-gather and reduce-scatter families' lines (``KernelFormula.lines``), the same
# form on the ring's bytes, ``(n-1)/n B`` a GPU: NCCL's tuner prices each algorithm x
# protocol it may run as a latency plus the bytes over a bandwidth and runs the least
# (NCCL v2.29.2-1 and v2.30.7-1 ``src/graph/tuning.cc``: ``ncclTopoTuneModel`` fills
# ``latencies`` / ``bandwidths``, ``ncclTopoGetAlgoTime`` is ``lat + bytes / bw``). Within
# one node it may run, for these two collectives, the ring with its three protocols (LL,
# LL128, Simple) and NVLS with Simple where the switch has it (PAT needs one GPU a node;
# CollNet a network): up to four lines. Three, as the all-reduce's: NVLS and the ring's
# Simple are both the large messages' regime, and a fit places the lines where the table
# bends
# (docs/decisions.md, "Issue 34, step: NCCL's all-gather and reduce-scatter as the least
# of three lines").
GATHER_LINES = 3

FORMULAS: dict[str, KernelFormula] = {
    f.kernel: f
    for f in (
        KernelFormula("gemm", "mem_bw", True, GEMM_EXTRAS, "dense GEMM (m tokens x k) @ (k x n)"),
        KernelFormula(
            "attn_prefill",
            "mem_bw",
            True,
            ("score_elems", "tiles"),
            "causal attention of n new tokens over c cached + n new keys",
        ),
        KernelFormula(
            "attn_decode",
            "mem_bw",
            True,
            ATTN_DECODE_EXTRAS,
            "one query token per sequence over its context",
            aliases=ATTN_DECODE_ALIASES,
        ),
        KernelFormula("ssm_scan", "mem_bw", True, ("chunks",), "Mamba2 chunked (SSD) scan"),
        KernelFormula("ssm_step", "mem_bw", True, (), "Mamba2 one-token state update (decode)"),
        KernelFormula(
            "conv1d",
            "mem_bw",
            True,
            ("seq_channels", "unaligned_ctas"),
            "causal depthwise conv1d over prompts",
        ),
        KernelFormula(
            "elementwise", "mem_bw", False, (), "element-wise pass / RMSNorm: bytes in and out"
        ),
        KernelFormula("copy_d2d", "mem_bw", False, (), "device-to-device copy (read + write)"),
        KernelFormula("copy_h2d", "host_bw", False, (), "pinned host to device copy"),
        KernelFormula("copy_d2h", "host_bw", False, (), "device to pinned host copy"),
        # Optional families (see OPTIONAL): the cost model falls back when a profile lacks one.
        KernelFormula(
            "conv1d_update",
            "mem_bw",
            True,
            # ``l2_bytes``: the bytes the table's CUDA-graph replays read from L2
            # (``ssm_features.conv1d_features``, the rule of ``MLA_KERNEL_REPLAY``); a serving
            # step passes 0. A fit without it reads ``c_l2_bytes`` 0 (``profile._upgrade``).
            ("cta_waves", *MLA_KERNEL_REPLAY),
            "causal conv1d decode update: one token per sequence, conv state read + written",
        ),
        # Issue 13's mixer kinds (optional: a profile without them takes the datasheet
        # fallback of ``twin.costmodel.mixer_kernels``).
        KernelFormula(
            "mamba1_scan",
            "mem_bw",
            True,
            (),
            "Mamba-1 selective scan over prompts (selective_scan_cuda: fp32 on CUDA cores)",
            flops_peak="fp32_flops",
        ),
        KernelFormula(
            "mamba1_step",
            "mem_bw",
            True,
            (),
            "Mamba-1 one-token state update (selective_state_update, fp32 CUDA cores)",
            flops_peak="fp32_flops",
        ),
        KernelFormula(
            "gdn_chunk",
            "mem_bw",
            True,
            ("chunks",),
            "Gated DeltaNet chunked delta rule over prompts (FLA chunk_gated_delta_rule)",
        ),
        KernelFormula(
            "gdn_step",
            "mem_bw",
            True,
            (),
            "Gated DeltaNet one-token recurrent update (FLA fused_recurrent_gated_delta_rule)",
        ),
        # Precision variants (``twin.precision``): the GEMM of each quantised weight
        # format against its tensor-core peak, and attention over an fp8 KV cache.
        *(
            KernelFormula(
                f"gemm_{mode}",
                "mem_bw",
                True,
                GEMM_EXTRAS,
                f"{mode} GEMM: quantised activations and weights in, bf16 out",
                flops_peak=peak,
                serial=GEMM_FP8_SERIAL if mode == "fp8" else (),
                fixed_rates=GEMM_FP8_FIXED if mode == "fp8" else (),
            )
            for mode, peak in PRECISION_GEMMS.items()
        ),
        KernelFormula(
            "attn_prefill_fp8kv",
            "mem_bw",
            True,
            ("score_elems", "tiles"),
            "causal attention over an fp8 KV cache (the engine's FMHA for it)",
            flops_peak="fp8_flops",
        ),
        KernelFormula(
            "attn_decode_fp8kv",
            "mem_bw",
            True,
            ATTN_DECODE_EXTRAS,
            "one query token per sequence over an fp8 KV cache",
            flops_peak="fp8_flops",
            aliases=ATTN_DECODE_ALIASES,
        ),
        # Fused MoE experts (issue 34): one fit per expert format, from the tables'
        # ``moe_perf`` rows; without one the experts are priced as two GEMMs of the
        # linear layers' fit (``twin.costmodel.dense_pricing``).
        *(
            _fused_moe(
                moe_kernel(mode),
                peak,
                f"fused MoE experts ({mode}): the rank's token x top-k rows through the "
                "experts they hit, up and down, plus a term over every routed row's hidden "
                "state of the step, all ranks' (gather, align, combine over the whole batch), "
                "one CTA's weight stream (the floor with fewer tiles than SMs), a table "
                "row's working set read from L2 across its replays (none in serving), and a "
                "serial cost per expert hit (its grouped-GEMM problem's set-up)",
            )
            for mode, peak in MOE_MODES.items()
        ),
        *(
            _fused_moe(
                moe_min_latency_kernel(mode),
                peak,
                f"fused MoE experts ({mode}), TensorRT-LLM's min-latency kernel: steps of at "
                f"most {MOE_MIN_LATENCY_MAX_TOKENS} tokens (the fused MoE's terms)",
            )
            for mode, peak in MOE_MIN_LATENCY_MODES.items()
        ),
        *(
            _fused_moe(
                moe_trtllm_gen_kernel(mode),
                peak,
                f"fused MoE experts ({mode}), TensorRT-LLM's TRTLLM-gen kernel at every step "
                "(moe_config.backend TRTLLM; the fused MoE's terms)",
            )
            for mode, peak in MOE_MIN_LATENCY_MODES.items()
        ),
        *(
            _fused_moe(
                moe_mxfp8_activation_kernel(mode),
                peak,
                f"fused MoE experts ({mode} weights, mxfp8 activations): the fused MoE's "
                f"terms and the {mode} family's peak (it stands in for that family's fit)",
            )
            for mode, peak in MOE_MXFP8_ACTIVATION_MODES.items()
        ),
        # MLA (issue 34): see ``mla_kernel``. The attention kernels' extras are
        # attention's (score elements, tiles); the modules' the GEMMs' weight elements and
        # the attention's score elements.
        *(
            KernelFormula(
                mla_kernel(f"mla_{phase}", kv=kv),
                "mem_bw",
                True,
                ("tiles", "seq_keys", *launch),
                f"MLA attention kernel, {doc} ({kv} KV)",
                serial=serial,
                floor=MLA_DECODE_FLOOR and phase == "decode",
            )
            for phase, launch, serial, doc in (
                (
                    "prefill",
                    MLA_KERNEL_REPLAY,
                    MLA_PREFILL_SERIAL,
                    "prompts in the decompressed form (per-head K/V, nope + rope); "
                    "the bytes its table's replays read from L2 on the compute side "
                    "(``mla_features.kernel_replay_l2``); waves: the CTAs' waves over "
                    "the SMs after the smooth maximum (``mla_features.mla_prefill_waves``)",
                ),
                (
                    "decode",
                    (*MLA_DECODE_BLOCK, *MLA_DECODE_LAUNCH, *MLA_KERNEL_REPLAY),
                    MLA_DECODE_SERIAL,
                    "one query per sequence in the absorbed form (over the latent); "
                    "seq_keys: the keys of one sequence, its split-KV critical path; "
                    "the launch's CTAs, waves, re-read keys and split partials "
                    "(``mla_decode_kernels.mla_decode_launch``); l2_bytes: a table row's bytes "
                    "read from L2 across its replays (``mla_features.kernel_replay_l2``)",
                ),
            )
            for kv in MLA_KV
        ),
        *(
            KernelFormula(
                mla_kernel("mla_bmm", mode),
                "mem_bw",
                True,
                MLA_BMM_EXTRAS,
                f"MLA absorbed decode's per-head batched GEMMs (W_UK in, W_UV out; {mode}): "
                "the smooth maximum of the FLOPs with the output tiles' waves over the SMs "
                "(128 x 128 and 64 x 64 tiles) and the bytes of a working set resident in "
                "L2, and the HBM bytes of one that is not (``mla_bmm.mla_bmm_features``)",
                flops_peak=peak,
                base=MLA_BMM_BASE,
                serial=MLA_BMM_SERIAL,
            )
            for mode, peak in MLA_BMM_MODES.items()
        ),
        *(
            KernelFormula(
                mla_kernel(f"mla_module_{phase}", gemm, kv),
                "mem_bw",
                True,
                extras,
                f"MLA attention module, {phase}: projections ({gemm}), attention ({kv} KV), "
                "output projection; the smooth maximum over the module's GEMMs and the "
                "attention's query/output traffic, the attention's KV stream and FLOPs "
                f"after it (a kernel of its own between the GEMMs: "
                f"``mla_module.module_attention_split``){doc}",
                flops_peak=MOE_MODES[gemm],
                serial=serial,
                base=MLA_MODULE_BASE,
                floor=MLA_MODULE_PREFILL_FLOOR and phase == "prefill",
            )
            for phase, extras, serial, doc in (
                (
                    "prefill",
                    MLA_MODULE_EXTRAS,
                    MLA_MODULE_PREFILL_SERIAL,
                    "; at least a fitted floor, the host time of an eager call that small "
                    "work hides under (``MLA_MODULE_PREFILL_FLOOR``)",
                ),
                (
                    "decode",
                    (*MLA_MODULE_DECODE_EXTRAS, *MLA_MODULE_REPLAY),
                    MLA_MODULE_DECODE_SERIAL,
                    "; its attention kernel's launch as ``mla_decode``'s "
                    "(``mla_module.module_decode_features``)",
                ),
            )
            for gemm in MLA_MODULE_GEMMS
            for kv in MLA_KV
        ),
        *(
            KernelFormula(
                a2a_kernel(mode, phase),
                "interconnect_bw",
                False,
                A2A_EXTRAS[a2a_kernel(mode, phase)],
                f"MoE all-to-all {phase} (DeepEP {mode}): the bytes one rank sends to the "
                "other expert ranks, plus a term per "
                f"{', '.join(A2A_EXTRAS[a2a_kernel(mode, phase)])} "
                "(twin.costmodel.a2a); at least a fitted floor (the wait a small batch's "
                "work hides under)",
                floor=True,
            )
            for mode in A2A_MODES
            for phase in A2A_PHASES
        ),
        # One fit per GPU count, stored as ``allreduce_<n>gpu``; without one the cost
        # model prices a ring from the profile's peaks. The least of three lines
        # (:data:`ALLREDUCE_LINES`): each engine's all-reduce picks among three
        # algorithms by message size, and NCCL's table above its largest size.
        KernelFormula(
            "allreduce",
            "interconnect_bw",
            False,
            (),
            "all-reduce across the tensor-parallel GPUs: the least of a latency plus the "
            "ring bytes per GPU over a bandwidth for each algorithm the engine picks among "
            "by message size (one-shot, two-shot, NCCL: ``ALLREDUCE_LINES``)",
            lines=ALLREDUCE_LINES,
        ),
        # NCCL's all-gather and reduce-scatter, one fit per GPU count as the all-reduce
        # (``allgather_<n>gpu``, ``reducescatter_<n>gpu``): TensorRT-LLM's MoE exchange
        # under attention DP (``twin.costmodel.gather_scatter``); without one the cost
        # model prices them on the all-reduce.
        *(
            KernelFormula(
                op,
                "interconnect_bw",
                False,
                (),
                f"NCCL {what} across the GPUs: the least of a latency plus the ring bytes "
                "per GPU ((n-1)/n of the buffer) over a bandwidth for each of NCCL's "
                "algorithm x protocol pairs (``GATHER_LINES``)",
                lines=GATHER_LINES,
            )
            for op, what in (("allgather", "all-gather"), ("reducescatter", "reduce-scatter"))
        ),
        # NCCL's all-reduce alone (``allreduce_nccl_<n>gpu``): what an engine runs above
        # its custom all-reduce's size limit (``KernelLayout.custom_allreduce_max_bytes``).
        KernelFormula(
            "allreduce_nccl",
            "interconnect_bw",
            False,
            (),
            "NCCL all-reduce across the tensor-parallel GPUs: the least of a latency plus "
            "the ring bytes per GPU over a bandwidth for each of NCCL's protocols "
            "(``ALLREDUCE_LINES``)",
            lines=ALLREDUCE_LINES,
        ),
    )
}

# Families every profile must carry (the cost model refuses a profile without one).
# The families that price a precision other than bf16 (optional: a profile without one
# refuses that precision); a bf16 run's label leaves them out (``costmodel.provenance``).
PRECISION_VARIANTS = (
    *(f"gemm_{mode}" for mode in PRECISION_GEMMS),
    "attn_prefill_fp8kv",
    "attn_decode_fp8kv",
)
# Families a model needs only for its layer kinds (MoE experts): optional, and, like
# the precision variants, left out of the label of a run that does not use them.
MOE_VARIANTS = (
    *(moe_kernel(mode) for mode in MOE_MODES),
    *(moe_min_latency_kernel(mode) for mode in MOE_MIN_LATENCY_MODES),
    *(moe_trtllm_gen_kernel(mode) for mode in MOE_MIN_LATENCY_MODES),
    *(moe_mxfp8_activation_kernel(mode) for mode in MOE_MXFP8_ACTIVATION_MODES),
)
MLA_VARIANTS = tuple(k for k in FORMULAS if k.startswith("mla_"))
A2A_VARIANTS = tuple(a2a_kernel(m, p) for m in A2A_MODES for p in A2A_PHASES)
MODEL_VARIANTS = (*MOE_VARIANTS, *MLA_VARIANTS, *A2A_VARIANTS)
OPTIONAL = (
    "conv1d_update",
    "allreduce",
    "allgather",
    "reducescatter",
    "allreduce_nccl",
    "mamba1_scan",
    "mamba1_step",
    "gdn_chunk",
    "gdn_step",
    *PRECISION_VARIANTS,
    *MODEL_VARIANTS,
)
KERNELS: tuple[str, ...] = tuple(k for k in FORMULAS if k not in OPTIONAL)

_PER_GPU_COUNT = re.compile(r"^(allreduce_nccl|allreduce|allgather|reducescatter)_(\d+)gpu$")


def allreduce_kernel(n_gpus: int) -> str:
    """The profile key of the all-reduce fit for ``n_gpus`` GPUs."""
    return collective_kernel("allreduce", n_gpus)


def is_allreduce_kernel(name: str) -> bool:
    """Whether profile key ``name`` is an engine's all-reduce fit (:func:`allreduce_kernel`
    of some GPU count; not NCCL's alone, :func:`nccl_allreduce_kernel`)."""
    return re.fullmatch(r"allreduce_\d+gpu", name) is not None


def collective_kernel(op: str, n_gpus: int) -> str:
    """The profile key of collective ``op``'s fit (``allreduce``, ``allgather``,
    ``reducescatter``) for ``n_gpus`` GPUs."""
    return f"{op}_{n_gpus}gpu"


def nccl_allreduce_kernel(n_gpus: int) -> str:
    """The profile key of NCCL's all-reduce fit for ``n_gpus`` GPUs."""
    return collective_kernel("allreduce_nccl", n_gpus)


def family(kernel: str) -> str:
    """The formula family of a profile key: ``allreduce_8gpu`` -> ``allreduce``."""
    m = _PER_GPU_COUNT.match(kernel)
    return m.group(1) if m else kernel


def get_formula(kernel: str) -> KernelFormula:
    """The formula of ``kernel``; a ``TwinError`` naming the known kernels otherwise."""
    try:
        return FORMULAS[family(kernel)]
    except KeyError:
        raise TwinError(f"unknown kernel {kernel!r}; known: {', '.join(FORMULAS)}") from None


def check_params(kernel: str, params: dict[str, float]) -> None:
    """Refuse a parameter set that would break monotonicity or divide by zero."""
    for name in get_formula(kernel).params_of(params):
        v = params.get(name)
        if v is None or not math.isfinite(v) or v < 0:
            raise TwinError(
                f"kernel {kernel!r}: parameter {name} must be finite and >= 0 (got {v!r})"
            )
    effs = ("eff_flops", *(line_params(i)[1] for i in range(1, MAX_LINES + 1)))
    for name in effs:
        if name in params and params[name] <= 0:
            raise TwinError(f"kernel {kernel!r}: {name} must be positive")
    if "p" in params and params["p"] < 1:
        raise TwinError(f"kernel {kernel!r}: smooth-max exponent p must be >= 1")


__all__ = [
    "A2A_MODES",
    "A2A_PHASES",
    "A2A_VARIANTS",
    "ALLREDUCE_LINES",
    "FLOOR",
    "FLOOR_PARAM",
    "FORMULAS",
    "GATHER_LINES",
    "KERNELS",
    "MAX_LINES",
    "MLA_BMM_BASE",
    "MLA_BMM_EXTRAS",
    "MLA_BMM_MODES",
    "MLA_BMM_SERIAL",
    "MLA_DECODE_BLOCK",
    "MLA_DECODE_FLOOR",
    "MLA_DECODE_LAUNCH",
    "MLA_DECODE_SERIAL",
    "MLA_KERNEL_REPLAY",
    "MLA_KV",
    "MLA_MODULE_BASE",
    "MLA_MODULE_DECODE_EXTRAS",
    "MLA_MODULE_DECODE_SERIAL",
    "MLA_MODULE_EXTRAS",
    "MLA_MODULE_GEMMS",
    "MLA_MODULE_PREFILL_FLOOR",
    "MLA_MODULE_PREFILL_SERIAL",
    "MLA_MODULE_REPLAY",
    "MLA_MODULE_SERIAL",
    "MLA_PREFILL_SERIAL",
    "MLA_VARIANTS",
    "MODEL_VARIANTS",
    "MOE_MIN_LATENCY_MAX_TOKENS",
    "MOE_MIN_LATENCY_MODES",
    "MOE_MIN_LATENCY_SOURCE",
    "MOE_MODES",
    "MOE_MXFP8_ACTIVATION_MODES",
    "MOE_ONLY_MODES",
    "MOE_VARIANTS",
    "OPTIONAL",
    "PRECISION_GEMMS",
    "PRECISION_VARIANTS",
    "SGLANG_MLA_MODULE_TABLES",
    "KernelFormula",
    "a2a_kernel",
    "allreduce_kernel",
    "check_params",
    "collective_kernel",
    "family",
    "get_formula",
    "line_params",
    "mla_kernel",
    "moe_kernel",
    "moe_min_latency_kernel",
    "moe_mxfp8_activation_kernel",
    "moe_trtllm_gen_kernel",
    "nccl_allreduce_kernel",
]
