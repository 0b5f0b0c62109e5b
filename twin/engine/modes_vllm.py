"""The ``vllm`` engine mode: vLLM V1's prefix cache for hybrid models and its flags.

Each flag function maps one of vLLM's own flag names (``--set name=value``)
onto :class:`~twin.engine.config.EngineConfig` fields or ``vllm+`` policy
options; :data:`VLLM` is the mode, registered in :mod:`twin.engine.modes`.
"""

from __future__ import annotations

from typing import Any

from twin.engine import speculative
from twin.engine.kernel_layouts_vllm import vllm_kernel_layout
from twin.engine.mode_base import (
    EngineMode,
    Flag,
    _acceptance,
    _batching_flags,
    _bool,
    _choice,
    _float,
    _int,
)
from twin.engine.releases import Release, release_of
from twin.engine.speculative_acceptance import length_from_rates
from twin.errors import TwinError
from twin.model import ModelSpec


def vllm_block_size(model: ModelSpec, block_size: int = 16) -> int:
    """The attention block vLLM uses for a hybrid model: one attention page >= one state page.

    vLLM ``vllm/platforms/interface.py`` ``Platform._align_hybrid_block_size``:
    ``attn_page_size_1_token`` is one attention layer's K+V of one token,
    ``mamba_page_size`` one recurrent layer's state (conv + SSM); the block is
    ``align * cdiv(mamba_page, align * attn_page_1)`` with ``align`` the larger
    of the kernel's block alignment (16, FlashAttention's
    ``get_supported_kernel_block_sizes``) and ``--block-size``, never smaller
    than ``--block-size``. With several recurrent kinds every state page is
    padded to one page size (``mamba_page_size_padded``), so the block must hold
    the largest: the page is the largest kind's state. Both pages come from the
    model's own byte methods.
    """
    if not (model.n_attention_layers and model.n_ssm_layers):
        return block_size
    attn_page_1 = model.kv_bytes_per_token // model.n_attention_layers
    mamba_page = largest_state_page(model)
    align = max(16, block_size)
    return max(block_size, align * -(-mamba_page // (align * attn_page_1)))


def largest_state_page(model: ModelSpec) -> int:
    """One layer's recurrent + conv state of the model's largest recurrent kind, bytes."""
    from twin.mixers import RECURRENT_KINDS

    return max(
        model.state_bytes_of(kind) // n
        for kind, n in model.mixer_counts.items()
        if kind in RECURRENT_KINDS and n
    )


def _vllm_block(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    block = _int("block_size", value)
    # vllm/config/cache.py CacheConfig.block_size takes any positive int, but the
    # attention backend must accept it: FlashAttention (vLLM's CUDA default)
    # declares get_supported_kernel_block_sizes() == [MultipleOf(16)], and a user
    # block size it does not support is refused at start-up
    # (vllm/v1/worker/utils.py select_common_block_size).
    if block % 16:
        raise TwinError(
            f"--set block_size={value}: vLLM's CUDA attention kernels (FlashAttention) "
            "need a multiple of 16 tokens"
        )
    out["vllm_block_size"] = block


# vllm/config/parallel.py (0.19.0) ParallelConfig.all2all_backend (--all2all-backend),
# default allgather_reducescatter (the MoE layers gather under DP attention); the DeepEP
# backends run one mode for every step, priced from the profile's a2a fits
# (twin.costmodel.a2a). The other backends (mori, nixl_ep, flashinfer) are not modelled.
VLLM_A2A = {
    "allgather_reducescatter": "",
    "deepep_high_throughput": "deepep_ht",
    "deepep_low_latency": "deepep_ll",
}


def _vllm_a2a(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    out["moe_a2a"] = VLLM_A2A[_choice("all2all_backend", value, tuple(VLLM_A2A))]


def _vllm_retention(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    # vllm/config/cache.py CacheConfig.prefix_cache_retention_interval (0.33.0): None
    # (dense), 0 (semantic checkpoints only, the default) or N >= 0 tokens; the multiple-
    # of-the-block check needs the hybrid block, so it runs in _vllm_options.
    if value.strip().lower() == "none":
        out["vllm_retention"] = None
    else:
        out["vllm_retention"] = _int("prefix_cache_retention_interval", value, low=0)


def _vllm_shared_prefix(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    # vllm/config/cache.py CacheConfig.enable_mamba_shared_prefix_checkpoint (0.33.0; was
    # enable_mamba_fine_grained_prefix_cache): a junction checkpoint "where an EAGLE/MTP
    # sibling was observed to resume"; v1/core/kv_cache_manager.py turns it on only with
    # EAGLE on the Mamba group (coordinator.eagle_group_ids), partial hash hits
    # (prefix_match_unit below the block) and no MTP re-prefill tail. Checked against the
    # speculative_config in _vllm_options.
    if _bool("enable_mamba_shared_prefix_checkpoint", value):
        out["vllm_shared_prefix"] = True


# vllm/config/speculative.py SpeculativeConfig keys the twin reads (others are refused);
# the synthetic acceptance keys differ by release (Release.choices["speculative_config"]).
_SPEC_KEYS = (
    "method",
    "model",
    "num_speculative_tokens",
    "draft_tensor_parallel_size",
    "rejection_sample_method",
    "prompt_lookup_max",
    "prompt_lookup_min",
)
# SpeculativeMethod names the twin models -> its method (MTPModelTypes such as
# deepseek_mtp are deprecated aliases vLLM maps to mtp; "[ngram]" an ngram alias).
_VLLM_METHODS = {
    "eagle": "eagle",
    "eagle3": "eagle3",
    "mtp": "mtp",
    "deepseek_mtp": "mtp",
    "qwen3_next_mtp": "mtp",
    "qwen3_5_mtp": "mtp",
    "glm4_moe_mtp": "mtp",
    "draft_model": "draft_model",
    "ngram": "ngram",
    "[ngram]": "ngram",
}


def _vllm_spec_config(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    # --speculative-config JSON (vllm/engine/arg_utils.py -> SpeculativeConfig), read by the
    # engines' one parser (speculative.read_config); built into a Speculation in
    # _vllm_options, once every flag is read.
    release = release_of(out)
    synthetic = release.choice("speculative_config", ())
    elsewhere = {
        key: f"--engine vllm=={r.version} has it; {release.version} reads {', '.join(synthetic)}"
        for r in reversed(VLLM_RELEASES)
        if r is not release
        for key in r.choice("speculative_config", ())
        if key not in synthetic
    }
    out["vllm_spec"] = speculative.read_config(
        "--set speculative_config",
        value,
        f"vLLM {release.version}",
        (*_SPEC_KEYS, *synthetic),
        elsewhere,
    )


def _vllm_speculation(model: ModelSpec, out: dict[str, Any]) -> None:
    """``speculative_config`` (and ``speculative_acceptance``) as a Speculation."""
    release = release_of(out)
    cfg = out.pop("vllm_spec", None)
    acceptance = out.pop("spec_acceptance", None)
    shared = out.pop("vllm_shared_prefix", False)
    if cfg is None:
        if acceptance is not None:
            raise TwinError("--set speculative_acceptance: give a speculative_config too")
        if shared:
            raise TwinError(
                "--set enable_mamba_shared_prefix_checkpoint=true: vLLM applies it only with "
                "EAGLE/MTP speculative decoding; give a speculative_config with method eagle, "
                "eagle3 or mtp"
            )
        return
    flag = "--set speculative_config"
    given = cfg.get("method")
    if given is None:
        if cfg.get("model") is None:
            raise TwinError(f'{flag}: give "method" (eagle, eagle3, mtp, draft_model, ngram)')
        given = "draft_model"  # SpeculativeConfig.__post_init__: a model without a method
    method = speculative.config_method(flag, given, _VLLM_METHODS, "method")
    k = speculative.config_int(flag, cfg, "num_speculative_tokens")
    draft_tp = speculative.config_int(flag, cfg, "draft_tensor_parallel_size") or 0
    length = _vllm_synthetic(cfg, release, k if k is not None else max(model.mtp_layers, 1))
    if shared and method not in ("eagle", "eagle3", "mtp"):
        raise TwinError(
            "--set enable_mamba_shared_prefix_checkpoint=true: vLLM applies it only with "
            f"EAGLE/MTP, not {method}"
        )
    # With EAGLE/MTP the flag is accepted and, as in vLLM, changes nothing unless hits may
    # land finer than the block (prefix_match_unit), which the twin does not model.
    spec = speculative.build(
        model,
        method,
        k,
        draft_model=str(cfg.get("model") or ""),
        draft_tp=draft_tp,
        length=length,
        acceptance=None if acceptance is None else ("--set speculative_acceptance", acceptance),
        state_slots=True,
        draft_host=release.default("spec_draft_host", "none") == "step",
    )
    out["speculative"] = spec.to_dict()


def _vllm_synthetic(cfg: dict[str, Any], release: Release, k: int) -> tuple[float, str] | None:
    """The acceptance length vLLM's synthetic rejection sampler is set to, if any.

    0.33.0 (``synthetic_acceptance_rates``: unconditional rates a position, or
    ``synthetic_acceptance_length``); 0.19.0 (``synthetic_acceptance_rate``: the mean of
    those rates, ``v1/worker/gpu/spec_decode/synthetic_rejection_sampler_utils.py``, so
    the length is ``1 + k x rate``). Valid only with ``rejection_sample_method:
    synthetic`` (SpeculativeConfig's check).
    """
    keys = [key for key in release.choice("speculative_config", ()) if key in cfg]
    if not keys:
        return None
    flag = "--set speculative_config"
    if cfg.get("rejection_sample_method") != "synthetic":
        raise TwinError(f'{flag}: {keys[0]} needs "rejection_sample_method": "synthetic"')
    if len(keys) > 1:
        raise TwinError(f"{flag}: give one of {' and '.join(keys)}")
    key, value = keys[0], cfg[keys[0]]
    label = f"speculative_config {key}"
    try:
        if key == "synthetic_acceptance_rates":
            rates = [float(v) for v in value]
            return length_from_rates(f"{flag}: {key}", rates, k), label
        number = float(value)
    except (TypeError, ValueError):
        raise TwinError(f"{flag}: {key} must be numeric (got {value!r})") from None
    if key == "synthetic_acceptance_rate":
        if not 0.0 <= number <= 1.0:
            raise TwinError(f"{flag}: {key} must be in [0, 1] (got {number:g})")
        return 1.0 + k * number, label
    return number, label


def _vllm_match_unit(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    # vllm/config/cache.py CacheConfig.prefix_match_unit (0.33.0): hits may land every
    # prefix_match_unit tokens, finer than the block (None: the block). Checked against
    # the hybrid block in _vllm_options.
    out["vllm_match_unit"] = _int("prefix_match_unit", value)


def _vllm_replayssm(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    # vllm/config/cache.py CacheConfig.use_replayssm (0.33.0): the ReplaySSM Mamba2 decode
    # kernel (skips the per-step state store): a kernel the twin has no cost for.
    if _bool("use_replayssm", value) and model.n_ssm_layers:
        raise TwinError(
            f"--set use_replayssm={value}: the ReplaySSM decode kernel's cost is not modelled yet"
        )


def _vllm_replayssm_len(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    # vllm/config/cache.py CacheConfig.replayssm_buffer_len (0.33.0, default 16): read only
    # with use_replayssm, which the twin refuses, so it changes nothing here.
    _int("replayssm_buffer_len", value)


def _vllm_prefix_caching(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    if not _bool("enable_prefix_caching", value):
        out["policy"] = "vanilla"


def _vllm_mamba_mode(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    # vllm/config/cache.py MambaCacheMode: "all" | "align" | "none" in 0.19.0, "align" |
    # "none" in 0.33.0. "none" keeps no recurrent state for reuse: a hybrid model gets no
    # prefix hits; "align" is the hybrid prefix cache; "all" (0.19.0: a state at every
    # block boundary) is the dense retention (prefix_cache_retention_interval=none).
    release = release_of(out)
    choices = release.choice("mamba_cache_mode", ("align", "none"))
    if value == "all" and "all" not in choices:
        raise TwinError(
            f"--set mamba_cache_mode=all: vLLM {release.version} removed it; use "
            "--set prefix_cache_retention_interval=none (a state on every block)"
        )
    mode = _choice("mamba_cache_mode", value, choices)
    if mode == "none" and model.n_ssm_layers:
        out["policy"] = "vanilla"
    elif mode == "all":
        out["vllm_retention"] = None


def _vllm_offload(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    # vLLM's native CPU offloading (--kv-offloading-size GB, --kv-offloading-backend native).
    out["host_cache_bytes"] = int(_float("kv_offloading_size", value, 0.0, 1e6) * 1e9)


def _vllm_options(model: ModelSpec, out: dict[str, Any]) -> dict[str, Any]:
    release = release_of(out)
    _vllm_speculation(model, out)
    default = release.default("prefix_cache_retention_interval", "none")
    block = out.pop("vllm_block_size", 16)
    retention = out.pop("vllm_retention", None if default == "none" else int(default))
    unit = out.pop("vllm_match_unit", None)
    out.setdefault("memory_utilization", float(release.default("gpu_memory_utilization", "0.9")))
    if out["policy"] != "vllm+":
        return {}
    size = vllm_block_size(model, block)
    if unit is not None and unit != size:
        # Hits finer than the block (vLLM 0.33.0 hashes every prefix_match_unit tokens;
        # every group's block must be a multiple of it) are not modelled: refused.
        raise TwinError(
            f"--set prefix_match_unit={unit}: hits finer than the block ({size} tokens for "
            f"{model.name}) are not modelled yet; give {size} or leave it unset"
        )
    if retention is None or not model.n_ssm_layers:
        # Dense (a state on every block), or nothing to retain: retention thins
        # recurrent states only (sliding-window KV is not modelled by the pool).
        return {"block_size": size}
    if retention % size:
        # kv_cache_coordinator.py _validate_prefix_cache_retention_interval.
        raise TwinError(
            f"--set prefix_cache_retention_interval={retention}: must be 0, none or a "
            f"multiple of the block size ({size} tokens for {model.name})"
        )
    return {"block_size": size, "retention_interval": retention}


# vLLM's --async-scheduling (vllm/config/scheduler.py SchedulerConfig.async_scheduling): the
# engine core schedules the next batch and launches its forward before it waits for the
# previous one's outputs (vllm/v1/engine/core.py EngineCore.step_with_batch_queue, a
# queue of two batches: v1/executor/multiproc_executor.py and uniproc_executor.py
# max_concurrent_batches), so the host's work overlaps the GPU's: the step's host time
# (twin.engine.host_time, overlap) shows only where it outlasts the forward. Its default,
# read from the wheels on PyPI: False in 0.12.0 (``async_scheduling: bool = False``,
# vllm/config/vllm.py "we won't reach here until async scheduling is enabled by
# default"); None in 0.14.0, 0.15.1 and 0.18.0, which vllm/config/vllm.py
# VllmConfig.__post_init__ turns on unless speculative decoding other than EAGLE/MTP/
# n-gram, or an executor other than mp/uni/external_launcher (Ray), is in use (given
# explicitly with CPU n-gram drafting it is refused: run_pricing._async_scheduling). The
# mode keeps it off unless given (the shipped H100 host time was fitted on 0.12.0's
# synchronous runs: twin/calibration/engine_times.json); the silicon harness passes the
# measured run's own (twin.validate.silicon.inferencemax_vllm.vllm_async_scheduling).
VLLM_ASYNC_FROM = "0.14.0"


def _vllm_async(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    options = dict(out.get("scheduler_options") or {})
    options["async_scheduling"] = _bool("async_scheduling", value)
    out["scheduler_options"] = options


# vLLM's VLLM_FLOAT32_MATMUL_PRECISION (``envs.py``, choices highest / high / medium,
# default "highest"), which ``v1/worker/gpu_worker.py`` hands to
# ``torch.set_float32_matmul_precision`` at start-up (read in the 0.16.0, 0.17.0, 0.18.0
# and 0.19.0 wheels): "highest" runs an fp32 matmul in IEEE fp32 on CUDA cores, "high" and
# "medium" on TF32 tensor cores. Only a model whose file runs a matmul in fp32 sees it
# (MiniMax-M2's router: twin.engine.kernel_layouts_vllm.VLLM_FP32_ROUTER_MODELS).
VLLM_FLOAT32_MATMUL_PRECISIONS = ("highest", "high", "medium")


def _vllm_f32_matmul(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    _choice("float32_matmul_precision", value, VLLM_FLOAT32_MATMUL_PRECISIONS)


# vLLM's --moe-backend (0.19.0 vllm/config/kernel.py KernelConfig.moe_backend, "auto" by
# default; engine/arg_utils.py ``--moe-backend``), or the environment variable
# VLLM_MXFP4_USE_MARLIN=1 that InferenceMAX's Hopper gpt-oss scripts set (0.15.1-0.18.0
# quantization/mxfp4.py get_mxfp4_backend; 0.19.0 fused_moe/oracle/mxfp4.py
# select_mxfp4_moe_backend): "marlin" runs the mxfp4 experts through the Marlin MoE kernel
# (twin.costmodel.engine_kernels.MARLIN_EXPERT_SCALE; twin.engine.run_pricing swaps the
# fit). Int4 experts run Marlin already (engine_kernels.RELEASE_KERNELS).
# "flashinfer_trtllm_afp8" (0.19.0 fused_moe/oracle/mxfp4.py ``map_mxfp4_backend``:
# FLASHINFER_TRTLLM_MXFP4_MXFP8), or the environment variable
# VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1 that InferenceMAX's B200 gpt-oss script sets
# (0.15.1 quantization/mxfp4.py get_mxfp4_backend: ``SM100_FI_MXFP4_MXFP8_TRTLLM`` on
# capability family 100; 0.19.0 select_mxfp4_moe_backend the same), runs the mxfp4
# experts on FlashInfer's TRT-LLM-gen kernel with the activations quantised to mxfp8
# (priced by the profile's ``moe_mxfp4_mxfp8`` fit: twin.costmodel.formulas
# ``moe_mxfp8_activation_kernel``; refused by a profile without one). Marlin for the
# other formats (fp8, nvfp4 weight-only) and the other backends are not modelled.
VLLM_MOE_BACKENDS = ("auto", "marlin", "flashinfer_trtllm_afp8")
# The expert formats each non-default backend runs.
MOE_BACKEND_FORMATS = {"marlin": ("mxfp4", "int4"), "flashinfer_trtllm_afp8": ("mxfp4",)}


def _vllm_moe_backend(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    backend = _choice("moe_backend", value, VLLM_MOE_BACKENDS)
    experts = model.moe_precision or model.precision
    formats = MOE_BACKEND_FORMATS.get(backend)
    if formats and model.n_moe_layers and experts not in formats:
        raise TwinError(
            f"--set moe_backend={backend}: {experts} experts under it are not modelled "
            f"(only {', '.join(formats)}; model {model.name!r})"
        )


# vllm/config/cache.py CacheConfig.prefix_cache_retention_interval: Field(default=0) (0.33.0).
VLLM_RETENTION_DEFAULT = 0

# Speculative decoding: vLLM's --speculative-config and the twin's acceptance.
_VLLM_SPEC = ("speculative_config", "speculative_acceptance")

_VLLM_COMMON = (
    "block_size",
    "all2all_backend",
    "enable_prefix_caching",
    "mamba_cache_mode",
    "kv_offloading_size",
    "max_num_seqs",
    "max_num_batched_tokens",
    "gpu_memory_utilization",
    "async_scheduling",
)

# The releases modelled, newest first. Read from the releases' sdists on PyPI:
# vllm/config/cache.py (CacheConfig) and vllm/engine/arg_utils.py (EngineArgs).
VLLM_RELEASES = (
    Release(
        version="0.33.0",
        source="vllm 0.33.0: vllm/config/cache.py CacheConfig, vllm/engine/arg_utils.py",
        flags=(
            *_VLLM_COMMON[:3],
            "prefix_cache_retention_interval",
            "prefix_match_unit",
            "enable_mamba_shared_prefix_checkpoint",
            "use_replayssm",
            "replayssm_buffer_len",
            *_VLLM_COMMON[3:],
            *_VLLM_SPEC,
        ),
        renamed={
            "enable_mamba_fine_grained_prefix_cache": "renamed it "
            "enable_mamba_shared_prefix_checkpoint (give --set "
            "enable_mamba_shared_prefix_checkpoint=...)",
        },
        choices={
            "mamba_cache_mode": ("align", "none"),
            # vllm/config/speculative.py: the synthetic sampler's per-position rates or mean
            # acceptance length (0.19.0 had one mean rate).
            "speculative_config": ("synthetic_acceptance_rates", "synthetic_acceptance_length"),
        },
        defaults={
            "prefix_cache_retention_interval": str(VLLM_RETENTION_DEFAULT),
            # CacheConfig.gpu_memory_utilization: Field(default=0.92) (0.9 in 0.19.0).
            "gpu_memory_utilization": "0.92",
            # Model Runner V2 is the default (vllm/config/vllm.py use_v2_model_runner); its
            # drafter (v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py) replays
            # the draft prefill and the fused draft-decode loop as CUDA graphs: no host
            # time a draft pass beyond the step's.
            "spec_draft_host": "none",
        },
        notes="retention interval (default 0), prefix_match_unit, mamba_cache_mode align|none, "
        "gpu_memory_utilization 0.92, draft passes replayed as CUDA graphs (Model Runner V2)",
    ),
    Release(
        version="0.19.0",
        source="vllm 0.19.0: vllm/config/cache.py CacheConfig, vllm/engine/arg_utils.py",
        flags=(*_VLLM_COMMON, "moe_backend", "float32_matmul_precision", *_VLLM_SPEC),
        choices={
            "mamba_cache_mode": ("all", "align", "none"),
            "speculative_config": ("synthetic_acceptance_rate",),
        },
        # No prefix_cache_retention_interval yet: a state on every block (dense).
        defaults={
            "prefix_cache_retention_interval": "none",
            "gpu_memory_utilization": "0.9",
            # The V1 model runner (VLLM_USE_V2_MODEL_RUNNER defaults to 0): its
            # EagleProposer.propose (v1/spec_decode/eagle.py) runs each draft pass as a
            # launch of its own, rebuilding the attention metadata (build_for_drafting)
            # each time: each pass pays the engine's host time a step.
            "spec_draft_host": "step",
        },
        notes="NVIDIA's measured vLLM runs (0.11.2 to 0.19.0); a state on every block, "
        "mamba_cache_mode all|align|none, gpu_memory_utilization 0.9, a step's host time a "
        "draft pass (V1 runner), synthetic_acceptance_rate",
    ),
)


# vLLM's API server defaults by device (``vllm/engine/arg_utils.py``
# ``EngineArgs.get_batch_defaults``, read in 0.12.0 and 0.19.0): 70 GiB of device memory
# or more and not an A100 (a larger budget lowered A100 throughput, vLLM PR #17885):
# ``max_num_batched_tokens`` 8,192 and ``max_num_seqs`` 1,024; otherwise 2,048 and 256.
# ``max_num_seqs`` is then clipped to ``max_num_batched_tokens``.
VLLM_LARGE_GPU_BYTES = 70 * (1 << 30)
VLLM_BATCH_DEFAULTS = {True: (8192, 1024), False: (2048, 256)}

# vLLM's API server takes the requests sent together in passes, not one at a time: a text
# prompt is tokenised by ``AsyncMicrobatchTokenizer`` (vLLM 0.15.1 ``utils/async_utils.py``
# l. 24-136: one thread, ``max_batch_size=32``, a 2 ms wait for more; called by
# ``entrypoints/renderer.py`` ``CompletionRenderer._create_prompt_from_text`` l. 313-344,
# the ``/v1/completions`` path), and the rest of the request's way (HTTP, input
# processing, the engine client) runs on one asyncio loop whose awaits do not hold the
# others. Every release read has it with the same batch: 0.10.2 and 0.12.0
# (``entrypoints/renderer.py`` ``_get_async_tokenizer``), 0.17.0 and 0.18.0
# (``renderers/base.py`` ``get_async_tokenizer``; ``utils/async_utils.py``
# ``max_batch_size: int = 32``), 0.19.0 (session 27's read). The front end
# (``frontend_s``, fitted per GPU with these passes in place: ``engine_times.json``) takes
# up to that many requests a pass (``HostTimeConfig.frontend_batch``,
# ``twin.engine.cluster.Cluster._through_front``); a pass starts when its first request
# reaches an idle front end (the thread's 2 ms wait for more is left out: a benchmark's
# burst is sent at one instant).
VLLM_FRONTEND_BATCH = 32


def vllm_gpu_defaults(
    gpu_bytes: float,
    tp: int,
    given: dict[str, Any],
    gpu: str = "",
    model: ModelSpec | None = None,
) -> dict[str, Any]:
    """vLLM's step budget and sequence cap on this GPU, and its front end's batch (any
    GPU), where not given (above)."""
    large = gpu_bytes >= VLLM_LARGE_GPU_BYTES and "a100" not in gpu.lower()
    tokens, seqs = VLLM_BATCH_DEFAULTS[large]
    out: dict[str, Any] = {}
    if "frontend_batch" not in given:
        out["frontend_batch"] = VLLM_FRONTEND_BATCH
    if "max_batched_tokens" not in given:
        out["max_batched_tokens"] = tokens
    if "max_running" not in given:
        out["max_running"] = min(seqs, given.get("max_batched_tokens", tokens))
    return out


VLLM = EngineMode(
    name="vllm",
    display="vLLM",
    kernels="vllm",
    policy="vllm+",
    preemption="recompute",
    models="vLLM V1 with --enable-prefix-caching and --mamba-cache-mode align",
    flags={
        "block_size": Flag(
            "attention block, a multiple of 16 (hybrids raise it to one state page)",
            _vllm_block,
            "16",
        ),
        "enable_prefix_caching": Flag("cache prefixes", _vllm_prefix_caching, "true"),
        "async_scheduling": Flag(
            "schedule the next step while the GPU runs this one: the host time "
            "overlaps the forward (vLLM's own default is on from 0.14.0)",
            _vllm_async,
            "false",
        ),
        "all2all_backend": Flag(
            "allgather_reducescatter, deepep_high_throughput or deepep_low_latency "
            "(the MoE layers' exchange under --dp-attention; DeepEP's from the a2a fits)",
            _vllm_a2a,
            "allgather_reducescatter",
        ),
        "mamba_cache_mode": Flag(
            "align (hybrid prefix caching) or none (0.19.0: also all, every block)",
            _vllm_mamba_mode,
            "align",
        ),
        "prefix_cache_retention_interval": Flag(
            "recurrent states kept: 0 junctions + replay boundary, N also every N "
            "tokens, none every block",
            _vllm_retention,
            "0",
        ),
        "prefix_match_unit": Flag(
            "tokens a hit may land on (the block only: finer is refused)",
            _vllm_match_unit,
            "the block",
        ),
        "enable_mamba_shared_prefix_checkpoint": Flag(
            "needs EAGLE/MTP speculative_config (then no effect: hits finer than "
            "the block are not modelled)",
            _vllm_shared_prefix,
            "false",
        ),
        "use_replayssm": Flag(
            "ReplaySSM decode kernel: true refused (hybrids)", _vllm_replayssm, "false"
        ),
        "replayssm_buffer_len": Flag(
            "ReplaySSM history (read only with use_replayssm)", _vllm_replayssm_len, "16"
        ),
        "kv_offloading_size": Flag("CPU offload tier, GB", _vllm_offload, "0"),
        "moe_backend": Flag(
            "auto; marlin: mxfp4 experts through the Marlin MoE kernel "
            "(VLLM_MXFP4_USE_MARLIN=1); flashinfer_trtllm_afp8: mxfp4 experts "
            "with mxfp8 activations (VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1)",
            _vllm_moe_backend,
            "auto",
        ),
        "float32_matmul_precision": Flag(
            "highest (IEEE fp32 matmuls on CUDA cores); high, medium: TF32 tensor "
            "cores (VLLM_FLOAT32_MATMUL_PRECISION; MiniMax-M2's fp32 router)",
            _vllm_f32_matmul,
            "highest",
        ),
        **_batching_flags(
            "max_num_seqs",
            "max_num_batched_tokens",
            "gpu_memory_utilization",
            budget_default="8192 (2048 below 70 GiB or on an A100)",
            running_default="1024 (256 below 70 GiB or on an A100)",
        ),
        "speculative_config": Flag(
            "JSON: method eagle|eagle3|mtp|draft_model|ngram, num_speculative_tokens, "
            "model (draft_model: a preset or config.json), draft_tensor_parallel_size, "
            "rejection_sample_method synthetic + synthetic_acceptance_* (acceptance)",
            _vllm_spec_config,
            "none",
        ),
        "speculative_acceptance": Flag(
            "twin: drafted tokens accepted, one rate or one per position "
            "(default: the method's published one; eagle, eagle3, mtp)",
            _acceptance,
            "published",
        ),
    },
    options=_vllm_options,
    scheduler="vllm",
    # vLLM V1 frees a preempted request's blocks still hashed (twin.engine.vllm_batching).
    scheduler_options={"cache_preempted": True},
    gpu_defaults=vllm_gpu_defaults,
    kernel_layout=vllm_kernel_layout,
    releases=VLLM_RELEASES,
)
