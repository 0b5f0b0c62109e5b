"""Which kernel an engine release runs, and which kernel each collected table times.

A release older than every collected table is priced from the oldest table
(:func:`twin.costmodel.table_release.pick_version`). Where the oldest table times another
kernel than the one that release runs, and a newer table times that release's kernel, the
newer table prices it (:func:`twin.costmodel.table_release.pick_for_kernel`). Both sides
are read from source, never from which table scores better:

- :data:`RELEASE_KERNELS`: "release R of engine E runs kernel K for kernel family F on
  GPUs G", each rule over the releases whose source was read (a release outside them has
  no rule and keeps :func:`~twin.costmodel.table_release.pick_version`'s table);
- :data:`TABLE_KERNELS`: the kernel each table's ``kernel_source`` label times (every fit
  of a profile made from NVIDIA's tables records its label in
  ``provenance["kernel_source"]``), read from the collector that wrote the label.

A table without an entry times no known kernel and is never preferred; a family or a
release without a rule is priced as before.
"""

from __future__ import annotations

from dataclasses import dataclass

from twin.costmodel.table_release import version_key

# Kernels, by the short name the two tables below share.
MARLIN_WNA16 = "marlin-wna16"  # vLLM's Marlin MoE: fused_marlin_moe, MarlinExperts
TRITON_WNA16 = "triton-wna16"  # vLLM's fused_experts W4A16: fused_moe_kernel_gptq_awq / moe_wna16
OAI_TRITON_MXFP4 = "oai-triton-mxfp4"  # triton_kernels matmul_ogs (OAITritonExperts)
# FlashInfer's TRT-LLM-gen MXFP4 fused MoE (``trtllm_fp4_block_scale_moe``, SM100)
FLASHINFER_TRTLLM_MXFP4 = "flashinfer-trtllm-mxfp4"
# FlashInfer's TRT-LLM-gen block-scaled fp8 fused MoE (``trtllm_fp8_block_scale_moe``, which
# routes in the kernel, and ``trtllm_fp8_block_scale_routed_moe``, which takes vLLM's
# top-k ids: the same GEMM kernels, SM100)
FLASHINFER_TRTLLM_FP8_BLOCK = "flashinfer-trtllm-fp8-block"
# vLLM's Triton fused MoE (fused_moe.py ``fused_experts`` / ``TritonExperts``)
TRITON_FUSED_MOE = "triton-fused-moe"
# vLLM's FusedMoE module with every expert on the GPU whatever the row's moe_ep_size says
# (TABLE_KERNELS' "vllm_mxfp4_moe"): not the kernel a run with expert parallelism runs.
MXFP4_MODULE_ALL_EXPERTS = "mxfp4-module-all-experts"

# GPUs by CUDA compute capability, as the engines' backend choices test it
# (vLLM ``current_platform.is_device_capability(90)`` / ``is_device_capability_family(100)``;
# H100/H200 are 9.0, B200/GB200 10.0, B300/GB300 10.3: NVIDIA's CUDA GPU list).
HOPPER = frozenset({"h100", "h200"})
BLACKWELL_SM100 = frozenset({"b200", "b300", "gb200", "gb300"})
SM100_EXACT = frozenset({"b200", "gb200"})  # ``is_device_capability(100)``: 10.0, not 10.3


@dataclass(frozen=True)
class ReleaseKernel:
    """Releases ``first``..``last`` (inclusive, the ones whose source was read) of
    ``engine`` (a fit's ``provenance["framework"]``) run ``kernel`` for ``family`` on
    ``gpus``; ``source`` says where that is read."""

    engine: str
    family: str
    gpus: frozenset[str]
    first: str
    last: str
    kernel: str
    source: str

    def covers(self, engine: str, family: str, gpu: str, release: str) -> bool:
        """Whether this rule says what ``release`` of ``engine`` runs for ``family`` on
        ``gpu`` (``release`` a version number within ``first``..``last``)."""
        want = version_key(release)
        low, high = version_key(self.first), version_key(self.last)
        if want is None or low is None or high is None:
            return False
        in_range = low <= want <= high
        return in_range and (engine, family) == (self.engine, self.family) and gpu in self.gpus


RELEASE_KERNELS: tuple[ReleaseKernel, ...] = (
    # Kimi-K2.5's experts (compressed-tensors pack-quantized, 4-bit int, group 32, the
    # twin's int4: twin.precision). vLLM 0.15.1, 0.16.0, 0.17.0, 0.18.0, 0.19.0 (wheels
    # read), model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe.py
    # ``CompressedTensorsMoEMethod.get_moe_method``: a WNA16 group/channel scheme takes
    # ``CompressedTensorsWNA16MarlinMoEMethod`` whenever ``check_moe_marlin_supports_layer``
    # holds (utils/marlin_utils.py: hidden % 128 == 0, the rank's intermediate width a
    # multiple of max(64, group), group in -1/32/64/128: Kimi-K2.5's 7168 and 2048/TP up to
    # TP 32) and the platform is not ROCm; FlashInfer's MxInt4 kernel instead only with
    # ``VLLM_USE_FLASHINFER_MOE_INT4=1`` (envs.py default "0"; from 0.16.0 on,
    # utils/flashinfer_mxint4_moe.py ``is_flashinfer_mxint4_moe_available``).
    ReleaseKernel(
        "vLLM",
        "moe_int4_wo",
        HOPPER | BLACKWELL_SM100,
        "0.15.1",
        "0.19.0",
        MARLIN_WNA16,
        "vllm 0.15.1-0.19.0 compressed_tensors_moe.py get_moe_method",
    ),
    # gpt-oss's mxfp4 experts on Hopper. vLLM 0.15.1, 0.16.0, 0.17.0, 0.18.0 (wheels read),
    # model_executor/layers/quantization/mxfp4.py ``get_mxfp4_backend``: on SM90 FlashInfer's
    # MXFP4 BF16 backend only with ``VLLM_USE_FLASHINFER_MOE_MXFP4_BF16=1`` (envs.py default
    # "0"), else Triton where ``has_triton_kernels()`` (the wheel bundles
    # vllm/third_party/triton_kernels) and 9.0 <= capability < 11.0, Marlin only with
    # ``VLLM_MXFP4_USE_MARLIN``; vLLM 0.19.0, model_executor/layers/fused_moe/oracle/mxfp4.py
    # ``select_mxfp4_moe_backend``: the first supported of FLASHINFER_TRTLLM_MXFP4_BF16
    # (SM100 only), CK (ROCm), TRITON -> ``OAITritonMxfp4ExpertsMonolithic``. Expert
    # parallelism as the run is configured (layer.py ``FusedMoEParallelConfig.make``).
    ReleaseKernel(
        "vLLM",
        "moe_mxfp4",
        HOPPER,
        "0.15.1",
        "0.19.0",
        OAI_TRITON_MXFP4,
        "vllm 0.15.1-0.18.0 quantization/mxfp4.py get_mxfp4_backend; "
        "0.19.0 fused_moe/oracle/mxfp4.py select_mxfp4_moe_backend",
    ),
    # gpt-oss's mxfp4 experts on Blackwell (SM100). vLLM 0.15.1 (wheel read),
    # model_executor/layers/quantization/mxfp4.py ``get_mxfp4_backend``: on capability
    # family 100 with FlashInfer (the CUDA wheel's dependency) the TRT-LLM-gen MXFP4 kernel,
    # with bf16 activations by default (``SM100_FI_MXFP4_BF16``) or mxfp8 ones under
    # ``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1`` (``SM100_FI_MXFP4_MXFP8_TRTLLM``, what
    # InferenceMAX's ``gptoss_fp4_b200.sh`` sets), CUTLASS only under
    # ``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8_CUTLASS``; vLLM 0.19.0 (wheel read),
    # fused_moe/oracle/mxfp4.py ``select_mxfp4_moe_backend``: FLASHINFER_TRTLLM_MXFP4_BF16
    # first where supported (SM100). Not the 0.19.0 table's ``vllm_mxfp4_moe`` module
    # (:data:`MXFP4_MODULE_ALL_EXPERTS`), 3.7-4x the TRT-LLM-gen table's time at
    # gpt-oss's shape from 1,024 tokens on B200. The mxfp8-activation variant is a setting
    # of the run (``--set moe_backend=flashinfer_trtllm_afp8``: twin.engine.modes_vllm),
    # priced by the profile's ``moe_mxfp4_mxfp8`` fit (calibration.aic_moe
    # ``mxfp8_activation_rows``).
    ReleaseKernel(
        "vLLM",
        "moe_mxfp4",
        BLACKWELL_SM100,
        "0.15.1",
        "0.19.0",
        FLASHINFER_TRTLLM_MXFP4,
        "vllm 0.15.1 quantization/mxfp4.py get_mxfp4_backend; "
        "0.19.0 fused_moe/oracle/mxfp4.py select_mxfp4_moe_backend",
    ),
    # Block-scaled fp8 experts (MiniMax-M2.5's and Qwen3-235B-A22B-FP8's checkpoints, 128 x
    # 128 weight blocks and 1 x 128 activation groups) on Blackwell. vLLM 0.19.0 (wheel
    # read), model_executor/layers/fused_moe/oracle/fp8.py ``select_fp8_moe_backend``: with
    # neither ``VLLM_USE_FLASHINFER_MOE_FP8`` nor ``VLLM_(MOE_)USE_DEEP_GEMM`` set and no
    # ``--moe-backend``, the first supported of ``_get_priority_backends`` (AITER,
    # FLASHINFER_TRTLLM, FLASHINFER_CUTLASS, DEEPGEMM, ...; Triton moves first only on
    # SM90): FLASHINFER_TRTLLM, whose ``backend_to_kernel_cls`` tries
    # ``TrtLlmFp8ExpertsMonolithic`` (routing in the kernel: DeepSeekV3's grouped routing
    # only, float32 router logits refused otherwise) then ``TrtLlmFp8ExpertsModular``
    # (experts/trtllm_fp8_moe.py: block fp8 on capability family 100, any routing, vLLM's
    # own top-k ids into ``flashinfer.fused_moe.trtllm_fp8_block_scale_routed_moe``).
    # 0.18.0 (wheel read) is not covered: its ``TrtLlmFp8ExpertsBase`` refuses float32
    # router logits for both classes, so MiniMax-M2.5 (``router_logits_dtype=torch.float32``,
    # models/minimax_m2.py) goes on to FLASHINFER_CUTLASS there. NVIDIA's 0.24.0 B200 tables
    # time both classes (``..._trtllmfp8expertsmonolithic`` / ``..._trtllmfp8expertsmodular``)
    # within 1-5% of each other at equal routed tokens (hidden 4,096, inter 2,048, 256
    # experts, TP 1-4, balanced), so the monolithic one (the one at MiniMax's shape) prices
    # both. Rows whose server turns FlashInfer's fp8 MoE off (``VLLM_USE_FLASHINFER_MOE_FP8=0``:
    # InferenceMAX's MiniMax B200 fp8 scripts on the v0.16.0/v0.17.0 images) run Triton, which
    # no rule here covers (they keep the oldest table, 0.19.0's Triton ``vllm_fused_moe``).
    ReleaseKernel(
        "vLLM",
        "moe_fp8_block",
        BLACKWELL_SM100,
        "0.19.0",
        "0.19.0",
        FLASHINFER_TRTLLM_FP8_BLOCK,
        "vllm 0.19.0 fused_moe/oracle/fp8.py select_fp8_moe_backend; "
        "experts/trtllm_fp8_moe.py TrtLlmFp8ExpertsModular",
    ),
)

# (engine, table ``kernel_source``) -> the kernel the table times.
TABLE_KERNELS: dict[tuple[str, str], str] = {
    # aiconfigurator's collector/vllm/collect_moe_v2.py (ai-dynamo/aiconfigurator, the
    # collector of the 0.19.0 tables) ``run_moe_torch``: int4_wo calls vLLM's
    # ``fused_experts`` with ``int4_w4a16_moe_quant_config`` (group 128), which is
    # fused_moe.py ``fused_experts_impl`` -> ``invoke_fused_moe_wna16_cuda_kernel`` /
    # ``invoke_fused_moe_wna16_triton_kernel`` (vLLM 0.19.0), not Marlin, whatever the
    # label says.
    ("vLLM", "vllm_marlin_int4_moe"): TRITON_WNA16,
    # The same collector's bf16 / fp8 / fp8_block rows (``vllm_fused_moe``) call
    # ``fused_experts`` with the format's quant config, which vLLM 0.19.0 sends to
    # ``dispatch_fused_experts_func`` -> ``fused_experts_impl``: the Triton fused MoE.
    ("vLLM", "vllm_fused_moe"): TRITON_FUSED_MOE,
    # 0.24.0's labels name the quantisation method, backend and experts class.
    ("vLLM", "vllm_compressedtensorswna16marlinmoe_marlin_marlinexperts"): MARLIN_WNA16,
    ("vLLM", "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic"): OAI_TRITON_MXFP4,
    ("vLLM", "vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic"): (
        FLASHINFER_TRTLLM_FP8_BLOCK
    ),
    ("vLLM", "vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmodular"): FLASHINFER_TRTLLM_FP8_BLOCK,
    (
        "vLLM",
        "vllm_gptossmxfp4moe_flashinfer_trtllm_mxfp4_bf16_trtllmmxfp4expertsmonolithic",
    ): FLASHINFER_TRTLLM_MXFP4,
    # collect_moe_v2.py builds ``FusedMoE(..., tp_size=moe_tp_size, ep_size=moe_ep_size)``
    # under a default ``VllmConfig()`` (``enable_expert_parallel`` False), and vLLM 0.19.0's
    # ``FusedMoEParallelConfig.make`` (fused_moe/config.py) then sets ep_size 1: every row
    # times all the experts on one GPU, so its moe_ep_size 2..128 rows equal its EP 1 rows
    # (h200_sxm and b200_sxm ``moe/vllm/0.19.0`` ``w4a16_mxfp4``: the same latency at every
    # EP). The table times no kernel a run with experts split runs.
    ("vLLM", "vllm_mxfp4_moe"): MXFP4_MODULE_ALL_EXPERTS,
}


# Expert formats vLLM runs through its Marlin MoE kernel when asked (``--moe-backend
# marlin``, 0.19.0 ``config/kernel.py`` ``KernelConfig.moe_backend``; or the environment
# variable ``VLLM_MXFP4_USE_MARLIN=1``: 0.15.1-0.18.0 ``quantization/mxfp4.py``
# ``get_mxfp4_backend`` returns ``Mxfp4Backend.MARLIN`` before Triton, 0.19.0
# ``fused_moe/oracle/mxfp4.py`` ``select_mxfp4_moe_backend`` the same), priced from the
# profile's Marlin WNA16 fit (the family whose table times :data:`MARLIN_WNA16`) with its
# compute term slowed by a factor per GPU. It is one kernel:
# ``fused_moe/fused_marlin_moe.py`` ``MarlinExperts`` sends int4 (``scalar_types.uint4b8``)
# and mxfp4 (``float4_e2m1f``) weights alike to ``ops.moe_wna16_marlin_gemm``: 4-bit
# weights dequantised to bf16 in registers (group 32 for both Kimi-K2.5's int4 and mxfp4)
# and bf16 MMAs; the weights read (4.25 bits against 4.5) are the format's own. The factor
# is NVIDIA's own timing of the mxfp4 variant, aiconfigurator-core 0.12.0's 0.24.0
# ``vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts_situ_as_silu`` table (hidden
# 3,584, 896 experts, top 16, moe_tp 1-16; ``{h100_sxm,h200_sxm}/moe/vllm/0.24.0/
# moe_perf.parquet``): the WNA16 fit's ``eff_flops`` divided by the factor that makes the
# median of table / price 1 over its 84 balanced compute-bound rows (2,048-16,384 tokens),
# priced as the fits are, with Marlin's row block (``moe_features.marlin_block_m``):
# H200 1.27, H100 1.30 against the WNA16 fits regenerated with the block's terms (session
# 30; 1.44 / 1.49 against the fits before them). The fit alone prices those rows at 0.87 /
# 0.85 of the table: the e2m1 + e8m0 dequantisation in the MMA loop costs more than int4's.
# Its decode-sized rows (1-64 tokens, 896 experts, 16 a token) stay under-priced at ~0.78 /
# 0.85 with or without it: a per-expert cost of that shape, not scaled.
# Both Marlin tables saturate at 190-250 TFLOP/s from ~150 rows an expert, where vLLM's
# bf16 Triton MoE and OAI Triton's mxfp4 one reach 500-560 on H200: at prefill sizes
# Marlin is not priced like a bf16 GEMM. Only those two GPUs have a Marlin mxfp4 table.
MARLIN_EXPERT_SCALE: dict[tuple[str, str], float] = {
    ("moe_mxfp4", "h200"): 1.27,
    ("moe_mxfp4", "h100"): 1.30,
}

# The shape vLLM's Marlin MoE kernel runs mxfp4 experts at: the hidden size rounded up to a
# multiple of 256 and the rank's intermediate size (``intermediate_size_per_partition``) to
# a multiple of 128 ("the moe marlin kernel requires that for each linear n % 256 == 0 and
# k % 128 == 0"): vLLM 0.10.2 ``quantization/mxfp4.py`` ``Mxfp4MoEMethod.create_weights``
# lines 182-200 (``layer.hidden_size`` set to the padded size), 0.18.0 lines 320-342 and
# ``fused_moe/layer.py`` ``maybe_roundup_hidden_size`` lines 263-269. The layer pads the
# activations to the padded hidden size before the kernel and all-reduces the padded output
# before cutting it back (0.10.2 ``fused_moe/layer.py`` ``forward_native`` lines 1608-1624,
# ``forward_impl``'s ``reduce_output`` 1818-1826; 0.18.0 ``fused_moe/runner/
# default_moe_runner.py`` lines 366-369 and 419-425). gpt-oss: hidden 2,880 -> 3,072,
# intermediate 2,880 / TP -> 2,944 (TP 1), 1,536 / 768 / 384 (TP 2 / 4 / 8). The tables the
# Marlin fit and ``MARLIN_EXPERT_SCALE`` were fitted on (WNA16: hidden 7,168, intermediate
# 2,048, moe_tp 1-32; mxfp4: hidden 3,584, intermediate 3,072, moe_tp 1-16) were priced at
# their own shapes, multiples of 256 / 128 but at moe_tp 32 (WNA16, 64 a rank) and 16
# (mxfp4, 192): not refitted. (hidden multiple, rank intermediate multiple):
# ``Profile.with_marlin_experts`` records it on the fit, ``MoePricing`` prices the shape.
# The same ``create_weights`` pads the other mxfp4 backends too, not priced here (their
# fits keep the model's shape): FlashInfer's SM100 TRT-LLM / bf16 intermediate and hidden to
# 256, CUTLASS and SM90 FlashInfer to 128, the Triton default the intermediate to 64
# (gpt-oss TP 2: 1,440 -> 1,472; hidden unpadded): 0.10.2 lines 202-218, 0.18.0 344-372.
MARLIN_MXFP4_PAD: tuple[int, int] = (256, 128)


def release_kernel(engine: str, family: str, gpu: str, release: str | None) -> str | None:
    """The kernel ``release`` of ``engine`` runs for ``family`` on ``gpu`` where a rule
    of :data:`RELEASE_KERNELS` says; None otherwise (and for no release)."""
    if not release:
        return None
    for rule in RELEASE_KERNELS:
        if rule.covers(engine, family, gpu, release):
            return rule.kernel
    return None


def table_kernel(engine: str, kernel_source: str) -> str | None:
    """The kernel a table labelled ``kernel_source`` by ``engine``'s collector times;
    None where :data:`TABLE_KERNELS` has no entry."""
    return TABLE_KERNELS.get((engine, kernel_source))


__all__ = [
    "FLASHINFER_TRTLLM_FP8_BLOCK",
    "MARLIN_EXPERT_SCALE",
    "MARLIN_MXFP4_PAD",
    "MARLIN_WNA16",
    "RELEASE_KERNELS",
    "TABLE_KERNELS",
    "TRITON_FUSED_MOE",
    "ReleaseKernel",
    "release_kernel",
    "table_kernel",
]
