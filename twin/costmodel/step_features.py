"""The sums over one step's sequences that price every kernel of the step.

A batch step's kernels read these totals only (prefill tokens, query-key pairs,
K/V rows, scan chunks, decode keys, per window kind), so ``CostModel`` prices a
step of any mix of prefill chunks and decodes from one ``StepFeatures``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from twin.errors import TwinError
from twin.mixers import FULL_KV_KINDS, keys_upto


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


def aggregate_step(
    prefills: Sequence[tuple[int, int]],
    decodes: Sequence[int],
    kinds: Mapping[str, int],
    window: int,
    chunk: int,
    g_chunk: int,
) -> StepFeatures:
    """The step's features: every kernel's FLOPs and bytes are functions of these sums.

    ``kinds``: the model's mixer counts; ``window``: its sliding window (0: none);
    ``chunk``, ``g_chunk``: the Mamba2 scan's and the GDN delta rule's chunk lengths
    (1 for a model without that kind).
    """
    sums = _prefill_sums(prefills, kinds, window, chunk, g_chunk)
    n_dec = len(decodes)
    if n_dec and min(decodes) < 0:
        raise TwinError("a decode context must be >= 0")
    d_keys = sum(decodes) + n_dec if _full(kinds) else 0
    s_dec = sum(min(c + 1, window) for c in decodes) if "swa" in kinds else 0
    return _features(len(prefills), sums, n_dec, d_keys, s_dec)


def aggregate_spread(
    prefills: Sequence[tuple[int, int]],
    batch: int,
    context: int,
    kinds: Mapping[str, int],
    window: int,
    chunk: int,
    g_chunk: int,
) -> StepFeatures:
    """:func:`aggregate_step` with ``batch`` decodes whose contexts sum to ``context``,
    spread evenly (``divmod``: the first ``context % batch`` one token longer), in O(1)."""
    sums = _prefill_sums(prefills, kinds, window, chunk, g_chunk)
    base, extra = divmod(context, batch) if batch else (0, 0)
    if batch and base < 0:
        raise TwinError("a decode context must be >= 0")
    d_keys = context + batch if _full(kinds) else 0
    s_dec = 0
    if "swa" in kinds and batch:
        s_dec = extra * min(base + 2, window) + (batch - extra) * min(base + 1, window)
    return _features(len(prefills), sums, batch, d_keys, s_dec)


def _full(kinds: Mapping[str, int]) -> bool:
    """Whether the model has full-attention layers (GQA or MLA: every key before)."""
    return any(k in kinds for k in FULL_KV_KINDS)


def _prefill_sums(
    prefills: Sequence[tuple[int, int]],
    kinds: Mapping[str, int],
    window: int,
    chunk: int,
    g_chunk: int,
) -> tuple[int, int, int, int, int, int, int]:
    """(tokens, keys, K/V rows, scan chunks, window keys, window rows, GDN chunks) of the
    prefill chunks."""
    full, swa = _full(kinds), "swa" in kinds
    p_tok = p_keys = p_kv = chunks = s_keys = s_kv = g_chunks = 0
    for n, c in prefills:
        if n <= 0 or c < 0:
            raise TwinError(f"a prefill chunk needs n_new >= 1 and n_cached >= 0 (got {(n, c)})")
        p_tok += n
        if full:
            p_keys += keys_upto(c + n, None) - keys_upto(c, None)
            p_kv += c + n
        if swa:
            s_keys += keys_upto(c + n, window) - keys_upto(c, window)
            s_kv += min(c + n, window + n)
        chunks += -(-n // chunk)
        g_chunks += -(-n // g_chunk)
    return p_tok, p_keys, p_kv, chunks, s_keys, s_kv, g_chunks


def _features(
    n_chunks: int,
    sums: tuple[int, int, int, int, int, int, int],
    n_dec: int,
    d_keys: int,
    s_dec: int,
) -> StepFeatures:
    p_tok, p_keys, p_kv, chunks, s_keys, s_kv, g_chunks = sums
    return StepFeatures(
        tokens=p_tok + n_dec,
        sequences=n_chunks + n_dec,
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
    )
