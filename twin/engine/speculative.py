"""Speculative decoding as a scheduler feature: a draft proposes, the target verifies.

This module holds a run's settings (:class:`Speculation`, built by :func:`build` from an
engine's flags) and their memory; the methods are :mod:`twin.engine.speculative_methods`'s,
the acceptance length :mod:`twin.engine.speculative_acceptance`'s, and the price of an
iteration (drafting and verification, the accounting in expected values)
:mod:`twin.engine.speculative_pricing`'s.

**Memory**: the draft's weights come off the pool; every token a request or the cache
holds also holds the draft's KV (vLLM registers the draft's attention layers in the same
KV cache groups; SGLang sizes the draft's token pool like the target's), so the pool
holds ``target KV / (target KV + draft KV)`` as many tokens. Hybrid models keep extra
recurrent states: vLLM ``num_speculative_tokens`` more a running request
(``MambaSpec.num_speculative_blocks``), SGLang a verify buffer of
``speculative_num_draft_tokens`` states per request slot taken from the mamba pool
(:func:`sglang_verify_reserve`). The engine modes' flags (:mod:`twin.engine.modes_vllm`,
:mod:`twin.engine.sglang_speculation`, :mod:`twin.engine.modes_trtllm`; the JSON objects through
one parser, :func:`read_config`) build a :class:`Speculation`; methods are found by name
in :data:`METHODS`. A workload's ``spec_acceptance`` column gives a request its own
acceptance (:meth:`Speculation.decode_scale`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

from twin.engine.speculative_acceptance import check_length, parse_acceptance, rate_length
from twin.engine.speculative_methods import METHODS, Method
from twin.errors import TwinError
from twin.model import ModelSpec

# The twin's bound on drafted tokens a step (vLLM and SGLang set none; the deepest
# published setups draft 8, EAGLE-3's paper trees up to 8 deep).
MAX_SPECULATIVE_TOKENS = 64


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


__all__ = [
    "Speculation",
    "build",
    "config_int",
    "config_method",
    "read_config",
    "sglang_verify_reserve",
]
