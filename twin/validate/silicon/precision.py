"""What precision a row is priced at (weights, experts, KV cache), read from its columns
or its checkpoint, and why."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twin import precision as px
from twin.costmodel.engine_kernels import BLACKWELL_SM100, HOPPER
from twin.model import ModelSpec
from twin.validate.silicon.configs import QUANTISED_NAME_SUFFIX, config_file, read_config
from twin.validate.silicon.rows import SiliconRow

# The CSV's precision names and quant modes (aiconfigurator's) -> the twin's --precision
# (twin.precision.TABLE_MODES; ``fp8_static`` is per-tensor static fp8: the same bytes,
# priced by the fp8 GEMM fit). An empty ``precision`` (the older collection's unquantised
# runs) is read from the checkpoint: its quantisation config, else its name's suffix,
# else its dtype.
_WEIGHT_MODES = {**px.TABLE_MODES, "fp8_static": "fp8"}
_CHECKPOINT_DTYPES = {"bfloat16": "bf16"}
# Checkpoint quantisation configs -> --precision: ModelOpt's ``quant_algo`` (the
# ``hf_quant_config.json`` NVIDIA ships, or ``quantization_config`` with quant_method
# modelopt) and Hugging Face's ``quant_method`` (fp8, with ``weight_block_size`` for
# block scales).
_CHECKPOINT_ALGOS = {"FP8": "fp8", "FP8_BLOCK": "fp8-block", "NVFP4": "nvfp4"}
# aiconfigurator's quant profiles pair fp8 and nvfp4 weights with an fp8 KV cache and
# bf16 with a bf16 one (package aiconfigurator 0.12.0, sdk/task_v1_compat.py
# ``_PROFILE_TO_QUANT``; its checkpoint inference does the same, aiconfigurator-core
# sdk/models/helpers.py ``_infer_quant_modes_from_raw_config``): a row whose checkpoint
# does not say (``kv_cache_quant_algo``) is run with that KV cache.
_KV_OF_WEIGHTS = {"bf16": "bf16", "fp8": "fp8", "fp8-block": "fp8", "nvfp4": "fp8"}
# Backends whose fp8 rows of a block-scaled checkpoint (``quant_method`` fp8 with
# ``weight_block_size``: MiniMax-M2.5, Qwen3-235B-A22B-FP8) are priced with fp8-block
# experts although the columns say ``fp8``: the column names aiconfigurator's family, the
# engine loads the checkpoint's scales as stored. vLLM 0.19.0
# ``model_executor/layers/quantization/fp8.py`` ``Fp8Config.from_config`` reads
# ``weight_block_size`` and ``Fp8MoEMethod`` runs block-scaled experts with per-token-group
# (1 x 128) activation scales (``fused_moe/oracle/fp8.py``: Triton for TP on Hopper; on
# Blackwell with FlashInfer and DeepGEMM off, as InferenceMAX's ``minimaxm2.5_fp8_b200.sh``
# sets, the first of vLLM CUTLASS / Triton that takes block scales). The linear layers
# keep the fp8 GEMM price: the fp8-block GEMM tables (B200 vLLM 0.24.0 DeepGEMM) time
# every call at 0.17-0.27 ms whatever its rows (1-1,024 rows of 4,096 x 3,072), which a
# decode step under CUDA graphs does not pay (MiniMax-M2.5 B200 TP 2 at 4 clients: 32 ms
# a token priced against 9.4 measured). Other backends not read here: unchanged.
BLOCK_SCALED_EXPERTS = frozenset({"vllm"})
# Backends whose rows of a 4-bit weight-only checkpoint (:func:`weight_only_checkpoint`:
# gpt-oss's mxfp4) are priced at the checkpoint's formats on every GPU, not only where the
# columns' mode has no FP4 tensor cores (``runs_weight_only``): vLLM has no path that turns
# an mxfp4 checkpoint into nvfp4 weights. vLLM 0.15.1 ``model_executor/layers/quantization/
# mxfp4.py``: ``Mxfp4Config`` quantises the experts alone (``Mxfp4MoEMethod``; the
# attention and router stay ``UnquantizedLinearMethod``) and on SM100 runs them with
# FlashInfer's TRT-LLM MXFP4 kernels (``get_mxfp4_backend``; InferenceMAX's
# ``gptoss_fp4_b200.sh`` sets ``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1``); the B200 rows'
# columns (``nvfp4``) are InferenceMAX's precision label: its configuration serves
# ``openai/gpt-oss-120b`` (``.github/configs/nvidia-master.yaml`` ``gptoss-fp4-b200-vllm``,
# SemiAnalysisAI/InferenceX at 626932a). Per (backend, experts' format): Kimi-K2.5's fp4
# rows ran ``nvidia/Kimi-K2.5-NVFP4`` (``kimik2.5-fp4-b200-vllm``), another checkpoint than
# the int4 one their ``model_path`` names, so their columns stand. TensorRT-LLM has none
# either: ``tensorrt_llm/_torch/model_config.py`` ``ModelConfig.load_hf_quant_config``
# (NVIDIA/TensorRT-LLM, the 1.2 line read) maps ``quant_method`` mxfp4 to the experts'
# mxfp4 algorithm with group 32 and leaves ``block.*.attn.qkv``, ``attn.out``,
# ``mlp.gate``, the embedding and the unembedding unquantised (bf16), on every GPU; the
# activations it picks by GPU are the engine's (``twin.engine.run_pricing.TRTLLM_MXFP8_EXPERTS``).
# InferenceMAX's ``gptoss_fp4_b200_trt.sh`` serves ``openai/gpt-oss-120b`` with
# ``kv_cache_config.dtype: fp8`` (the columns' fp8 pairing, kept).
CHECKPOINT_EXPERTS = frozenset({("vllm", "mxfp4"), ("trtllm", "mxfp4")})
# Backends that cannot quantise an unquantised checkpoint, so a row whose columns name fp8
# but whose ``model_path`` is the unquantised model ran a quantised checkpoint of it:
# TensorRT-LLM's PyTorch backend ignores a requested quantisation and takes the
# checkpoint's own (``tensorrt_llm/llmapi/llm_utils.py`` ``CachedModelLoader.__call__``:
# "QuantConfig for pytorch backend is ignored. You can load quantized model with
# hf_quant_config.json directly"; ``ModelLoader._update_from_hf_quant_config``:
# ``quant_method`` fp8 with ``weight_block_size`` -> ``QuantAlgo.FP8_BLOCK_SCALES``,
# NVIDIA/TensorRT-LLM's stored tree, the 1.x line), and aiconfigurator's generated
# deployment passes no quantisation (aiconfigurator 0.12.0 ``generator/config/
# backend_templates/trtllm/extra_engine_args.1.0.0rc3.yaml.j2``: the model path and
# ``kv_cache_dtype`` only). Which checkpoint is not recorded; the twin prices the model
# organisation's own FP8 repository (:data:`SERVED_FP8_SUFFIX`) where its config is
# cached: ``Qwen/Qwen3-32B-FP8``, block-scaled (``weight_block_size`` [128, 128]). On the
# H100 1.0.0rc3 Qwen3-32B rows (fit split) the per-tensor price is 9% fast in TPOT, more
# where contexts fill the decodes (c 32-64: 0.84), and the block price is flat at 0.97-1.05
# by clients, TP and OSL (docs/decisions.md, "Issue 31, step: the H100 TensorRT-LLM
# Qwen3-32B rows served a block-fp8 checkpoint"); bf16 weights (what the named checkpoint
# holds) are 26% off.
SERVED_FP8_BACKENDS = frozenset({"trtllm"})
SERVED_FP8_SUFFIX = "-FP8"


# TensorRT-LLM loads a checkpoint's block scales as stored (``quant_method`` fp8 with
# ``weight_block_size`` -> ``QuantAlgo.FP8_BLOCK_SCALES``, ``_update_from_hf_quant_config``
# above), so DeepSeek-R1/V3's experts run block-scaled whatever the columns say. Their
# price is the fp8-block expert table where that table times the kernel the row's MoE
# backend runs (``inferencemax_trtllm.inferencemax_trtllm_moe_backend``): NVIDIA's B200
# TensorRT-LLM table of fp8_block experts is DeepGEMM's (aiconfigurator-core 0.12.0
# ``b200_sxm/moe/trtllm/1.3.0rc20/moe_perf``, ``kernel_source`` deepgemm, the module
# ``DeepGemmFusedMoE``), H200's is CUTLASS's (``h200_sxm/.../1.3.0rc20``,
# ``moe_torch_flow_cutlass``). B200's ``TRTLLM`` backend (``TRTLLMGenFusedMoE``) has no
# table: its rows keep the per-tensor CUTLASS price.
TRTLLM_BLOCK_EXPERT_TABLES = frozenset({("b200", "DEEPGEMM"), ("h200", "CUTLASS")})


@dataclass(frozen=True)
class RowPrecision:
    """What the twin prices a row at (``twin.precision``) and why."""

    weights: str  # --precision
    kv: str  # --kv-dtype
    moe: str | None = None  # the experts' (None: as the weights)
    why: str = ""
    kv_from_checkpoint: bool = False  # the checkpoint says the KV dtype (else a default)
    # Read from the checkpoint where the columns name a mode the GPU runs weight-only
    # (``weight_only_checkpoint``), not from the columns.
    native: bool = False

    @property
    def label(self) -> str:
        """``fp8-block, fp8 KV``: the summary's per-precision key."""
        experts = f", {self.moe} experts" if self.moe not in (None, self.weights) else ""
        return f"{self.weights}{experts}, {self.kv} KV"

    @property
    def text(self) -> str:
        """The per-row ``priced_as``: the label and where it was read."""
        return f"{self.weights} weights{', ' + self.moe + ' experts' if self.moe else ''}, " + (
            f"{self.kv} KV ({self.why})"
        )


def _unpriced_columns(row: SiliconRow) -> str | None:
    """The reason, if the row's own precision columns name one the twin does not price."""
    gemm = row.gemm_quant_mode or row.precision
    if gemm and gemm not in _WEIGHT_MODES:
        label = row.precision or row.gemm_quant_mode
        extra = f" ({row.gemm_quant_mode})" if row.gemm_quant_mode not in ("", label) else ""
        return f"precision {label}{extra} not priced"
    if row.moe_quant_mode and row.moe_quant_mode not in _WEIGHT_MODES:
        return f"precision {row.moe_quant_mode} (MoE) not priced"
    return None


def hf_quant_config(configs: Path, hf_id: str) -> dict[str, Any] | None:
    """The ``quantization`` section of ``<org>--<name>_hf_quant_config.json`` (NVIDIA
    ModelOpt's file beside a quantised checkpoint's config), if the package caches it."""
    path = configs / f"{hf_id.replace('/', '--')}_hf_quant_config.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    quant = data.get("quantization") if isinstance(data, dict) else None
    return quant if isinstance(quant, dict) else None


def attention_unquantised(config: dict[str, Any], hf: dict[str, Any] | None) -> bool:
    """Whether a quantised checkpoint leaves its attention projections unquantised: its
    config's ``quantization_config`` (``ignore``, ``modules_to_not_convert``; a
    multimodal config's ``text_config`` too) or its ModelOpt ``hf_quant_config.json``
    (``exclude_modules``) names ``self_attn``. So do ``nvidia/Kimi-K2.5-NVFP4``
    (``language_model.model.layers.N.self_attn*``), ``nvidia/MiniMax-M2.5-NVFP4``
    (``model.layers.N.self_attn*``), Kimi-K2.5's int4 and gpt-oss's mxfp4 checkpoints;
    MiniMax-M2.5's block-fp8 one quantises them. The rows' precision columns price every
    linear layer in one format; this says only how vLLM issues them
    (``eager_prefill.vllm_part_launches``: no activation quantisation before a bf16 GEMM)."""
    names: list[Any] = list((hf or {}).get("exclude_modules") or [])
    for where in (config, config.get("text_config") or {}):
        quant = where.get("quantization_config") if isinstance(where, dict) else None
        if isinstance(quant, dict):
            names += quant.get("ignore") or []
            names += quant.get("modules_to_not_convert") or []
    return any("self_attn" in str(name) for name in names)


def checkpoint_attention_unquantised(configs: Path, hf_id: str) -> bool:
    """:func:`attention_unquantised` for the checkpoint ``hf_id`` from its cached files
    (its own config only, not a stand-in of another name; False when none is cached)."""
    path = config_file(configs, hf_id)
    try:
        config = read_config(str(path)) if path.is_file() else {}
    except (OSError, ValueError):
        config = {}
    return attention_unquantised(config, hf_quant_config(configs, hf_id))


def _checkpoint_quant(config: dict[str, Any], hf: dict[str, Any] | None) -> str | None:
    """The weights' --precision a checkpoint's own quantisation says, ``""`` for an
    unquantised one, or a reason (starting "precision") for one the twin cannot price."""
    quant = config.get("quantization_config")
    algo = (hf or {}).get("quant_algo")
    if isinstance(quant, dict) and not algo:
        method = str(quant.get("quant_method", "quantised")).lower()
        if method == "fp8":
            return "fp8-block" if quant.get("weight_block_size") else "fp8"
        if method == "modelopt":
            algo = quant.get("quant_algo")
        else:
            return f"precision of the {method} checkpoint not priced"
    if algo:
        found = _CHECKPOINT_ALGOS.get(str(algo).upper())
        return found or f"precision of the {algo} checkpoint not priced"
    return ""


def _checkpoint_kv(config: dict[str, Any], hf: dict[str, Any] | None) -> str | None:
    """The KV dtype a checkpoint says (``kv_cache_quant_algo``, ``kv_cache_scheme``)."""
    quant = config.get("quantization_config")
    algo = (hf or {}).get("kv_cache_quant_algo")
    if algo is None and isinstance(quant, dict):
        algo = quant.get("kv_cache_quant_algo")
        scheme = quant.get("kv_cache_scheme")
        if algo is None and isinstance(scheme, dict):
            algo = f"{scheme.get('type', 'float')}{scheme.get('num_bits', '')}"
    if algo is None:
        return None
    return "fp8" if str(algo).upper() in ("FP8", "FLOAT8") else f"kv {algo}"


def weight_only_checkpoint(config: dict[str, Any]) -> tuple[str, str] | None:
    """``(linear layers, experts)`` as --precision values for a checkpoint whose own
    quantisation stores its routed experts in a 4-bit weight-only format the twin prices
    (``twin.precision``), None for any other. aiconfigurator reads the same two
    (aiconfigurator-core 0.12.0 ``sdk/models/helpers.py``
    ``_infer_quant_modes_from_raw_config``):

    - ``quant_method`` mxfp4 (gpt-oss): gemm bfloat16, moe ``w4a16_mxfp4``; Hugging
      Face's ``Mxfp4Config`` quantises the experts only (``modules_to_not_convert``:
      attention, router, embeddings, LM head);
    - compressed-tensors with 4-bit integer weights (Kimi-K2.5): ``int4_wo``
      (``sdk/utils.py`` ``parse_compressed_tensors_quant``), the linear layers bf16
      where ``ignore`` names the attention (``re:.*self_attn.*``). Only the twin's
      ``int4`` (group 32, symmetric, no activation quantisation) is read."""
    quant = config.get("quantization_config")
    if not isinstance(quant, dict):
        return None
    method = str(quant.get("quant_method", "")).lower()
    if method == "mxfp4":
        return "bf16", "mxfp4"
    if method != "compressed-tensors":
        return None
    groups = [g for g in (quant.get("config_groups") or {}).values() if isinstance(g, dict)]
    weights = [g.get("weights") or {} for g in groups]
    int4 = bool(groups) and all(
        w.get("num_bits") == 4
        and str(w.get("type", "")).lower() == "int"
        and w.get("group_size") == 32
        and w.get("symmetric")
        and not g.get("input_activations")
        for g, w in zip(groups, weights, strict=True)
    )
    attention_kept = any("self_attn" in str(p) for p in quant.get("ignore") or [])
    return ("bf16", "int4") if int4 and attention_kept else None


def served_fp8_checkpoint(row: SiliconRow, configs: Path) -> dict[str, Any] | None:
    """The cached config of the quantised checkpoint a :data:`SERVED_FP8_BACKENDS` row
    whose columns name fp8 ran (``<model_path>`` + :data:`SERVED_FP8_SUFFIX`), None where
    the rule does not apply or no such config is cached."""
    if row.backend not in SERVED_FP8_BACKENDS or (row.gemm_quant_mode or row.precision) != "fp8":
        return None
    path = config_file(configs, row.model_path + SERVED_FP8_SUFFIX)
    try:
        return read_config(str(path)) if path.is_file() else None
    except (OSError, ValueError):
        return None


def runs_weight_only(row: SiliconRow, gpu: str | None) -> bool:
    """Whether the row's experts' column names a 4-bit mode the GPU runs weight-only:
    ``int4_wo``, or nvfp4 on a GPU without FP4 tensor cores (aiconfigurator 0.12.0 runs
    nvfp4 as ``nvfp4_wo`` there: aiconfigurator-core ``sdk/models/helpers.py``
    ``resolve_nvfp4_for_system``, "non-Blackwell hardware has no native FP4 tensor
    cores")."""
    mode = row.moe_quant_mode or row.gemm_quant_mode or row.precision
    if mode == "int4_wo":
        return True
    from twin.hardware import GPUS

    spec = GPUS.get(gpu or "")
    return _WEIGHT_MODES.get(mode) == "nvfp4" and spec is not None and not spec.fp4_flops


def row_precision(
    row: SiliconRow,
    config: dict[str, Any],
    own: bool,
    hf: dict[str, Any] | None,
    gpu: str | None = None,
    served: dict[str, Any] | None = None,
) -> RowPrecision | str:
    """What the twin prices ``row`` at, or a reason starting "precision".

    The row's columns first (``gemm_quant_mode``, else ``precision``; ``moe_quant_mode``
    for the experts); with both empty, the checkpoint: its quantisation config when the
    cached config is the row's own (``own``) or its ``hf_quant_config.json``, else the
    repository name's suffix (``-FP8``, ``-NVFP4``), else its dtype (bfloat16 only). The
    KV cache: the checkpoint's ``kv_cache_quant_algo`` where it says, else
    ``_KV_OF_WEIGHTS`` (aiconfigurator's pairing).

    One exception to the columns: where they name a 4-bit mode ``gpu`` runs weight-only
    (``runs_weight_only``) and the row's own checkpoint stores its experts in a 4-bit
    weight-only format (:func:`weight_only_checkpoint`), the checkpoint's formats are
    priced: that is what the engine loads and runs (gpt-oss-120b's rows say fp4 /
    nvfp4, the InferenceMAX collection's precision label, but its checkpoint is mxfp4,
    and aiconfigurator's InferenceMAX reader takes gpt-oss's quantisation from the
    checkpoint: aiconfigurator 0.12.0 ``sdk/config_adapter/inferencex.py``
    ``NATIVE_QUANT_MODELS``; Kimi-K2.5's int4 rows say ``int4_wo`` for the GEMMs too,
    but its checkpoint leaves attention and the shared and dense MLPs in bf16).

    ``served``: the config of the quantised checkpoint a :data:`SERVED_FP8_BACKENDS` row
    ran where its columns name fp8 and its own checkpoint (``own``) is unquantised
    (:func:`served_fp8_checkpoint`); a block-scaled one is priced as ``fp8-block``."""
    native = weight_only_checkpoint(config) if own else None
    weight_only = runs_weight_only(row, gpu)
    if native is not None and (weight_only or (row.backend, native[1]) in CHECKPOINT_EXPERTS):
        kv = _checkpoint_kv(config, hf)
        if kv is not None and kv not in px.KV_DTYPES:
            return f"precision {kv} cache not priced"
        weights, experts = native
        ran = f"run weight-only on {gpu}" if weight_only else f"loaded as stored by {row.backend}"
        why = (
            f"precision column {row.precision or '-'}, moe_quant_mode "
            f"{row.moe_quant_mode or '-'} {ran}: the checkpoint's "
            f"{experts} experts, {weights} linear layers"
        )
        said = kv is not None
        column = _WEIGHT_MODES.get(row.gemm_quant_mode or row.precision)
        if said:
            kv_why = "KV: the checkpoint's kv_cache_quant_algo"
        elif not weight_only and column in _KV_OF_WEIGHTS:
            # the columns' KV pairing, as without the checkpoint's weights (InferenceMAX's
            # gptoss_fp4_b200.sh runs ``kv-cache-dtype: fp8``)
            kv, kv_why = _KV_OF_WEIGHTS[column], "KV: aiconfigurator's pairing"
        else:
            kv_why = "KV: as the weights"
        kv = kv or _KV_OF_WEIGHTS[weights]
        return RowPrecision(
            weights, kv, experts, f"{why}; {kv_why}", kv_from_checkpoint=said, native=True
        )
    reason = _unpriced_columns(row)
    if reason is not None:
        return reason
    gemm = row.gemm_quant_mode or row.precision
    moe = _WEIGHT_MODES[row.moe_quant_mode] if row.moe_quant_mode else None
    checkpoint = _checkpoint_quant(config, hf) if own or hf else ""
    if checkpoint and checkpoint.startswith("precision"):
        if not gemm:
            return checkpoint
        checkpoint = ""
    suffix = QUANTISED_NAME_SUFFIX.search(row.model_path.rsplit("/", 1)[-1])
    if gemm:
        weights = _WEIGHT_MODES[gemm]
        why = (
            f"precision column {row.precision or '-'}, gemm_quant_mode {row.gemm_quant_mode or '-'}"
        )
        if (
            weights == "fp8"
            and moe in (None, "fp8")
            and checkpoint == "fp8-block"
            and own
            and row.backend in BLOCK_SCALED_EXPERTS
        ):
            moe = "fp8-block"
            why += "; the checkpoint's weight_block_size: fp8-block experts"
        if (
            weights == "fp8"
            and own
            and checkpoint == ""
            and served is not None
            and row.backend in SERVED_FP8_BACKENDS
            and _checkpoint_quant(served, None) == "fp8-block"
        ):
            weights = "fp8-block"
            moe = "fp8-block" if moe in (None, "fp8") else moe
            why += (
                f"; {row.backend} served the unquantised checkpoint's "
                f"{SERVED_FP8_SUFFIX} repository (weight_block_size): fp8-block"
            )
    elif checkpoint:
        weights, why = checkpoint, "the checkpoint's quantisation config"
    elif suffix is not None:
        weights = suffix.group(1).lower()
        why = f"precision columns empty; the name's -{suffix.group(1)} suffix"
    else:
        dtype = str(config.get("torch_dtype") or config.get("dtype") or "")
        if dtype not in _CHECKPOINT_DTYPES:
            return f"precision unspecified (checkpoint dtype {dtype or 'not given'}) not priced"
        weights = _CHECKPOINT_DTYPES[dtype]
        why = f"precision column empty; checkpoint torch_dtype {dtype}"
    if weights not in _KV_OF_WEIGHTS:
        return f"precision {weights} not priced"
    kv = _checkpoint_kv(config, hf) if own or hf else None
    if kv is not None and kv not in px.KV_DTYPES:
        return f"precision {kv} cache not priced"
    if kv is None:
        kv, kv_why = _KV_OF_WEIGHTS[weights], "KV: aiconfigurator's pairing"
    else:
        kv_why = "KV: the checkpoint's kv_cache_quant_algo"
    return RowPrecision(
        weights,
        kv,
        moe if moe != weights else None,
        f"{why}; {kv_why}",
        kv is not None and kv_why.endswith("kv_cache_quant_algo"),
    )


# Engines whose default KV cache dtype the checkpoint decides where the row's deployment
# writes no ``--kv-cache-dtype``: SGLang 0.5.6.post2
# ``model_executor/model_runner.py`` ``ModelRunner.init_memory_pool`` (the same rule in
# 0.5.1.post1 to 0.5.10.post1): ``--kv-cache-dtype auto`` (``server_args.py``'s default)
# is fp8 only when the model's quantisation config says ``kv_cache_quant_algo`` FP8, else
# the model's dtype, so ``--quantization fp8`` on a bf16 checkpoint keeps a bf16 cache.
# aiconfigurator's generator writes ``fp8_e4m3`` only when it was given an fp8 KV cache
# (``rule_plugin/sglang.rule``: ``kv_cache_dtype = ("fp8_e4m3" if kv_cache_dtype == "fp8"
# else kv_cache_dtype)``, bf16 -> ``auto``), which the CSV's rows do not record (no KV
# column); the generated SGLang deployment (``aiconfigurator_limits``) therefore names
# none, and the collection's tp 1 Llama-3.1-8B rows, whose decode steps are the KV
# cache's reads, measure the bf16 cache's TPOT (docs/decisions.md, "Issue 31, step: the
# Llama-3.1-8B H200 SGLang rows ran the generator's mixed chunks").
# vLLM the same where the checkpoint names no KV quantisation: ``--kv-cache-dtype``'s
# default ``auto`` (0.16.0-0.18.0 ``config/cache.py`` ``CacheConfig.cache_dtype``) is the
# model's dtype (``utils/torch_utils.py`` ``kv_cache_dtype_str_to_dtype``: ``auto`` ->
# ``model_config.dtype``). Only the vLLM rows whose script is read as naming none take it
# (``plan``: ``inferencemax_vllm.inferencemax_vllm_default_kv``).
ENGINE_DEFAULT_KV = frozenset({"sglang", "vllm"})


# SGLang's own default for a DeepSeek-sparse-attention model (an MLA indexer: GLM-5's
# ``GlmMoeDsaForCausalLM``, DeepSeek-V3.2) at ``--kv-cache-dtype auto``, which comes before
# the checkpoint rule above: fp8_e4m3 from compute capability 10 (Blackwell), else bfloat16
# (SGLang 0.5.9 ``server_args.py`` ``_set_default_nsa_kv_cache_dtype``, called from
# ``_handle_model_specific_adjustments`` for ``is_deepseek_nsa`` models), whatever the
# checkpoint's weights. (The one scored Blackwell script read as naming none is
# InferenceMAX's ``glm5_nvfp4_b200.sh`` at d43805fc3, the B200 fp4 rows:
# ``inferencemax_sglang.inferencemax_glm5``.)
SGLANG_DSA_KV = {**dict.fromkeys(HOPPER, "bf16"), **dict.fromkeys(BLACKWELL_SM100, "fp8")}


def engine_default_kv(
    precision: RowPrecision,
    engine: str,
    limits: dict[str, Any],
    config: dict[str, Any],
    model: ModelSpec,
    gpu: str,
) -> RowPrecision:
    """``precision`` with the KV cache the engine picks at its defaults (``ENGINE_DEFAULT_KV``;
    a sparse-attention ``model`` on ``gpu``: ``SGLANG_DSA_KV``) where the row's deployment
    (``limits``) names no KV dtype and the checkpoint does not say."""
    named = "kv_cache_dtype" in (limits.get("sets") or {})
    if engine not in ENGINE_DEFAULT_KV or named or precision.kv_from_checkpoint:
        return precision
    dtype = SGLANG_DSA_KV.get(gpu) if model.index_n_heads else None
    if dtype is not None:
        arch = "Hopper" if gpu in HOPPER else "Blackwell"
        rule = f"{engine}'s sparse-attention default on {arch} ({dtype})"
    else:
        named_dtype = config.get("torch_dtype") or config.get("dtype")
        if not named_dtype and engine == "vllm":
            # vLLM 0.17.0 ``config/model.py`` ``_resolve_auto_dtype``: a dtype the config
            # (or its weights) does not give as a supported one falls back to the
            # platform's first, bfloat16 on CUDA (MiniMax-M2.5's cached config names none)
            named_dtype = "bfloat16"
        dtype = _CHECKPOINT_DTYPES.get(str(named_dtype or ""))
        rule = f"{engine}'s --kv-cache-dtype auto (the model's dtype)"
    if dtype is None or dtype == precision.kv:
        return precision
    why = precision.why.replace("KV: aiconfigurator's pairing", f"KV: {rule}")
    return dataclasses.replace(precision, kv=dtype, why=why)


def trtllm_block_experts(
    precision: RowPrecision, config: dict[str, Any], moe_backend: str | None, gpu: str
) -> RowPrecision:
    """``precision`` with fp8-block experts where a TensorRT-LLM row's checkpoint
    (``config``, the row's own) is block-scaled and its MoE backend's kernel is the one
    the GPU's fp8-block expert table times (:data:`TRTLLM_BLOCK_EXPERT_TABLES`)."""
    if (
        (gpu, moe_backend) not in TRTLLM_BLOCK_EXPERT_TABLES
        or precision.weights != "fp8"
        or precision.moe not in (None, "fp8")
        or _checkpoint_quant(config, None) != "fp8-block"
    ):
        return precision
    why = f"{precision.why}; TensorRT-LLM's {moe_backend} experts run the checkpoint's block scales"
    return dataclasses.replace(precision, moe="fp8-block", why=why)
