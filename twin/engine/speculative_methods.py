"""The speculative-decoding methods (``twin.engine.speculative``), found by name in
:data:`METHODS`: what each drafts with (a draft model, an EAGLE or EAGLE-3 head, the
model's own MTP layers, n-gram lookup), the weights it adds and its published
acceptance default.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    pass

from twin.engine.speculative_acceptance import iid_length, iid_rate
from twin.errors import TwinError
from twin.model import ModelSpec


class Method:
    """How a speculative method drafts: its draft model (a ModelSpec, or none), the
    weights it adds, and its published acceptance default."""

    name: ClassVar[str]
    help: ClassVar[str]
    # A published acceptance length at a number of drafted tokens and its source: the
    # default acceptance (the per-token rate that gives it, iid_rate). None: must be given.
    published: ClassVar[tuple[float, int, str] | None] = None
    # Whether the draft is a layer of the target's own stack, run by the target's modules,
    # so its kernels are laid out as the target's (``twin.costmodel.kernel_layout``).
    target_layout: ClassVar[bool] = False

    def draft_spec(self, target: ModelSpec, draft_model: str) -> ModelSpec | None:
        """The draft as a model the cost model prices (None: drafting costs no GPU time)."""
        return None

    def weight_bytes(self, draft: ModelSpec) -> int:
        """Bytes of the weights the draft adds to the target's."""
        return draft.weight_bytes

    def default_length(self, k: int) -> tuple[float, str] | None:
        """The published default's acceptance length at ``k`` drafts, and its source."""
        if self.published is None:
            return None
        length, at, source = self.published
        rate = iid_rate(length, at)
        return iid_length(rate, k), f"default: per-token rate {rate:.3f} ({source})"


class DraftModel(Method):
    name = "draft_model"
    help = "a smaller model of the same vocabulary drafts (give it: a preset or config.json)"

    def draft_spec(self, target: ModelSpec, draft_model: str) -> ModelSpec | None:
        from twin.presets import resolve_model

        if not draft_model:
            raise TwinError(
                "speculative method draft_model: name the draft model (a preset or a "
                "config.json), e.g. vLLM's \"model\" key or SGLang's speculative_draft_model_path"
            )
        return resolve_model(draft_model)


def _head(target: ModelSpec, name: str, vocab: int) -> ModelSpec:
    """One Llama-style decoder layer at the target's width (EAGLE heads): the target's
    attention heads, its dense FFN width (its routed experts' active width on an MoE)."""
    heads = target.n_heads or max(target.d_model // 128, 1)
    d_ff = target.mlp_d_ff or target.moe_d_ff * max(target.moe_top_k, 1) or 4 * target.d_model
    return ModelSpec(
        name=f"{target.name}-{name}",
        n_attention_layers=1,
        n_mlp_layers=1,
        d_model=target.d_model,
        n_heads=heads,
        n_kv_heads=target.n_kv_heads or heads,
        head_dim=target.head_dim or target.d_model // heads,
        mlp_d_ff=d_ff,
        vocab_size=vocab,
        kv_dtype=target.kv_dtype,
        source=f"EAGLE head of {target.name} (one decoder layer at its width)",
    )


class Eagle(Method):
    name = "eagle"
    help = "an EAGLE head: one decoder layer on the target's features, the target's LM head"
    # vllm-project/vllm issue #20780 (EAGLE-1 head yuhuili/EAGLE-LLaMA3.1-Instruct-8B on
    # Llama-3.1-8B-Instruct, MT-bench, batch 1): acceptance length 2.39 at K=4.
    published = (2.39, 4, "EAGLE on Llama-3.1-8B, MT-bench: length 2.39 at 4, vLLM #20780")

    def draft_spec(self, target: ModelSpec, draft_model: str) -> ModelSpec | None:
        return _head(target, "eagle", target.vocab_size)

    def weight_bytes(self, draft: ModelSpec) -> int:
        # vLLM's EAGLE-1 heads share the target's embedding and LM head (they are not in
        # the head's checkpoint): the head adds its layer and its fc (2d -> d).
        d = draft.d_model
        shared = 2 * draft.vocab_size * d * draft.dtype_bytes
        return draft.weight_bytes - shared + 2 * d * d * draft.dtype_bytes


class Eagle3(Eagle):
    name = "eagle3"
    help = "an EAGLE-3 head: one layer on three of the target's layers, its own 32K LM head"
    # vllm-project/vllm issue #20780 (EAGLE-3 head yuhuili/EAGLE3-LLaMA3.1-Instruct-8B on
    # Llama-3.1-8B-Instruct, MT-bench, batch 1): acceptance length 3.08 at K=4.
    published = (3.08, 4, "EAGLE-3 on Llama-3.1-8B, MT-bench: length 3.08 at 4, vLLM #20780")
    # The EAGLE-3 heads' draft vocabulary: "draft_vocab_size": 32000 in the Llama-3.1-8B
    # head's config (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B, as converted by
    # nm-testing/EAGLE3-LLaMA3.1-Instruct-8B-converted config.json).
    DRAFT_VOCAB = 32000

    def draft_spec(self, target: ModelSpec, draft_model: str) -> ModelSpec | None:
        return _head(target, "eagle3", min(self.DRAFT_VOCAB, target.vocab_size))

    def weight_bytes(self, draft: ModelSpec) -> int:
        # Its own LM head over the draft vocabulary, the target's embedding, and an fc
        # fusing three of the target's hidden states (3d -> d).
        d = draft.d_model
        shared = draft.vocab_size * d * draft.dtype_bytes
        return draft.weight_bytes - shared + 3 * d * d * draft.dtype_bytes


class Mtp(Method):
    name = "mtp"
    help = "the model's own multi-token-prediction layers (DeepSeek-V3 and its kind)"
    # DeepSeek-V3 technical report (arXiv 2412.19437, sec. 5.4.3): "the acceptance rate of
    # the second token prediction ranges between 85% and 90%" (one MTP module); the
    # lower end as the per-token rate (length 1.85 at one draft).
    published = (1.85, 1, "MTP: DeepSeek-V3 report, 85-90% second-token acceptance")
    target_layout = True

    def draft_spec(self, target: ModelSpec, draft_model: str) -> ModelSpec | None:
        if not target.mtp_layers:
            raise TwinError(
                f"speculative method mtp: {target.name} carries no MTP layers (mtp_layers 0); "
                "use eagle/eagle3/draft_model/ngram, or give the model one "
                "(--model-set mtp_layers=1)"
            )
        # One module: a decoder layer like the stack's last (ModelSpec.mtp_params), with
        # the target's vocabulary.
        if target.layers is not None:
            return dataclasses.replace(
                target,
                name=f"{target.name}-mtp",
                layers=(target.layers[-1],),
                n_attention_layers=0,
                n_ssm_layers=0,
                n_mlp_layers=0,
                n_moe_layers=0,
                mtp_layers=0,
            )
        moe = bool(target.n_moe_layers)
        return dataclasses.replace(
            target,
            name=f"{target.name}-mtp",
            n_attention_layers=1,
            n_ssm_layers=0,
            n_mlp_layers=0 if moe else 1,
            n_moe_layers=1 if moe else 0,
            mtp_layers=0,
        )

    def weight_bytes(self, draft: ModelSpec) -> int:
        # ModelSpec.mtp_params: the layer, eh_proj (2d -> d), norms, and the embedding
        # and LM head the checkpoint stores again in the module.
        return draft.weight_bytes + 2 * draft.d_model * draft.d_model * draft.dtype_bytes


class Ngram(Method):
    name = "ngram"
    help = "prompt lookup: drafts copied from the context on the CPU (no GPU draft)"


METHODS: dict[str, Method] = {m.name: m for m in (DraftModel(), Eagle(), Eagle3(), Mtp(), Ngram())}


__all__ = [
    "METHODS",
]
