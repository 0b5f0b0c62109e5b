"""Model shapes and what they cost: cache bytes, weight bytes and prefill FLOPs.

A ``ModelSpec`` describes a decoder-only model by how many layers of each kind
it has (attention, SSM, dense MLP, MoE) and their widths. Everything the
prefix cache and the cost model need is derived from it: KV bytes per token,
the bytes of one SSM checkpoint (every SSM layer's recurrent state plus its
conv state), the weight bytes, and the FLOPs of a prefill of ``n_new`` tokens
after ``n_cached`` cached ones, split by layer kind.

FLOPs count 2 per multiply-add. They are computed with Python integers and
converted to float at the end, so ``prefill_flops(a + b, 0)`` equals
``prefill_flops(a, 0) + prefill_flops(b, a)`` exactly (below 2**53).
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

from twin import mixers as mx
from twin.errors import TwinError
from twin.mixers import keys_upto
from twin.model_checks import check_fields, check_name, check_pattern_size

FLOP_KINDS = ("attention", "ssm", "mlp", "moe")


class FlopBreakdown(dict[str, float]):
    """FLOPs by layer kind (keys ``attention``, ``ssm``, ``mlp``, ``moe``); ``.total`` sums them."""

    @property
    def total(self) -> float:
        """Sum over layer kinds."""
        return float(sum(self.values()))


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """Shape of a (hybrid) decoder-only LLM; see the module docstring."""

    name: str  # registry / display name
    n_attention_layers: int = 0  # layers holding a KV cache (self-attention)
    n_ssm_layers: int = 0  # Mamba(2) layers holding a recurrent state
    n_mlp_layers: int = 0  # dense MLP (FFN) layers
    n_moe_layers: int = 0  # mixture-of-experts FFN layers
    d_model: int  # hidden size
    n_heads: int = 0  # attention query heads
    n_kv_heads: int = 0  # attention key/value heads (GQA when < n_heads)
    head_dim: int = 0  # attention head dimension
    mlp_d_ff: int = 0  # dense MLP intermediate size
    mlp_gated: bool = True  # SwiGLU-style (3 matrices) for MLP and experts; else 2
    moe_n_experts: int = 0  # routed experts per MoE layer
    moe_top_k: int = 0  # experts each token goes through
    moe_d_ff: int = 0  # expert intermediate size
    ssm_d_state: int = 0  # N: state size per channel
    ssm_expand: float = 2  # d_inner = expand * d_model (in/out projections, conv channels)
    ssm_state_channels: int | None = None  # n_ssm_heads * ssm_head_dim; None -> d_inner
    ssm_head_dim: int = 64  # P: channels per SSM head
    ssm_groups: int = 1  # G: groups sharing B and C
    ssm_conv_kernel: int = 4  # causal conv width
    ssm_chunk_size: int = 256  # SSD chunk length Q
    vocab_size: int  # embedding rows
    dtype_bytes: int = 2  # unquantised weights, activations and KV (fp16/bf16)
    state_dtype_bytes: int = 2  # SSM recurrent state
    sliding_window: int | None = None  # attention window in tokens; None = full causal
    tie_embeddings: bool = False  # LM head shares the embedding matrix
    shared_block_copies: int | None = None  # Zamba2: distinct attention/MLP weight copies
    # Per-layer pattern (see twin.mixers): one token per layer, "MIXER[+MIXER][/FFN]" or
    # "FFN" alone, MIXER in attention|swa|mamba1|mamba2|gdn, FFN in mlp|moe. When given,
    # the four layer counts are derived from it; when None, counts describe the model
    # (attention layers are "swa" if sliding_window is set, SSM layers "mamba2").
    layers: tuple[str, ...] | None = None
    attn_output_gate: bool = False  # gated attention (Qwen3-Next): q_proj also emits a gate
    # An RMSNorm over the whole query projection and one over the whole key projection,
    # every head together (MiniMax-M2): under tensor parallelism each rank holds a slice,
    # so the variances are all-reduced across the ranks every attention layer. Per-head
    # q/k norms (Qwen3) are not this and are not priced (``twin.costmodel.dense_pricing``).
    qk_norm_across_heads: bool = False
    ssm_dt_rank: int = 0  # Mamba-1 dt rank; 0 -> ceil(d_model / 16) (mamba_ssm default)
    gdn_k_heads: int = 0  # Gated DeltaNet query/key heads
    gdn_v_heads: int = 0  # Gated DeltaNet value heads (one state each)
    gdn_head_k_dim: int = 0  # key head dim
    gdn_head_v_dim: int = 0  # value head dim
    gdn_conv_kernel: int = 4  # causal conv width over q, k, v
    gdn_chunk_size: int = 64  # chunk length of the chunked delta rule (FLA default)
    moe_shared_d_ff: int = 0  # shared-expert intermediate size (0: none), every MoE layer
    # Group-limited routing (DeepSeek-V3's ``n_group`` / ``topk_group``): the experts split
    # into ``moe_n_group`` groups and a token's top-k drawn from its ``moe_topk_group``
    # best groups; 1 / 1: plain top-k. What the kernel tables' EP rows timed depends on it
    # (``twin.costmodel.moe_layout``).
    moe_n_group: int = 1
    moe_topk_group: int = 1
    # Multi-head latent attention (``mla`` layers, twin.mixers; the Hugging Face names).
    q_lora_rank: int = 0  # query latent; 0: one q_proj (a null q_lora_rank in the config)
    kv_lora_rank: int = 0  # KV latent cached per token and layer
    qk_nope_head_dim: int = 0  # per-head query/key width without RoPE
    qk_rope_head_dim: int = 0  # per-head query width with RoPE; the key's, shared by heads
    v_head_dim: int = 0  # per-head value width
    # DeepSeek Sparse Attention's indexer in every MLA layer (GLM-5, DeepSeek-V3.2; 0:
    # none): its query heads and head width, and the keys it picks for each query
    # (``index_topk``). Its launches are priced (``twin.costmodel.mla_pricing``), and its
    # top-k where an engine's prefill runs the sparse kernel (``KernelLayout``); its
    # weights are not counted.
    index_n_heads: int = 0
    index_head_dim: int = 0
    index_topk: int = 0
    # Multi-token-prediction modules the checkpoint carries (DeepSeek-V3's
    # num_nextn_predict_layers): each one decoder layer like the stack's last, an
    # eh_proj (2d -> d), three norms and its own embedding and LM head. Counted apart
    # (``mtp_params``), never in ``n_params``/``weight_bytes``: the twin runs no MTP yet.
    mtp_layers: int = 0
    # Precision (twin.precision): the linear layers' weights and activations, the experts'
    # (None: as the linear layers) and the KV cache. bf16 is ``dtype_bytes`` unquantised.
    precision: str = "bf16"
    moe_precision: str | None = None
    kv_dtype: str = "bf16"
    source: str = ""  # citation of the config / model card / paper

    # ------------------------------------------------------------------ checks
    def __post_init__(self) -> None:
        check_name(self.name)
        if self.layers is not None:
            check_pattern_size(self)
            self._derive_counts()
        check_fields(self)

    # ------------------------------------------------------------------ kinds
    @property
    def is_hybrid(self) -> bool:
        """Both attention and SSM layers."""
        return self.n_attention_layers > 0 and self.n_ssm_layers > 0

    @property
    def is_transformer(self) -> bool:
        """No SSM layers."""
        return self.n_ssm_layers == 0

    @property
    def kind(self) -> str:
        """``hybrid``, ``transformer`` or ``ssm``."""
        if self.is_hybrid:
            return "hybrid"
        return "transformer" if self.is_transformer else "ssm"

    # ------------------------------------------------------------------ SSM widths
    @property
    def d_inner(self) -> int:
        """Width of the SSM in/out projections and conv (expand * d_model)."""
        return round(self.ssm_expand * self.d_model)

    @property
    def state_channels(self) -> int:
        """Channels carrying the recurrent state (n_ssm_heads * ssm_head_dim)."""
        return self.d_inner if self.ssm_state_channels is None else self.ssm_state_channels

    @property
    def n_ssm_heads(self) -> int:
        """SSM heads (each with its own A, D and dt)."""
        return self.state_channels // self.ssm_head_dim

    @property
    def conv_channels(self) -> int:
        """Channels of the causal conv: it runs over x, B and C (Mamba2)."""
        return self.d_inner + 2 * self.ssm_groups * self.ssm_d_state

    # ------------------------------------------------------------------ layer pattern
    def _derive_counts(self) -> None:
        """Set the four layer counts from ``layers`` (refusing counts that disagree)."""
        from twin.layer_pattern import parse_layers

        assert self.layers is not None
        layers, counts = parse_layers(self.name, self.layers)
        object.__setattr__(self, "layers", layers)
        for f, n in counts.items():
            given = getattr(self, f)
            if given not in (0, n):
                raise TwinError(
                    f"model {self.name!r}: field {f!r} is {given} but the layer pattern "
                    f"has {n} (leave the counts out when giving layers)"
                )
            object.__setattr__(self, f, n)

    @functools.cached_property
    def mixer_counts(self) -> Mapping[str, int]:
        """Layers of each mixer kind (a parallel hybrid layer counts for each of its kinds).

        Computed once per spec (bytes and FLOPs ask for it on every call); read-only,
        so no caller can change the spec's answer.
        """
        return MappingProxyType(self._count_mixers())

    def _count_mixers(self) -> dict[str, int]:
        from twin.layer_pattern import layer_parts

        out: dict[str, int] = {}
        if self.layers is None:
            if self.n_attention_layers:
                kind = "swa" if self.sliding_window is not None else "attention"
                out[kind] = self.n_attention_layers
            if self.n_ssm_layers:
                out["mamba2"] = self.n_ssm_layers
            return out
        for token in self.layers:
            for kind in layer_parts(token)[0]:
                out[kind] = out.get(kind, 0) + 1
        return out

    @property
    def pattern(self) -> str:
        """The layer stack, compactly: ``(3 gdn/moe, 1 attn/moe) x 12``."""
        from twin.layer_pattern import describe

        return describe(self)

    # ------------------------------------------------------------------ bytes
    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of one token over all attention layers (full and sliding-window)."""
        return sum(n * mx.kv_bytes_per_token(self, k) for k, n in self.mixer_counts.items())

    def kv_bytes_per_token_of(self, kind: str) -> int:
        """K and V of one token over the layers of one kind (``attention``, ``swa``, ``mla``)."""
        return self.mixer_counts.get(kind, 0) * mx.kv_bytes_per_token(self, kind)

    @property
    def full_kv_bytes_per_token(self) -> int:
        """KV of one token over the layers that need every prefix token (full attention
        and MLA: the cache's full-attention hit rule, ``twin.cache.kinds``)."""
        return sum(self.kv_bytes_per_token_of(k) for k in sorted(mx.FULL_KV_KINDS))

    @property
    def ssm_state_bytes_per_layer(self) -> int:
        """Recurrent state plus conv state of one recurrent layer (their mean if kinds differ).

        mamba_ssm's inference cache keeps the full conv kernel width per channel.
        """
        return self.ssm_checkpoint_bytes // self.n_ssm_layers if self.n_ssm_layers else 0

    def state_bytes_of(self, kind: str) -> int:
        """Recurrent + conv state of every layer of one recurrent kind."""
        return self.mixer_counts.get(kind, 0) * mx.state_bytes(self, kind)

    @property
    def ssm_checkpoint_bytes(self) -> int:
        """One checkpoint: every recurrent layer's state + conv state."""
        return sum(n * mx.state_bytes(self, k) for k, n in self.mixer_counts.items())

    @property
    def weight_bytes(self) -> int:
        """Bytes of all parameters: the linear layers' at ``precision``, the experts' at
        theirs, the rest at ``dtype_bytes`` (``twin.precision.weight_bytes``)."""
        from twin import precision as px

        return px.weight_bytes(self, *self.param_parts)

    @property
    def n_params(self) -> int:
        """Parameter count (all experts included)."""
        return sum(self.param_parts)

    @property
    def param_parts(self) -> tuple[int, int, int]:
        """Parameters as (dense linear layers, MoE experts, everything else).

        The linear layers are the projections the cost model prices as GEMMs (attention
        QKV/O, MLA's projections, the recurrent mixers' projections, MLP matrices); the
        experts are every routed and shared expert matrix; the rest (embeddings, LM head,
        norms, convs, the recurrent mixers' small parameters, the MoE router) stay
        unquantised (``twin.precision``). Sums of :attr:`param_groups`.
        """
        g = self.param_groups
        return (
            g["mixer_linear"] + g["mlp_linear"],
            g["routed_experts"] + g["shared_experts"],
            g["mixer_other"] + g["other"],
        )

    @functools.cached_property
    def param_groups(self) -> Mapping[str, int]:
        """Parameters by where a parallel layout puts them (``twin.parallel``):
        ``mixer_linear`` and ``mixer_other`` (the sequence mixers' projections and their
        norms, convs, small parameters), ``mlp_linear`` (dense FFN matrices),
        ``routed_experts``, ``shared_experts``, ``other`` (embeddings, LM head, FFN
        pre-norms, the MoE routers, the final norm). Computed once; read-only."""
        d = self.d_model
        mats = 3 if self.mlp_gated else 2
        n_mlp = self.n_mlp_layers
        mixer_linear = mixer_other = 0
        for kind, n in self.mixer_counts.items():
            if kind in mx.KV_KINDS and self.shared_block_copies is not None:
                # Zamba2: the attention+MLP blocks are shared; only this many copies exist.
                n = min(n, self.shared_block_copies)
            lin = mx.linear_params(self, kind)
            mixer_linear += n * lin
            mixer_other += n * (mx.params(self, kind) - lin)
        if self.shared_block_copies is not None:
            n_mlp = min(n_mlp, self.shared_block_copies)
        other = n_mlp * d  # the MLP's pre-norm
        other += self.n_moe_layers * (d * self.moe_n_experts + d)  # router + pre-norm
        embed = self.vocab_size * d * (1 if self.tie_embeddings else 2)
        other += embed + d  # + final norm
        return MappingProxyType(
            {
                "mixer_linear": mixer_linear,
                "mixer_other": mixer_other,
                "mlp_linear": n_mlp * mats * d * self.mlp_d_ff,
                "routed_experts": self.n_moe_layers * self.moe_n_experts * mats * d * self.moe_d_ff,
                "shared_experts": self.n_moe_layers * mats * d * self.moe_shared_d_ff,
                "other": other,
            }
        )

    @property
    def mtp_params(self) -> int:
        """Parameters of the ``mtp_layers`` multi-token-prediction modules (DeepSeek-V3's
        ``model.layers.61``: enorm, hnorm, eh_proj 2d -> d, one decoder layer like the
        stack's last, the shared head's norm, and the embedding and LM head the checkpoint
        stores again in it; vLLM's ``DeepSeekMultiTokenPredictorLayer`` loads them all)."""
        if not self.mtp_layers:
            return 0
        from twin.layer_pattern import layer_parts

        d, mats = self.d_model, 3 if self.mlp_gated else 2
        last = self.layers[-1] if self.layers else None
        kinds, ffn = layer_parts(last) if last else (tuple(self.mixer_counts)[:1], "mlp")
        layer = sum(mx.params(self, k) for k in kinds) + d
        if ffn == "moe":
            experts = self.moe_n_experts * self.moe_d_ff + self.moe_shared_d_ff
            layer += mats * d * experts + d * self.moe_n_experts
        elif ffn == "mlp":
            layer += mats * d * self.mlp_d_ff
        one = layer + 2 * d * d + 3 * d + 2 * self.vocab_size * d
        return self.mtp_layers * one

    # ------------------------------------------------------------------ FLOPs
    def prefill_flops_by_mixer(self, n_new: int, n_cached: int = 0) -> dict[str, int]:
        """Exact integer FLOPs of every mixer kind's layers (prefill of ``n_new`` after
        ``n_cached``), keyed by kind; FFNs are in ``prefill_flops``."""
        n_new, n_cached = _check_counts(n_new, n_cached)
        return {
            k: n * mx.prefill_flops(self, k, n_new, n_cached) for k, n in self.mixer_counts.items()
        }

    def prefill_flops(self, n_new: int, n_cached: int = 0) -> FlopBreakdown:
        """FLOPs of prefilling ``n_new`` tokens after ``n_cached`` cached ones, by layer kind.

        ``attention`` sums the attention and sliding-window layers, ``ssm`` every
        recurrent kind (``prefill_flops_by_mixer`` splits them). The LM head is left
        out: a prefill needs logits for its last token only.
        """
        by_mixer = self.prefill_flops_by_mixer(n_new, n_cached)
        n, d = n_new, self.d_model
        mats = 3 if self.mlp_gated else 2
        mlp = 2 * n * d * self.mlp_d_ff * mats
        # MoE: top_k experts (plus the shared one) per token and the router's GEMM.
        moe = 2 * n * d * (self.moe_d_ff * self.moe_top_k + self.moe_shared_d_ff) * mats
        moe += 2 * n * d * self.moe_n_experts
        return FlopBreakdown(
            attention=float(sum(v for k, v in by_mixer.items() if k in mx.KV_KINDS)),
            ssm=float(sum(v for k, v in by_mixer.items() if k in mx.RECURRENT_KINDS)),
            mlp=float(self.n_mlp_layers * mlp),
            moe=float(self.n_moe_layers * moe),
        )

    def decode_flops(self, context: int) -> FlopBreakdown:
        """FLOPs of decoding one token after ``context`` tokens, by layer kind: a prefill
        of one token except for MLA layers, which decode in the absorbed form
        (``twin.mixers.decode_flops``)."""
        context = _check_counts(1, context)[1]
        out = self.prefill_flops(1, context)
        mla = self.mixer_counts.get("mla", 0)
        if mla:
            delta = mx.decode_flops(self, "mla", context) - mx.prefill_flops(
                self, "mla", 1, context
            )
            out["attention"] += float(mla * delta)
        return out

    # ------------------------------------------------------------------ I/O
    def to_dict(self, derived: bool = True) -> dict[str, Any]:
        """Plain JSON-ready dict of the fields, plus derived sizes when ``derived``."""
        out: dict[str, Any] = dataclasses.asdict(self)
        if derived:
            out.update(
                kind=self.kind,
                d_inner=self.d_inner if self.n_ssm_layers else 0,
                kv_bytes_per_token=self.kv_bytes_per_token,
                ssm_state_bytes_per_layer=self.ssm_state_bytes_per_layer,
                ssm_checkpoint_bytes=self.ssm_checkpoint_bytes,
                pattern=self.pattern,
                n_params=self.n_params,
                weight_bytes=self.weight_bytes,
                mtp_params=self.mtp_params,
            )
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelSpec:
        """Inverse of ``to_dict`` (derived keys are ignored; unknown keys are refused)."""
        names = {f.name for f in fields(cls)}
        derived = {
            "kind",
            "d_inner",
            "kv_bytes_per_token",
            "ssm_state_bytes_per_layer",
            "ssm_checkpoint_bytes",
            "pattern",
            "n_params",
            "weight_bytes",
            "mtp_params",
        }
        unknown = sorted(set(data) - names - derived)
        if unknown:
            raise TwinError(f"unknown model field(s): {', '.join(unknown)}")
        try:
            return cls(**{k: v for k, v in data.items() if k in names})
        except TypeError as err:  # a required field is missing
            raise TwinError(f"model description incomplete: {err}") from None

    @staticmethod
    def from_hf_config(path: str | Path, name: str | None = None) -> ModelSpec:
        """Read a Hugging Face ``config.json``; see :func:`twin.hf_config.from_hf_config`."""
        from twin.hf_config import from_hf_config  # late import: hf_config imports us

        return from_hf_config(path, name=name)


def _check_counts(n_new: int, n_cached: int) -> tuple[int, int]:
    """Validate token counts; return them as Python ints (numpy ints would overflow)."""
    out = []
    for label, v in (("n_new", n_new), ("n_cached", n_cached)):
        try:
            iv = operator.index(v)
        except TypeError:
            iv = -1
        if isinstance(v, bool) or iv < 0:
            raise TwinError(f"{label} must be a non-negative integer (got {v!r})")
        out.append(iv)
    return out[0], out[1]


__all__ = ["FLOP_KINDS", "FlopBreakdown", "ModelSpec", "keys_upto"]
