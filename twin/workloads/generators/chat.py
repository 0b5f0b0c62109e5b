"""``chat``: multi-turn human conversations shaped like the Marconi paper's LMSys trace.

Each session is one conversation. Turn k's prompt is the whole history (every
earlier user message and reply) plus a new user message, so every turn after
the first is written with ``extends_history`` and only the new message.

Defaults follow the Marconi artifact's LMSys-Chat-1M trace (conversations of
10+ turns, think time = typing time at 90 words/min) with per-message lengths
from the LMSYS-Chat-1M paper. The ``sharegpt`` kind reuses this session model
with other defaults.

Context cap: a session stops *before* a turn whose full prompt + reply would
exceed the cap (``--max-context``, and ``max_session_tokens`` when set), as
the Marconi artifact does; replies are never truncated mid-conversation. Only
turn 0 is clipped (message, then reply) so that every session has a request.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from twin.workloads.generators.base import (
    GeneratorParams,
    Turn,
    WorkloadGenerator,
    clip_turn,
    knob,
    knob_error,
    lognormal_int,
    token_ids,
    turn_count,
)

# LMSYS-Chat-1M (Zheng et al., ICLR 2024, arXiv 2309.11998), Table 1, Llama-2 tokenizer.
_LMSYS = "LMSYS-Chat-1M paper (arXiv 2309.11998) Table 1"
_MARCONI = "Marconi artifact utils/generate_trace.py (generate_lmsys_trace)"
_SPREAD = (
    "assumption: no published spread; sigma {s} puts the 5-95% range at about "
    "x{lo}-x{hi} the median (lengths of tens to hundreds of tokens)"
)


@dataclass(frozen=True)
class ChatParams(GeneratorParams):
    """Knobs of the conversational kinds (``chat``, ``sharegpt``)."""

    min_turns: int = knob(
        10,
        "fewest turns in a conversation",
        f"{_MARCONI}: keeps only LMSYS-Chat-1M conversations with turn >= 10",
        lo=1,
    )
    mean_turns: float = knob(
        11.0,
        "mean turns per conversation (min_turns + a geometric number of extra turns)",
        f"{_LMSYS}: 2.0 turns on average; a geometric fit (p = 1/2) conditioned on "
        ">= 10 turns has mean 10 + 1 = 11 (memoryless)",
        lo=1,
    )
    max_turns: int = knob(
        64,
        "most turns in a conversation (tail guard)",
        "guard only: binds with probability < 1e-9 at the chat and sharegpt default means",
        lo=1,
    )
    prompt_mean_tokens: float = knob(
        69.5, "mean user-message length (tokens)", f"{_LMSYS}: 69.5 tokens per prompt", gt=0
    )
    prompt_sigma: float = knob(
        1.0, "log-spread of user-message lengths", _SPREAD.format(s=1.0, lo=0.2, hi=5), lo=0
    )
    prompt_max_tokens: int = knob(
        4096,
        "longest user message (tokens)",
        "guard: pasted documents longer than this are rare in LMSYS-Chat-1M; "
        "P(length > 4096) < 1e-5 at the default mean and spread",
        lo=1,
    )
    output_mean_tokens: float = knob(
        214.5, "mean reply length (tokens)", f"{_LMSYS}: 214.5 tokens per response", gt=0
    )
    output_sigma: float = knob(
        0.8, "log-spread of reply lengths", _SPREAD.format(s=0.8, lo=0.27, hi=3.7), lo=0
    )
    output_max_tokens: int = knob(
        2048,
        "longest reply (tokens)",
        "guard: P(reply > 2048) < 0.1% at the default mean and spread",
        lo=1,
    )
    typing_wpm: float = knob(
        90.0,
        "typing speed (words/min): the think time before turn k is the time to type its message",
        f"{_MARCONI}: words_per_min = 90, inter-request latency = words / typing speed",
        gt=0,
    )
    words_per_token: float = knob(
        0.75,
        "English words per token, to turn message tokens into words typed",
        "OpenAI help center 'What are tokens': 1 token is about 3/4 of a word",
        gt=0,
    )
    max_session_tokens: int = knob(
        0,
        "per-session context cap in tokens on top of --max-context (0: none)",
        "off by default; the Marconi artifact stops sessions past 8,192 tokens "
        "(reproduce with --max-context 8192)",
        lo=0,
    )

    def check(self) -> None:
        self.require_ordered("min_turns", "mean_turns", "max_turns")
        if self.max_session_tokens == 1:
            raise knob_error(
                "max_session_tokens", 1, "must be 0 (off) or >= 2 (a prompt and a reply token)"
            )


class ChatGenerator(WorkloadGenerator):
    """Multi-turn conversations; each turn appends a user message to the history."""

    name: ClassVar[str] = "chat"
    description: ClassVar[str] = (
        "LMSys-like multi-turn chat: 10+ turns, ~70-token messages, ~215-token replies, "
        "think time = typing time"
    )
    Params: ClassVar[type[GeneratorParams]] = ChatParams

    def session(self, rng: np.random.Generator, shared: Any, max_context: int) -> Iterator[Turn]:
        p: ChatParams = self.params  # type: ignore[assignment]
        cap = max_context if p.max_session_tokens == 0 else min(max_context, p.max_session_tokens)
        n_turns = turn_count(rng, p.min_turns, p.mean_turns, p.max_turns)
        seconds_per_token = p.words_per_token * 60.0 / p.typing_wpm
        history = 0  # tokens of every earlier prompt and reply
        for k in range(n_turns):
            n_in = lognormal_int(rng, p.prompt_mean_tokens, p.prompt_sigma, 1, p.prompt_max_tokens)
            n_out = lognormal_int(rng, p.output_mean_tokens, p.output_sigma, 1, p.output_max_tokens)
            if k == 0:
                n_in, n_out = clip_turn(n_in, n_out, cap)
            elif history + n_in + n_out > cap:
                return  # the conversation would overflow the context: it ends here
            yield Turn(
                think_s=n_in * seconds_per_token,
                input_tokens=token_ids(rng, n_in, p.vocab_size),
                extends_history=k > 0,
                output_tokens=token_ids(rng, n_out, p.vocab_size),
            )
            history += n_in + n_out
