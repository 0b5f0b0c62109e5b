"""SGLang's kernel layouts (``twin.engine.kernel_layouts``): its builds' GDN input
projection (Qwen3.5), a DeepSeek-sparse-attention model's sparse prefill, indexer and
measured sparse modules (GLM-5), and the norms inside the all-reduces (FlashInfer's fusion);
``sglang_kernel_layout``, the engine mode's rule (``twin.engine.modes_sglang``).
"""

from __future__ import annotations

import dataclasses
import re

from twin.costmodel.engine_kernels import BLACKWELL_SM100, HOPPER
from twin.costmodel.kernel_layout import (
    DEFAULT_LAYOUT,
    KernelLayout,
    SparseMlaDecodeModule,
    SparseMlaModule,
)
from twin.costmodel.table_release import release_at_least, version_key
from twin.engine.fabric import NODE_GPUS
from twin.engine.kernel_layouts import (
    _named,
    _qwen3_architecture,
)
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


__all__ = [
    "sglang_allreduce_norm_tokens",
    "sglang_gdn_in_proj_gemms",
    "sglang_kernel_layout",
]
