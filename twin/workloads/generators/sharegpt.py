"""``sharegpt``: ShareGPT conversations as the Marconi paper's trace keeps them.

The same session model as ``chat`` (history-extending turns, typing-time think
time), with ShareGPT's message lengths. Like the Marconi artifact's trace builder
(``utils/generate_trace.py``: ``process_sharegpt_dataset`` keeps conversations
of 10+ rounds; ``generate_sharegpt_trace`` stops a session at 32,768 input
tokens, the default ``--max-context``), only conversations of at least 10 turns
are generated and there is no per-session cap below the context.

vLLM's ShareGPT benchmark instead keeps every conversation and caps sequences
at 2,048 tokens: ``--set min_turns=1 mean_turns=3.51 max_session_tokens=2048``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from twin.workloads.generators.base import GeneratorParams, knob
from twin.workloads.generators.chat import ChatGenerator, ChatParams

_VLLM_FILTER = (
    "vLLM benchmarks (sample_sharegpt_requests) drop prompts over 1,024 tokens "
    "and prompt + output over 2,048 tokens"
)
_VLLM_PAPER = "vLLM paper (Kwon et al., SOSP 2023) Fig. 11a, ShareGPT length distribution"


@dataclass(frozen=True)
class ShareGPTParams(ChatParams):
    """``ChatParams`` with ShareGPT defaults (only the defaults and sources differ)."""

    min_turns: int = knob(
        10,
        "fewest turns in a conversation",
        "Marconi artifact utils/generate_trace.py (process_sharegpt_dataset): min_num_rounds = 10",
        lo=1,
    )
    mean_turns: float = knob(
        12.51,
        "mean turns per conversation (min_turns + a geometric number of extra turns)",
        "ShareGPT: 330,239 turns in 94,145 conversations = 3.51 (ShareChat paper, "
        "arXiv 2512.17843, Table 1); a geometric fit with that mean conditioned on "
        ">= 10 turns has mean 10 + 2.51 = 12.51 (memoryless)",
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
        0,
        "per-session context cap in tokens on top of --max-context (0: none)",
        "Marconi artifact utils/generate_trace.py (generate_sharegpt_trace): no cap "
        f"below 32,768 input tokens; {_VLLM_FILTER}",
        lo=0,
    )


class ShareGPTGenerator(ChatGenerator):
    """ShareGPT conversations of 10+ turns."""

    name: ClassVar[str] = "sharegpt"
    description: ClassVar[str] = (
        "ShareGPT-like conversations as Marconi's trace keeps them: 10+ turns, "
        "~160-token messages, ~340-token replies"
    )
    Params: ClassVar[type[GeneratorParams]] = ShareGPTParams
