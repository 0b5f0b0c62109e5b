"""Speculative decoding as a scheduler feature: a draft proposes, the target verifies.

Each decode step of a request (one *iteration* of the engine) runs

- the **draft**: ``num_speculative_tokens`` sequential forward passes of the draft
  (a smaller model, an EAGLE head, the model's own MTP layers; none for n-gram
  lookup), the first over the ``k + 1`` positions the last verification left (vLLM's
  padded drafter batch, SGLang's padded draft extend), each later one over one token a
  request (``topk`` with SGLang's tree drafts), every pass priced by the cost model
  as a step of the draft's :class:`~twin.model.ModelSpec`;
- the **verification**: the target over ``verify_tokens`` tokens a request (``k + 1``
  for a chain, ``speculative_num_draft_tokens`` for a tree), priced by the cost model
  as a small prefill (an extend) after the request's context;

and emits ``1 + accepted`` tokens. **Accounting: expected values.** The twin keeps the
engine's one-token-a-step bookkeeping and times each token step at the iteration's
price over the expected acceptance length ``tau = 1 + E[accepted]``: a request with
``L`` tokens to go decodes in ``L`` token steps of ``iteration / tau`` seconds, so its
completion time, its TPOT, the KV it grows (one token a token step) and the keys
attention reads (one more a token step) are the real ones in expectation, and the run
stays deterministic without drawing acceptances. A step that also carries prefill
chunks is one iteration of the mixed batch less the part of a pure decode iteration
that the decoders' ``tau - 1`` further tokens would have cost (``(1 - 1/tau)`` of it):
the decoders' busy time stays exact, a prefill in a mixed step ends up to that much
early. What this leaves out: the spread of accepted lengths (a request's tokens come in
bursts, so the ITL distribution is narrower than a real engine's; its mean is right),
the fc / eh_proj matrices of EAGLE-3 / MTP heads in the price (their weights are
counted), and drafting for a request in the step its prefill ends.

**Acceptance** is the expected acceptance length ``tau``, from (first match wins, two
given is refused): the engine's own knob (vLLM's ``synthetic_acceptance_*`` keys with
``rejection_sample_method: synthetic``; SGLang's ``SGLANG_SIMULATE_ACC_LEN``), the twin's
``--set speculative_acceptance=`` (one rate ``a``: every drafted token accepted with
probability ``a`` given the ones before, ``tau = (1 - a^(k+1)) / (1 - a)``, Leviathan
et al. 2023, arXiv 2211.17192, eq. 1; or ``k`` rates, each the unconditional share of
steps whose first ``i`` drafts are all accepted, as vLLM's per-position acceptance
metrics report them, ``tau = 1 + sum``), or the method's published default (EAGLE,
EAGLE-3, MTP; draft models and n-gram lookup have none: their acceptance is the
draft's and the workload's, so it must be given).

**Memory**: the draft's weights come off the pool; every token a request or the cache
holds also holds the draft's KV (vLLM registers the draft's attention layers in the same
KV cache groups; SGLang sizes the draft's token pool like the target's), so the pool
holds ``target KV / (target KV + draft KV)`` as many tokens. Hybrid models keep extra
recurrent states: vLLM ``num_speculative_tokens`` more a running request
(``MambaSpec.num_speculative_blocks``), SGLang a verify buffer of
``speculative_num_draft_tokens`` states per request slot taken from the mamba pool
(:func:`sglang_verify_reserve`). The engine modes' flags (:mod:`twin.engine.modes_vllm`,
:mod:`twin.engine.modes_sglang`, :mod:`twin.engine.modes_trtllm`; the JSON objects through
one parser, :func:`read_config`) build a :class:`Speculation`; methods are found by name
in :data:`METHODS`. A workload's ``spec_acceptance`` column gives a request its own
acceptance (:meth:`Speculation.decode_scale`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

if TYPE_CHECKING:
    from twin.engine.config import EngineConfig

from twin.costmodel.kernel_layout import DEFAULT_LAYOUT, KernelLayout
from twin.engine.cost import Chunk, Durations, RankStep, WrappingPricer, affine_fit
from twin.errors import TwinError
from twin.model import ModelSpec

# The twin's bound on drafted tokens a step (vLLM and SGLang set none; the deepest
# published setups draft 8, EAGLE-3's paper trees up to 8 deep).
MAX_SPECULATIVE_TOKENS = 64


# ------------------------------------------------------------------ acceptance
def iid_length(rate: float, k: int) -> float:
    """Expected tokens a step when each of ``k`` drafts is accepted with probability
    ``rate`` given the ones before (Leviathan et al. 2023, arXiv 2211.17192, eq. 1)."""
    if rate >= 1.0:
        return float(k + 1)
    return (1.0 - rate ** (k + 1)) / (1.0 - rate)


def rate_length(rate: float, k: int) -> float:
    """The acceptance length of one per-token ``rate`` over ``k`` drafts, as
    ``--set speculative_acceptance=RATE`` reads it (:func:`parse_acceptance`)."""
    return 1.0 + rate if k == 1 else iid_length(rate, k)


def iid_rate(length: float, k: int) -> float:
    """The per-token rate whose :func:`iid_length` over ``k`` drafts is ``length``."""
    low, high = 0.0, 1.0
    for _ in range(60):  # bisection to below 1e-15
        mid = (low + high) / 2
        if iid_length(mid, k) < length:
            low = mid
        else:
            high = mid
    return high


def length_from_rates(flag: str, rates: Sequence[float], k: int) -> float:
    """``1 + sum(rates)``: ``rates[i]`` the unconditional share of steps whose first
    ``i + 1`` drafts are all accepted (vLLM's per-position acceptance rates), checked."""
    if len(rates) != k:
        raise TwinError(f"{flag}: give one rate, or {k} (one per drafted token); got {len(rates)}")
    for r in rates:
        if not (math.isfinite(r) and 0.0 <= r <= 1.0):
            raise TwinError(f"{flag}: each rate must be in [0, 1] (got {r:g})")
    if any(b > a for a, b in pairwise(rates)):
        raise TwinError(
            f"{flag}: per-position rates are unconditional (all drafts up to i accepted), "
            "so they cannot rise with the position"
        )
    return 1.0 + float(sum(rates))


def parse_acceptance(flag: str, value: str, k: int) -> float:
    """``--set speculative_acceptance=``: one per-token rate, or ``k`` per-position rates;
    the expected acceptance length."""
    try:
        rates = [float(v) for v in value.split(",")]
    except ValueError:
        raise TwinError(
            f"{flag}={value}: expected rates in [0, 1], e.g. 0.8 or 0.8,0.6,0.4"
        ) from None
    if len(rates) == 1 and k > 1:
        r = rates[0]
        if not (math.isfinite(r) and 0.0 <= r <= 1.0):
            raise TwinError(f"{flag}={value}: the rate must be in [0, 1]")
        return rate_length(r, k)
    return length_from_rates(f"{flag}={value}", rates, k)


def check_length(flag: str, length: float, k: int) -> float:
    """An acceptance length given directly: in [1, k + 1]."""
    if not (math.isfinite(length) and 1.0 <= length <= k + 1):
        raise TwinError(f"{flag}: the acceptance length must be in [1, {k + 1}] (got {length:g})")
    return float(length)


# ------------------------------------------------------------------ methods
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


# ------------------------------------------------------------------ the settings
@dataclass(frozen=True)
class Speculation:
    """A run's speculative decoding (module docstring); ``EngineConfig.speculative`` holds
    :meth:`to_dict`, which the run's summary records."""

    method: str
    num_speculative_tokens: int  # draft passes a step (SGLang speculative_num_steps)
    verify_tokens: int  # tokens a request verifies a step (chain: k + 1)
    acceptance_length: float  # expected tokens a request emits a step (1 + accepted)
    acceptance: str  # where it came from
    topk: int = 1  # branches each draft pass after the first (SGLang speculative_eagle_topk)
    draft_model: str = ""  # draft_model: a preset name or a config.json
    draft_tp: int = 0  # the draft's tensor parallelism (0: the target's)
    state_slots: int = 0  # vLLM: more recurrent states a running request holds
    verify_states: int = 0  # SGLang: states a request slot of the verify buffer holds
    draft_host: bool = False  # each draft pass pays the engine's host time a step
    # Tokens a decoding request the draft extend (the first draft pass) runs over; 0: k + 1
    # (SGLang 0.5.23 runs the tree's width, speculative_num_draft_tokens).
    extend_tokens: int = 0
    # Host times an iteration pays beside the verification's own (SGLang 0.5.10.post1:
    # the overlap scheduler is off with speculation; its draft and draft extend forwards).
    forward_host: int = 0
    # The host time of a whole iteration (fixed, and per request it carries) that an
    # engine without its overlap scheduler exposes (SGLang's spec v1), priced where the
    # run's engine times give no host time of their own (:func:`speculative_pricer`).
    loop_host_s: float = 0.0
    loop_seq_host_s: float = 0.0

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise TwinError(
                f"speculative method {self.method!r}: not modelled (the twin models "
                f"{', '.join(METHODS)})"
            )
        k = self.num_speculative_tokens
        if not 1 <= k <= MAX_SPECULATIVE_TOKENS:
            raise TwinError(f"speculative tokens: must be 1 to {MAX_SPECULATIVE_TOKENS} (got {k})")
        if self.verify_tokens < 2 or self.topk < 1:
            raise TwinError(
                f"speculative verification: at least 2 tokens and 1 branch a step (got "
                f"{self.verify_tokens} and {self.topk})"
            )
        check_length("speculative acceptance", self.acceptance_length, k)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Speculation:
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        """Its fields; the later ones left out at their defaults, so a run's summary keeps
        the keys it had before they existed."""
        data = dataclasses.asdict(self)
        for name in ("extend_tokens", "forward_host", "loop_host_s", "loop_seq_host_s"):
            if not data[name]:
                del data[name]
        return data

    @property
    def kind(self) -> Method:
        return METHODS[self.method]

    @property
    def absorbed_extend(self) -> int:
        """The longest extend an iteration runs per decoding request (the verification,
        the draft extend): the cost model prices extends this short in MLA's absorbed
        form, as the engines do (``twin.costmodel.step_features.split_absorbed``)."""
        return max(self.verify_tokens, self.extend_tokens or self.num_speculative_tokens + 1)

    def draft_spec(self, target: ModelSpec) -> ModelSpec | None:
        """The draft as a ModelSpec (None: n-gram lookup)."""
        return self.kind.draft_spec(target, self.draft_model)

    def decode_scale(self, rate: float) -> float:
        """Token steps a request with its own acceptance ``rate`` (the workload's
        ``spec_acceptance`` column) takes per output token, relative to the run's.

        A token step lasts ``iteration / tau`` at the run's ``tau``; a request accepting
        at its own rate emits ``tau_r = rate_length(rate, k)`` tokens an iteration, so its
        decode takes ``(L - 1) x tau / tau_r`` token steps (``Seq.out_len``): its
        completion time and TPOT are its own in expectation. Its KV and the keys
        attention reads grow a token a step, so they follow its step count, not its
        tokens: off by ``tau / tau_r`` for that request (the cache keeps its real
        tokens). A rate giving the run's ``tau`` is 1.0 exactly.
        """
        return self.acceptance_length / rate_length(rate, self.num_speculative_tokens)

    def budget(self, budget: float, target: ModelSpec, layout: Any = None) -> float:
        """A replica's pool (or running-request memory) with the draft in it: its weights
        off, and the share of the rest the target's KV keeps when every token also holds
        the draft's. ``layout`` (a ``twin.parallel.Layout``, given where the target's
        weights are counted per GPU: expert or attention-data parallelism): an MoE draft
        at the target's TP (an MTP module, priced at the target's layout too) has its
        layer weights counted as the target's, per GPU under it (a DP rank holds its own
        copy of the attention), the method's extra weights (``eh_proj``) as they are."""
        draft = self.draft_spec(target)
        if draft is None:
            return budget
        weights = self.kind.weight_bytes(draft)
        if layout is not None and draft.n_moe_layers and self.draft_tp in (0, layout.tp):
            from twin.parallel import weight_bytes_per_gpu  # at the target's layout

            whole = layout.tp * weight_bytes_per_gpu(draft, layout)
            weights += whole - draft.weight_bytes
        budget -= weights
        kv, extra = target.kv_bytes_per_token, draft.kv_bytes_per_token
        return budget * kv / (kv + extra) if kv else budget


def build(
    model: ModelSpec,
    method: str,
    k: int | None,
    *,
    verify: int | None = None,
    topk: int = 1,
    draft_model: str = "",
    draft_tp: int = 0,
    length: tuple[float, str] | None = None,
    acceptance: tuple[str, str] | None = None,
    state_slots: bool = False,
    verify_states: bool = False,
    draft_host: bool = False,
    extend_tokens: int = 0,
    forward_host: int = 0,
    loop_host: tuple[float, float] = (0.0, 0.0),
) -> Speculation:
    """A checked :class:`Speculation` of ``model`` from an engine's flags.

    ``length``: an acceptance length the engine's own knob gave, with its label;
    ``acceptance``: the twin's ``speculative_acceptance`` (flag, value); neither: the
    method's published default. ``state_slots`` / ``verify_states``: the engine's rule for
    the recurrent states of a hybrid model (vLLM's / SGLang's).
    """
    kind = METHODS.get(method)
    if kind is None:
        raise TwinError(
            f"speculative method {method!r}: not modelled (the twin models {', '.join(METHODS)})"
        )
    if k is None:
        if method != "mtp":
            raise TwinError(f"speculative method {method}: give the number of speculative tokens")
        k = max(model.mtp_layers, 1)
    if method != "ngram" and model.n_ssm_layers and not model.n_attention_layers:
        raise TwinError(
            f"speculative decoding of {model.name} (no attention layers) with a draft is "
            "not modelled; use ngram"
        )
    kind.draft_spec(model, draft_model)  # refuses a missing draft or MTP layer now
    if length is not None and acceptance is not None:
        raise TwinError(
            f"{acceptance[0]} and {length[1]} both give the acceptance: give one of them"
        )
    if acceptance is not None:
        tau = parse_acceptance(acceptance[0], acceptance[1], k)
        source = f"{acceptance[0]}={acceptance[1]}"
    elif length is not None:
        tau, source = check_length(length[1], length[0], k), length[1]
    else:
        default = kind.default_length(k)
        if default is None:
            raise TwinError(
                f"speculative method {method}: its acceptance depends on the draft and the "
                "workload; give it with --set speculative_acceptance=RATE (or one rate per "
                "drafted token)"
            )
        tau, source = default
    hybrid = bool(model.n_ssm_layers)
    width = verify if verify is not None else k + 1
    return Speculation(
        method=method,
        num_speculative_tokens=k,
        verify_tokens=width,
        acceptance_length=tau,
        acceptance=source,
        topk=topk,
        draft_model=draft_model,
        draft_tp=draft_tp,
        # vLLM (0.19.0, 0.33.0) model_executor/layers/mamba/abstract.py get_kv_cache_spec:
        # MambaSpec.num_speculative_blocks = num_speculative_tokens, a state block per
        # drafted token beside the running state (v1/kv_cache_interface.py).
        state_slots=k if state_slots and hybrid else 0,
        # SGLang 0.5.23 mem_cache/memory_pool.py MambaPool: intermediate_ssm_state_cache
        # [layers, requests + 1, speculative_num_draft_tokens, state] for the verify.
        verify_states=width if verify_states and hybrid else 0,
        draft_host=draft_host,
        extend_tokens=extend_tokens,
        forward_host=forward_host,
        loop_host_s=loop_host[0],
        loop_seq_host_s=loop_host[1],
    )


# ------------------------------------------------------------------ engine spellings
def read_config(
    flag: str,
    value: str,
    label: str,
    known: Sequence[str],
    elsewhere: dict[str, str] | None = None,
) -> dict[str, Any]:
    """An engine's speculative-decoding object given as ``--set NAME=JSON`` (vLLM's
    ``--speculative-config``, TensorRT-LLM's ``speculative_config`` section of
    ``--extra_llm_api_options``), its keys checked: the one parser every engine spelling
    goes through. ``label`` names the engine release (``vLLM 0.33.0``); ``known`` the keys
    the twin reads; ``elsewhere`` keys this release lacks -> what to give instead (another
    release has them, or the release spells them otherwise). Unknown keys are refused in
    one line naming the key."""
    try:
        cfg = json.loads(value)
    except json.JSONDecodeError as err:
        raise TwinError(f"{flag}={value}: not JSON ({err.msg})") from None
    except RecursionError:
        raise TwinError(f"{flag}: nested too deeply") from None
    if not isinstance(cfg, dict):
        raise TwinError(f"{flag}={value}: expected a JSON object")
    unknown = sorted(set(cfg) - set(known))
    for key in unknown:
        if elsewhere and key in elsewhere:
            raise TwinError(f"{flag}: key {key!r} is not {label}'s ({elsewhere[key]})")
    if unknown:
        raise TwinError(
            f"{flag}: key {unknown[0]!r} is not modelled for {label} (the twin reads "
            f"{', '.join(known)})"
        )
    return cfg


def config_int(flag: str, cfg: dict[str, Any], key: str, low: int = 1) -> int | None:
    """``cfg[key]`` as an integer of at least ``low`` (None when absent), checked."""
    v = cfg.get(key)
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or v < low:
        word = "a positive integer" if low == 1 else f"an integer of at least {low}"
        raise TwinError(f"{flag}: {key} must be {word} (got {v!r})")
    return v


def config_method(flag: str, given: object, names: dict[str, str], key: str) -> str:
    """The twin's method (a :data:`METHODS` name) an engine's method name maps to."""
    method = names.get(str(given))
    if method is None:
        raise TwinError(
            f'{flag}: {key} "{given}" is not modelled (the twin models {", ".join(names)})'
        )
    return method


# ------------------------------------------------------------------ hybrid states
def sglang_verify_reserve(
    state_bytes: int, slot: int, draft_tokens: int, state_slots: int, max_running: int
) -> int:
    """Bytes of SGLang's mamba pool the speculative verify buffer takes.

    SGLang 0.5.23 ``mem_cache/kv_cache_configurator.py`` (the ratio-based mamba budget,
    ``mamba_pool.memory_budget_spec``): the pool's state slots ``K`` and the verify
    buffer share the mamba budget, ``K = (budget - P (1 + D)) // (P (1 + D / R))``
    with ``P`` a state slot's bytes, ``D`` the draft tokens and ``R`` the slots a
    request is sized for (``_calculate_mamba_ratio``: 3, plus the tracking slots of
    extra_buffer: 2, lazy 1), and the buffer holds ``D`` states for
    ``min(max_running_requests, K // R) + 1`` requests. The twin's pool keeps ``K``
    slots; the rest is the buffer's (and its padding slot's).
    """
    if not draft_tokens or slot <= 0:
        return 0
    ratio = 2 + state_slots  # 3 + tracking slots (no_buffer 1 slot, extra_buffer 3, lazy 2)
    slots = int((state_bytes - slot * (1 + draft_tokens)) // (slot * (1 + draft_tokens / ratio)))
    if slots <= 0:
        raise TwinError(
            "SGLang's speculative verify buffer leaves no room for recurrent states "
            f"({state_bytes / 1e9:.1f} GB of mamba pool, {draft_tokens} draft tokens of "
            f"{slot / 1e6:.1f} MB each a request): lower speculative_num_draft_tokens or "
            "max_running_requests, or raise mamba_full_memory_ratio"
        )
    return max(state_bytes - slots * slot, 0)


# ------------------------------------------------------------------ pricing
class SpeculativePricer(WrappingPricer):
    """``inner`` (the target's :class:`~twin.engine.cost.StepPricer`) with drafting and
    verification, a token step at ``1 / tau`` of an iteration (module docstring)."""

    def __init__(
        self,
        inner: Any,
        draft: Any | None,
        spec: Speculation,
        draft_host_s: float = 0.0,
        loop_host: bool = False,
    ) -> None:
        super().__init__(inner)
        self.draft = draft
        self.spec = spec
        self.tau = spec.acceptance_length
        # Host time of each draft pass (vLLM 0.19.0's V1 runner launches each one apart).
        self.draft_host_s = float(draft_host_s) if spec.draft_host else 0.0
        # Host time of the forwards an iteration runs beside the verification's, exposed
        # when the engine does not overlap scheduling with the GPU (SGLang 0.5.10.post1).
        self.forward_host_s = float(draft_host_s) * spec.forward_host
        # The whole iteration's host time, fixed and per request (Speculation.loop_host_s),
        # where ``loop_host`` (the run's engine times price none of their own).
        self.loop_host = (spec.loop_host_s, spec.loop_seq_host_s) if loop_host else (0.0, 0.0)
        self._affine: dict[int, tuple[float, float] | None] = {}
        self._fixed: dict[int, tuple[float, float] | None] = {}

    @property
    def provenance(self) -> str:
        return str(getattr(self.inner, "provenance", ""))

    def tokens_per_iteration(self) -> float:
        return float(self.tau)

    def _verify(self, batch: int, context: int) -> list[Chunk]:
        """Each decoder's verification: ``verify_tokens`` new tokens after its context
        (the batch's context sum spread evenly, as the cost model's decode spread)."""
        base, extra = divmod(context, batch)
        v = self.spec.verify_tokens
        return [(v, base + 1)] * extra + [(v, base)] * (batch - extra)

    @staticmethod
    def _forward(pricer: Any, steps: Sequence[RankStep], decode: bool = False) -> float:
        """Seconds of one forward whose ranks run ``steps``: a plain pricer's step (one
        rank), or the synchronised step of attention-DP ranks
        (``twin.engine.dp_attention.DPStepPricer.sync_time``): every forward of an
        iteration, the verification and each draft pass, gathers all ranks' tokens in its
        MoE/MLP layers, so the ranks run each one in lockstep (an idle rank an idle batch:
        SGLang 0.5.10.post1 ``EAGLEWorker`` runs its draft and verify forwards under the
        scheduler's ``prepare_mlp_sync_batch``; TensorRT-LLM's MTP worker runs inside the
        attention-DP model forward).

        ``decode``: the forward is the verification of an iteration that decodes only, so
        the ranks exchange its tokens as a decode batch's, not an extend's
        (``DPStepPricer.comm_time``). SGLang 0.5.9: ``managers/scheduler_dp_attn_mixin.py``
        ``prepare_mlp_sync_batch`` sets ``is_extend_in_batch`` from the scheduler batch's
        ``forward_mode.is_extend()``, and a speculative decode batch is DECODE there (the
        worker switches it to TARGET_VERIFY after), so ``ForwardBatch`` takes
        ``DpPaddingMode.get_dp_padding_mode(False, ...)`` (``layers/dp_attention.py``:
        MAX_LEN when the ranks are even), and the TARGET_VERIFY CUDA graph is captured in
        ``get_default_mode_in_cuda_graph`` (MAX_LEN) with DeepEP's decode mode
        (``model_executor/cuda_graph_runner.py``, ``capture(is_extend_in_batch=False)``).
        TensorRT-LLM's MTP verify is a generation step (generation requests carrying their
        draft tokens, ``_torch/speculative/mtp.py``), gathered as any generation step. The
        draft extend keeps the extend's exchange (SGLang captures its CUDA graph with
        DeepEP's extend mode, ``eagle_draft_extend_cuda_graph_runner.py``)."""
        if len(steps) == 1:
            return float(pricer.step_time(*steps[0]))
        if decode:
            return float(pricer.sync_time(steps, extend=False))
        return float(pricer.sync_time(steps))

    def _drafting(self, steps: Sequence[RankStep], later: bool = True) -> float:
        """Seconds of the draft passes: the first over each rank's prefill chunks and
        ``k + 1`` positions a decoder, the others (``later``) over ``topk`` tokens a
        decoder; each pass's host time (the ranks' schedulers run side by side)."""
        draft = self.draft
        spec = self.spec
        k = spec.num_speculative_tokens
        decoding = any(batch for _, batch, _ in steps)
        passes = k if decoding else 1
        host = self.draft_host_s * passes
        if self.forward_host_s:
            # A prefill-only iteration runs one forward beside the target's (the draft
            # extend over the prompt); a decode iteration the draft and the draft extend.
            host += self.forward_host_s if decoding else self.forward_host_s / spec.forward_host
        fixed, each = self.loop_host
        if fixed or each:
            # Each rank's loop over its own requests (the ranks' schedulers side by side).
            host += fixed + each * max(len(prefills) + batch for prefills, batch, _ in steps)
        if draft is None:
            return host
        w = spec.extend_tokens or k + 1
        first: list[RankStep] = []
        for prefills, batch, context in steps:
            chunks = list(prefills)
            if batch:
                base, extra = divmod(context, batch)
                chunks += [(w, base + 1)] * extra + [(w, base)] * (batch - extra)
            first.append((chunks, 0, 0))
        seconds = self._forward(draft, first) + host
        if later and decoding and k > 1:
            rows = [
                ((), batch * spec.topk, self._later_keys(context)) for _, batch, context in steps
            ]
            seconds += (k - 1) * self._forward(draft, rows)
        return seconds

    def _later_keys(self, context: int) -> int:
        """Keys the later draft passes' attention reads. A chain: each request's context.
        A tree (topk > 1): SGLang's FlashAttention-3 backend (its default on Hopper for
        Llama, ``is_fa3_default_architecture``) runs a draft decode as cascade attention,
        the prefix once for the topk queries of a request and each branch's own few tokens
        apart (``flashattention_backend.py``, 0.5.10.post1 and 0.5.23: "we enable cascade
        attention when top_k > 1"): the prefix once (the branch parts, at most
        ``speculative_num_steps`` keys a branch, are left out)."""
        return context if self.spec.topk > 1 else context * self.spec.topk

    def _iteration(self, steps: Sequence[RankStep]) -> float:
        """One iteration: the target over each rank's prefill chunks and verifications,
        and the draft passes."""
        verify: list[RankStep] = []
        for prefills, batch, context in steps:
            chunks = list(prefills)
            if batch:
                chunks += self._verify(batch, context)
            verify.append((chunks, 0, 0))
        decode = not any(prefills for prefills, _, _ in steps)
        return self._forward(self.inner, verify, decode) + self._drafting(steps)

    def step_time(self, prefills: Sequence[Chunk], decode_batch: int, decode_context: int) -> float:
        return self.sync_time([(prefills, decode_batch, decode_context)])

    def sync_time(self, steps: Sequence[RankStep]) -> float:
        """A token step of ranks running ``steps`` (one rank: :meth:`step_time`): an
        iteration over ``tau`` where they only decode, a mixed iteration less the part of
        a pure decode iteration that the decoders' further tokens would have cost."""
        if not any(batch for _, batch, _ in steps):
            return self._iteration([(prefills, 0, 0) for prefills, _, _ in steps])
        decode = self._iteration([((), batch, context) for _, batch, context in steps])
        if not any(prefills for prefills, _, _ in steps):
            return decode / self.tau
        mixed = self._iteration(steps)
        return mixed - (1.0 - 1.0 / self.tau) * decode

    def decode_affine(self, batch: int) -> tuple[float, float] | None:
        if batch not in self._affine:
            self._affine[batch] = affine_fit(lambda x: self.step_time((), batch, x), batch)
        return self._affine[batch]

    def _fixed_part(self, batch: int) -> tuple[float, float] | None:
        """The affine fit of a decode iteration's parts other than the later draft passes
        (the verification, the first draft pass, the host times), if affine."""
        if batch not in self._fixed:

            def price(context: int) -> float:
                verify = float(self.inner.step_time(self._verify(batch, context), 0, 0))
                return verify + self._drafting([((), batch, context)], later=False)

            self._fixed[batch] = affine_fit(price, batch)
        return self._fixed[batch]

    def decode_run(self, batch: int, context: int, steps: int) -> Durations:
        """A decode run's token steps: the affine parts in closed form, the later draft
        passes through the draft's own ``decode_run`` (its compiled or remembered
        prices); step by step where the parts are not affine."""
        fit = self._fixed_part(batch)
        if fit is None:
            return super().decode_run(batch, context, steps)
        seconds = fit[0] + fit[1] * (context + batch * np.arange(steps, dtype=np.float64))
        spec, draft = self.spec, self.draft
        if draft is not None and spec.num_speculative_tokens > 1:
            rows = batch * spec.topk
            if spec.topk == 1:
                later = np.asarray(draft.decode_run(rows, context, steps), np.float64)
            else:
                # A tree's rows read the prefix once (_later_keys), which grows a token a
                # request each token step, not a token a row.
                steps_keys = context + batch * np.arange(steps, dtype=np.int64)
                fit = draft.decode_affine(rows)
                if fit is not None:
                    later = fit[0] + fit[1] * steps_keys.astype(np.float64)
                else:
                    later = np.array([float(draft.step_time((), rows, int(c))) for c in steps_keys])
            seconds = seconds + (spec.num_speculative_tokens - 1) * later
        return seconds / self.tau


def speculative_pricer(
    inner: Any,
    model: ModelSpec,
    profile: Any,
    config: EngineConfig,
    kernel_layout: KernelLayout = DEFAULT_LAYOUT,
) -> SpeculativePricer:
    """``inner`` with the run's speculative decoding (``config.mode.speculative``): the
    draft priced by the cost model on the same GPU at its tensor parallelism; under
    attention DP (``config.cluster.dp_attention``) by the ranks' synchronised pricer, as the target
    (``twin.engine.dp_attention.dp_pricer``). The draft's kernels are laid out as the
    target's ``kernel_layout`` where the draft is a layer of the target's own stack
    (``Method.target_layout``: MTP), else as the default (an EAGLE head, a draft model)."""
    from twin.engine.cost import make_pricer

    c = config.cluster
    spec = Speculation.from_dict(config.mode.speculative)
    draft_spec = spec.draft_spec(model)
    draft: Any = None
    layout = kernel_layout if METHODS[spec.method].target_layout else DEFAULT_LAYOUT
    if draft_spec is not None:
        tp = spec.draft_tp or c.tp
        ep = c.ep if tp == c.tp and draft_spec.n_moe_layers else 1
        if c.dp_attention > 1:
            from twin.engine.dp_attention import dp_pricer

            dp = c.dp_attention
            moe_a2a = c.moe_a2a if draft_spec.n_moe_layers else ""
            draft = dp_pricer(
                draft_spec, profile, tp, ep, dp, 0.0, 0.0, moe_a2a, spec.absorbed_extend, layout
            )
        else:
            draft = make_pricer(draft_spec, profile, tp, ep, spec.absorbed_extend, layout)
    h = config.host_time
    loop_host = not (h.step_host_s or h.seq_host_s)
    return SpeculativePricer(inner, draft, spec, h.step_host_s, loop_host)


__all__ = [
    "METHODS",
    "Speculation",
    "SpeculativePricer",
    "build",
    "config_int",
    "config_method",
    "iid_length",
    "parse_acceptance",
    "rate_length",
    "read_config",
    "sglang_verify_reserve",
    "speculative_pricer",
]
