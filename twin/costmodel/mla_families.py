"""The MLA families' names (issue 34): each family's profile key (``mla_kernel``: the
attention kernels, the absorbed decode's batched GEMMs and the attention module, per
phase, GEMM mode and KV dtype), their features, bases and floors, and SGLang's module
tables. Their formulas are in the registry, ``twin.costmodel.formulas``.
"""

from __future__ import annotations

# MLA families (issue 34), from NVIDIA's ``mla`` and ``mla_bmm`` tables
# (``calibration.aic_tables``): the attention kernels alone per phase (``mla_prefill``,
# ``mla_decode``), the absorbed decode's two batched GEMMs (``mla_bmm``), and the whole
# attention module per phase (``mla_module_prefill``, ``mla_module_decode``: every
# projection, the attention and the output, as vLLM's and TensorRT-LLM's module tables
# time it). Keys: ``<family>[_<gemm mode>][_fp8kv]``; the GEMM mode is the module's
# projections' (``MLA_MODULE_GEMMS``) or the BMM's own (``MLA_BMM_MODES``).
MLA_KV = {"bfloat16": "", "fp8": "_fp8kv"}
# ``fp8``: per-tensor fp8 projections; only SGLang's module tables give it (their query
# has no GEMM axis: ``calibration.aic_mla.wideep_rows``).
MLA_MODULE_GEMMS = {"bfloat16": "", "fp8": "_fp8", "fp8_block": "_fp8_block", "nvfp4": "_nvfp4"}
MLA_BMM_MODES = {"bfloat16": "flops", "fp8": "fp8_flops"}
# SGLang's MLA module tables (``calibration.aic_mla.wideep_rows``), per phase. Their rows
# say ``kv_cache_dtype`` fp8, but that is a string the collector writes
# (aiconfigurator ``collector/sglang/collect_wideep_attn.py``, every version from
# 45033ab44 to ced205af0: ``"kv_cache_dtype": "fp8"`` in ``log_perf``), whose
# ``ServerArgs`` names no ``kv_cache_dtype``: SGLang's ``auto``, which
# ``model_executor/model_runner.py`` ``configure_kv_cache_dtype`` (0.5.10 wheel, read)
# makes the model's dtype unless the checkpoint's quantisation config names
# ``kv_cache_quant_algo`` FP8, and DeepSeek-V3's block-fp8 config names none: the rows
# time a **bf16** cache. Their timings agree: H200 0.5.10 flashinfer, 16 heads, 64
# sequences, 2,048 -> 4,096 cached tokens each adds 0.0356 ms, 1,304 bytes a cached
# token at 4.8 TB/s, the bf16 latent row's 1,152, not the fp8 one's 576. The 0.5.9 and
# 0.5.10 collections (every GPU: B200, B300, H100, H200, GB200, GB300) come from its
# successor, ``collector/sglang/collect_mla_module.py`` (754aadc3c, cb4d907c7:
# ``_build_wideep_mla_test_cases``, "Single precision: run with bfloat16, log as
# fp8_block/fp8", ``kv_cache_dtype`` "bfloat16" passed to ``ServerArgs``, "bf16" for
# Blackwell's ``trtllm_mla``, which SGLang 0.5.9/0.5.10 accepts: ``server_args.py``); their
# timings read a bf16 cache on each GPU (``benchmarks/results/sgl-label/kv-bytes.txt``:
# B200/B300 ``trtllm_mla`` 1,526-1,685 bytes a cached token at 8 TB/s, TensorRT-LLM's
# module 1,562-1,692 at a bf16 cache and 693-891 at fp8; H100 1,220-1,314 at 3.35 TB/s,
# TensorRT-LLM 1,191-1,247 / 570-680).
# ``precision_kernels`` prices their fits as a bf16-KV pair (at the features they were
# fitted with); their family names keep the tables' label.
SGLANG_MLA_MODULE_TABLES = {
    "prefill": "wideep_context_mla_perf.parquet",
    "decode": "wideep_generation_mla_perf.parquet",
}
# The module families' serial features (``mla_module.module_attention_split``): the
# attention kernel's KV stream and its FLOPs, priced after the smooth maximum of the
# module's GEMMs; and the name of that smooth maximum (``KernelFormula.base``).
MLA_MODULE_SERIAL = ("attn_kv_bytes", "attn_flops")
# The prefill modules' floor (``KernelFormula.floor``): SGLang's module collector times one
# eager forward of the attention module between two CUDA events, synchronising after each
# (ai-dynamo/aiconfigurator cb4d907c7, the 0.5.9 / 0.5.10 tables,
# ``collector/sglang/collect_mla_module.py`` ``_run_prefill``: no CUDA graph, ``use_module_
# cuda_graph`` is the decode's; 0.5.6.post2's ``collector/sglang/collect_wideep_attn.py``
# times its context rows the same way). The host issues the module's kernels one Python
# call after another and the GPU runs each as it arrives, so the GPU's work hides under the
# host's until it outgrows it: the larger of the two, not their sum. NVIDIA's H200 SGLang
# 0.5.10 flashinfer table, 16 heads, one sequence: 0.59-0.62 ms from 1 to 2,048 prompt
# tokens, then 0.72, 1.17, 2.70 ms at 4,096, 8,192, 16,384; a fit with the host time as its
# launch latency ``t0`` in series (0.55 ms) priced those three 18-23% high (0.87, 1.43,
# 3.30 ms; docs/decisions.md, helper ``mlapre35``). Only SGLang's fits were refitted with
# it; TensorRT-LLM's and vLLM's shipped fits read a zero floor (the same prices) and take a
# fitted floor at their next ``--refit mla_module`` (one refit of h200-trtllm's: a floor near
# its fastest row, held-out error unchanged; session 35's review).
MLA_MODULE_PREFILL_FLOOR = True
# The prefill attention kernel's serial feature: its waves of CTAs over the SMs
# (``mla_features.mla_prefill_waves``), each about one CTA's time.
MLA_PREFILL_SERIAL = ("waves",)
# The attention kernel's bytes read from L2 across its table's CUDA-graph replays
# (``mla_features.kernel_replay_l2``: where the kernel's whole working set fits in
# ``features.REPLAY_L2_SHARE`` of L2, all of it, its HBM bytes then zero; the collectors'
# replays are cited there), on the compute side; a serving step reads from HBM (zero). A
# fit without it reads with ``c_l2_bytes`` 0 (``fit_upgrade.upgrade_fit``): the same prices.
# ``mla_prefill*`` takes it before its serial ``waves``, ``mla_decode*`` after its launch
# features.
MLA_KERNEL_REPLAY = ("l2_bytes",)
# The decode attention kernel's launch features (``mla_decode_kernels.mla_decode_launch``, the
# split-KV rule of the kernel the table times): its CTAs and their waves on the compute
# side, the keys re-read by a sequence's other CTAs, the split reduction's partial
# outputs and the critical path's keys after the smooth maximum. Zero without a rule; a
# fit of the older ``roofline+tiles+seq_keys`` form reads with zero coefficients: the
# same prices.
MLA_DECODE_LAUNCH = ("launch_ctas", "launch_waves")
# The decode kernels' floor (``KernelFormula.floor``): NVIDIA's TensorRT-LLM decode
# tables on A100 / L40S / RTX PRO 6000 (the FMHA v2 launch,
# ``mla_decode_kernels.kernel_decode_rule``) are flat at 9.5-10 us (L40S) from 1 to 63 cached
# keys at any batch to 16 and heads to 128, then 14, 24, 44, 84 us at 127, 255, 511 and
# 1,023 keys: 78 ns a key over ~4 us, hidden under the ~10 us below ~80 keys (the larger
# of the two, not their sum). A fit without it reads with a zero floor: the same prices.
MLA_DECODE_FLOOR = True
# The decode kernel's keys times its query-row blocks where its block is read
# (``mla_decode_kernels.decode_block_keys``: Hopper SGLang's ``flash_attention`` over an fp8
# cache, 128 rows a block), on the compute side before the launch's; zero elsewhere. A fit
# without it reads with a zero coefficient: the same prices.
MLA_DECODE_BLOCK = ("block_keys",)
MLA_DECODE_SERIAL = ("kv_repeat", "partials", "critical_keys")
# The decode module's features: the module's, with its attention kernel's launch
# (``mla_module.module_decode_features``: the same split rule as ``mla_decode``'s, read
# from the module table's ``kernel_source``) on each side as there. A decode-module fit of
# the older form reads with zero launch coefficients: the same prices.
MLA_MODULE_EXTRAS = ("tiles", "seq_keys")
MLA_MODULE_DECODE_EXTRAS = (*MLA_MODULE_EXTRAS, *MLA_DECODE_LAUNCH)
# The decode module's working set read from L2 across the tables' CUDA-graph replays
# (``mla_module.module_replay_l2``: the whole module's bytes, weights, activations and
# KV, within ``features.REPLAY_L2_SHARE`` of L2), on the compute side, its HBM bytes then
# zero; a serving step reads from HBM (zero). A module fit without it reads with
# ``c_l2_bytes`` 0 (``fit_upgrade.upgrade_fit``): the same prices. Not read by the prefill
# modules: on their fit rows it measured worse (docs/decisions.md, helper ``mla-module``).
MLA_MODULE_REPLAY = ("l2_bytes",)
# The module's linears' activation quantisation loop, last (``mla_bmm.module_quant_rule``,
# ``mla_module.module_quant_steps``: TensorRT-LLM's fp8 block-scale linears and BMMs on
# SM120). A module fit without it reads with ``c_quant_steps`` 0
# (``fit_upgrade.upgrade_fit``): the same prices.
MLA_MODULE_QUANT = ("quant_steps",)
MLA_MODULE_DECODE_SERIAL = (*MLA_MODULE_SERIAL, *MLA_DECODE_SERIAL, *MLA_MODULE_QUANT)
# The prefill module's context attention's CTA waves over the SMs after its KV stream and
# FLOPs: the ``mla_prefill`` kernel's serial feature (``MLA_PREFILL_SERIAL``,
# ``mla_module.module_prefill_features``). The module runs that kernel: TensorRT-LLM
# 1.3.0rc20 (the tables' release) ``tensorrt_llm/_torch/modules/attention.py``
# ``MLA.forward_context_default``, taken where the context has no cached prefix (the
# module tables' ``step`` 0), runs kv_b_proj over the new rows, copies k_nope and the
# broadcast k_pe into one K and calls ``self.mha.forward`` (``TrtllmAttention``) with
# ``AttentionInputType.context_only``: the context FMHA NVIDIA's ``context_mla_perf``
# tables time alone, whose fits price each wave of CTAs (docs/decisions.md, issue 34).
# On the module tables' fit rows the feature lowered the fitted error of most families
# (docs/decisions.md, helper ``mlamod37``). A fit without it reads with ``c_waves`` 0
# (``fit_upgrade.upgrade_fit``): the same prices (SGLang's per-release fits).
MLA_MODULE_PREFILL_SERIAL = (*MLA_MODULE_SERIAL, *MLA_PREFILL_SERIAL, *MLA_MODULE_QUANT)
MLA_MODULE_BASE = "gemms_roofline"
# The absorbed BMMs' compute-side features (``mla_bmm.mla_bmm_features``): the output
# tiles' waves over the SMs, the bytes of a working set that stays in L2 across the
# tables' replays, and the waves of the library's smaller (64 x 64) tiles
# (``mla_bmm.MLA_BMM_SMALL_TILE``); the smooth maximum's bytes are HBM bytes only
# (zero for such a set), so the formula has a name of its own (a ``roofline+weight_elems``
# fit is refused by name). A fit without ``small_waves`` reads with ``c_small_waves`` 0
# (``fit_upgrade.upgrade_fit``): the same prices.
MLA_BMM_EXTRAS = ("waves", "l2_bytes", "small_waves")
MLA_BMM_BASE = "hbm_roofline"
# The absorbed BMMs' serial feature: the steps of the activation's quantisation kernel
# where the table times one with a serial token loop (``mla_bmm.bmm_quant_steps``:
# TensorRT-LLM's fp8 BMM on SM120); zero elsewhere. And the K-tile steps of one CTA's
# reduction loop (``mla_bmm.bmm_k_steps``: W_UV's k = 512 against W_UK's 128), on the
# critical path beside the throughput terms. A fit without either reads with a zero
# coefficient: the same prices.
MLA_BMM_SERIAL = ("quant_steps", "k_steps")


def mla_kernel(family: str, gemm_mode: str = "bfloat16", kv: str = "bfloat16") -> str:
    """The profile key of an MLA fit: ``family`` (``mla_prefill``, ``mla_decode``,
    ``mla_bmm``, ``mla_module_prefill``, ``mla_module_decode``) at a GEMM mode and a KV
    dtype (the tables' names)."""
    if family == "mla_bmm":
        return family if gemm_mode == "bfloat16" else f"{family}_{gemm_mode}"
    gemm = MLA_MODULE_GEMMS[gemm_mode] if family.startswith("mla_module") else ""
    return f"{family}{gemm}{MLA_KV[kv]}"


__all__ = [
    "MLA_BMM_BASE",
    "MLA_BMM_EXTRAS",
    "MLA_BMM_MODES",
    "MLA_BMM_SERIAL",
    "MLA_DECODE_BLOCK",
    "MLA_DECODE_FLOOR",
    "MLA_DECODE_LAUNCH",
    "MLA_DECODE_SERIAL",
    "MLA_KERNEL_REPLAY",
    "MLA_KV",
    "MLA_MODULE_BASE",
    "MLA_MODULE_DECODE_EXTRAS",
    "MLA_MODULE_DECODE_SERIAL",
    "MLA_MODULE_EXTRAS",
    "MLA_MODULE_GEMMS",
    "MLA_MODULE_PREFILL_FLOOR",
    "MLA_MODULE_PREFILL_SERIAL",
    "MLA_MODULE_QUANT",
    "MLA_MODULE_REPLAY",
    "MLA_MODULE_SERIAL",
    "MLA_PREFILL_SERIAL",
    "SGLANG_MLA_MODULE_TABLES",
    "mla_kernel",
]
