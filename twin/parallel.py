"""A parallel layout of one replica: tensor, expert and attention-data parallelism, and
what each GPU holds under it.

``Layout(tp, ep, dp)`` is one replica of ``tp`` GPUs (one pipeline stage; pipeline
parallelism is not modelled yet):

- **tp**: the GPUs. Without the other two, every layer is split ``tp`` ways (Megatron
  style: heads, FFN columns, vocabulary rows), as the twin always priced it.
- **ep** (``--ep``): expert parallelism. The routed experts are dealt out to ``ep``
  ranks, ``n_experts / ep`` each, and each of those is split ``tp / ep`` ways (MoE TP);
  TensorRT-LLM's ``moe_ep_size`` x ``moe_tp_size`` = ``tp_size``, SGLang's
  ``--ep-size`` within ``--tp``, vLLM's ``--enable-expert-parallel`` (ep = tp), and the
  ``moe_ep_size``/``moe_tp_size`` columns of aiconfigurator's ``silicon_sample.csv``.
- **dp** (``--dp-attention``): attention data parallelism. The attention (and every
  other non-FFN weight: mixers, norms, embeddings, LM head, routers) runs ``dp``
  replicas, each split ``tp / dp`` ways; the FFNs stay split over all ``tp`` GPUs.
  SGLang's ``--dp D --enable-dp-attention``, TensorRT-LLM's ``enable_attention_dp``
  (dp = tp), the CSV's ``attention_dp_size``.

Dense FFN layers and shared experts are split over all ``tp`` GPUs (SGLang's default
``moe_dense_tp_size``, None: the full TP group; TensorRT-LLM shards them like the MoE
TP), so at ``dp = 1`` the bytes of all GPUs add up to the model's ``weight_bytes``.

A layout the model cannot take is refused with one line naming the flag: experts not
divisible by ``--ep``, heads not divisible by the attention TP (``tp / dp``; the engines
shard heads evenly), an ``--ep`` or ``--dp-attention`` that does not divide ``--tp``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from twin import mixers as mx
from twin import precision as px
from twin.errors import TwinError
from twin.model import ModelSpec


@dataclass(frozen=True)
class Layout:
    """One replica's parallel layout: ``tp`` GPUs, ``ep`` expert ranks, ``dp`` attention
    data-parallel ranks (see the module docstring)."""

    tp: int = 1
    ep: int = 1
    dp: int = 1

    def __post_init__(self) -> None:
        for flag, v in (("--tp", self.tp), ("--ep", self.ep), ("--dp-attention", self.dp)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise TwinError(f"{flag} must be a positive integer (got {v!r})")
        for flag, v in (("--ep", self.ep), ("--dp-attention", self.dp)):
            if self.tp % v:
                raise TwinError(f"{flag} {v} must divide --tp {self.tp} (the replica's GPUs)")

    @property
    def attention_tp(self) -> int:
        """GPUs each attention replica is split over: ``tp / dp``."""
        return self.tp // self.dp

    @property
    def moe_tp(self) -> int:
        """GPUs each routed expert is split over: ``tp / ep``."""
        return self.tp // self.ep


def check_layout(m: ModelSpec, layout: Layout) -> None:
    """Refuse a layout ``m`` cannot take, with one line naming the flag."""
    if layout.ep > 1:
        if not m.n_moe_layers:
            raise TwinError(f"--ep {layout.ep}: model {m.name!r} has no MoE layers")
        if m.moe_n_experts % layout.ep:
            raise TwinError(
                f"--ep {layout.ep} does not divide the {m.moe_n_experts} routed experts "
                f"of model {m.name!r}"
            )
    kinds = m.mixer_counts
    heads = m.n_heads if any(kinds.get(k) for k in mx.KV_KINDS) else 0
    a_tp = layout.attention_tp
    if heads and heads % a_tp:
        flag = f"--tp {layout.tp}" + (f" / --dp-attention {layout.dp}" if layout.dp > 1 else "")
        raise TwinError(
            f"{flag} = {a_tp} does not divide the {heads} attention heads of model {m.name!r}"
        )
    if kinds.get("gdn") and m.gdn_v_heads % a_tp:
        raise TwinError(
            f"--tp {layout.tp}: attention TP {a_tp} does not divide the {m.gdn_v_heads} "
            f"GDN value heads of model {m.name!r}"
        )


def weight_bytes_per_gpu(m: ModelSpec, layout: Layout) -> int:
    """Bytes of weights one GPU holds under ``layout`` (rounded up): the non-FFN weights
    over ``tp / dp`` GPUs (replicated ``dp`` times), dense FFNs and shared experts over
    ``tp``, the routed experts ``n / ep`` per rank split ``tp / ep`` ways; each part in
    its precision (``twin.precision``). At ``dp = 1`` the GPUs hold ``weight_bytes``."""
    check_layout(m, layout)
    g = m.param_groups
    dense, moe = px.weight_format(m.precision), px.moe_format(m)
    e = m.dtype_bytes
    attention_side = px.param_bytes(m, g["mixer_linear"], dense) + Fraction(
        (g["mixer_other"] + g["other"]) * e
    )
    ffn = px.param_bytes(m, g["mlp_linear"], dense) + px.param_bytes(m, g["shared_experts"], moe)
    routed = px.param_bytes(m, g["routed_experts"], moe) / layout.ep / layout.moe_tp
    return math.ceil(attention_side / layout.attention_tp + ffn / layout.tp + routed)


def kv_bytes_per_token_per_gpu(m: ModelSpec, layout: Layout) -> Fraction:
    """KV bytes one GPU holds per token of a sequence its attention replica serves.

    GQA K and V split by KV heads over ``tp / dp`` (KV heads below that are replicated,
    as vLLM does); MLA's latent is not split by heads: every attention-TP rank holds all
    of it (vLLM's MLA layers have one KV head, ``get_kv_cache_shape`` in
    ``vllm/v1/attention/backends/mla/common.py``)."""
    check_layout(m, layout)
    a_tp, out = layout.attention_tp, Fraction(0)
    for kind, n in m.mixer_counts.items():
        per = Fraction(mx.kv_bytes_per_token(m, kind))
        if kind in mx.GQA_KINDS:
            per *= kv_head_share(m, a_tp)
        out += n * per
    return out


def kv_head_share(m: ModelSpec, attention_tp: int) -> Fraction:
    """The share of a GQA layer's K and V one of ``attention_tp`` GPUs holds: its
    ``max(n_kv_heads // attention_tp, 1)`` heads of ``n_kv_heads`` (KV heads fewer than
    the GPUs are replicated, as vLLM does and SGLang's ``compute_head_slice_params``,
    0.5.23 ``disaggregation/common/staging_buffer.py``, counts them)."""
    return Fraction(max(m.n_kv_heads // attention_tp, 1), m.n_kv_heads)


__all__ = [
    "Layout",
    "check_layout",
    "kv_bytes_per_token_per_gpu",
    "kv_head_share",
    "weight_bytes_per_gpu",
]
