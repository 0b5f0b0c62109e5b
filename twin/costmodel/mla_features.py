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
"""

from __future__ import annotations

from typing import NamedTuple

from twin.costmodel.features import Sums, gemm_sums_at


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
    kv_e: int,
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


def mla_bmm_sums(
    rows: Sums, heads: int, k: int, n: int, e: int, act_e: float, w_e: float
) -> tuple[Sums, Sums, float]:
    """(FLOPs, bytes, weight elements) of one absorbed-decode batched GEMM: ``rows``
    tokens, per head a (rows x k) @ (k x n) product (W_UK: nope -> kv_lora; W_UV:
    kv_lora -> v), at the given operand bytes (``twin.precision.gemm_operand_bytes``)."""
    flops, nbytes, weights = gemm_sums_at(rows, k, n, e, act_e, w_e)
    return heads * flops, heads * nbytes, float(heads * weights)


def _gemms(
    gemms: list[tuple[Sums, int, int]], e: int, act_e: float, w_e: float
) -> tuple[Sums, Sums, float]:
    flops: Sums = 0.0
    nbytes: Sums = 0.0
    weights = 0.0
    for rows, k, n in gemms:
        f, b, w = gemm_sums_at(rows, k, n, e, act_e, w_e)
        flops, nbytes, weights = flops + f, nbytes + b, weights + w
    return flops, nbytes, weights


def _shared_projections(dims: MlaDims, tokens: Sums) -> list[tuple[Sums, int, int]]:
    """q_a + kv_a (one GEMM, replicated on every rank), q_b, o_proj over ``tokens``."""
    h, qk = dims.heads, dims.nope + dims.rope
    latent = dims.kv_lora + dims.rope
    if dims.q_lora:
        q = [(tokens, dims.d_model, dims.q_lora + latent), (tokens, dims.q_lora, h * qk)]
    else:
        q = [(tokens, dims.d_model, latent), (tokens, dims.d_model, h * qk)]
    return [*q, (tokens, h * dims.v, dims.d_model)]


def mla_projection_sums(
    dims: MlaDims, tokens: Sums, e: int, act_e: float, w_e: float
) -> tuple[Sums, Sums, float]:
    """(FLOPs, bytes, weight elements) of the projections every token runs through,
    whatever its phase: q_a and kv_a (vLLM's ``fused_qkv_a_proj``, ``disable_tp=True``:
    whole on every rank), q_b and o_proj (split by heads)."""
    return _gemms(_shared_projections(dims, tokens), e, act_e, w_e)


# What the module families' features are: (FLOPs, bytes, tiles, keys per sequence, the
# attention's KV bytes, the attention's FLOPs). The first two are the module's GEMMs and
# the attention's query/output traffic; the last two are priced after the smooth maximum
# (``formulas.MLA_MODULE_SERIAL``).
ModuleSums = tuple[Sums, Sums, Sums, Sums, Sums, Sums]


def module_attention_split(
    gemm_flops: Sums,
    gemm_bytes: Sums,
    attention: tuple[Sums, Sums, Sums, Sums],
    kv_bytes: Sums,
    tile_flops: Sums,
) -> ModuleSums:
    """The module's features from its GEMMs' sums and its attention kernel's
    (``attention``: FLOPs, bytes, tiles, keys per sequence): the attention's KV stream
    (``kv_bytes``, part of its bytes) and its FLOPs as computed by the tensor cores
    (``tile_flops``) come out of the smooth maximum as serial features.

    The module is a chain of kernels, each a launch of its own (vLLM's MLA common
    implementation, ``vllm/v1/attention/backends/mla/common.py`` in vllm-project/vllm:
    the q/kv projections, W_UK as a batched GEMM, the attention backend over the latent,
    W_UV as a batched GEMM, o_proj; the module collectors time that forward,
    ``collector/{vllm,trtllm}/collect_mla_module.py``), so the attention's time adds to
    the GEMMs' rather than hiding under them; one smooth maximum over the summed FLOPs
    and bytes priced a 64-head decode at a long context as compute-bound when it is
    bound by its KV stream (NVIDIA's module tables, ``aiconfigurator-core`` 0.12.0: B200
    vLLM bf16, 64 heads, batch 64, 65,535 cached tokens: the old form 1.5x the measured
    time). The query/output traffic and the per-tile and per-sequence terms stay in the
    smooth maximum."""
    _, ab, tiles, seq = attention
    return gemm_flops, gemm_bytes + (ab - kv_bytes), tiles, seq, kv_bytes, tile_flops


def mla_module_prefill_sums(
    dims: MlaDims,
    tokens: Sums,
    keys: Sums,
    kv_rows: Sums,
    sequences: Sums,
    e: int,
    act_e: float,
    w_e: float,
    kv_e: int,
) -> ModuleSums:
    """The module's features (``ModuleSums``) over prefill chunks: the projections,
    kv_b_proj over every visible row (the decompression of the cached context too:
    vLLM's chunked-context loop, SGLang's ``MHA_CHUNKED_KV``), the decompressed attention
    (its K and V of every visible row per head the KV stream; a tile is one sequence and
    head, nothing padded)."""
    h = dims.heads
    kv_b = (kv_rows, dims.kv_lora, h * (dims.nope + dims.v))
    gf, gb, _ = _gemms([*_shared_projections(dims, tokens), kv_b], e, act_e, w_e)
    attention = mla_prefill_sums(tokens, keys, kv_rows, sequences, dims, e, kv_e)
    kv_bytes = kv_e * kv_rows * float(h * (dims.nope + dims.rope + dims.v))
    return module_attention_split(gf, gb, attention, kv_bytes, attention[0])


def mla_module_decode_sums(
    dims: MlaDims, batch: Sums, keys: Sums, e: int, act_e: float, w_e: float, kv_e: int
) -> ModuleSums:
    """The module's features (``ModuleSums``) over ``batch`` decode tokens reading
    ``keys`` keys in all: :func:`mla_module_absorbed_sums` of one query token a
    sequence."""
    return mla_module_absorbed_sums(dims, batch, batch, keys, keys, 1, e, act_e, w_e, kv_e)


def mla_module_absorbed_sums(
    dims: MlaDims,
    sequences: Sums,
    queries: Sums,
    keys: Sums,
    kv_rows: Sums,
    width: int,
    e: int,
    act_e: float,
    w_e: float,
    kv_e: int,
) -> ModuleSums:
    """The module's features (``ModuleSums``) in its absorbed form
    (:func:`mla_absorbed_sums`' arguments): the projections and the two absorbed BMMs
    over every query token (at the projections' operand bytes), and the attention: its
    KV stream each latent row read once, its FLOPs at whole blocks of
    ``MLA_DECODE_HEAD_TILE`` query rows (a CTA's MMA runs its 64 rows whatever the rank's
    heads: :func:`decode_head_tiles`)."""
    h = dims.heads
    gf, gb, _ = _gemms(_shared_projections(dims, queries), e, act_e, w_e)
    pf, pb, _ = mla_bmm_sums(queries, h, dims.nope, dims.kv_lora, e, act_e, w_e)
    of, ob, _ = mla_bmm_sums(queries, h, dims.kv_lora, dims.v, e, act_e, w_e)
    attention = mla_absorbed_sums(sequences, queries, keys, kv_rows, width, dims, e, kv_e)
    kv_bytes = kv_e * float(dims.kv_lora + dims.rope) * kv_rows
    rows = h * width
    padded = attention[0] * (decode_head_tiles(rows) * MLA_DECODE_HEAD_TILE / rows)
    return module_attention_split(gf + pf + of, gb + pb + ob, attention, kv_bytes, padded)


__all__ = [
    "MLA_DECODE_HEAD_TILE",
    "MLA_PREFILL_TILE_Q",
    "MlaDims",
    "ModuleSums",
    "decode_head_tiles",
    "mla_absorbed_sums",
    "mla_bmm_sums",
    "mla_decode_sums",
    "mla_module_absorbed_sums",
    "mla_module_decode_sums",
    "mla_module_prefill_sums",
    "mla_prefill_sums",
    "mla_prefill_waves",
    "mla_projection_sums",
    "module_attention_split",
]
