"""vLLM's kernel layouts (``twin.engine.kernel_layouts``): the shared expert's stream,
0.12.0's DeepGEMM experts, attention DP's per-rank dense MLPs, 0.10.2's all-reduce limit and
static fp8, 0.16.0's FlashInfer CUTLASS experts under TP and MiniMax-M2's fp32 router;
``vllm_kernel_layout``, the engine mode's rule (``twin.engine.modes_vllm``).
"""

from __future__ import annotations

import dataclasses

from twin.costmodel.engine_kernels import HOPPER, SM100_EXACT
from twin.costmodel.kernel_layout import (
    DEFAULT_LAYOUT,
    KernelLayout,
)
from twin.costmodel.table_release import release_at_least
from twin.engine.kernel_layouts import (
    DEEPGEMM_M_ALIGNMENT,
    _block_fp8_experts,
    _named,
)
from twin.model import ModelSpec

# vLLM runs a MoE layer's shared expert on a second CUDA stream beside its router gate and
# routed experts in a step of at most ``VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD`` (256,
# ``envs.py``) tokens (wheels read: 0.12.0 and 0.15.1 ``model_executor/layers/fused_moe/
# layer.py`` ``FusedMoE._maybe_setup_shared_experts_stream``, 0.17.0 and 0.19.0
# ``fused_moe/runner/default_moe_runner.py``): ``shared_experts_stream.wait_stream`` before
# the gate, the shared expert under ``torch.cuda.stream(self.shared_experts_stream)``, the
# main stream waiting for it after the routed experts. It needs the shared expert apart
# from the routed kernel (``has_separate_shared_experts``: the modular kernel owns it only
# with all-to-all kernels, 0.17.0 ``oracle/nvfp4.py`` ``make_nvfp4_moe_kernel``) and no DP
# chunking: a tensor-parallel run without attention DP (DeepSeek's and Kimi-K2.5's
# ``DeepseekV2MoE`` pass ``shared_experts`` and ``gate`` to ``SharedFusedMoE``).
VLLM_SHARED_EXPERTS_STREAM_TOKENS = 256
VLLM_SHARED_EXPERTS_STREAM_SINCE = "0.12.0"


def vllm_shared_expert_stream_tokens(model: ModelSpec, build: str, dp: int) -> int:
    """The largest step (tokens) in which vLLM ``build`` overlaps ``model``'s shared expert
    with its routed experts (above); 0: never."""
    if dp > 1 or not model.moe_shared_d_ff or not model.n_moe_layers:
        return 0
    if not release_at_least(build, VLLM_SHARED_EXPERTS_STREAM_SINCE):
        return 0
    return VLLM_SHARED_EXPERTS_STREAM_TOKENS


# vLLM 0.12.0 runs a block-fp8 MoE through DeepGEMM's contiguous grouped GEMM at every step
# size (the 0.12.0 wheel): ``quantization/fp8.py`` ``get_fp8_moe_backend`` picks
# ``Fp8MoeBackend.DEEPGEMM`` for block-quantised weights where DeepGEMM is supported
# (``utils/deep_gemm.py`` ``is_deep_gemm_supported``: compute capability 9.0 or 10.0,
# :data:`DEEPGEMM_GPUS`) and the MoE's tensor-parallel size
# (``moe_parallel_config.tp_size``) is below 8 (``VLLM_USE_DEEP_GEMM`` and
# ``VLLM_MOE_USE_DEEP_GEMM`` default 1, ``VLLM_USE_FLASHINFER_MOE_FP8`` 0). That size is
# ``fused_moe/config.py`` ``FusedMoEParallelConfig.make``'s: dp x tp without expert
# parallelism, 1 with it (``use_ep``: ``--enable-expert-parallel`` on more than one GPU,
# the experts then split over dp x tp instead), so an EP run keeps DeepGEMM at any size.
# Then ``fused_moe/fused_moe.py`` ``fused_experts`` calls ``deep_gemm_moe_fp8`` whenever
# ``is_deep_gemm_e8m0_used()`` (``VLLM_USE_DEEP_GEMM_E8M0`` default 1, on Hopper too), not
# only for M >= 128 (``_valid_deep_gemm``). ``deep_gemm_moe.py`` lays each expert's rows
# out padded to ``get_mk_alignment_for_contiguous_layout()``, 128 in DeepGEMM, in a buffer
# of ``M_sum`` rows: ``DeepGemmExperts.apply`` sizes it by ``deep_gemm_utils.
# compute_aligned_M``, which without the experts' token counts on the host (``deep_gemm_
# moe_fp8`` runs ``MoEPrepareAndFinalizeNoEP``, whose ``prepare`` returns none) takes the
# worst case, ``M x topk + local_num_experts x (128 - 1)`` rounded up to 128. DeepGEMM's
# grouped contiguous GEMM then walks every 128-row block of it (deepseek-ai/DeepGEMM
# 38f8ef7, 2025-11-21, ``impls/sm90_fp8_gemm_1d2d.cuh``): its TMA warp loads each block's
# A, A-scale and B tiles and the epilogue stores it. DeepGEMM would skip a block's WGMMAs
# only where its expert id is negative (``common/scheduler.cuh`` ``is_computation_valid``),
# but vLLM 0.12.0 never writes one there: ``deep_gemm_utils.deepgemm_moe_permute`` makes
# the ids ``torch.zeros`` whenever the host has no token counts (``maybe_has_empty_blocks``)
# and ``ep_scatter`` overwrites only the blocks of the experts reached, so the blocks
# beyond them run as expert 0's, their WGMMAs computed (on uninitialised rows, expert 0's
# weights, which sit in L2 after the first such block). The twin prices the launch
# (``KernelLayout.moe_pads_every_expert``, ``MoePricing._moe_padded_rows``) as 128 rows
# computed for each expert reached and the rest of ``M_sum`` streamed: each such block's
# rows in and out, one expert's weights (its B tiles across the output) and the activation
# and fp8 group quantisation ``apply`` runs between the GEMMs over every row of the buffer
# (``moe_features.moe_sums``), no FLOPs, the
# reading the fit rows chose (docs/decisions.md, issue 31 / 34, session 41); every row of
# ``M_sum`` computed with only the reached experts' weights from HBM (the source's reading)
# prices a Qwen3-235B-A22B-FP8 H200 decode step 2-6% higher and a prefill 1-2% higher
# (docs/decisions.md, review41). Either way a decode step pays for every expert on the GPU
# whatever its few tokens reach, and its time hardly moves with the batch (the measured
# 0.12.0 H200 Qwen3-235B-A22B-FP8 TPOT: 51-59 ms on 2 MoE GPUs at 4-20 clients). 0.16.0
# puts FlashInfer CUTLASS before DeepGEMM on Hopper (below), so only 0.12.0 is read as this
# rule.
VLLM_DEEPGEMM_MOE_BUILDS = frozenset({"0.12.0"})
VLLM_DEEPGEMM_MOE_MAX_TP = 8  # ``get_fp8_moe_backend``: DeepGEMM off from this MoE TP
DEEPGEMM_GPUS = HOPPER | SM100_EXACT


# vLLM's data-parallel ranks are engines of their own, each a tensor-parallel group of
# ``--tensor-parallel-size`` GPUs; only the MoE layers' experts span the DP x TP group.
# Its DeepSeek builds the dense MLP layers and the shared expert at that group's size
# (vLLM 0.12.0 ``model_executor/models/deepseek_v2.py``: ``DeepseekV2MLP`` of the dense
# layers with no TP override, the shared expert ``DeepseekV2MLP(..., reduce_results=False,
# is_sequence_parallel=...)``, both on ``get_tensor_model_parallel_world_size()``, the DP
# rank's TP group): each DP rank runs them on its own tokens (``dense_ffn_on_rank``).


# vLLM 0.10.2 (the wheel), the image of InferenceMAX's Llama-3.1-70B vLLM rows
# (``twin.validate.silicon.inferencemax_vllm.inferencemax_vllm_build``): its custom
# all-reduce stops at ``CUSTOM_ALL_REDUCE_MAX_SIZES`` and NCCL runs above
# (``KernelLayout.custom_allreduce_size_limit``); and a static per-tensor fp8 checkpoint
# (ModelOpt's, ``quantization/modelopt.py`` ``ModelOptFp8LinearMethod``:
# ``Fp8LinearOp(act_quant_static=True)`` with the checkpoint's ``input_scale``) quantises
# its activations with ``QuantFP8(static=True)`` (``utils/w8a8_utils.py``), pointwise,
# which Inductor fuses into the RMSNorm / SiLU-mul before the GEMM (V1 compiles with
# custom ops off, ``config/compilation.py``), o_proj's a small pass of its own, not
# priced (``KernelLayout.fp8_static_activation``). Taken for every fp8 row of the build:
# the only fp8 checkpoints the twin reads as served by it are ModelOpt's.
VLLM_STATIC_FP8_BUILDS = frozenset({"0.10.2"})


# vLLM 0.16.0 (the wheel) runs block-fp8 experts on Hopper through FlashInfer's CUTLASS
# fused MoE whatever the parallel layout: ``fused_moe/oracle/fp8.py``
# ``select_fp8_moe_backend`` takes the first supported of AITER, FLASHINFER_TRTLLM,
# FLASHINFER_CUTLASS, DEEPGEMM, ..., TRITON with no FlashInfer / DeepGEMM variable set
# (``quantization/fp8.py`` ``Fp8MoEMethod``: block weights are kFp8Static128BlockSym with
# kFp8Dynamic128Sym activations); FLASHINFER_TRTLLM is Blackwell's only
# (``flashinfer_trtllm_moe.py`` ``_supports_current_device``), and
# ``flashinfer_cutlass_moe.py`` ``FlashInferExperts._supports_quant_scheme`` takes
# (kFp8Static128BlockSym, kFp8Dynamic128Sym) on capability 9.0 (as vLLM issue 34249's
# server log shows on H100). 0.18.0 (the wheel) moves Triton to the front for tensor
# parallelism and FlashInfer CUTLASS for expert parallelism on Hopper
# (``_get_priority_backends``: "On Hopper for Block Fp8, prefer Triton for TP and FI
# CUTLASS for EP"), the layouts the kernel tables time (NVIDIA's 0.24.0 FlashInfer CUTLASS
# table only at moe_tp 1, EP 2..256; Triton's at EP 1). FlashInfer CUTLASS pays a cost
# for each expert held on the GPU whether its tokens reach it or not: at 1 token the
# table's latency less the weights streamed grows 0.224 us an expert on H200 (0.239 on
# H100), the median over its 14 shapes of 128 experts or more
# (``benchmarks/results/vllm-lowc-s27/per_expert.py``). At equal bytes a GPU the Triton
# table at moe_tp k and FlashInfer CUTLASS at EP k agree within 5% from 4 tokens (H200,
# MiniMax-M2.5's shape: 65 / 66, 90 / 91, 265 / 252 us at 4 / 8 / 32 tokens), so the
# twin's Triton price of a moe_tp k run stands for FlashInfer CUTLASS holding E / k
# experts; under TP it holds all E, so each MoE layer pays the cost of the E (1 - 1 / k)
# experts more (``KernelLayout.moe_layer_extra_s``).
VLLM_FLASHINFER_CUTLASS_TP_BUILDS = frozenset({"0.16.0"})
FLASHINFER_CUTLASS_EXPERT_S = {"h200": 0.224e-6, "h100": 0.239e-6}


def vllm_flashinfer_cutlass_tp_s(model: ModelSpec, build: str, moe_tp: int, gpu: str) -> float:
    """Seconds each MoE layer of ``model`` pays above the fused-MoE fit where vLLM
    ``build`` runs its block-fp8 experts through FlashInfer's CUTLASS fused MoE at MoE
    tensor-parallel size ``moe_tp`` on ``gpu`` (above); 0 elsewhere."""
    per_expert = FLASHINFER_CUTLASS_EXPERT_S.get(gpu)
    if (
        per_expert is None
        or moe_tp <= 1
        or build not in VLLM_FLASHINFER_CUTLASS_TP_BUILDS
        or not _block_fp8_experts(model)
    ):
        return 0.0
    return per_expert * model.moe_n_experts * (1.0 - 1.0 / moe_tp)


def vllm_moe_tp(tp: int, ep: int) -> int:
    """vLLM's MoE tensor-parallel size on a replica of ``tp`` GPUs, ``ep`` > 1 where its
    experts are split (``FusedMoEParallelConfig.make``, above): all the replica's GPUs,
    its data-parallel ranks' included (``dp x`` each rank's ``--tensor-parallel-size``, the
    replica's ``tp`` as ``layout_for`` is given it), or 1 under expert parallelism."""
    return 1 if ep > 1 else tp


# vLLM's MiniMax-M2 model file (MiniMax-M2 and M2.5) runs the MoE router in fp32: 0.16.0,
# 0.17.0, 0.18.0 and 0.19.0 (the wheels) ``models/minimax_m2.py`` ``MiniMaxM2MoE``:
# ``self.gate = ReplicatedLinear(config.hidden_size, config.num_local_experts, ...,
# params_dtype=torch.float32)`` called as ``self.gate(hidden_states.to(torch.float32))``
# (``router_logits_dtype=torch.float32``), an fp32 GEMM replicated on every rank. At vLLM's
# default ``VLLM_FLOAT32_MATMUL_PRECISION=highest`` it runs IEEE fp32 on CUDA cores;
# "high" or "medium" (``twin.engine.modes_vllm.VLLM_FLOAT32_MATMUL_PRECISIONS``) on TF32
# tensor cores. The nightly the InferenceMAX rows ran (April 2026) is taken to hold 0.19.0's
# file. Only the builds read carry the rule (a later build's file is unread: bf16, as every
# other model's router is priced: ``KernelLayout.router_precision``).
VLLM_FP32_ROUTER_MODELS = ("minimax-m2",)
VLLM_FP32_ROUTER_BUILDS = frozenset(
    {"0.16.0", "0.17.0", "0.18.0", "0.19.0", "nightly-5b8c30d62b754b57"}
)
TF32_MATMUL_PRECISIONS = ("high", "medium")  # torch.set_float32_matmul_precision's


def vllm_router_precision(model: ModelSpec, build: str) -> str:
    """``KernelLayout.router_precision`` of ``model`` under vLLM ``build`` (above): "fp32"
    for a model whose file at that build runs its router in fp32; "" (bf16) otherwise.
    TF32 is the run's flag (:func:`with_float32_matmul`)."""
    if (
        build not in VLLM_FP32_ROUTER_BUILDS
        or not model.n_moe_layers
        or not any(_named(model, m) for m in VLLM_FP32_ROUTER_MODELS)
    ):
        return ""
    return "fp32"


def with_float32_matmul(layout: KernelLayout, float32_matmul_precision: str) -> KernelLayout:
    """``layout`` with its fp32 router on TF32 tensor cores where vLLM's
    ``float32_matmul_precision`` flag says so (above); unchanged otherwise."""
    if layout.router_precision == "fp32" and float32_matmul_precision in TF32_MATMUL_PRECISIONS:
        return dataclasses.replace(layout, router_precision="tf32")
    return layout


def vllm_kernel_layout(
    model: ModelSpec, build: str, tp: int, dp: int, ep: int, gpu: str
) -> KernelLayout:
    """vLLM ``build``'s kernel layout of ``model`` on ``gpu`` (above): its block-fp8 experts
    padded, every expert held, to DeepGEMM's M alignment on 0.12.0 on a GPU DeepGEMM
    supports under a MoE tensor-parallel size below 8; 0.16.0's FlashInfer CUTLASS block-fp8
    experts under MoE tensor parallelism on Hopper (their cost per expert held); under data-parallel
    attention its dense MLP layers and shared expert on each rank; 0.10.2's custom
    all-reduce limit and static fp8 activations; MiniMax-M2's fp32 router."""
    on_rank = dp > 1
    static = build in VLLM_STATIC_FP8_BUILDS
    extra = vllm_flashinfer_cutlass_tp_s(model, build, vllm_moe_tp(tp, ep), gpu)
    padded = (
        build in VLLM_DEEPGEMM_MOE_BUILDS
        and _block_fp8_experts(model)
        and gpu in DEEPGEMM_GPUS
        and vllm_moe_tp(tp, ep) < VLLM_DEEPGEMM_MOE_MAX_TP
    )
    router = vllm_router_precision(model, build)
    stream = vllm_shared_expert_stream_tokens(model, build, dp)
    if not (padded or on_rank or static or extra or router or stream):
        return DEFAULT_LAYOUT
    return KernelLayout(
        shared_expert_stream_tokens=stream,
        router_precision=router,
        moe_rows_per_expert=DEEPGEMM_M_ALIGNMENT if padded else 0,
        moe_pads_every_expert=padded,
        moe_layer_extra_s=extra,
        dense_ffn_on_rank=on_rank,
        custom_allreduce_size_limit=static,
        fp8_static_activation=static,
    )


__all__ = [
    "DEEPGEMM_GPUS",
    "FLASHINFER_CUTLASS_EXPERT_S",
    "VLLM_FLASHINFER_CUTLASS_TP_BUILDS",
    "VLLM_FP32_ROUTER_MODELS",
    "vllm_flashinfer_cutlass_tp_s",
    "vllm_kernel_layout",
    "vllm_moe_tp",
    "vllm_router_precision",
    "vllm_shared_expert_stream_tokens",
    "with_float32_matmul",
]
