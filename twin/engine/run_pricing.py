"""A run's step pricer from its configuration (:func:`run_pricer`): the profile as the engine
mode prices the model's experts (:func:`priced_profile`), the kernels as the engine build lays
them out (:func:`kernel_layout_of`), and the layers over the cost model: attention DP's
synchronised ranks, the pipeline's stages, the host time, speculative decoding and eager
prefill."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from twin import precision as px
from twin.costmodel import moe_families as moef
from twin.costmodel.kernel_layout import KernelLayout
from twin.costmodel.profile import Profile
from twin.engine.config import EngineConfig
from twin.engine.cost import StepPricer, make_pricer
from twin.engine.kernel_layouts_sglang import with_nsa_prefill_backend
from twin.engine.kernel_layouts_trtllm import trtllm_graph_batch
from twin.engine.kernel_layouts_vllm import with_float32_matmul
from twin.errors import TwinError
from twin.model import ModelSpec

# TensorRT-LLM runs an mxfp4 checkpoint's experts with mxfp8 activations on Blackwell:
# ``tensorrt_llm/_torch/model_config.py`` ``ModelConfig.get_mxfp4_quant_algo``
# (NVIDIA/TensorRT-LLM, the 1.2 line read; ``load_hf_quant_config`` calls it for
# ``quant_method`` mxfp4) returns ``W4A8_MXFP4_MXFP8`` on SM100+ for every MoE backend but
# TRITON (``W4A8_MXFP4_FP8``, not modelled) unless ``OVERRIDE_QUANT_ALGO`` is set, and
# ``W4A16_MXFP4`` below SM100. Only Blackwell TensorRT-LLM profiles carry the
# mxfp8-activation fit (``calibration.aic_moe.mxfp8_activation_rows``: TensorRT-LLM's own
# ``w4a8_mxfp4_mxfp8`` rows, which aiconfigurator times on SM100 only), so its presence is
# the GPU test.
TRTLLM_MXFP8_EXPERTS = frozenset({"trtllm"})


def priced_profile(
    model: ModelSpec, profile: Any, engine: str, flags: Mapping[str, str] | None = None
) -> Any:
    """``profile`` as engine mode ``engine`` with ``--set`` flags ``flags`` prices
    ``model``'s experts with it (the run's step prices, ``twin plan``'s analytic bound and
    ``twin cost --engine`` read the same): vLLM's
    ``--set moe_backend=marlin`` prices mxfp4 experts with the Marlin MoE kernel
    (``twin.engine.modes_vllm``; ``Profile.with_marlin_experts``),
    ``moe_backend=flashinfer_trtllm_afp8`` with the mxfp8-activation kernel's fit
    (``Profile.with_experts_fit``); the ``trtllm`` mode prices mxfp4 experts with that fit
    wherever the profile has one (:data:`TRTLLM_MXFP8_EXPERTS`)."""
    backend = (flags or {}).get("moe_backend")  # vLLM's flag, TensorRT-LLM's moe_config
    if not model.n_moe_layers or (backend is None and engine not in TRTLLM_MXFP8_EXPERTS):
        return profile
    expert = px.moe_format(model)
    if (
        engine == "trtllm"
        and backend is not None
        and expert.table_mode in moef.MOE_MIN_LATENCY_MODES
    ):
        # moe_config.backend picks the nvfp4 experts' kernel; mxfp4 ones keep their
        # mxfp8 activations under it (below: every backend but TRITON)
        return trtllm_moe_backend_profile(expert, profile, backend)
    if backend == "marlin" and expert.name == "mxfp4":
        return profile.with_marlin_experts(expert.moe_kernel)
    kernel = moef.moe_mxfp8_activation_kernel(expert.table_mode)
    if backend == "flashinfer_trtllm_afp8":
        why = f"--set moe_backend={backend}"
        return profile.with_experts_fit(expert.moe_kernel, kernel, why)
    trtllm_mxfp8 = (
        engine in TRTLLM_MXFP8_EXPERTS
        and expert.name in moef.MOE_MXFP8_ACTIVATION_MODES
        and kernel in profile.kernels
    )
    if trtllm_mxfp8:
        why = "TensorRT-LLM's W4A8_MXFP4_MXFP8 (get_mxfp4_quant_algo)"
        return profile.with_experts_fit(expert.moe_kernel, kernel, why)
    return profile


def trtllm_moe_backend_profile(expert: px.WeightFormat, profile: Profile, backend: str) -> Profile:
    """``profile`` pricing nvfp4 experts ``expert`` with TensorRT-LLM's ``moe_config.backend``
    ``backend`` at every step (``twin.engine.modes_trtllm.TRTLLM_MOE``): ``TRTLLM`` with the
    TRTLLM-gen kernel's fits, the min-latency one (fitted there) up to 128 tokens and the
    one over every token count (``moe_families.moe_trtllm_gen_kernel``) above; ``CUTLASS``
    with the CUTLASS fit, the min-latency one's steps too. Unchanged for other formats (the
    fp8 block-scale experts follow the backend through the silicon plan's precision) or
    where the profile lacks the TRTLLM-gen fit."""
    small = moef.moe_min_latency_kernel(expert.table_mode)
    if expert.table_mode not in moef.MOE_MIN_LATENCY_MODES or small not in profile.kernels:
        return profile
    why = f"--set moe_backend={backend}"
    if backend == "CUTLASS":
        return profile.with_experts_fit(small, expert.moe_kernel, why)
    gen = moef.moe_trtllm_gen_kernel(expert.table_mode)
    if gen not in profile.kernels:
        return profile
    return profile.with_experts_fit(expert.moe_kernel, gen, why)


def run_pricer(model: ModelSpec, profile: Any, config: EngineConfig) -> StepPricer:
    """The step prices of ``model`` on ``profile`` (its experts as the mode prices them:
    :func:`priced_profile`) under ``config``'s layout and host times, a prefill step at
    least ``config.host_time.eager_prefill_s`` long (the outermost layer: a speculative
    step's verification replays a graph and is not floored)."""
    profile = priced_profile(model, profile, config.mode.engine, config.mode.engine_flags)
    pricer = _layout_pricer(model, profile, config)
    # Under attention DP the replica's step loop adds it (``DPReplica.eager_s``): it sees
    # whether any rank prefills, where the synchronised pricer sees verification chunks too.
    if config.host_time.eager_prefill_s and config.cluster.dp_attention == 1:
        from twin.engine.host_time import EagerPrefillPricer

        h = config.host_time
        pricer = EagerPrefillPricer(
            pricer,
            h.eager_prefill_s,
            h.eager_graph_tokens,
            overlap=h.eager_overlap,
            decode_s=h.eager_decode_s,
        )
    return pricer


def _async_scheduling(config: EngineConfig) -> bool:
    """Whether the engine schedules the next step while the GPU runs this one (vLLM's
    ``--async-scheduling``, ``scheduler_options``: ``twin.engine.modes_vllm``), so the
    step's host time overlaps its forward (``twin.engine.host_time``). Refused where the
    host time is priced by the attention-DP ranks' or the pipeline's own pricer, which
    add it."""
    overlap = bool(config.scheduling.scheduler_options.get("async_scheduling", False))
    if overlap and config.mode.speculative.get("method") == "ngram":
        # vllm/config/vllm.py VllmConfig.__post_init__ (wheels read: 0.14.0, 0.15.1,
        # 0.16.0, 0.17.0, 0.18.0): an explicit async_scheduling with a speculative method
        # other than EAGLE/MTP (0.14.0, 0.15.1), EAGLE/MTP/draft model (0.16.0, 0.17.0),
        # or those and GPU n-gram (0.18.0) is a ValueError. The twin's ngram is vLLM's
        # CPU n-gram proposer; its draft model runs asynchronously in the modelled
        # releases (0.19.0, 0.33.0).
        raise TwinError(
            "--set async_scheduling=true: vLLM refuses it with n-gram drafting (its "
            "n-gram drafting reads the sampled tokens on the host); give false"
        )
    host = config.host_time.step_host_s or config.host_time.seq_host_s
    if overlap and host and (config.cluster.dp_attention > 1 or config.cluster.pp > 1):
        raise TwinError(
            "--set async_scheduling=true: the host time's overlap is not modelled with "
            "attention data parallelism or pipeline stages yet (give false)"
        )
    return overlap


def kernel_layout_of(model: ModelSpec, config: EngineConfig, gpu: str) -> KernelLayout:
    """How the run's engine build lays out ``model``'s kernels (``twin.engine.kernel_layouts``):
    the engine mode's rule at the build ``config`` names (``engine_build``, else the kernel
    tables' release, else the engine's release) on the replica's GPUs (``gpu``, the
    profile's; "": not known)."""
    from twin.engine.modes import get_mode

    m, c = config.mode, config.cluster
    build = m.engine_build or m.kernel_tables or m.engine_release
    layout = get_mode(m.engine).layout_for(model, build, c.tp, c.dp_attention, c.ep, gpu)
    # SGLang's --set nsa_prefill_backend (twin.engine.modes_sglang): the forced sparse-MLA
    # prefill's kernel.
    backend = m.engine_flags.get("nsa_prefill_backend", "")
    layout = with_nsa_prefill_backend(layout, model, c.tp, gpu, backend, c.dp_attention)
    # vLLM's --set float32_matmul_precision (twin.engine.modes_vllm): TF32 for an fp32 GEMM.
    layout = with_float32_matmul(layout, m.engine_flags.get("float32_matmul_precision", ""))
    if m.engine == "trtllm" and layout.moe_rows_per_expert and m.engine_flags.get("moe_backend"):
        # ``kernel_layouts_trtllm.trtllm_deepgemm_rows_per_expert`` is DeepGEMM's tile: a
        # ``moe_config.backend`` the mode takes (CUTLASS, TRTLLM) runs the rows as routed.
        layout = dataclasses.replace(layout, moe_rows_per_expert=0)
    if m.engine == "trtllm" and layout.shared_expert_stream_tokens:
        # TensorRT-LLM's shared expert on its own stream in the captured generation steps
        # (``twin.engine.kernel_layouts_trtllm.trtllm_shared_expert_stream``): up to the run's
        # graphs' largest batch (``kernel_layouts_trtllm.trtllm_graph_batch``), each request
        # verifying its draft tokens under speculation.
        batch = trtllm_graph_batch(config.scheduling.max_running, config.arrivals.concurrency)
        verify = 1
        if m.speculative:
            from twin.engine.speculative import Speculation

            verify = Speculation.from_dict(m.speculative).absorbed_extend
        layout = dataclasses.replace(layout, shared_expert_stream_tokens=batch * verify)
    return layout


def unfused_allreduce(layout: KernelLayout, config: EngineConfig) -> bool:
    """Whether a run under ``config`` whose kernels ``layout`` lays out reads the un-fused
    all-reduce's tables (``TableReleases.unfused_fits``): its kernel tables are a release's
    (the tables are picked by release), it runs all-reduces at all (TP above 1) and runs them
    un-fused (no norm inside them, ``KernelLayout.norm_in_allreduce`` false). The one rule of
    the prices (:func:`allreduce_profile`) and the summary's picks (``Run.profile_info``)."""
    return (
        bool(config.mode.kernel_tables) and config.cluster.tp > 1 and not layout.norm_in_allreduce
    )


def allreduce_profile(profile: Any, layout: KernelLayout, config: EngineConfig) -> Any:
    """``profile`` (at the run's kernel tables' release, ``Profile.at_release``) with the
    all-reduce fits ``layout`` runs: a layout whose all-reduces run un-fused
    (:func:`unfused_allreduce`) reads the tables that time the un-fused op's own picks too
    (``Profile.with_unfused_allreduce``;
    ``twin.calibration.aic_collectives.UNFUSED_TWOSHOT_TABLES``), a fused one does not."""
    if not unfused_allreduce(layout, config) or not isinstance(profile, Profile):
        return profile
    return profile.with_unfused_allreduce(config.mode.kernel_tables)


def _layout_pricer(model: ModelSpec, profile: Any, config: EngineConfig) -> StepPricer:
    """The step prices of ``model`` on ``profile`` under ``config``'s layout and host times,
    its kernels laid out as the engine build lays them out (:func:`kernel_layout_of`)."""
    c, h = config.cluster, config.host_time
    layout = kernel_layout_of(model, config, profile.gpu)
    profile = allreduce_profile(profile, layout, config)
    overlap = _async_scheduling(config)
    absorb = 0
    if config.mode.speculative:
        from twin.engine.speculative import Speculation

        absorb = Speculation.from_dict(config.mode.speculative).absorbed_extend
    pricer: StepPricer
    if c.dp_attention > 1:  # ranks' steps priced together (twin.engine.dp_attention)
        from twin.engine.dp_pricing import dp_pricer

        pricer = dp_pricer(
            model,
            profile,
            c.tp,
            c.ep,
            c.dp_attention,
            h.step_host_s,
            h.seq_host_s,
            c.moe_a2a,
            absorb,
            layout,
        )
    elif c.pp > 1:  # stages and micro-batches (twin.engine.pipeline)
        from twin.engine.pipeline import pipeline_pricer

        return pipeline_pricer(
            model,
            profile,
            c.tp,
            c.ep,
            c.pp,
            h.step_host_s,
            h.seq_host_s,
            config.mode.engine,
            layout,
        )
    else:
        pricer = make_pricer(model, profile, c.tp, c.ep, absorb, layout)
        if h.step_host_s or h.seq_host_s:
            from twin.engine.host_time import HostTimePricer

            pricer = HostTimePricer(pricer, h.step_host_s, h.seq_host_s, overlap=overlap)
    if config.mode.speculative:  # drafting and verification (twin.engine.speculative)
        from twin.engine.speculative_pricing import speculative_pricer

        pricer = speculative_pricer(pricer, model, profile, config, layout)
    return pricer
