"""How a request's KV maps between a prefill pool and a decode pool of different TP:
which pairs SGLang can map, and each side's share of the bytes."""

from __future__ import annotations

from fractions import Fraction

from twin import mixers as mx
from twin.errors import TwinError
from twin.model import ModelSpec
from twin.parallel import Layout, check_layout, kv_head_share


def check_tp_pair(prefill_tp: int, decode_tp: int) -> None:
    """Refuse a pair of pool TPs whose ranks SGLang cannot map (one line)."""
    lo, hi = sorted((prefill_tp, decode_tp))
    if hi % lo:
        raise TwinError(
            f"--prefill-tp {prefill_tp} and --decode-tp {decode_tp}: one must divide the "
            "other (SGLang maps decode ranks to prefill ranks by their ratio, "
            "disaggregation/common/conn.py _resolve_rank_mapping)"
        )


def transfer_shares(model: ModelSpec, prefill_tp: int, decode_tp: int) -> tuple[Fraction, Fraction]:
    """Per prompt token: (KV bytes the busiest prefill GPU sends, KV bytes each decode GPU
    receives), as SGLang 0.5.23 maps the ranks of two pools of different TP.

    ``disaggregation/common/conn.py`` ``_resolve_rank_mapping``: with equal TP each decode
    rank pulls from the prefill rank of its index; with ``decode_tp = k x prefill_tp``,
    decode rank ``j`` pulls from prefill rank ``j // k`` (each prefill rank serves ``k``);
    with ``prefill_tp = k x decode_tp``, decode rank ``j`` pulls from prefill ranks
    ``j k .. j k + k - 1``. What moves (``common/staging_buffer.py``
    ``compute_head_slice_params``, ``mooncake/conn.py`` ``send_kvcache_slice``):

    - a GQA layer's K and V, sliced by KV head: each decode rank receives the heads it
      holds (:func:`twin.parallel.kv_head_share` at ``decode_tp``), from its one prefill
      rank or as the ``k`` slices of its ``k`` prefill ranks (each sends all it holds);
      a prefill rank serving ``k`` decode ranks sends each its slice, so replicated heads
      (fewer KV heads than decode GPUs) are sent more than once;
    - MLA's latent (not split by heads): every decode rank receives all of it; a prefill
      rank serving ``k`` decode ranks sends it ``k`` times, and of ``k`` prefill ranks
      serving one decode rank only the first sends (the others send dummies).

    At equal TP both are :func:`twin.parallel.kv_bytes_per_token_per_gpu`.
    """
    check_tp_pair(prefill_tp, decode_tp)
    check_layout(model, Layout(prefill_tp))
    check_layout(model, Layout(decode_tp))
    send = recv = Fraction(0)
    fan_out = max(decode_tp // prefill_tp, 1)  # decode ranks one prefill rank serves
    fan_in = max(prefill_tp // decode_tp, 1)  # prefill ranks one decode rank pulls from
    for kind, n in model.mixer_counts.items():
        full = Fraction(mx.kv_bytes_per_token(model, kind))
        if not full:
            continue
        if kind in mx.GQA_KINDS:
            if fan_in > 1:
                one = full * kv_head_share(model, prefill_tp)  # a prefill rank's heads
                send, recv = send + n * one, recv + n * fan_in * one
            else:
                one = full * kv_head_share(model, decode_tp)  # a decode rank's heads
                send, recv = send + n * fan_out * one, recv + n * one
        else:  # replicated on every rank (MLA's latent)
            send, recv = send + n * fan_out * full, recv + n * full
    return send, recv
