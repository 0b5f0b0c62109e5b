"""A parallel layout of one replica: tensor, expert, attention-data and pipeline
parallelism, and what each GPU holds under it.

``Layout(tp, ep, dp, pp)`` is one replica of ``tp x pp`` GPUs: ``pp`` pipeline stages of
``tp`` GPUs each:

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
- **pp** (``--pp``): pipeline parallelism. The layers are split into ``pp`` contiguous
  stages (:func:`stage_sizes`: the engine's ``get_pp_indices``), each held by its own ``tp``
  GPUs; the embedding sits on the first stage, the final norm and the LM head on the
  last (vLLM's ``PPMissingLayer`` elsewhere), so a GPU holds its stage's layers, their
  KV and states (:func:`stage_models`, :func:`stage_weight_bytes_per_gpu`,
  :func:`stage_shares`; the tightest stage sets the pool:
  ``twin.engine.budget.memory_budget``). The engine's stages and micro-batches are
  ``twin.engine.pipeline``.

Dense FFN layers and shared experts are split over all ``tp`` GPUs (SGLang's default
``moe_dense_tp_size``, None: the full TP group; TensorRT-LLM shards them like the MoE
TP), so at ``dp = 1`` the bytes of all GPUs add up to the model's ``weight_bytes``, but
for MLA's q_a/kv_a projection and its norms, which every attention-TP rank holds whole
(``mixers.mla_replicated_params``).

A layout the model cannot take is refused with one line naming the flag: experts not
divisible by ``--ep``, heads not divisible by the attention TP (``tp / dp``; the engines
shard heads evenly), an ``--ep`` or ``--dp-attention`` that does not divide ``--tp``, a
``--pp`` above the model's layers.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from twin import mixers as mx
from twin import precision as px
from twin.errors import TwinError
from twin.model import ModelSpec


@dataclass(frozen=True)
class Layout:
    """One replica's parallel layout: ``tp`` GPUs a stage, ``ep`` expert ranks, ``dp``
    attention data-parallel ranks, ``pp`` pipeline stages (see the module docstring)."""

    tp: int = 1
    ep: int = 1
    dp: int = 1
    pp: int = 1
    pp_split: str = "vllm"  # how the layers are dealt to the stages (PP_SPLITS)

    def __post_init__(self) -> None:
        flags = (
            ("--tp", self.tp),
            ("--ep", self.ep),
            ("--dp-attention", self.dp),
            ("--pp", self.pp),
        )
        for flag, v in flags:
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise TwinError(f"{flag} must be a positive integer (got {v!r})")
        if self.pp_split not in PP_SPLITS:
            raise TwinError(f"unknown pipeline split {self.pp_split!r}; one of {PP_SPLITS}")
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
    if layout.pp > 1:
        n = len(layer_tokens(m, layout.pp))
        if n < layout.pp:
            raise TwinError(
                f"--pp {layout.pp}: model {m.name!r} has {n} layer(s), fewer than the "
                "pipeline stages (each stage holds at least one layer)"
            )
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
    over ``tp / dp`` GPUs (replicated ``dp`` times) but MLA's q_a/kv_a projection and
    norms, whole on every GPU; dense FFNs and shared experts over ``tp``, the routed
    experts ``n / ep`` per rank split ``tp / ep`` ways; each part in its precision
    (``twin.precision``). At ``dp = 1`` and without MLA the GPUs hold ``weight_bytes``.
    With pipeline stages (``pp > 1``): the most any stage's GPU holds
    (:func:`stage_weight_bytes_per_gpu`)."""
    if layout.pp > 1:
        return max(stage_weight_bytes_per_gpu(m, layout))
    check_layout(m, layout)
    return math.ceil(_weight_bytes_per_gpu(m, layout))


def _weight_bytes_per_gpu(m: ModelSpec, layout: Layout) -> Fraction:
    """:func:`weight_bytes_per_gpu` of one stage holding all of ``m``, not rounded."""
    g = m.param_groups
    dense, moe = px.weight_format(m.precision), px.moe_format(m)
    e = m.dtype_bytes
    n_mla = m.mixer_counts.get("mla", 0)
    rep_linear, rep_norms = mx.mla_replicated_params(m) if n_mla else (0, 0)
    rep_linear, rep_norms = n_mla * rep_linear, n_mla * rep_norms
    attention_side = px.param_bytes(m, g["mixer_linear"] - rep_linear, dense) + Fraction(
        (g["mixer_other"] - rep_norms + g["other"]) * e
    )
    whole = px.param_bytes(m, rep_linear, dense) + Fraction(rep_norms * e)
    ffn = px.param_bytes(m, g["mlp_linear"], dense) + px.param_bytes(m, g["shared_experts"], moe)
    routed = px.param_bytes(m, g["routed_experts"], moe) / layout.ep / layout.moe_tp
    return attention_side / layout.attention_tp + whole + ffn / layout.tp + routed


def kv_bytes_per_token_per_gpu(m: ModelSpec, layout: Layout) -> Fraction:
    """KV bytes one GPU holds per token of a sequence its attention replica serves.

    GQA K and V split by KV heads over ``tp / dp`` (KV heads below that are replicated,
    as vLLM does); MLA's latent is not split by heads: every attention-TP rank holds all
    of it (vLLM's MLA layers have one KV head, ``get_kv_cache_shape`` in
    ``vllm/v1/attention/backends/mla/common.py``; SGLang's ``MLATokenToKVPool`` keeps
    ``kv_lora_rank + qk_rope_head_dim`` per token and layer on every rank,
    ``python/sglang/srt/mem_cache/memory_pool.py``; TensorRT-LLM's MLA cache is one KV
    head of that width, ``num_kv_heads=1`` in its ``KVCacheManager``)."""
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


# ------------------------------------------------------------------ pipeline stages
def layer_tokens(m: ModelSpec, pp: int = 2) -> tuple[str, ...]:
    """``m``'s layer stack, one pattern token a layer (``twin.layer_pattern``): its
    ``layers``, or for a model given by counts alone the stack those counts describe
    where it is one kind of layer repeated (a transformer, a pure SSM); a hybrid given by
    counts has no order to cut into stages and is refused (``--pp`` names it)."""
    if m.layers is not None:
        return tuple(m.layers)
    mixers = {k: n for k, n in m.mixer_counts.items() if n}
    ffns = {k: n for k, n in (("mlp", m.n_mlp_layers), ("moe", m.n_moe_layers)) if n}
    if len(mixers) == 1 and len(ffns) <= 1:
        ((mixer, n),) = mixers.items()
        ffn = next(iter(ffns), None)
        if ffn is None or ffns[ffn] == n:
            return (f"{mixer}/{ffn}" if ffn else mixer,) * n
    raise TwinError(
        f"--pp {pp}: model {m.name!r} gives layer counts without their order "
        "(a hybrid); pipeline stages need its per-layer pattern (--model-set layers=...)"
    )


# How an engine deals the layers to its stages by default (:func:`stage_sizes`); engines
# not named split as vLLM does (TensorRT-LLM's default was not read here).
PP_SPLITS = ("vllm", "sglang")
PP_SPLIT_OF_ENGINE = {"sglang": "sglang"}


def stage_sizes(n_layers: int, pp: int, split: str = "vllm") -> list[int]:
    """Layers of each of ``pp`` stages, ``n_layers // pp`` each and the remainder one more
    each to some: ``vllm``, to the stages before the last, from the second-to-last
    backwards (vLLM 0.19.0 ``vllm/distributed/utils.py`` ``get_pp_indices`` without
    ``VLLM_PP_LAYER_PARTITION``: the last stage carries the final norm and LM head, so it
    is not given an extra layer); ``sglang``, to the last ones (SGLang 0.5.10.post1
    ``python/sglang/srt/distributed/utils.py`` ``get_pp_indices`` without
    ``SGLANG_PP_LAYER_PARTITION``)."""
    sizes = [n_layers // pp] * pp
    extra = n_layers % pp
    if split == "sglang":
        for i in range(pp - extra, pp):
            sizes[i] += 1
        return sizes
    for i in range(2, extra + 2):
        sizes[-i] += 1
    return sizes


def stage_models(m: ModelSpec, pp: int, split: str = "vllm") -> tuple[ModelSpec, ...]:
    """``m`` cut into ``pp`` stages (:func:`stage_sizes` by ``split``), each a
    ``ModelSpec`` of its own layers (the same name and shapes). Each still counts the
    whole embedding, final norm and LM head in its ``weight_bytes``;
    :func:`stage_weight_bytes_per_gpu` puts them on the first and last stages."""
    check_layout(m, Layout(pp=pp, pp_split=split))
    tokens = layer_tokens(m, pp)
    out: list[ModelSpec] = []
    start = 0
    for n in stage_sizes(len(tokens), pp, split):
        out.append(
            dataclasses.replace(
                m,
                layers=tokens[start : start + n],
                n_attention_layers=0,
                n_ssm_layers=0,
                n_mlp_layers=0,
                n_moe_layers=0,
                mtp_layers=0,
            )
        )
        start += n
    return tuple(out)


def _io_params(m: ModelSpec, first: bool, last: bool) -> int:
    """Embedding, final norm and LM head parameters a stage holds: the embedding on the
    first, the final norm and the LM head on the last. With more than one stage a tied LM
    head is its own copy on the last stage (vLLM's ``ParallelLMHead`` there; the
    embedding it would share sits on another GPU)."""
    d, vocab = m.d_model, m.vocab_size
    if first and last:
        return vocab * d * (1 if m.tie_embeddings else 2) + d
    return (vocab * d if first else 0) + (vocab * d + d if last else 0)


def stage_weight_bytes_per_gpu(m: ModelSpec, layout: Layout) -> list[int]:
    """Bytes of weights one GPU of each stage holds (rounded up): its stage's layers under
    the stage's ``tp``/``ep``/``dp`` (:func:`weight_bytes_per_gpu`), and the embedding,
    final norm and LM head where they sit (:func:`_io_params`), split as the non-FFN
    weights are (over ``tp / dp``)."""
    stages = stage_models(m, layout.pp, layout.pp_split)
    one = Layout(layout.tp, layout.ep, layout.dp)
    whole = _io_params(m, True, True)
    out = []
    for s, sm in enumerate(stages):
        io = _io_params(m, s == 0, s == len(stages) - 1) - whole
        per = _weight_bytes_per_gpu(sm, one) + Fraction(io * m.dtype_bytes, one.attention_tp)
        out.append(math.ceil(per))
    return out


def stage_shares(m: ModelSpec, pp: int, split: str = "vllm") -> list[Fraction]:
    """Each stage's share of what a request holds: the larger of its share of the
    model's KV bytes per token and of its recurrent states' bytes (a stage holds its own
    layers' KV and states only)."""
    stages = stage_models(m, pp, split)
    out = []
    for sm in stages:
        parts: Sequence[Fraction] = [
            Fraction(own, whole)
            for own, whole in (
                (sm.kv_bytes_per_token, m.kv_bytes_per_token),
                (sm.ssm_checkpoint_bytes, m.ssm_checkpoint_bytes),
            )
            if whole
        ]
        out.append(max(parts, default=Fraction(1, pp)))
    return out


__all__ = [
    "PP_SPLITS",
    "PP_SPLIT_OF_ENGINE",
    "Layout",
    "check_layout",
    "kv_bytes_per_token_per_gpu",
    "kv_head_share",
    "layer_tokens",
    "stage_models",
    "stage_shares",
    "stage_sizes",
    "stage_weight_bytes_per_gpu",
    "weight_bytes_per_gpu",
]
