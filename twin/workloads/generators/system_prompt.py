"""``system-prompt``: independent single-turn requests sharing a few long prefixes.

Think of a few applications, each with its own long system prompt, serving many
users. Every request is its own session (one turn, open loop) whose prompt is

    system prompt i  +  few-shot block j of prompt i  +  a unique user question

with i drawn from a Zipf-like popularity over ``n_system_prompts`` prompts and
j uniform over that prompt's ``n_fewshot`` alternative example blocks. The
prefix tree is therefore two levels deep (prompt, then few-shot block) with a
unique leaf per request: the "purely input" sharing of Marconi's taxonomy.

All prompts and few-shot blocks are drawn once per seed. Context cap: the
question and then the reply are clipped so that prompt + reply fits
``--max-context``; a cap too small for a system prompt with its few-shot block
is refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from twin.errors import TwinError
from twin.workloads.generators.base import (
    GeneratorParams,
    Turn,
    WorkloadGenerator,
    clip_turn,
    knob,
    lognormal_int,
    token_ids,
    zipf_weights,
)

_LMSYS = "LMSYS-Chat-1M paper (arXiv 2309.11998) Table 1"


@dataclass(frozen=True)
class SystemPromptParams(GeneratorParams):
    """Knobs of the ``system-prompt`` kind."""

    n_system_prompts: int = knob(
        4,
        "number of distinct system prompts (applications)",
        "assumption: a handful of applications share one deployment",
        lo=1,
    )
    system_prompt_min_tokens: int = knob(
        1000,
        "shortest system prompt (tokens); lengths are uniform in [min, max]",
        "published assistant system prompts (e.g. Anthropic's claude.ai prompts in its "
        "release notes) run from about one to a few thousand tokens",
        lo=1,
    )
    system_prompt_max_tokens: int = knob(
        4000, "longest system prompt (tokens)", "as system_prompt_min_tokens", lo=1
    )
    zipf_s: float = knob(
        0.8,
        "Zipf exponent of system-prompt popularity: prompt k is picked with weight k^-s",
        "Breslau et al., INFOCOM 1999: web request popularity is Zipf-like with "
        "exponents 0.64-0.83; applications behind one endpoint are assumed alike",
        lo=0,
    )
    n_fewshot: int = knob(
        4,
        "alternative few-shot example blocks per system prompt, one picked uniformly "
        "per request (0: no few-shot block)",
        "assumption: a few prompt variants (tasks or A/B arms) per application",
        lo=0,
    )
    fewshot_mean_tokens: float = knob(
        500.0,
        "mean length of a few-shot block (tokens)",
        "assumption: 3-5 worked examples of ~100-150 tokens, as in few-shot prompting "
        "(Brown et al. 2020, GPT-3)",
        gt=0,
    )
    fewshot_sigma: float = knob(
        0.5,
        "log-spread of few-shot block lengths",
        "assumption: 5-95% range x0.44-x2.3 the median",
        lo=0,
    )
    fewshot_max_tokens: int = knob(
        4000,
        "longest few-shot block (tokens)",
        "guard: P(block > 4000) < 1e-4 at the default mean and spread",
        lo=1,
    )
    question_mean_tokens: float = knob(
        69.5, "mean user-question length (tokens)", f"{_LMSYS}: 69.5 tokens per user prompt", gt=0
    )
    question_sigma: float = knob(
        1.0, "log-spread of question lengths", "assumption: 5-95% range x0.2-x5 the median", lo=0
    )
    question_max_tokens: int = knob(
        1024,
        "longest user question (tokens)",
        "guard: P(question > 1024) < 1e-3 at the default mean and spread",
        lo=1,
    )
    output_mean_tokens: float = knob(
        149.0,
        "mean reply length (tokens)",
        "Mooncake FAST'25 synthetic trace (/work/shared/data): average output 149 tokens",
        gt=0,
    )
    output_sigma: float = knob(
        0.8, "log-spread of reply lengths", "assumption: 5-95% range x0.27-x3.7 the median", lo=0
    )
    output_max_tokens: int = knob(
        1024,
        "longest reply (tokens)",
        "guard: P(reply > 1024) < 1e-3 at the default mean and spread",
        lo=1,
    )

    def check(self) -> None:
        self.require_ordered("system_prompt_min_tokens", "system_prompt_max_tokens")


@dataclass(frozen=True)
class _Shared:
    prompts: list[np.ndarray]  # system prompt i
    fewshot: list[list[np.ndarray]]  # few-shot blocks of system prompt i
    cdf: np.ndarray  # cumulative Zipf popularity over the prompts


class SystemPromptGenerator(WorkloadGenerator):
    """Single-turn requests: shared system prompt + few-shot block + unique question."""

    name: ClassVar[str] = "system-prompt"
    description: ClassVar[str] = (
        "single-turn requests sharing 4 system prompts (1-4K tokens, Zipf popularity) and "
        "few-shot blocks, then a short unique question"
    )
    Params: ClassVar[type[GeneratorParams]] = SystemPromptParams

    def shared(self, rng: np.random.Generator, max_context: int) -> _Shared:
        p: SystemPromptParams = self.params  # type: ignore[assignment]
        prompts, fewshot = [], []
        for i in range(p.n_system_prompts):
            n = int(rng.integers(p.system_prompt_min_tokens, p.system_prompt_max_tokens + 1))
            prompts.append(token_ids(rng, n, p.vocab_size))
            blocks = [
                token_ids(
                    rng,
                    lognormal_int(
                        rng, p.fewshot_mean_tokens, p.fewshot_sigma, 1, p.fewshot_max_tokens
                    ),
                    p.vocab_size,
                )
                for _ in range(p.n_fewshot)
            ]
            fewshot.append(blocks)
            longest = n + max((len(b) for b in blocks), default=0)
            if longest + 2 > max_context:
                raise TwinError(
                    f"--max-context {max_context} is too small: system prompt {i} with its "
                    f"longest few-shot block is {longest} tokens, and a question token and a "
                    "reply token must fit too; raise it or lower --set system_prompt_max_tokens "
                    "/ fewshot_mean_tokens"
                )
        cdf = np.cumsum(zipf_weights(p.n_system_prompts, p.zipf_s))
        return _Shared(prompts, fewshot, cdf)

    def session(self, rng: np.random.Generator, shared: Any, max_context: int) -> Iterator[Turn]:
        p: SystemPromptParams = self.params  # type: ignore[assignment]
        i = min(int(np.searchsorted(shared.cdf, rng.random(), side="right")), len(shared.cdf) - 1)
        parts = [shared.prompts[i]]
        if p.n_fewshot:
            parts.append(shared.fewshot[i][int(rng.integers(p.n_fewshot))])
        prefix = sum(len(x) for x in parts)
        n_q = lognormal_int(rng, p.question_mean_tokens, p.question_sigma, 1, p.question_max_tokens)
        n_out = lognormal_int(rng, p.output_mean_tokens, p.output_sigma, 1, p.output_max_tokens)
        n_q, n_out = clip_turn(n_q, n_out, max_context - prefix)
        parts.append(token_ids(rng, n_q, p.vocab_size))
        yield Turn(0.0, np.concatenate(parts), False, token_ids(rng, n_out, p.vocab_size))
