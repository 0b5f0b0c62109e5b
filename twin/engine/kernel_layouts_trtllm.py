"""TensorRT-LLM's kernel layouts (``twin.engine.kernel_layouts``): the norms inside the
all-reduces (Llama, gpt-oss, Qwen3-MoE), Qwen3's q/k norm and RoPE pass, attention DP's
per-rank dense MLPs, the 1.1 line's DeepGEMM experts and the shared expert's stream in the
CUDA graphs; ``trtllm_kernel_layout``, the engine mode's rule (``twin.engine.modes``).
"""

from __future__ import annotations

from twin.costmodel.engine_kernels import SM100_EXACT
from twin.costmodel.kernel_layout import (
    DEFAULT_LAYOUT,
    KernelLayout,
)
from twin.costmodel.table_release import release_at_least, version_key
from twin.engine.kernel_layouts import (
    DEEPGEMM_M_ALIGNMENT,
    _block_fp8_experts,
    _named,
    _qwen3_architecture,
)
from twin.model import ModelSpec

# TensorRT-LLM runs each layer's residual add + RMSNorm inside its tensor-parallel
# all-reduces (``AllReduceFusionOp.RESIDUAL_RMS_NORM``; for an NVFP4 Llama
# ``RESIDUAL_RMS_NORM_QUANT_NVFP4``, which writes the next GEMM's quantised input too)
# for three of the collection's models, read in NVIDIA/TensorRT-LLM's 1.x PyTorch flow:
# - Llama (``tensorrt_llm/_torch/models/modeling_llama.py`` ``LlamaDecoderLayer``, at
#   3a5901cd): ``PRE_MLP_FUSION`` / ``POST_MLP_FUSION`` where the mapping has TP, no
#   attention DP and ``hidden_size > 4096`` ("Disable fusion for small models due to
#   accuracy issues"): Llama-3.1-70B, not Llama-3.1-8B (hidden 4,096);
# - gpt-oss (``modeling_gpt_oss.py`` ``TransformerBlock.forward_tp``, at 050b6cb9):
#   whenever ``mapping.has_tp() and not enable_attention_dp``, the post-attention norm
#   and the next layer's ``input_layernorm`` ride on the two all-reduces.
# - Qwen3-MoE (``modeling_qwen3_moe.py`` ``Qwen3MoEDecoderLayer``, stored at 03441af1):
#   ``enable_fusion`` (``TRTLLM_QWEN3_EAGER_FUSION_DISABLED`` unset, "0") and not attention
#   DP; ``PRE_MOE_FUSION = enable_fusion and has_tp``, ``POST_MOE_FUSION`` the same without
#   PP: the post-attention norm and the next layer's ``input_layernorm`` ride on the
#   attention's and the experts' all-reduces (``RESIDUAL_RMS_NORM``). Since when: the same
#   block, line for line, stands outside the conflict markers of a fork's unresolved merge
#   of upstream 1.1.0rc6 into a tree whose ``tensorrt_llm/version.py`` reads 0.20.0
#   (Ataraksia/TensorRT-LLM at a451bf93: both sides carry it), and in the development
#   state of NVIDIA/TensorRT-LLM pull request 4530 (opened 2025-05-21; rosenrodt/
#   TensorRT-LLM at 0780ce14). So every release from 0.20.0 on fuses, before 1.0.0rc3 and
#   1.1.0rc2 (the H100 / H200 rows' releases); an older release is not read and keeps its
#   norms apart here (issue 31, helper trtar39). The pull request that added the block
#   was not found.
# Qwen3 (``modeling_qwen3.py`` ``Qwen3DecoderLayer``, at 5dedf53b) runs its norms apart.
# Priced by ``twin.costmodel.dense_pricing.DensePricing._norm_in_allreduce``.
TRTLLM_LLAMA_FUSION_MIN_HIDDEN = 4096
TRTLLM_QWEN3_MOE_FUSION_BY = "0.20.0"


def trtllm_norm_in_allreduce(
    model: ModelSpec, tp: int, dp: int, build: str = ""
) -> tuple[bool, bool]:
    """(whether TensorRT-LLM ``build`` runs ``model``'s norms inside its all-reduces on
    ``tp`` GPUs with ``dp`` attention-DP ranks, whether those also quantise the next GEMM's
    input: Llama's NVFP4 op) by the rules above. ``build`` a release (a build that is no
    version number, "" among them, is the newest)."""
    if tp <= 1 or dp > 1:
        return False, False
    if _named(model, "gpt-oss"):
        return True, False
    if _qwen3_architecture(model) and model.n_moe_layers:
        fused = version_key(build) is None or release_at_least(build, TRTLLM_QWEN3_MOE_FUSION_BY)
        return fused, False
    if not _named(model, "llama-3"):
        return False, False
    fused = model.d_model > TRTLLM_LLAMA_FUSION_MIN_HIDDEN
    return fused, fused


def trtllm_qk_norm_rope_pass(model: ModelSpec) -> bool:
    """Whether TensorRT-LLM runs ``model``'s q/k norms and RoPE as a pass of their own."""
    return _qwen3_architecture(model)


# Under attention DP TensorRT-LLM's DeepSeek runs its dense MLP layers and its shared
# expert with no tensor parallelism, each rank on its own tokens (NVIDIA/TensorRT-LLM
# ``tensorrt_llm/_torch/models/modeling_deepseekv3.py``, stored at 000561df, the 1.1 / 1.2
# module: ``DeepseekV3DecoderLayer._compute_mlp_tp_size`` "If using attention DP, the MLP
# also uses DP instead of TP", ``mlp_tp_size = 1``; ``Deepseekv3MoE.
# _compute_shared_expert_tp_size`` ``if self.use_dp: shared_tp_size = 1``, its output added
# to the routed experts' before the reduce-scatter, no all-reduce of its own). TensorRT-LLM's
# attention DP gives every rank one GPU (``enable_attention_dp``: attention TP 1), the TP
# the twin's attention side prices. ``KernelLayout.dense_ffn_on_rank``.


def trtllm_kernel_layout(
    model: ModelSpec, build: str, tp: int, dp: int, ep: int, gpu: str
) -> KernelLayout:
    """TensorRT-LLM's kernel layout of ``model`` (``ep`` unused; ``build`` and ``gpu`` only
    for the 1.1 line's DeepGEMM experts, :func:`trtllm_deepgemm_rows_per_expert`).
    Under attention DP its MoE layers all-gather and reduce-scatter the ranks' tokens
    (``twin.costmodel.gather_scatter``, which cites the modules and the releases'
    all-to-all selection) and its dense MLP layers and shared expert run on each rank's
    own tokens, exchanging none (above)."""
    fused, quantised = trtllm_norm_in_allreduce(model, tp, dp, build)
    qk = trtllm_qk_norm_rope_pass(model)
    gather = dp > 1
    stream = TRTLLM_CUDA_GRAPH_MAX_BATCH if trtllm_shared_expert_stream(model, dp) else 0
    rows = trtllm_deepgemm_rows_per_expert(model, build, gpu)
    if not (fused or qk or gather or stream or rows):
        return DEFAULT_LAYOUT
    return KernelLayout(
        norm_in_allreduce=fused,
        allreduce_quantises_input=quantised,
        qk_norm_rope_pass=qk,
        moe_gather_scatter=gather,
        dense_ffn_on_rank=gather,
        shared_expert_stream_tokens=stream,
        moe_rows_per_expert=rows,
    )


# TensorRT-LLM's DEEPGEMM MoE backend (``DeepGemmFusedMoE``, ``tensorrt_llm/_torch/modules/
# fused_moe/fused_moe_deepgemm.py``, read at jmydurant/TensorRT-LLM f44cd328, a 2026 fork)
# lays each local expert's tokens out in a masked buffer (``m_max = align(tokens, 128)``
# rows an expert, ``masked_m`` the rows it holds) and runs DeepGEMM's masked grouped GEMM
# (``fp8_m_grouped_gemm_nt_masked``) for both expert GEMMs, on SM 100 / 103 and block-fp8
# experts only (``can_implement``). DeepGEMM's SM100 kernels put the tokens on the MMA's M
# side in tiles of 128 rows unless they swap A and B: DeepGEMM's SM100 support as NVIDIA
# contributed it (deepseek-ai/DeepGEMM pull request 112, 2025-06-12) lists "small M
# optimization (~128)", "very small M values (<64), with swap AB optimization" and "masked
# grouped GEMM optimization" as still to come, and TensorRT-LLM pull request 7355 (merged
# 2025-08-29, "Support DeepGEMM swap-AB on sm100") added swap-AB as a tactic of the FP8
# blockwise linear GEMM only; today's DeepGEMM (``csrc/jit_kernels/heuristics/sm100.hpp``
# ``get_layout_candidates``) always swaps for the m-grouped GEMMs (tokens on the N side, 16-
# row steps). So a decode step of the 1.1 line computes 128 rows for every expert its
# tokens reach (``MoePricing._moe_padded_rows``) where the priced table (NVIDIA's B200
# ``moe_perf`` 1.3.0rc20 DeepGEMM rows, ``twin.validate.silicon.precision``
# ``TRTLLM_BLOCK_EXPERT_TABLES``) times the swapped kernel. The 1.1.0rc2.post2 wheel was not
# read (not reachable); the release bound is measured: InferenceMAX's B200 fp8 DeepSeek-R1
# rows at the same lengths, clients, TP and drafts run 33-56% slower in TPOT on
# 1.1.0rc2.post2 (DEEPGEMM) than on 1.2.0rc6 (TRTLLM, or DEEPGEMM under attention DP,
# whose rows the unpadded table prices within +4%), while the image's fp4 rows (nvfp4
# experts, not DeepGEMM) price within -4% (median) with no release term
# (docs/decisions.md, "TensorRT-LLM 1.1's DeepGEMM experts", session 32).
TRTLLM_DEEPGEMM_SWAP_AB_SINCE = "1.2.0rc0"


def trtllm_deepgemm_rows_per_expert(model: ModelSpec, build: str, gpu: str) -> int:
    """The rows TensorRT-LLM ``build``'s DeepGEMM experts compute for each expert a step
    reaches on ``gpu`` (above): DeepGEMM's M tile for block-fp8 experts on an SM 10.0 GPU
    before 1.2; 0 (the rows as routed) otherwise, or where ``build`` is not a release."""
    if not _block_fp8_experts(model) or gpu not in SM100_EXACT or version_key(build) is None:
        return 0
    return 0 if release_at_least(build, TRTLLM_DEEPGEMM_SWAP_AB_SINCE) else DEEPGEMM_M_ALIGNMENT


# TensorRT-LLM's DeepSeek-V3 MoE layer (``tensorrt_llm/_torch/models/modeling_deepseekv3.py``
# ``Deepseekv3MoE.forward``, NVIDIA/TensorRT-LLM stored at 000561df, the 1.1 / 1.2 module;
# Kimi-K2 and K2.5 load the same module) runs its shared experts through
# ``maybe_execute_in_parallel(_compute_routed_output, _compute_shared_output, ...,
# self.aux_stream)``: the router GEMM, routing and routed experts on the main stream, the
# shared expert's gate/up GEMM, activation and down GEMM on ``AuxStreamType.MoeShared``,
# joined before their sum. ``modules/multi_stream_utils.py`` takes the second stream only
# under ``do_multi_stream()``, which the CUDA-graph runner sets while it captures
# ("Multi-stream is only enabled when cuda graph is turned on"): the generation steps the
# graphs replay, not the eager context steps. Without attention DP (under it the twin
# prices the shared expert on the ranks' side, ``KernelLayout.dense_ffn_on_rank``). The
# graphs' largest batch: ``CudaGraphConfig.max_batch_size`` or 128 when unset
# (``tensorrt_llm/llmapi/llm_args.py`` ``CudaGraphConfig.validate_cuda_graph_config``), so
# steps of up to 128 tokens here; a run sets its own
# (``twin.engine.run_pricing.kernel_layout_of``: InferenceMAX's scripts capture up to the
# concurrency, ``dsr1_fp4_b200_trt.sh`` ``cuda_graph_config.max_batch_size: $CONC``, each
# request verifying its draft tokens too under MTP).
TRTLLM_CUDA_GRAPH_MAX_BATCH = 128


def trtllm_graph_batch(max_running: int, concurrency: int | None) -> int:
    """The largest batch (requests) a run's TensorRT-LLM CUDA graphs capture (above): a
    closed-loop client's concurrency, as InferenceMAX's scripts set it; without one,
    TensorRT-LLM's default; never more than the requests the run holds."""
    cap = TRTLLM_CUDA_GRAPH_MAX_BATCH if concurrency is None else concurrency
    return min(max_running, cap)


def trtllm_shared_expert_stream(model: ModelSpec, dp: int) -> bool:
    """Whether TensorRT-LLM runs ``model``'s shared expert on a second stream in its CUDA
    graphs (above): a DeepSeek-V3-style MoE (MLA layers and a shared expert), no
    attention DP."""
    return dp == 1 and bool(model.mixer_counts.get("mla")) and model.moe_shared_d_ff > 0


__all__ = [
    "TRTLLM_CUDA_GRAPH_MAX_BATCH",
    "TRTLLM_DEEPGEMM_SWAP_AB_SINCE",
    "trtllm_deepgemm_rows_per_expert",
    "trtllm_graph_batch",
    "trtllm_kernel_layout",
    "trtllm_norm_in_allreduce",
    "trtllm_qk_norm_rope_pass",
    "trtllm_shared_expert_stream",
]
