"""Every kernel family NVIDIA's tables (``calibration.aic_tables``) give a GPU under an
engine, and the tables older engine releases read instead. The families keep the rows
that match how the twin prices a kernel (bf16 weights and activations, bf16 KV cache,
full attention, no beams; and, as families of their own, each quantised GEMM mode and an
fp8 KV cache). Which table feeds which kernel family:

- ``gemm``: ``gemm_perf`` (m x n x k, ``gemm_dtype`` bfloat16); ``gemm_<mode>`` the same
  table's rows of each quantised mode (``fp8``, ``fp8_block``, ``nvfp4``: the precision
  fits of ``twin.precision``), their features at the format's operand bytes; every
  kernel source of a mode is kept (their shapes are disjoint: the engine's dispatcher
  picks one per shape, e.g. vLLM's DeepGEMM, FlashInfer and CUTLASS block-fp8 kernels);
- ``attn_prefill``: ``context_attention_perf`` (batch x isl, no cached prefix: ``step`` 0);
- ``attn_decode``: ``generation_attention_perf`` (batch, ``step`` = cached length, so
  each query reads ``step + 1`` keys);
- ``attn_prefill_fp8kv``, ``attn_decode_fp8kv``: the same tables' rows with
  ``kv_cache_dtype`` fp8 (K/V read at 1 byte), of the engine's default kernel source;
  the context FMHA in fp8 where the table has it (``attn_dtype`` fp8, what
  aiconfigurator pairs with an fp8 KV cache: ``fmha_quant_mode`` fp8 in its
  ``sdk/models/helpers.py`` ``_infer_quant_modes_from_raw_config``), else bf16;
- ``conv1d``: ``mamba2_perf``'s ``causal_conv1d_fn`` (prefill) and
  ``causal_conv1d_update`` (decode) rows; only TensorRT-LLM collected them, and it is
  the same CUDA kernel (Dao-AILab causal-conv1d) that vLLM and SGLang call;
- ``moe`` and ``moe_<mode>``: ``moe_perf``'s fused-MoE rows per ``moe_dtype``
  (``twin.precision.MOE_TABLE_MODES``), ``distribution`` balanced only, gated (SwiGLU)
  kernels only (``moe_torch_flow_nongated`` is Nemotron's relu2 MLP); features per GPU
  (``moe_row``); per dtype the version directory with such rows that the release
  picks (below) and, where several kernel sources timed it, the one with the most rows
  (the backend the collector swept: the engine's default for that format); a series
  the same-silicon sibling (B200 / GB200, B300 / GB300) timed far faster is read from the
  sibling's table of the same version (``calibration.moe_sibling``,
  :func:`calibration.aic_moe.moe_table`), and on B200's die a series both GPUs of the
  pair timed slow from B300's die's;
  ``moe_nvfp4_min_latency`` TensorRT-LLM's min-latency nvfp4 rows (kernel source
  ``moe_torch_flow_min_latency``) of at most 128 tokens, the steps it prices
  (``twin.costmodel.moe_families.MOE_MIN_LATENCY_MAX_TOKENS``);
- ``moe_mxfp4_mxfp8`` (vLLM only): the mxfp4 experts with mxfp8 activations, SGLang's
  rows of the FlashInfer kernel vLLM runs for them
  (:func:`calibration.aic_moe.mxfp8_activation_rows`);
- ``mla_*``: the MLA tables (``calibration.aic_mla``);
- ``a2a_*``: DeepEP's all-to-all dispatch and combine (``calibration.aic_a2a``);
- ``allreduce_<n>gpu``: the engine's ``custom_allreduce_perf`` (CUDA-graph backend)
  where it has the message size, NCCL ``nccl_perf`` all_reduce above that;
  ``message_size`` counts elements (2 bytes each), not bytes;
- ``allreduce_nccl_<n>gpu``: NCCL's ``nccl_perf`` all_reduce alone (an engine's
  fallback above its custom all-reduce's size limit).
"""

from __future__ import annotations

from pathlib import Path

from twin.calibration.aic_a2a import a2a_rows
from twin.calibration.aic_collectives import allreduce_rows, gather_rows, nccl_allreduce_rows
from twin.calibration.aic_dense import attention_rows, conv1d_rows, gemm_rows
from twin.calibration.aic_mla import mla_rows
from twin.calibration.aic_moe import moe_rows, mxfp8_activation_rows
from twin.calibration.aic_tables import (
    ENGINES,
    FamilyRows,
    system_dir,
    table_versions,
)
from twin.costmodel import moe_families as moef
from twin.errors import expect_one_of


def read_families(
    gpu: str, engine: str, root: Path | None = None, release: str | None = None
) -> list[FamilyRows]:
    """Every kernel family the database has for ``gpu`` under ``engine``, each from the
    table of engine release ``release`` (``twin.costmodel.table_release``; None: the
    newest). The Mamba2 conv1d rows are TensorRT-LLM's only, a kernel every engine shares:
    their newest table stands for every engine and release."""
    expect_one_of(engine, ENGINES, "--engine")
    system = system_dir(gpu, root)
    found = [
        gemm_rows(system, engine, release=release),
        attention_rows(system, engine, "prefill", release=release),
        attention_rows(system, engine, "decode", release=release),
        *conv1d_rows(system),
        *allreduce_rows(system, engine, release),
        # NCCL's all-gather / reduce-scatter: priced by TensorRT-LLM's layout alone
        # (``KernelLayout.moe_gather_scatter``), so fitted into its profiles only.
        *(gather_rows(system) if engine == "trtllm" else ()),
        *nccl_allreduce_rows(system),
        # The precision families (twin.precision): each quantised GEMM mode, fp8 KV.
        *(gemm_rows(system, engine, mode, release) for mode in moef.PRECISION_GEMMS),
        attention_rows(system, engine, "prefill", "fp8", release),
        attention_rows(system, engine, "decode", "fp8", release),
        # Issue 34: the fused-MoE experts of each format, the MLA families.
        *moe_rows(system, engine, release),
        *mxfp8_activation_rows(system, engine),
        *mla_rows(system, engine, release),
        # Issue 34: DeepEP's all-to-all dispatch and combine (calibration.aic_a2a).
        *a2a_rows(system, engine, release),
    ]
    return [f for f in found if f is not None and f.rows]


def release_families(
    gpu: str, engine: str, root: Path | None = None
) -> tuple[dict[str, str], dict[str, dict[str, FamilyRows]]]:
    """Per kernel family, the tables older engine releases read instead of the newest.

    Returns ``(default, others)``: ``default[kernel]`` the release of the table the
    newest pick reads (:func:`read_families` without a release), ``others[kernel]`` the
    family as read from each other release's table, by that table's release. Every
    version directory of the engine's tables on this GPU is asked for
    (:func:`table_versions`); a family that reads the same table at every release has no
    others.
    """
    newest = {f.kernel: f for f in read_families(gpu, engine, root)}
    default = {k: f.release for k, f in newest.items()}
    others: dict[str, dict[str, FamilyRows]] = {}
    for version in table_versions(system_dir(gpu, root), engine):
        for fam in read_families(gpu, engine, root, version):
            base = newest.get(fam.kernel)
            if not fam.release or (base is not None and fam.tables == base.tables):
                continue
            others.setdefault(fam.kernel, {}).setdefault(fam.release, fam)
    # A family the newest pick lacks (SGLang's MLA module tables: ``aic_mla.wideep_rows``):
    # its default names the release from which on no table of it is read.
    for kernel in [k for k in others if k not in newest]:
        default[kernel] = _last_without(gpu, engine, root, kernel)
    return default, others


def _last_without(gpu: str, engine: str, root: Path | None, kernel: str) -> str:
    """The oldest table version newer than the newest one reading ``kernel`` whose read
    lacks it (newest first: the version just before the first that has it)."""
    last = ""
    for version in table_versions(system_dir(gpu, root), engine):
        if any(f.kernel == kernel for f in read_families(gpu, engine, root, version)):
            return last
        last = version
    return last
