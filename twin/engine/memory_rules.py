"""How each engine sizes its KV pool from the GPU's memory, per release modelled.

A replica's pool is what the engine leaves for KV after the weights and what it holds
besides (:func:`pool_bytes`, read by :func:`twin.engine.budget.memory_budget`):

- **SGLang** (and the paper's world): ``mem_fraction_static`` x the device total, less the
  weights. Its default, when not given, is SGLang's own rule
  (:func:`sglang_mem_fraction_static`): the total less a reserve for activations and CUDA
  graphs, over the total.
- **vLLM**: ``gpu_memory_utilization`` x the device total, less the weights and the
  activation peak of its profiling forward (``vllm/v1/worker/gpu_worker.py``
  ``Worker.determine_available_memory``, 0.19.0: ``requested_memory`` (utilisation x
  total, ``request_memory``) minus ``non_kv_cache_memory`` = weights + the torch peak
  increase of ``profile_run`` + the non-torch increase since the snapshot taken after
  NCCL's init; CUDA-graph memory only under ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``,
  off by default, ``vllm/envs.py``). The non-torch increase after that snapshot (cuBLAS
  workspaces, attention-backend buffers) is not modelled.
- **TensorRT-LLM**: ``KvCacheConfig.free_gpu_memory_fraction`` (0.9 when unset) of the
  memory left after the profiling run's peak, torch and non-torch together
  (``tensorrt_llm/_torch/pyexecutor/_util.py`` ``KvCacheCreator`` ``_cal_max_tokens`` /
  ``_cal_max_memory`` and ``cal_max_tokens`` of the 1.0 line: ``available_kv_mem =
  (total_gpu_memory - peak_memory + the profiling run's own KV) x fraction``; the peak is
  the weights, the activations of ``max_num_tokens`` dummy context tokens and the CUDA
  context, NCCL and cuBLAS memory).

Neither engine's profiled peak can be run here: the activation peak of a forward over
``n`` tokens is aiconfigurator-core 0.12.0's estimate of it
(``sdk/backends/base_backend.py`` ``BaseBackend._get_memory_usage``, the coefficients of
``sdk/backends/trtllm_backend.py`` ``TRTLLMBackend.ACTIVATION_COEFFICIENTS``, which its
vLLM backend shares), and TensorRT-LLM's non-torch memory its ``systems/<gpu>.yaml``
``misc`` figures (:func:`activation_bytes`, :func:`non_torch_bytes`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from twin.costmodel.table_release import release_at_least
from twin.hardware import MIB
from twin.model import ModelSpec

if TYPE_CHECKING:
    from twin.engine.config import EngineConfig

# aiconfigurator-core 0.12.0 TRTLLMBackend.ACTIVATION_COEFFICIENTS (vLLM's backend shares
# them): bytes of activation per token and hidden unit, over 2, by tp (clamped to 8).
# "LLAMA" (Llama and Qwen3 dense map to it, sdk/common.py) for models without experts,
# "MOE" (also its DeepSeek rows) for models with experts.
ACTIVATION_COEFFICIENTS = {
    "dense": {1: 11.0, 2: 6.5, 4: 5.0, 8: 5.0},
    "moe": {1: 22.0, 2: 13.0, 4: 10.0, 8: 10.0},
}
# BaseBackend.MIN_ACTIVATION_BYTES: the estimate's floor.
MIN_ACTIVATION_BYTES = 70 * MIB
# systems/{h100_sxm,h200_sxm,b200_sxm,...}.yaml misc.nccl_mem (the same on every GPU):
# NCCL's buffers a GPU by tp (clamped to 8), bytes.
NCCL_BYTES = {1: 0, 2: 358_612_992, 4: 411_041_792, 8: 411_041_792}
# misc.other_mem's comment: "increase from 551MB to 3.5GB for safer deployment"; the CUDA
# context, cuBLAS and the like before that safety margin (551 MiB) is what the twin takes.
OTHER_BYTES = 551 * MIB


def _clamp_tp(tp: int) -> int:
    """aiconfigurator's table key: tp clamped to 8, rounded down to a power of two."""
    key = 1
    while key * 2 <= min(tp, 8):
        key *= 2
    return key


def activation_bytes(model: ModelSpec, tokens: int, tp: int) -> float:
    """A GPU's activation peak over a forward of ``tokens`` tokens (module docstring):
    ``2 x tokens x hidden x coefficient(tp)`` with hidden the query width (heads x head
    dim; the model width without attention), at least 70 MiB."""
    hidden = model.n_heads * model.head_dim or model.d_model
    family = "moe" if model.n_moe_layers else "dense"
    coeff = ACTIVATION_COEFFICIENTS[family][_clamp_tp(tp)]
    return max(2.0 * tokens * hidden * coeff, float(MIN_ACTIVATION_BYTES))


def non_torch_bytes(tp: int) -> int:
    """A GPU's memory outside PyTorch's allocator at TensorRT-LLM's profiling peak."""
    return NCCL_BYTES[_clamp_tp(tp)] + OTHER_BYTES


def _of_total(model: ModelSpec, config: EngineConfig, weights: float) -> float:
    """SGLang and the paper's world: the fraction of the total, less the weights."""
    assert config.memory.gpu_memory_bytes is not None
    usable = config.cluster.tp * config.memory.gpu_memory_bytes * config.memory.memory_utilization
    return usable - weights


def _vllm(model: ModelSpec, config: EngineConfig, weights: float) -> float:
    """vLLM: the fraction of the total, less the weights and the activation peak."""
    act = config.cluster.tp * activation_bytes(
        model, config.scheduling.max_batched_tokens, config.cluster.tp
    )
    return _of_total(model, config, weights) - act


def _trtllm(model: ModelSpec, config: EngineConfig, weights: float) -> float:
    """TensorRT-LLM: the fraction of what the profiling peak leaves free."""
    assert config.memory.gpu_memory_bytes is not None
    per_gpu = activation_bytes(model, config.scheduling.max_batched_tokens, config.cluster.tp)
    peak = weights + config.cluster.tp * (per_gpu + non_torch_bytes(config.cluster.tp))
    return (
        config.cluster.tp * config.memory.gpu_memory_bytes - peak
    ) * config.memory.memory_utilization


# Engine mode -> its rule; a mode not named here sizes its pool as SGLang does.
POOL_RULES: dict[str, Callable[[ModelSpec, EngineConfig, float], float]] = {
    "vllm": _vllm,
    "trtllm": _trtllm,
}


def pool_bytes(model: ModelSpec, config: EngineConfig, weights: float) -> float:
    """The replica's bytes for KV (and a dedicated cache) under its engine's rule."""
    return POOL_RULES.get(config.mode.engine, _of_total)(model, config, weights)


def held_bytes(model: ModelSpec, config: EngineConfig, weights: float) -> float:
    """What the engine's rule keeps from the replica's ``fraction x total`` besides the
    weights (0 for SGLang and the paper's world): for the one-line memory error."""
    assert config.memory.gpu_memory_bytes is not None
    usable = config.cluster.tp * config.memory.gpu_memory_bytes * config.memory.memory_utilization
    return usable - weights - pool_bytes(model, config, weights)


def sglang_graph_max_bs(gpu_mib: float, tp: int, release: str) -> int:
    """SGLang's ``cuda_graph_max_bs`` (0.5.23: the decode graph's ``max_bs``) by the GPU's
    memory and tp, where not given (``_handle_gpu_memory_settings``): 8 below 20 GiB;
    24 (0.5.23: 48) below 35 GiB at tp < 4, else 80 (160); 32 below 60 GiB at tp < 4,
    else 160; 256 below 160 GiB at tp < 4, else 512; 512 above."""
    if gpu_mib < 20 * 1024:
        return 8
    if gpu_mib < 35 * 1024:
        small, large = (48, 160) if release_at_least(release, SGLANG_0_5_23) else (24, 80)
        return small if tp < 4 else large
    if gpu_mib < 60 * 1024:
        return 32 if tp < 4 else 160
    if gpu_mib < 160 * 1024:
        return 256 if tp < 4 else 512
    return 512


def sglang_prefill_graph_sizes(max_tokens: int) -> int:
    """How many token counts SGLang captures a prefill (piecewise) CUDA graph for, up to
    ``max_tokens`` (0.5.10.post1 ``_generate_piecewise_cuda_graph_tokens``; 0.5.23
    ``arg_groups/cuda_graph_hook.py`` ``generate_prefill_cuda_graph_batch_sizes``): every
    4 to 32, 16 to 256, 32 to 512, 64 to 1,024, 256 to 4,096, then every 512."""
    sizes = (
        list(range(4, 33, 4))
        + list(range(48, 257, 16))
        + list(range(288, 513, 32))
        + list(range(576, 1025, 64))
        + list(range(1280, 4097, 256))
        + list(range(4608, max_tokens + 1, 512))
    )
    return sum(1 for s in sizes if s <= max_tokens)


# Architectures whose piecewise CUDA graph SGLang 0.5.10.post1 turns off
# (configs/model_config.py piecewise_cuda_graph_disabled_model_archs), by the twin's
# model names' stems.
SGLANG_NO_PIECEWISE = ("qwen3-next", "deepseek-v3.2", "glm-5")
# From 0.5.23 SGLang captures its prefill graphs whatever the model (the 0.5.23 wheel's
# ``sglang/srt/model_executor/cuda_graph_config.py``: ``CudaGraphConfig.prefill`` defaults
# to ``default_prefill_backend()``, ``breakable`` on CUDA) and sizes memory as below.
SGLANG_0_5_23 = "0.5.23"


def sglang_piecewise_off(model_name: str, release: str | None) -> bool:
    """Whether SGLang ``release`` runs ``model_name`` without piecewise CUDA graphs (above)."""
    off = any(stem in model_name.lower() for stem in SGLANG_NO_PIECEWISE)
    return off and not release_at_least(release, SGLANG_0_5_23)


def sglang_mem_fraction_static(
    gpu_bytes: float,
    tp: int,
    release: str,
    *,
    chunk: int,
    graph_max_bs: int | None = None,
    max_running: int | None = None,
    dp_attention: int = 1,
    speculative: str = "",
    mla: bool = False,
    piecewise_off: bool = False,
    hicache: bool = False,
) -> float:
    """SGLang's default ``mem_fraction_static`` (a share of the device total for weights
    and the KV pool), ``(memory - reserved) / memory`` in MiB rounded to 3 places.

    0.5.10.post1 (``python/sglang/srt/server_args.py``
    ``ServerArgs._handle_gpu_memory_settings``): ``reserved`` = 512 + 1.5 x max(chunk,
    2,048) + 2 x ``cuda_graph_max_bs`` + 1,024 x tp / 8; with attention DP + 3 x max_bs
    x dp, and 1.5 x max_bs x dp more above 300; the piecewise CUDA graphs 8 a captured
    size (MLA: 1,536) unless off (``_handle_piecewise_cuda_graph``: speculative decoding,
    attention DP, HiCache, the architectures of ``SGLANG_NO_PIECEWISE``); at least 10 GiB
    above 60 GiB; then 4 GiB more for EAGLE, EAGLE3 and NEXTN drafts, 6 GiB for a
    STANDALONE draft model, none for NGRAM.

    0.5.23 (``sglang/srt/arg_groups/memory_hook.py`` ``handle_gpu_memory_settings`` and
    ``reserve_for_graph_mb``; post-capture KV sizing is off,
    ``SGLANG_ENABLE_POST_CAPTURE_KV_SIZING`` False in ``environ.py``): the same terms,
    the decode graph's ``max_bs`` capped at a given ``max_running_requests``, the prefill
    graphs (``breakable``, on by default on CUDA, ``cuda_graph_config.py``) captured up to
    the chunk (MLA: at most 8,192 tokens, 1,536 MiB) whatever else runs, no speculative
    term, the floor last (DeepEP's 2 GiB after it is not modelled).
    """
    mem = gpu_bytes / MIB
    new = release_at_least(release, SGLANG_0_5_23)
    max_bs = graph_max_bs or sglang_graph_max_bs(mem, tp, release)
    if new and graph_max_bs is None and max_running is not None:
        max_bs = min(max_bs, max_running)
    reserved = 512 + max(chunk, 2048) * 1.5 + max_bs * 2 + tp / 8 * 1024
    if dp_attention > 1:
        reserved += max_bs * dp_attention * 3
        if max_bs > 300:
            reserved += max_bs * dp_attention * 1.5
    if new:
        prefill_graphs = not piecewise_off
    else:
        prefill_graphs = not (piecewise_off or speculative or dp_attention > 1 or hicache)
    if prefill_graphs:
        reserved += 1.5 * 1024 if mla else sglang_prefill_graph_sizes(chunk) * 8
    if mem > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    if not new and speculative:
        if speculative == "STANDALONE":
            reserved += 6 * 1024
        elif speculative != "NGRAM":
            reserved += 4 * 1024
    return round((mem - reserved) / mem, 3)


__all__ = [
    "activation_bytes",
    "held_bytes",
    "non_torch_bytes",
    "pool_bytes",
    "sglang_mem_fraction_static",
]
