"""Features of the MLA kernel families (issue 34): FLOPs, bytes and extras of a shape.

Multi-head latent attention (``twin.mixers``, ``mla``) runs in two forms, and NVIDIA's
tables (``aiconfigurator-core`` 0.12.0, ``systems/data/<gpu>/mla*``) time them in the
same pieces the engines run:

- **prefill** (decompressed, "MHA"): kv_b_proj turns each visible key's latent into
  per-head K (nope) and V, the RoPE key is shared; attention per head at ``nope + rope``
  for QK and ``v`` for AV (TensorRT-LLM's collector: ``head_dim`` nope + rope,
  ``num_kv_heads`` = heads, ``v_head_dim`` v, ``collector/trtllm/collect_mla.py``);
- **decode** (absorbed, "MQA over the latent"): W_UK maps each head's q_nope into the
  latent (a batched GEMM per head, ``mla_bmm`` "pre"), attention reads each key's
  latent + RoPE key once for all heads (QK at ``kv_lora_rank + rope``, AV at
  ``kv_lora_rank``), W_UV maps the result back (``mla_bmm`` "post");
- **the module** (vLLM's ``DeepseekV2MLAAttention`` forward, TensorRT-LLM's
  ``DeepseekV3Attention``: ``collector/{vllm,trtllm}/collect_mla_module.py``): the
  above plus q_a / kv_a (one replicated GEMM, ``fused_qkv_a_proj``), q_b and o_proj,
  without the layer's pre-norm and all-reduce.

Every function here is per GPU: ``heads`` is the rank's share (``n_heads / tp``), the
latent is whole on every rank. Counts may be arrays (a run of decode steps), as in
``twin.costmodel.features``. Pure Python.

Here: the attention kernels' FLOPs, bytes and tiles in both forms, the prefill kernel's
waves and the bytes a kernel table's replays read from L2. The decode kernels' rules and
launch are ``mla_decode_kernels``', the BMMs ``mla_bmm``'s, the module ``mla_module``'s.
"""

from __future__ import annotations

from typing import NamedTuple

from twin.costmodel.engine_kernels import HOPPER
from twin.costmodel.features import Sums, replay_l2


class MlaDims(NamedTuple):
    """One GPU's MLA widths (``twin.mixers``' field names; ``heads`` the rank's)."""

    d_model: int
    q_lora: int  # 0: one q_proj from d_model
    kv_lora: int
    nope: int
    rope: int
    v: int
    heads: int


def mla_prefill_sums(
    queries: Sums,
    keys: Sums,
    kv_rows: Sums,
    sequences: Sums,
    dims: MlaDims,
    e: int,
    kv_e: int,
) -> tuple[Sums, Sums, Sums, Sums]:
    """(FLOPs, bytes, tiles, keys per sequence) of prefill chunks' MLA attention kernel in
    the decompressed form, batched in one launch: QK^T at ``nope + rope`` and AV at
    ``v`` per head and query-key pair; Q in and O out per query, the decompressed K and V
    of every visible row per head (at ``kv_e``: an fp8 cache runs the FMHA on fp8 K/V)
    and the new rows' latent written to the cache. A tile is one (sequence, head): the
    heads do not share K/V in this form."""
    h, qk = dims.heads, dims.nope + dims.rope
    flops = 2.0 * h * (qk + dims.v) * keys
    per_head = float(h * (qk + dims.v))
    nbytes = e * queries * per_head + kv_e * (
        kv_rows * per_head + queries * (dims.kv_lora + dims.rope)
    )
    return flops, nbytes, float(h) * sequences, kv_rows / sequences


# Query rows one CTA of the context (prefill) attention kernel computes: the trtllm-gen
# FMHA runner's default ``mTileSizeQ(128)`` (``SelectKernelParams`` in flashinfer-python
# 0.6.1 ``include/flashinfer/trtllm/fmha/fmhaRunnerParams.h``; the kernels SGLang's
# ``trtllm_mla`` backend and TensorRT-LLM's Blackwell attention run; only the MLA
# generation kernels pick another, ``fmhaKernels.cuh`` ``selectMlaGenerationKernel``).
# The grid is one CTA per (sequence, head, 128-row query tile).
MLA_PREFILL_TILE_Q = 128


def mla_prefill_waves(queries: Sums, sequences: Sums, heads: int, sms: int) -> Sums:
    """Waves of CTAs a prefill launch runs over ``sms`` SMs: one CTA per sequence, head
    and ``MLA_PREFILL_TILE_Q`` query rows (a batch of chunks at their mean length), one CTA
    a SM at a time, ``ceil(ctas / sms)``. Each wave costs about one CTA's time whatever
    the other SMs do: the steps of NVIDIA's context tables as the prompts or the batch
    cross a multiple of the SMs (``formulas``: the serial ``waves`` feature)."""
    tiles = -(-(queries / sequences) // MLA_PREFILL_TILE_Q)
    return -(-(sequences * heads * tiles) // sms)


# Query heads one thread block of an MLA decode kernel computes against each key block:
# FlashMLA's 64 (deepseek-ai/FlashMLA, docs/20250422-new-kernel-deep-dive.md: a CTA holds
# 64 query rows, h_q x s_q), which FlashInfer's and TensorRT-LLM's MLA decode kernels
# share. NVIDIA's tables show it on every engine: at a given batch and context the time is
# flat from 1 to 64 heads on the rank and nearly doubles at 128 (H200 TensorRT-LLM 1.3,
# batch 256, 65,535 cached tokens: 4.23 ms at 1 head, 4.31 at 64, 7.11 at 128).
MLA_DECODE_HEAD_TILE = 64


def decode_head_tiles(heads: int) -> int:
    """Blocks of ``MLA_DECODE_HEAD_TILE`` query heads a decode kernel runs per sequence."""
    return -(-heads // MLA_DECODE_HEAD_TILE)


def mla_decode_sums(
    batch: Sums, keys: Sums, dims: MlaDims, e: int, kv_e: int
) -> tuple[Sums, Sums, Sums, Sums]:
    """(FLOPs, bytes, tiles, keys per sequence) of ``batch`` decode queries over ``keys``
    keys in all, MLA's absorbed form: :func:`mla_absorbed_sums` of one query token a
    sequence. Affine in ``keys`` with no constant FLOPs or score elements (as
    ``features.attn_decode_sums``, which ``decode_pricing.affine_in_keys`` relies on)."""
    return mla_absorbed_sums(batch, batch, keys, keys, 1, dims, e, kv_e)


def mla_absorbed_sums(
    sequences: Sums,
    queries: Sums,
    keys: Sums,
    kv_rows: Sums,
    width: int,
    dims: MlaDims,
    e: int,
    kv_e: float,
) -> tuple[Sums, Sums, Sums, Sums]:
    """(FLOPs, bytes, tiles, keys per sequence) of MLA's absorbed form over ``queries``
    query tokens of ``sequences`` sequences (at most ``width`` a sequence), ``keys``
    query-key pairs in all, each sequence's ``kv_rows`` latent rows read once: per head
    and pair QK^T at ``kv_lora + rope`` and AV at ``kv_lora``; the absorbed query in and
    the latent output out per head and query. A sequence's query tokens ride with its
    heads as query rows (FlashMLA's ``h_q x s_q``), padded to whole blocks of
    ``MLA_DECODE_HEAD_TILE``; a tile is one (sequence, block)."""
    lat, rope = dims.kv_lora, dims.rope
    blocks = decode_head_tiles(dims.heads * width)
    flops = 2.0 * dims.heads * (2 * lat + rope) * keys
    nbytes = e * queries * float(dims.heads * (2 * lat + rope)) + kv_e * float(lat + rope) * kv_rows
    return flops, nbytes, float(blocks) * sequences + 0.0 * keys, kv_rows / sequences


# The attention-kernel tables' replays (``mla_prefill*`` and ``mla_decode*``): the
# collectors time one call captured in a CUDA graph and replayed on the same buffers, with
# no L2 flush between (ai-dynamo/aiconfigurator 095f58a51: ``collector/trtllm/collect_mla.py``
# and ``collector/sglang/collect_mla.py`` call ``collector/helper.py``
# ``benchmark_with_power``, whose ``use_cuda_graph`` defaults to True; 070f5afd's TensorRT-LLM
# ``run_mla`` replays ``g.replay()`` ``test_ite`` times over one ``fused_q`` and
# ``latent_cache``). A working set that fits in ``features.REPLAY_L2_SHARE`` of L2 stays
# there from one replay to the next and is read at L2's rate, as the BMMs' and the
# modules' (:func:`module_replay_l2`). The tables step where it stops: NVIDIA's RTX PRO 6000
# TensorRT-LLM fp8-KV decode table (128 MB L2, 576 bytes a cached token) runs 18-28% over a
# fit without the term at batch x keys = 2^18 (151 MB) and sits on it at 2^17 (75 MB)
# (docs/decisions.md, issue 34, helpers ``mla36`` and ``mla37``); the L40S TensorRT-LLM
# prefill table (96 MB L2) steps 6x for 2x the work from 44 to 177 MB of Q, K, V, O and
# latent (helper ``mlamod37``).
KernelSums = tuple[Sums, Sums, Sums, Sums]


def kernel_replay_l2(sums: KernelSums, l2_bytes: float | None) -> tuple[KernelSums, Sums]:
    """An attention kernel's sums (:func:`mla_prefill_sums` / :func:`mla_decode_sums`:
    FLOPs, bytes, tiles, keys a sequence) with the bytes a kernel table's replays read from
    L2, and those L2 bytes (``mla_families.MLA_KERNEL_REPLAY``): where all the kernel's bytes
    fit in an L2 of ``l2_bytes`` (``features.replay_resident``) they are read from L2, its
    HBM bytes zero; else nothing. ``l2_bytes`` None: nothing resident (a serving step:
    between two reads of one layer's cache every other layer's weights and cache stream
    through L2)."""
    flops, nbytes, tiles, seq = sums
    hbm, l2 = replay_l2(nbytes, l2_bytes)
    return (flops, hbm, tiles, seq), l2


# SGLang's sparse (DeepSeek-sparse-attention) prefill kernel, FlashMLA's
# ``flash_mla_sparse_fwd``, takes a multiple of 64 query heads on Hopper (128 on
# Blackwell): ``_forward_flashmla_sparse`` (``layers/attention/nsa_backend.py``, SGLang
# 0.5.9 and 0.5.10.post1) pads the rank's heads with zeros up to that (8 at tp 8 of
# GLM-5's 64 run as 64 on an H200), so the kernel's work is that of the padded heads.
# The backend runs it for a prefill batch whose longest sequence exceeds the model's
# ``index_topk`` (``set_nsa_prefill_impl``; below it MHA_ONE_SHOT, the dense form) where
# the prefill backend is ``flashmla_sparse``: Hopper's default over a bf16 cache
# (``server_args.py`` ``_set_default_nsa_backends``; an fp8 cache takes ``flashmla_kv``
# there, not read: no padding priced). Blackwell is not priced here: SGLang forces
# GLM-5's prefill onto sparse MLA there at every length, priced from its measured module
# (``KernelLayout.nsa_sparse_module``, ``twin.engine.kernel_layouts_sglang.
# SGLANG_DSA_SPARSE_MODULE``); a DSA model not forced keeps the dense form there.
SPARSE_PREFILL_HEAD_MULTIPLE = 64
SPARSE_PREFILL_GPUS = HOPPER


def sparse_prefill_heads(gpu: str, heads: int, kv_e: int) -> int:
    """The query heads SGLang's sparse prefill kernel runs for the rank's ``heads`` on
    ``gpu`` over a cache of ``kv_e`` bytes an element (above): ``heads`` rounded up to
    the kernel's multiple; 0 where the twin does not price that kernel (an fp8 cache,
    GPUs off Hopper)."""
    if gpu not in SPARSE_PREFILL_GPUS or kv_e != 2:
        return 0
    multiple = SPARSE_PREFILL_HEAD_MULTIPLE
    return -(-heads // multiple) * multiple


__all__ = [
    "MLA_DECODE_HEAD_TILE",
    "MLA_PREFILL_TILE_Q",
    "KernelSums",
    "MlaDims",
    "decode_head_tiles",
    "kernel_replay_l2",
    "mla_absorbed_sums",
    "mla_decode_sums",
    "mla_prefill_sums",
    "mla_prefill_waves",
]
