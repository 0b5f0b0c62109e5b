"""``sharegpt``: short ShareGPT conversations as serving benchmarks replay them.

The same session model as ``chat`` (history-extending turns, typing-time think
time), with ShareGPT's message lengths and turn count, and the 2,048-token
sequence cap of vLLM's ShareGPT benchmark: a conversation ends before the turn
that would take it past 2,048 tokens, so sequences stay under 2K and sessions
are a few turns long.

The Marconi artifact's own ShareGPT trace keeps only 10+-turn conversations and
caps at 8,192 tokens; ``--set min_turns=10 mean_turns=11 max_session_tokens=8192``
comes close to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from workloads.generators.base import GeneratorParams, knob
from workloads.generators.chat import ChatGenerator, ChatParams

_VLLM_FILTER = (
    "vLLM benchmarks (sample_sharegpt_requests) drop prompts over 1,024 tokens "
    "and prompt + output over 2,048 tokens"
)
_VLLM_PAPER = "vLLM paper (Kwon et al., SOSP 2023) Fig. 11a, ShareGPT length distribution"


@dataclass(frozen=True)
class ShareGPTParams(ChatParams):
    """``ChatParams`` with ShareGPT defaults (only the defaults and sources differ)."""

    min_turns: int = knob(
        1,
        "fewest turns in a conversation",
        "every ShareGPT conversation has at least one turn",
        lo=1,
    )
    mean_turns: float = knob(
        3.51,
        "mean turns per conversation (min_turns + a geometric number of extra turns)",
        "ShareGPT: 330,239 turns in 94,145 conversations = 3.51 "
        "(ShareChat paper, arXiv 2512.17843, Table 1)",
        lo=1,
    )
    prompt_mean_tokens: float = knob(
        161.0, "mean user-message length (tokens)", f"{_VLLM_PAPER}: mean input 161 tokens", gt=0
    )
    prompt_max_tokens: int = knob(1024, "longest user message (tokens)", _VLLM_FILTER, lo=1)
    output_mean_tokens: float = knob(
        338.0, "mean reply length (tokens)", f"{_VLLM_PAPER}: mean output 338 tokens", gt=0
    )
    output_max_tokens: int = knob(2048, "longest reply (tokens)", _VLLM_FILTER, lo=1)
    max_session_tokens: int = knob(
        2048,
        "per-session context cap in tokens on top of --max-context (0: none)",
        _VLLM_FILTER,
        lo=0,
    )


class ShareGPTGenerator(ChatGenerator):
    """Few-turn conversations with sequences under 2K tokens."""

    name: ClassVar[str] = "sharegpt"
    description: ClassVar[str] = (
        "ShareGPT-like conversations: ~3.5 turns, ~160-token messages, ~340-token replies, "
        "sequences capped at 2,048 tokens"
    )
    Params: ClassVar[type[GeneratorParams]] = ShareGPTParams
