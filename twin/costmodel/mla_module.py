"""The MLA module's features (``mla_module*``, issue 34): the whole attention block as
vLLM's ``DeepseekV2MLAAttention`` and TensorRT-LLM's ``DeepseekV3Attention`` run it.

Its projections (q_a / kv_a, q_b, o_proj; kv_b_proj in prefill), the absorbed BMMs in decode
(``mla_bmm``), the attention kernel (``mla_features``) with its KV stream and FLOPs split out
of the smooth maximum, the bytes the module tables' replays read from L2, and the families'
arguments with the decode kernel's launch (``mla_decode_kernels``). Per GPU, counts as in
``twin.costmodel.features``. Pure Python.
"""

from __future__ import annotations

from twin.costmodel.features import Sums, gemm_sums_at, replay_resident
from twin.costmodel.mla_bmm import bmm_quant_steps, mla_bmm_sums
from twin.costmodel.mla_decode_kernels import LaunchSums
from twin.costmodel.mla_features import (
    MLA_DECODE_HEAD_TILE,
    MlaDims,
    decode_head_tiles,
    mla_absorbed_sums,
    mla_prefill_sums,
)


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
# (``mla_families.MLA_MODULE_SERIAL``).
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


def module_quant_steps(dims: MlaDims, tokens: int, kv_rows: int, sms: int) -> float:
    """The ``quant_steps`` feature of a module whose linears and absorbed BMMs quantise their
    activation in a serial loop first (``mla_bmm.module_quant_rule``): each launch's
    :func:`mla_bmm.bmm_quant_steps` over the rows it quantises. The projections every token
    runs (q_a + kv_a over ``d_model``, q_b over the q latent, o_proj over the heads' values)
    over ``tokens``; a prefill's kv_b_proj over its ``kv_rows`` decompressed rows (the
    latent's width); an absorbed decode's (``kv_rows`` 0) two BMMs per head over the
    tokens (W_UK over ``nope``, W_UV over the latent)."""
    # the reductions of :func:`_shared_projections`' linears (q_b over the q latent, or a
    # second GEMM over d_model without one)
    ks = (dims.d_model, dims.q_lora or dims.d_model, dims.heads * dims.v)
    steps = sum(bmm_quant_steps(True, tokens, 1, k, sms) for k in ks)
    if kv_rows:
        return float(steps + bmm_quant_steps(True, kv_rows, 1, dims.kv_lora, sms))
    bmms = (dims.nope, dims.kv_lora)
    return float(steps + sum(bmm_quant_steps(True, tokens, dims.heads, k, sms) for k in bmms))


def module_prefill_features(module: ModuleSums, waves: Sums, quant: Sums = 0.0) -> tuple[Sums, ...]:
    """The ``mla_module_prefill`` families' arguments in their formula's order
    (``mla_families.MLA_MODULE_PREFILL_SERIAL``): the module's sums
    (:func:`mla_module_prefill_sums`), its context attention's waves of CTAs
    (:func:`mla_prefill_waves`, the ``mla_prefill`` kernel's feature: the module runs
    that kernel) and, last, its linears' quantisation steps (:func:`module_quant_steps`;
    zero where ``mla_bmm.module_quant_rule`` does not hold)."""
    return (*module, waves, quant)


def mla_module_decode_sums(
    dims: MlaDims, batch: Sums, keys: Sums, e: int, act_e: float, w_e: float, kv_e: float
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
    kv_e: float,
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


def module_replay_l2(module: ModuleSums, l2_bytes: float | None) -> tuple[ModuleSums, Sums]:
    """The module's sums (``ModuleSums``) with the bytes NVIDIA's module tables read from
    L2, and those L2 bytes (``mla_families.MLA_MODULE_REPLAY``): where the whole module's
    working set (its GEMMs' weights and activations, the attention's query/output traffic
    and KV stream) fits in ``features.REPLAY_L2_SHARE`` of an L2 of ``l2_bytes``, all of it
    is read from L2 (its HBM bytes and KV stream zero); else nothing. ``l2_bytes`` None:
    nothing resident (a serving step: a layer's weights were last read a whole forward
    pass earlier).

    The module collectors time the module forward captured in a CUDA graph and replayed
    on the same buffers (ai-dynamo/aiconfigurator 095f58a51,
    ``collector/vllm/collect_mla_module.py``: ``benchmark_with_power(...,
    use_cuda_graph=True)`` for MLA generation and context; ``collector/helper.py``), so a
    working set that fits stays in L2 from one replay to the next, as for the BMMs and
    the fused MoE (``features.replay_resident``). The tables step where it stops fitting:
    vLLM 0.24.0's L40S decode module (96 MB L2), one sequence, 2 cached tokens: 96 us at
    16 heads (73 MB of bf16 weights) and 201 us at 32 (116 MB), where the HBM bytes alone
    say 85 and 134 us; a fit without the term priced the 16-head series 20-40% high and
    the 32-head one low."""
    flops, nbytes, tiles, seq, kv_bytes, attn_flops = module
    resident = replay_resident(nbytes + kv_bytes, l2_bytes)
    kept = 1 - resident
    return (flops, nbytes * kept, tiles, seq, kv_bytes * kept, attn_flops), (
        nbytes + kv_bytes
    ) * resident


def module_decode_features(
    module: ModuleSums, launch: LaunchSums, l2: Sums = 0.0, quant: Sums = 0.0
) -> tuple[Sums, ...]:
    """The ``mla_module_decode`` families' arguments in their formula's order
    (``mla_families.MLA_MODULE_DECODE_EXTRAS``, ``MLA_MODULE_REPLAY``,
    ``MLA_MODULE_DECODE_SERIAL``): the module's sums (:func:`mla_module_absorbed_sums`) with its
    attention kernel's launch (:func:`mla_decode_launch`) beside them. The module runs the same
    decode kernel as the ``mla_decode`` families, so its CTAs and waves sit on the compute side and
    its re-read keys, split partials and critical path after the smooth maximum, as there (NVIDIA's
    B200 TensorRT-LLM module table, bf16: the 32-head long-context series, the low-latency kernel's
    two CTAs a sequence each reading every key, 30-40% above a fit without them; docs/decisions.md,
    issue 34, helper ``kernels``). ``l2``: a table row's bytes read from L2
    (:func:`module_replay_l2`; zero for a serving step), on the compute side after the launch's
    (``mla_families.MLA_MODULE_REPLAY``); ``quant``, last, its linears' and BMMs'
    quantisation steps (:func:`module_quant_steps`; zero where
    ``mla_bmm.module_quant_rule`` does not hold)."""
    flops, nbytes, tiles, seq, kv_bytes, attn_flops = module
    ctas, waves, repeat, partials, critical = launch
    return (
        *(flops, nbytes, tiles, seq, ctas, waves, l2),
        *(kv_bytes, attn_flops, repeat, partials, critical, quant),
    )


__all__ = [
    "ModuleSums",
    "mla_module_absorbed_sums",
    "mla_module_decode_sums",
    "mla_module_prefill_sums",
    "mla_projection_sums",
    "module_attention_split",
    "module_decode_features",
    "module_prefill_features",
    "module_quant_steps",
    "module_replay_l2",
]
