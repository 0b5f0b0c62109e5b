"""The registry of the kernels' latency formulas (``FORMULAS``, one
``twin.costmodel.kernel_formula.KernelFormula`` a family, where the model is described),
the families every profile must carry (``KERNELS``) and the optional ones (the precision,
MoE, MLA and all-to-all variants), and the lookups of a profile key's formula
(``get_formula``) and of a parameter set's validity (``check_params``). The families'
names are in ``moe_families``, ``mla_families`` and ``collective_families``; the dense
families' features here.
"""

from __future__ import annotations

import math

from twin.costmodel.collective_families import (
    A2A_EXTRAS,
    A2A_MODES,
    A2A_PHASES,
    ALLREDUCE_LINES,
    GATHER_LINES,
    a2a_kernel,
    family,
)
from twin.costmodel.kernel_formula import MAX_LINES, KernelFormula, line_params
from twin.costmodel.mla_families import (
    MLA_BMM_BASE,
    MLA_BMM_EXTRAS,
    MLA_BMM_MODES,
    MLA_BMM_SERIAL,
    MLA_DECODE_BLOCK,
    MLA_DECODE_FLOOR,
    MLA_DECODE_LAUNCH,
    MLA_DECODE_SERIAL,
    MLA_KERNEL_REPLAY,
    MLA_KV,
    MLA_MODULE_BASE,
    MLA_MODULE_DECODE_EXTRAS,
    MLA_MODULE_DECODE_SERIAL,
    MLA_MODULE_EXTRAS,
    MLA_MODULE_GEMMS,
    MLA_MODULE_PREFILL_FLOOR,
    MLA_MODULE_PREFILL_SERIAL,
    MLA_MODULE_REPLAY,
    MLA_PREFILL_SERIAL,
    mla_kernel,
)
from twin.costmodel.moe_families import (
    MOE_EXTRAS,
    MOE_MIN_LATENCY_MAX_TOKENS,
    MOE_MIN_LATENCY_MODES,
    MOE_MODES,
    MOE_MXFP8_ACTIVATION_MODES,
    MOE_SERIAL,
    PRECISION_GEMMS,
    moe_kernel,
    moe_min_latency_kernel,
    moe_mxfp8_activation_kernel,
    moe_trtllm_gen_kernel,
)
from twin.errors import TwinError


def _fused_moe(kernel: str, flops_peak: str, description: str) -> KernelFormula:
    """A fused-MoE family's formula: the fused MoE's terms at ``flops_peak``."""
    return KernelFormula(
        kernel, "mem_bw", True, MOE_EXTRAS, description, flops_peak=flops_peak, serial=MOE_SERIAL
    )


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
# (``fit_upgrade.upgrade_fit``).
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
# (``fit_upgrade.upgrade_fit``): the same prices. The third extra is the launch of the kernel each
# table times (``features.decode_launch_rule``, helper attnfix39): a grid's waves x head dim
# (``c_waves_d``), or on TensorRT-LLM Hopper's XQA fits the XQA side's CTAs, whose coefficient
# is named ``c_xqa_ctas``, and on SGLang's FlashInfer fits FlashInfer's grid's waves x head dim,
# named ``c_flashinfer_waves`` (``ATTN_DECODE_ALIASES``, ``features.launch_coefficient``;
# ``fit_upgrade.name_launch_coefficient`` renames an XQA fit written with ``c_waves_d``, and a
# FlashInfer one as the fitter writes it; a FlashInfer fit read from a file under ``c_waves_d``
# is refused, ``fit_upgrade.stale_launch_coefficient``).
ATTN_DECODE_EXTRAS = ("score_elems", "tiles", "waves_d")
ATTN_DECODE_ALIASES = (("c_waves_d", "c_xqa_ctas"), ("c_waves_d", "c_flashinfer_waves"))

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
            # step passes 0. A fit without it reads ``c_l2_bytes`` 0 (``fit_upgrade.upgrade_fit``).
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
    "A2A_VARIANTS",
    "ATTN_DECODE_ALIASES",
    "ATTN_DECODE_EXTRAS",
    "FORMULAS",
    "GEMM_EXTRAS",
    "GEMM_FP8_FIXED",
    "GEMM_FP8_SERIAL",
    "KERNELS",
    "MLA_VARIANTS",
    "MODEL_VARIANTS",
    "MOE_VARIANTS",
    "OPTIONAL",
    "PRECISION_VARIANTS",
    "check_params",
    "get_formula",
]
