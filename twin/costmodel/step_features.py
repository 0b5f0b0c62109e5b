"""The sums over one step's sequences that price every kernel of the step.

A batch step's kernels read these totals only (prefill tokens, query-key pairs,
K/V rows, scan chunks, decode keys, per window kind), so ``CostModel`` prices a
step of any mix of prefill chunks and decodes from one ``StepFeatures``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from twin.errors import TwinError
from twin.mixers import FULL_KV_KINDS, chunk_keys, chunk_kv_rows


class StepFeatures(NamedTuple):
    """Sums over one step's sequences that price every kernel of the step."""

    tokens: int  # new tokens: prefill chunks' plus one per decode
    sequences: int  # prefill chunks + decoding sequences (one LM-head row each)
    prefill_tokens: int
    prefill_chunks: int
    prefill_keys: int  # query-key pairs of the prefill chunks (causal, windowed)
    prefill_kv_rows: int  # K/V rows the prefill chunks read
    scan_chunks: int  # Mamba2 scan chunks over the prefill chunks (each padded)
    decodes: int
    decode_keys: int  # keys the decode queries read, summed
    swa_prefill_keys: int = 0  # the same three for sliding-window layers
    swa_prefill_kv_rows: int = 0
    swa_decode_keys: int = 0
    gdn_chunks: int = 0  # GDN chunks over the prefill chunks (each padded)
    # Short extends that MLA runs in its absorbed (decode) form, not among the prefill
    # chunks above: speculative verification and draft extends (``absorb`` below).
    absorbed_chunks: int = 0
    absorbed_tokens: int = 0
    absorbed_keys: int = 0  # query-key pairs (causal within each extend)
    absorbed_kv_rows: int = 0  # latent rows read: each extend's keys once
    absorbed_width: int = 0  # the longest such extend's new tokens
    prefill_longest: int = 0  # the longest prefill chunk's sequence (cached + new tokens)
    gdn_depth: int = 0  # the most GDN chunks of one prefill chunk (its sequential pass)
    # The keys the prefill chunks' new tokens read, each at most the model's ``index_topk``
    # (a DeepSeek-sparse-attention model: sum of min(position, index_topk) over the new
    # tokens, cached keys counted; SGLang's trtllm sparse MLA prefill reads that many,
    # ``MlaPricing._dsa_sparse_module``); 0 without a top-k.
    prefill_topk_keys: int = 0
    # The same for the decodes: each decode query's keys (its context plus the new token)
    # capped at ``index_topk``, summed (SGLang's sparse decode reads that many,
    # ``MlaPricing._dsa_decode_module``); 0 without a top-k.
    decode_topk_keys: int = 0


def aggregate_step(
    prefills: Sequence[tuple[int, int]],
    decodes: Sequence[int],
    kinds: Mapping[str, int],
    window: int,
    chunk: int,
    g_chunk: int,
    absorb: int = 0,
    topk: int = 0,
) -> StepFeatures:
    """The step's features: every kernel's FLOPs and bytes are functions of these sums.

    ``kinds``: the model's mixer counts; ``window``: its sliding window (0: none);
    ``chunk``, ``g_chunk``: the Mamba2 scan's and the GDN delta rule's chunk lengths
    (1 for a model without that kind); ``absorb``: prefill chunks of at most this many
    new tokens are absorbed extends (:func:`split_absorbed`; 0: none); ``topk``: the
    model's DSA ``index_topk`` (``prefill_topk_keys``, ``decode_topk_keys``; 0: none).
    """
    prefills, absorbed = split_absorbed(prefills, absorb)
    sums = _prefill_sums(prefills, kinds, window, chunk, g_chunk, topk)
    n_dec = len(decodes)
    if n_dec and min(decodes) < 0:
        raise TwinError("a decode context must be >= 0")
    d_keys = sum(decodes) + n_dec if _full(kinds) else 0
    s_dec = sum(min(c + 1, window) for c in decodes) if "swa" in kinds else 0
    t_dec = sum(min(c + 1, topk) for c in decodes) if topk else 0
    depth = _gdn_depth(prefills, g_chunk) if "gdn" in kinds else 0
    return _features(
        len(prefills), sums, n_dec, d_keys, s_dec, absorbed, _longest(prefills), depth, t_dec
    )


def aggregate_spread(
    prefills: Sequence[tuple[int, int]],
    batch: int,
    context: int,
    kinds: Mapping[str, int],
    window: int,
    chunk: int,
    g_chunk: int,
    absorb: int = 0,
    topk: int = 0,
) -> StepFeatures:
    """:func:`aggregate_step` with ``batch`` decodes whose contexts sum to ``context``,
    spread evenly (``divmod``: the first ``context % batch`` one token longer), in O(1)
    of the batch."""
    prefills, absorbed = split_absorbed(prefills, absorb)
    sums = _prefill_sums(prefills, kinds, window, chunk, g_chunk, topk)
    if batch and context < 0:
        raise TwinError("a decode context must be >= 0")
    d_keys = context + batch if _full(kinds) else 0
    s_dec = spread_keys(batch, context, window) if "swa" in kinds else 0
    t_dec = spread_keys(batch, context, topk) if topk else 0
    depth = _gdn_depth(prefills, g_chunk) if "gdn" in kinds else 0
    return _features(
        len(prefills), sums, batch, d_keys, s_dec, absorbed, _longest(prefills), depth, t_dec
    )


def spread_keys(batch: int, context: int, cap: int) -> int:
    """Keys ``batch`` decodes read, each at most ``cap``, whose contexts sum to ``context``
    spread evenly (``divmod``: the first ``context % batch`` one token longer), a new key
    each: a sliding window's (``cap`` the window) or a top-k's; 0 without decodes. The
    compiled step (``twin.costmodel.compiled``) compiles this function."""
    if not batch:
        return 0
    base, extra = divmod(context, batch)
    return extra * min(base + 2, cap) + (batch - extra) * min(base + 1, cap)


def split_absorbed(
    prefills: Sequence[tuple[int, int]], absorb: int
) -> tuple[Sequence[tuple[int, int]], tuple[int, int, int, int, int]]:
    """``prefills`` without the chunks of at most ``absorb`` new tokens, and those
    chunks' (count, tokens, query-key pairs, latent rows read, widest).

    Only an MLA-only model is given ``absorb`` > 0 (``CostModel``): the engines run a
    speculative verification, q_len = 1 + the drafts, through MLA's absorbed decode
    kernel, one pass over each sequence's latent for all its query tokens, not through
    the decompressed prefill form: vLLM 0.19.0 classes a request of at most
    ``reorder_batch_threshold`` query tokens as a decode, raised to 1 +
    ``num_speculative_tokens`` for MLA backends whose decode takes uniform multi-token
    queries (``v1/attention/backend.py`` ``_init_reorder_batch_threshold``,
    ``layers/attention/mla_attention.py`` ``QueryLenSupport``); SGLang 0.5.10.post1
    sends only ``is_extend_without_speculative`` batches to MHA, target verify and draft
    extend to MLA (``deepseek_common/attention_backend_handler.py``); TensorRT-LLM's
    MLA runs generation tokens, drafts included, in ``forward_absorption_generation``
    (``_torch/modules/attention.py``)."""
    if absorb <= 0:
        return prefills, (0, 0, 0, 0, 0)
    rest: list[tuple[int, int]] = []
    count = tokens = keys = rows = widest = 0
    for n, c in prefills:
        if n > absorb:
            rest.append((n, c))
            continue
        if n <= 0 or c < 0:
            raise TwinError(f"a prefill chunk needs n_new >= 1 and n_cached >= 0 (got {(n, c)})")
        count += 1
        tokens += n
        keys += chunk_keys(n, c, None)
        rows += c + n
        widest = max(widest, n)
    return rest, (count, tokens, keys, rows, widest)


def _longest(prefills: Sequence[tuple[int, int]]) -> int:
    """The longest prefill chunk's sequence, cached and new tokens (0: none)."""
    return max((n + c for n, c in prefills), default=0)


def _gdn_depth(prefills: Sequence[tuple[int, int]], g_chunk: int) -> int:
    """The most GDN chunks of one prefill chunk (0: none)."""
    return max((-(-n // g_chunk) for n, _ in prefills), default=0)


def _full(kinds: Mapping[str, int]) -> bool:
    """Whether the model has full-attention layers (GQA or MLA: every key before)."""
    return any(k in kinds for k in FULL_KV_KINDS)


def _prefill_sums(
    prefills: Sequence[tuple[int, int]],
    kinds: Mapping[str, int],
    window: int,
    chunk: int,
    g_chunk: int,
    topk: int = 0,
) -> tuple[int, int, int, int, int, int, int, int]:
    """(tokens, keys, K/V rows, scan chunks, window keys, window rows, GDN chunks, keys
    capped at ``topk`` a token) of the prefill chunks."""
    full, swa = _full(kinds), "swa" in kinds
    p_tok = p_keys = p_kv = chunks = s_keys = s_kv = g_chunks = t_keys = 0
    for n, c in prefills:
        if n <= 0 or c < 0:
            raise TwinError(f"a prefill chunk needs n_new >= 1 and n_cached >= 0 (got {(n, c)})")
        p_tok += n
        if full:
            p_keys += chunk_keys(n, c, None)
            p_kv += chunk_kv_rows(n, c, None)
        if swa:
            s_keys += chunk_keys(n, c, window)
            s_kv += chunk_kv_rows(n, c, window)
        if topk:
            t_keys += chunk_keys(n, c, topk)
        chunks += -(-n // chunk)
        g_chunks += -(-n // g_chunk)
    return p_tok, p_keys, p_kv, chunks, s_keys, s_kv, g_chunks, t_keys


def _features(
    n_chunks: int,
    sums: tuple[int, int, int, int, int, int, int, int],
    n_dec: int,
    d_keys: int,
    s_dec: int,
    absorbed: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0),
    longest: int = 0,
    gdn_depth: int = 0,
    t_dec: int = 0,
) -> StepFeatures:
    p_tok, p_keys, p_kv, chunks, s_keys, s_kv, g_chunks, t_keys = sums
    a_chunks, a_tok, a_keys, a_rows, a_width = absorbed
    return StepFeatures(
        tokens=p_tok + n_dec + a_tok,
        # A verification's logits at every position: one LM-head row a token.
        sequences=n_chunks + n_dec + a_tok,
        prefill_tokens=p_tok,
        prefill_chunks=n_chunks,
        prefill_keys=p_keys,
        prefill_kv_rows=p_kv,
        scan_chunks=chunks,
        decodes=n_dec,
        decode_keys=d_keys,
        swa_prefill_keys=s_keys,
        swa_prefill_kv_rows=s_kv,
        swa_decode_keys=s_dec,
        gdn_chunks=g_chunks,
        absorbed_chunks=a_chunks,
        absorbed_tokens=a_tok,
        absorbed_keys=a_keys,
        absorbed_kv_rows=a_rows,
        absorbed_width=a_width,
        prefill_longest=longest,
        gdn_depth=gdn_depth,
        prefill_topk_keys=t_keys,
        decode_topk_keys=t_dec,
    )
