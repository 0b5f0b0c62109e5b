"""How each engine's builds lay out a model's kernels where that differs from the twin's
default pricing (``twin.costmodel.kernel_layout.KernelLayout``): one rule an engine, the
engine mode's ``kernel_layout`` (``twin.engine.mode_base.EngineMode``). The run chooses
the layout from the engine mode, its build (``EngineModeConfig.engine_build``, else the
kernel tables' release, else the engine's release) and the replica's GPUs
(``twin.engine.run_pricing.kernel_layout_of``), for ``twin simulate --engine`` and the silicon
scorer alike.

A model is recognised by its name (a preset's, or the Hugging Face id a config was read
under), as the engines' own modules are chosen by architecture.
"""

from __future__ import annotations

import dataclasses
import re

from twin import precision as px
from twin.costmodel.engine_kernels import BLACKWELL_SM100, HOPPER, SM100_EXACT
from twin.costmodel.kernel_layout import (
    DEFAULT_LAYOUT,
    KernelLayout,
    SparseMlaDecodeModule,
    SparseMlaModule,
)
from twin.costmodel.table_release import release_at_least, version_key
from twin.engine.fabric import NODE_GPUS
from twin.model import ModelSpec

# SGLang runs Qwen3.5's GDN input projection as the checkpoint's four matrices, one GEMM
# launch each, up to 0.5.9 (the 0.5.9 wheel's ``models/qwen3_5.py``, file dated
# 2026-02-23: ``Qwen3_5GatedDeltaNet._forward`` calls ``in_proj_qkv``, ``in_proj_z``,
# ``in_proj_b`` and ``in_proj_a`` in turn); 0.5.10.post1's (2026-04-08) loads them into
# ``in_proj_qkvz`` and ``in_proj_ba`` and, in a captured decode graph, runs the second on
# another stream beside the first (``_forward_input_proj``): the one GEMM the twin prices
# by default (``twin.costmodel.dense_pricing.DensePricing._gdn_in_proj``). A nightly
# build (``nightly-dev-YYYYMMDD``) dated before 0.5.9's file ran that file's code or an
# earlier one. Later nightlies, and a build that names no day, are not read and keep the
# default.
SGLANG_GDN_SPLIT_BEFORE = "0.5.10"
SGLANG_0_5_9_QWEN35_DAY = "20260223"
_NIGHTLY_DAY = re.compile(r"^nightly-dev-(\d{8})")


def _named(model: ModelSpec, stem: str) -> bool:
    return stem in model.name.lower()


def sglang_gdn_in_proj_gemms(model: ModelSpec, build: str) -> int:
    """The GEMM launches of a GDN layer's input projection SGLang ``build`` runs ``model``
    with (above): 4 for Qwen3.5 on a release before 0.5.10 or a nightly built before
    0.5.9's ``qwen3_5.py``; else 1."""
    if not model.mixer_counts.get("gdn") or not _named(model, "qwen3.5"):
        return 1
    if version_key(build) is not None:
        return 1 if release_at_least(build, SGLANG_GDN_SPLIT_BEFORE) else 4
    day = _NIGHTLY_DAY.match(build)
    return 4 if day is not None and day.group(1) < SGLANG_0_5_9_QWEN35_DAY else 1


# Seconds SGLang's DeepSeek-sparse-attention indexer spends per query-key pair in a prefill
# (``KernelLayout.nsa_indexer_pair_s``; the rule: ``MlaPricing._indexer_prefill``, SGLang
# 0.5.9 ``nsa_indexer.py``), on each GPU where it is measured. Source: aiconfigurator_core
# 0.12.0's SGLang 0.5.14 tables ``systems/data/<gpu>/sparse_attention/sglang/0.5.14/
# dsa_context_module_perf.parquet`` (one layer's attention module, tp 8 = 8 heads a rank,
# batch 1): zai-org/GLM-5-FP8 with the indexer (``sglang_dsa_indexer_<backend>``) minus
# zai-org/GLM-5.2-FP8 without it (``sglang_dsa_skip_indexer_<backend>``), its growth over
# the growth of the causal pairs L(L+1)/2, on the backend and cache the rows ran.
# - B200 (``--nsa-prefill-backend trtllm``, fp8 cache: the tables' ``sglang_dsa_{,skip_}
#   indexer_trtllm`` rows) at ``step`` 0, the tables' cached prefix (aiconfigurator
#   ``collector/sglang/collect_mla_module.py``: ``"step": prefix_len``; the rows' random
#   prompts share none): 0.724 / 0.848 / 2.074 ms a layer at 4k / 8k / 16k, growth 4.92e-12 s
#   a pair (4k -> 8k) and 1.22e-11 (8k -> 16k), the mean here (FlashMLA-sparse's: 1.79e-11
#   and 1.24e-11). Session 28's first figure, 3.31e-11, averaged every step, 0 to ~200k
#   cached tokens whose keys the causal pairs leave out (docs/decisions.md, helper
#   ``glm5-h200``). B300 has no GLM-5.2-FP8 skip-indexer table; its with-indexer module at
#   step 0 grows 8k -> 16k by 2.62 ms against B200's 2.78 ms, so B200's rate.
# - H200: ``glm5_fp8_h200.sh`` names no NSA backend and no KV dtype, so SGLang 0.5.9
#   (``server_args.py`` ``_set_default_nsa_kv_cache_dtype`` / ``_set_default_nsa_backends``)
#   runs a bf16 cache and ``flashmla_sparse`` prefill on Hopper, and past ``index_topk``
#   (``nsa_backend.py`` ``set_nsa_prefill_impl``: MHA only up to the top-k off trtllm) the
#   sparse kernel, which needs the indexer's top-k: the tables'
#   ``sglang_dsa_{,skip_}indexer_flashmla_sparse`` rows (kv_cache_dtype bfloat16), at step 0
#   (no cached prefix, as the rows' random prompts): 0.484 / 1.036 ms a layer at 4k / 8k
#   (the table's longest), 2.19e-11 s a pair (4k -> 8k).
# Derivation: benchmarks/results/glm5-h200-s28/indexer_pairs.py.txt.
SGLANG_DSA_INDEXER_PAIR_S = {"b200": 8.56e-12, "b300": 8.56e-12, "h200": 2.19e-11}


# SGLang forces GLM-5's prefill onto sparse MLA on Blackwell: 0.5.9 ``server_args.py``
# ``_handle_model_specific_adjustments`` sets ``SGLANG_NSA_FORCE_MLA`` for
# ``GlmMoeDsaForCausalLM`` where ``is_blackwell_supported()`` ("disable MHA_ONE_SHOT"), and
# ``layers/attention/nsa_backend.py`` ``set_nsa_prefill_impl`` then sets ``use_mha =
# False`` for every batch, at every prompt length (below ``index_topk`` too; 0.5.10.post1
# does the same through ``SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD = 0``; the rows'
# nightlies lie between). ``forward_extend`` runs then, by the prefill backend:
# - ``--nsa-prefill-backend trtllm`` (InferenceMAX's GLM-5 fp8 B200/B300 scripts):
#   ``_forward_trtllm``, FlashInfer's ``trtllm_batch_decode_with_kv_cache_mla(...,
#   sparse_mla_top_k=index_topk)``, each new token a one-query row over its top-k list at
#   the rank's heads, its ``seq_lens`` the token's position clipped to the top-k
#   (``nsa_cache_seqlens_int32``);
# - SGLang's default (``_set_default_nsa_backends``: ``flashmla_auto`` over the fp8 cache
#   ``_set_default_nsa_kv_cache_dtype`` gives SM100; InferenceMAX's GLM-5 NVFP4 B200 script
#   at d43805fc3 names none): ``set_nsa_prefill_impl`` picks ``flashmla_sparse`` while
#   ``seq_lens_sum < extend_num_tokens * 512`` (always without a cached prefix), whose
#   ``_forward_flashmla_sparse`` pads the rank's heads to 128 on SM100 and reads the
#   chunk's own bf16 keys (``_cat([k, k_rope])``).
# Priced from the measured module (``KernelLayout.nsa_sparse_module``, the form:
# ``SparseMlaModule``), per (GPU, kernel), at 8 query heads a rank (GLM-5's 64 at tp 8, the
# rows' layout; other head counts are not fitted and keep the dense price). Source:
# aiconfigurator_core 0.12.0's SGLang 0.5.14 tables ``systems/data/<gpu>/sparse_attention/
# sglang/0.5.14/dsa_context_module_perf.parquet``, op ``dsa_context_module_skip_indexer``
# (kernel_source ``sglang_dsa_skip_indexer_<kernel>``: GLM-5.2's index-sharing layers, the
# module with no indexer work; aiconfigurator ``collector/sglang/collect_mla_module.py``
# times ``self_attn.forward`` eagerly, back to back), ``step`` 0 (no cached prefix, as the
# rows' random prompts), 8 heads, batch 1/2/4 x isl 4k/8k/16k (every row there: six),
# non-negative least squares; fit error at most 0.7% (trtllm) and 5.6% (flashmla_sparse):
# - B200 trtllm: zai-org/GLM-5.2-FP8 (fp8 cache, fp8-block projections, as the fp8 rows);
# - B300 trtllm: nvidia/GLM-5.2-NVFP4 (fp8 cache, bf16 projections; the table has no
#   fp8-block GLM-5.2 row on B300: on B200 the bf16 set is 1.5-3% dearer);
# - B200 / B300 flashmla_sparse: zai-org/GLM-5.2 / nvidia/GLM-5.2-NVFP4 (bf16 cache, bf16
#   projections: GLM-5's NVFP4 checkpoint quantises only its experts).
# The per-key rates (6.5-7.5e-11 s, ~576 bytes a key at 8 TB/s) agree across kernels and
# GPUs; flashmla_sparse's per-token rate carries its 128 padded heads over every top-k slot.
# The tables time SGLang 0.5.14; the 0.5.9 dispatch above is the rows' logic, the rates a
# later release's kernels. No table row below 4k (0.5.14's collector runs dense there):
# the 1k/2k price is the fit's extrapolation (B200 trtllm 0.164 / 0.321 ms a layer).
# Derivation: benchmarks/results/glm5-sparse-s29/fit.py.txt (output fit.txt).
SGLANG_DSA_FORCED_MLA_HEADS = 8
SGLANG_DSA_SPARSE_MODULE = {
    ("b200", "trtllm"): SparseMlaModule("trtllm", 8.661e-05, 3.768e-08, 7.483e-11),
    ("b300", "trtllm"): SparseMlaModule("trtllm", 6.923e-05, 3.996e-08, 7.254e-11),
    ("b200", "flashmla_sparse"): SparseMlaModule("flashmla_sparse", 0.0, 3.800e-07, 6.464e-11),
    ("b300", "flashmla_sparse"): SparseMlaModule("flashmla_sparse", 0.0, 3.187e-07, 7.465e-11),
}
# The kernel SGLang's default ``flashmla_auto`` runs without a cached prefix (above).
SGLANG_DSA_DEFAULT_PREFILL = "flashmla_sparse"


def sglang_forced_sparse_module(
    model: ModelSpec, tp: int, gpu: str, backend: str = "", dp: int = 1
) -> SparseMlaModule | None:
    """The measured sparse-MLA prefill module SGLang runs ``model`` with on ``gpu`` at
    ``tp`` GPUs and ``dp`` attention-DP ranks among them under the prefill ``backend``
    (``--nsa-prefill-backend``; "" or ``flashmla_auto``: SGLang's default) where it forces
    sparse MLA (above: GLM-5 on a Blackwell GPU of the table, 8 heads an attention rank,
    the attention split over ``tp / dp`` GPUs as ``twin.engine.dp_attention`` prices it);
    else None."""
    if not (model.index_n_heads and model.index_topk) or not _named(model, "glm-5"):
        return None
    attn_tp = tp // dp if dp > 0 else 0
    if attn_tp <= 0 or model.n_heads != SGLANG_DSA_FORCED_MLA_HEADS * attn_tp:
        return None
    if backend in ("", "flashmla_auto"):
        backend = SGLANG_DSA_DEFAULT_PREFILL
    return SGLANG_DSA_SPARSE_MODULE.get((gpu, backend))


def with_nsa_prefill_backend(
    layout: KernelLayout, model: ModelSpec, tp: int, gpu: str, backend: str, dp: int = 1
) -> KernelLayout:
    """``layout`` with the forced sparse-MLA module of the prefill ``backend`` the run's
    ``--set nsa_prefill_backend`` names (:func:`sglang_forced_sparse_module`, ``dp``
    attention-DP ranks among ``tp``); unchanged where the layout forces none or no flag
    is given."""
    if layout.nsa_sparse_module is None or not backend:
        return layout
    module = sglang_forced_sparse_module(model, tp, gpu, backend, dp)
    return dataclasses.replace(layout, nsa_sparse_module=module)


# SGLang decodes a DeepSeek-sparse-attention model through its NSA backend at every
# context: 0.5.9 ``layers/attention/nsa/nsa_indexer.py`` ``Indexer.forward_cuda`` skips the
# indexer's logits only for an extend (``skip_logits_computation`` needs
# ``is_extend_without_speculative``), so a decode step always scores every key of each
# sequence (``_get_topk_paged``: ``deep_gemm.fp8_paged_mqa_logits``, then
# ``topk_transform``, whose fast path keeps every key of a sequence at most ``index_topk``
# long) and the sparse kernel reads at most ``index_topk`` keys a sequence. The decode
# backend is ``server_args.py`` ``_set_default_nsa_backends``' on Hopper where the script
# names none (InferenceMAX's ``glm5_fp8_h200.sh``: no ``--nsa-*-backend``, no
# ``--kv-cache-dtype``): ``fa3`` over the bf16 cache ``_set_default_nsa_kv_cache_dtype``
# gives below SM100, ``flashmla_kv`` over an fp8 one. The twin's dense MLA decode price
# reads every key at the latent's width instead (2.2x the sparse kernel's keys at an 8k
# context) and leaves the logits' key reads out (``MlaPricing._indexer``).
# Priced from the measured module (``KernelLayout.nsa_decode_module``, the form:
# ``SparseMlaDecodeModule``), per (GPU, decode backend), at 8 query heads a rank (GLM-5's
# 64 at tp 8, the rows' layout) and fp8 projections (other head counts and precisions keep
# the dense price). Source: aiconfigurator_core 0.12.0's SGLang 0.5.14 table
# ``systems/data/h200_sxm/sparse_attention/sglang/0.5.14/dsa_generation_module_perf.parquet``,
# zai-org/GLM-5-FP8, tp 8, kernel_source ``sglang_dsa_indexer_fa3`` (bf16 cache) and
# ``sglang_dsa_indexer_flashmla_kv`` (fp8 cache): aiconfigurator
# ``collector/sglang/collect_mla_module.py`` (stored tree 095f58a51) times
# ``self_attn.forward`` (the projections, the indexer and the sparse kernel) in a captured
# decode graph, its ``step`` each sequence's cached prefix; batches 1-256 (512 and 1,024
# run eager), prefixes to 32k, 125 rows each, non-negative least squares on relative error:
# fa3 median 2.1%, P90 6.9%; flashmla_kv 4.3%, 8.0% (without the one-sequence key term fa3
# 2.7% / 7.7%, its 1k-prefix rows at 8-64 sequences 7-13% low: at one sequence the module
# grows 6 us from 1 to 1,024 keys, 7x what its bytes cost). The tables time SGLang 0.5.14; the
# dispatch above is the rows' 0.5.9 (the GLM-5 H200 rows' ``glm5-hopper`` image has its
# NSA backend, ``sglang_kernel_layout``). The single-layer replay keeps part of the
# module's ~45 MB of fp8 projections in H200's L2; not taken out (the decode floor is its
# ~20 launches). Derivation: benchmarks/results/sgl-h200-s31/dsa_decode_fit.py.txt (output
# ``dsa_decode_fit.txt``).
SGLANG_DSA_DECODE_HEADS = 8
SGLANG_DSA_DECODE_PRECISIONS = frozenset({"fp8", "fp8-block"})
SGLANG_DSA_DECODE_MODULE = {
    ("h200", "fa3"): SparseMlaDecodeModule(
        6.177e-05, 1.646e-07, 2.070e-10, 1.104e-10, 2.897e-06, 7.446e-09
    ),
    ("h200", "flashmla_kv"): SparseMlaDecodeModule(
        8.026e-05, 7.508e-07, 3.636e-11, 1.225e-10, 8.299e-06, 1.052e-09
    ),
}


def sglang_dsa_decode_module(
    model: ModelSpec, tp: int, gpu: str, dp: int = 1
) -> SparseMlaDecodeModule | None:
    """The measured sparse-MLA decode module SGLang runs ``model`` with on ``gpu`` at
    ``tp`` GPUs and ``dp`` attention-DP ranks among them (above: a DSA model at 8 heads an
    attention rank, fp8 projections, the decode backend of its cache's dtype, on a GPU of
    the table); else None."""
    if not (model.index_n_heads and model.index_topk):
        return None
    if model.precision not in SGLANG_DSA_DECODE_PRECISIONS:
        return None
    attn_tp = tp // dp if dp > 0 else 0
    if attn_tp <= 0 or model.n_heads != SGLANG_DSA_DECODE_HEADS * attn_tp:
        return None
    backend = "flashmla_kv" if model.kv_dtype == "fp8" else "fa3"
    return SGLANG_DSA_DECODE_MODULE.get((gpu, backend))


# SGLang runs each layer's residual add + RMSNorm inside its tensor-parallel all-reduces
# (FlashInfer's ``trtllm_allreduce_fusion``, one-shot Lamport kernel) where
# ``enable_flashinfer_allreduce_fusion`` is on: 0.5.9 and 0.5.10.post1 (the wheels)
# ``srt/server_args.py`` ``_handle_model_specific_adjustments`` turns it on by default
# for :data:`SGLANG_ALLREDUCE_FUSION_MODELS` on SM90 or SM10x (``is_sm90_supported`` /
# ``is_sm100_supported``: capability major 9 or 10, B300 included) at ``tp_size > 1``
# (0.5.10.post1; 0.5.9 fuses nothing on one GPU either), without DP attention, on one
# node, with no MoE all-to-all backend; 0.5.10.post1 adds Qwen3.5
# (``Qwen3_5MoeForConditionalGeneration``). ``srt/layers/communicator.py``
# ``apply_flashinfer_allreduce_fusion``: in a step of at most
# ``FUSE_ALLREDUCE_MAX_BATCH_SIZE`` (2,048) tokens the post-attention all-reduce runs
# with the MLP's norm (``_gather_hidden_states_and_residual``:
# ``layernorm.forward_with_allreduce_fusion``) and the MLP's with the next layer's input
# norm (``should_fuse_mlp_allreduce_with_next_layer``, the MLP then skipping its own
# all-reduce: ``models/deepseek_v2.py``, ``gpt_oss.py``, ``qwen3_moe.py``; 0.5.10.post1
# ``qwen3_5.py``). Priced by ``DensePricing._norm_in_allreduce`` (both norms leave; the
# all-reduce's fit stands for the fused kernel). Releases before 0.5.9 and the nightly
# builds are not read here: unchanged. The architectures by name: DeepSeek-V3 / R1 and
# Kimi-K2 / K2.5 (``DeepseekV3ForCausalLM``, ``KimiK25ForConditionalGeneration``) with
# MLA and no sparse-attention indexer (not DeepSeek-V3.2's ``DeepseekV32ForCausalLM``, nor
# a distilled dense model named after R1), gpt-oss, Qwen3-MoE (:func:`_qwen3_architecture`
# with MoE layers: not Qwen3-Next), Qwen3.5. ``Glm4MoeForCausalLM`` /
# ``Glm4MoeLiteForCausalLM`` (GLM-4.5 to 4.7) are in both lists too but not named here.
SGLANG_ALLREDUCE_FUSION_SINCE = "0.5.9"
SGLANG_ALLREDUCE_FUSION_MLA_MODELS = ("deepseek-r1", "deepseek-v3", "kimi-k2")
SGLANG_ALLREDUCE_FUSION_MODELS = ("gpt-oss",)
SGLANG_ALLREDUCE_FUSION_QWEN35_SINCE = "0.5.10"
SGLANG_ALLREDUCE_FUSION_GPUS = HOPPER | BLACKWELL_SM100
SGLANG_FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048


def sglang_allreduce_norm_tokens(model: ModelSpec, build: str, tp: int, dp: int, gpu: str) -> int:
    """The largest step (tokens) in which SGLang ``build`` runs ``model``'s norms inside
    its all-reduces on ``tp`` ``gpu`` GPUs with ``dp`` attention-DP ranks (above); 0: never.
    One node (``nnodes == 1``): at most the twin's node of ``fabric.NODE_GPUS``."""
    if tp <= 1 or tp > NODE_GPUS or dp > 1 or gpu not in SGLANG_ALLREDUCE_FUSION_GPUS:
        return 0
    if not release_at_least(build, SGLANG_ALLREDUCE_FUSION_SINCE):
        return 0
    qwen3_moe = _qwen3_architecture(model) and bool(model.n_moe_layers)
    qwen35 = _named(model, "qwen3.5") and release_at_least(
        build, SGLANG_ALLREDUCE_FUSION_QWEN35_SINCE
    )
    mla = bool(model.kv_lora_rank) and not model.index_topk  # DeepseekV3ForCausalLM's MLA
    named = any(_named(model, m) for m in SGLANG_ALLREDUCE_FUSION_MODELS) or (
        mla and any(_named(model, m) for m in SGLANG_ALLREDUCE_FUSION_MLA_MODELS)
    )
    return SGLANG_FUSE_ALLREDUCE_MAX_BATCH_SIZE if (named or qwen3_moe or qwen35) else 0


def sglang_kernel_layout(
    model: ModelSpec, build: str, tp: int, dp: int, ep: int, gpu: str
) -> KernelLayout:
    """SGLang ``build``'s kernel layout of ``model`` (its GDN input projection; the sparse
    prefill of a DeepSeek-sparse-attention model: every build that runs one, GLM-5's
    ``glm5-hopper`` image and the nightlies among them, has 0.5.9's NSA backend,
    ``twin.costmodel.mla_pricing.MlaPricing._mla_sparse_prefill``, and its indexer's
    prefill logits on a ``gpu`` of :data:`SGLANG_DSA_INDEXER_PAIR_S`; GLM-5's forced
    sparse-MLA prefill module on Blackwell at SGLang's default prefill backend,
    :func:`sglang_forced_sparse_module`, at ``tp / dp`` GPUs an attention rank; its
    measured sparse decode module, :func:`sglang_dsa_decode_module`; its norms inside the
    all-reduces, :func:`sglang_allreduce_norm_tokens`); the same on every ``ep``."""
    gemms = sglang_gdn_in_proj_gemms(model, build)
    sparse = bool(model.index_n_heads and model.index_topk)
    fused = sglang_allreduce_norm_tokens(model, build, tp, dp, gpu)
    if gemms == 1 and not sparse and not fused:
        return DEFAULT_LAYOUT
    pair_s = SGLANG_DSA_INDEXER_PAIR_S.get(gpu, 0.0) if sparse else 0.0
    return KernelLayout(
        norm_in_allreduce=bool(fused),
        norm_in_allreduce_max_tokens=fused,
        gdn_in_proj_gemms=gemms,
        nsa_sparse_prefill=sparse,
        nsa_indexer_pair_s=pair_s,
        nsa_sparse_module=sglang_forced_sparse_module(model, tp, gpu, dp=dp),
        nsa_decode_module=sglang_dsa_decode_module(model, tp, gpu, dp),
    )


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


# TensorRT-LLM's Qwen3 and Qwen3-MoE attention (``Qwen3Attention``, the one module both
# ``models/modeling_qwen3.py`` and ``models/modeling_qwen3_moe.py`` build; NVIDIA/
# TensorRT-LLM at 5dedf53b) is a ``QKNormRoPEAttention`` with ``fuse_qk_norm_rope``
# true: one ``fused_qk_norm_rope`` launch an attention layer, the per-head q/k norms and
# RoPE over the fused QKV. Those two architectures: :func:`_qwen3_architecture`.
QWEN3_STEM = "qwen3-"


def _qwen3_architecture(model: ModelSpec) -> bool:
    """Whether ``model`` is Qwen3 or Qwen3-MoE (``model_type`` ``qwen3`` / ``qwen3_moe``)
    by name: ``Qwen3-<size>``, not Qwen3.5 (``qwen3_5_moe``) nor a hybrid with GDN layers
    (Qwen3-Next, ``qwen3_next``: modules of its own)."""
    base = model.name.lower().rsplit("/", 1)[-1]
    return base.startswith(QWEN3_STEM) and not model.mixer_counts.get("gdn")


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
# tokens reach (``DensePricing._moe_padded_rows``) where the priced table (NVIDIA's B200
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
# out padded to ``get_mk_alignment_for_contiguous_layout()``, 128 in DeepGEMM, so a decode
# step computes 128 rows for every expert its few tokens reach. 0.16.0 puts FlashInfer
# CUTLASS before DeepGEMM on Hopper (below), so only 0.12.0 is read as this rule (priced by
# ``DensePricing._moe_padded_rows``).
VLLM_DEEPGEMM_MOE_BUILDS = frozenset({"0.12.0"})
DEEPGEMM_M_ALIGNMENT = 128
VLLM_DEEPGEMM_MOE_MAX_TP = 8  # ``get_fp8_moe_backend``: DeepGEMM off from this MoE TP
DEEPGEMM_GPUS = HOPPER | SM100_EXACT
DEEPGEMM_FORMAT = "fp8-block"  # block-quantised fp8 experts (``block_quant``)


def _block_fp8_experts(model: ModelSpec) -> bool:
    """Whether ``model`` has MoE layers whose experts are block-quantised fp8 (the format
    DeepGEMM's and FlashInfer's block-fp8 MoE kernels take)."""
    return bool(model.n_moe_layers) and px.moe_format(model).name == DEEPGEMM_FORMAT


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


def vllm_moe_tp(tp: int, dp: int, ep: int) -> int:
    """vLLM's MoE tensor-parallel size on ``tp`` GPUs with ``dp`` data-parallel ranks,
    ``ep`` > 1 where its experts are split (``FusedMoEParallelConfig.make``, above)."""
    return 1 if ep > 1 else tp * max(dp, 1)


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
    padded per expert to DeepGEMM's M alignment on 0.12.0 on a GPU DeepGEMM supports under
    a MoE tensor-parallel size below 8; 0.16.0's FlashInfer CUTLASS block-fp8 experts under
    MoE tensor parallelism on Hopper (their cost per expert held); under data-parallel
    attention its dense MLP layers and shared expert on each rank; 0.10.2's custom
    all-reduce limit and static fp8 activations; MiniMax-M2's fp32 router."""
    on_rank = dp > 1
    static = build in VLLM_STATIC_FP8_BUILDS
    extra = vllm_flashinfer_cutlass_tp_s(model, build, vllm_moe_tp(tp, dp, ep), gpu)
    padded = (
        build in VLLM_DEEPGEMM_MOE_BUILDS
        and _block_fp8_experts(model)
        and gpu in DEEPGEMM_GPUS
        and vllm_moe_tp(tp, dp, ep) < VLLM_DEEPGEMM_MOE_MAX_TP
    )
    router = vllm_router_precision(model, build)
    stream = vllm_shared_expert_stream_tokens(model, build, dp)
    if not (padded or on_rank or static or extra or router or stream):
        return DEFAULT_LAYOUT
    return KernelLayout(
        shared_expert_stream_tokens=stream,
        router_precision=router,
        moe_rows_per_expert=DEEPGEMM_M_ALIGNMENT if padded else 0,
        moe_layer_extra_s=extra,
        dense_ffn_on_rank=on_rank,
        custom_allreduce_size_limit=static,
        fp8_static_activation=static,
    )


__all__ = [
    "DEEPGEMM_GPUS",
    "FLASHINFER_CUTLASS_EXPERT_S",
    "TRTLLM_CUDA_GRAPH_MAX_BATCH",
    "TRTLLM_DEEPGEMM_SWAP_AB_SINCE",
    "VLLM_FLASHINFER_CUTLASS_TP_BUILDS",
    "VLLM_FP32_ROUTER_MODELS",
    "sglang_allreduce_norm_tokens",
    "sglang_gdn_in_proj_gemms",
    "sglang_kernel_layout",
    "trtllm_deepgemm_rows_per_expert",
    "trtllm_graph_batch",
    "trtllm_kernel_layout",
    "trtllm_norm_in_allreduce",
    "trtllm_qk_norm_rope_pass",
    "trtllm_shared_expert_stream",
    "vllm_flashinfer_cutlass_tp_s",
    "vllm_kernel_layout",
    "vllm_moe_tp",
    "vllm_router_precision",
    "vllm_shared_expert_stream_tokens",
    "with_float32_matmul",
]
