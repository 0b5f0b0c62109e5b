"""``swebench``: SWE-agent-like coding-agent episodes with collapsed old observations.

Turn 0's prompt is a long system prompt (identical tokens in every session:
drawn once per seed) followed by the session's own task (the issue text). Its
output is the agent's first action. Turn t >= 1 adds the tool's observation of
the previous action and asks for the next action; the time between turns is
the tool's running time (``think_s``).

SWE-agent keeps only the newest observations in full: its ``LastNObservations``
history processor replaces older ones with ``Old environment output: (N lines
omitted)``. It never touches the first observation (the task) and, with
``polling`` P, only advances the cut-off every P steps. At turn t the history
holds observations 1..t, of which the first

    max(0, floor((1 + t) / P) * P - n - 1)

are collapsed (SWE-agent's ``_get_omit_indices``: the ``1 +`` counts the task).
A turn that collapses no new observation extends the history and stores only
the new observation. A turn that does collapse one rewrites the middle of the
prompt, so it is written with ``extends_history=False`` and the full prompt
(system + task + actions + placeholders + recent observations): it shares the
previous prompt only up to the newly collapsed observation, which is what makes
agent traces hard for exact-prefix caches.

Context cap: the session ends before a step whose full prompt + action would
exceed ``--max-context`` (an agent that runs out of context stops); turn 0 is
clipped (task, then action) so that every session has a request.
"""

from __future__ import annotations

import math
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
    turn_count,
)

# "Old environment output: (N lines omitted)" is about a dozen Llama-2 tokens.
# The line count varies in SWE-agent; one fixed run of ids keeps it simple and
# changes the prompt length by at most a token or two.
PLACEHOLDER_TOKENS = 12

_MARCONI = "Marconi artifact utils/generate_trace.py (process_swebench_trace)"
_SWEAGENT = "SWE-agent sweagent/agent/history_processors.py, LastNObservations"
_CLAUDE_TRACE = "HF dataset noddu/swe_multiturn-claude-trace-tokenized-qwen3.5"


@dataclass(frozen=True)
class SWEBenchParams(GeneratorParams):
    """Knobs of the ``swebench`` kind."""

    system_prompt_tokens: int = knob(
        1600,
        "length of the system prompt shared by every session (tokens; 0: none)",
        "SWE-agent config/default.yaml: system_template 1,793 characters + the JSON "
        "schemas of its tool bundles (defaults, search, edit_replace, submit) 4,698 "
        "characters = 6,491 characters, about 1.6K tokens at ~4 characters per token "
        "(OpenAI help center 'What are tokens'); its optional demonstration "
        "(put_demos_in_history) would add ~26K characters (~6.5K tokens)",
        lo=0,
    )
    task_mean_tokens: float = knob(
        400.0,
        "mean length of the per-session task: issue text in the instance template (tokens)",
        "SWE-bench paper (arXiv 2310.06770) Table 1: issues average 195.1 words (~260 "
        "tokens at 0.75 words/token) + ~150 tokens of SWE-agent instance template",
        gt=0,
    )
    task_sigma: float = knob(
        0.8, "log-spread of task lengths", "assumption: 5-95% range x0.27-x3.7 the median", lo=0
    )
    task_max_tokens: int = knob(
        6000,
        "longest task (tokens)",
        "SWE-bench paper Table 1: longest issue 4,477 words (~6K tokens)",
        lo=1,
    )
    min_steps: int = knob(
        5,
        "fewest LLM calls (turns) in an episode",
        f"{_MARCONI}: keeps trajectories of >= 10 messages (5 action/observation turns)",
        lo=1,
    )
    mean_steps: float = knob(
        20.0,
        "mean LLM calls per episode (min_steps + a geometric number of extra steps)",
        "assumption: between the artifact's 5-step floor and 50-step cut, below the ~33 "
        "calls per task of recent agents (HF Inferact/codex_swebenchpro_traces)",
        lo=1,
    )
    max_steps: int = knob(
        50, "most LLM calls in an episode", f"{_MARCONI}: stops after turn 50", lo=1
    )
    action_mean_tokens: float = knob(
        150.0,
        "mean action length: the agent's thought + command, i.e. each turn's output (tokens)",
        f"{_CLAUDE_TRACE}: outputs of 97-196 tokens per step",
        gt=0,
    )
    action_sigma: float = knob(
        0.6, "log-spread of action lengths", "assumption: 5-95% range x0.37-x2.7 the median", lo=0
    )
    action_max_tokens: int = knob(
        1024,
        "longest action (tokens)",
        "guard: P(action > 1024) < 1e-3 at the default mean and spread",
        lo=1,
    )
    observation_mean_tokens: float = knob(
        500.0,
        "mean tool observation length: each turn's new input (tokens)",
        "assumption: short command outputs (~100-300 tokens per step in "
        f"{_CLAUDE_TRACE}) mixed with SWE-agent's 100-line file windows (~1-1.5K tokens)",
        gt=0,
    )
    observation_sigma: float = knob(
        1.0, "log-spread of observation lengths", "assumption: 5-95% range x0.2-x5 the median", lo=0
    )
    observation_min_tokens: int = knob(
        32,
        "shortest observation (tokens)",
        "SWE-agent 0.x next-step template wraps every output in '(Open file: ...) "
        "(Current directory: ...) bash-$' (~30 tokens)",
        lo=1,
    )
    observation_max_tokens: int = knob(
        8000,
        "longest observation (tokens)",
        "guard: P(observation > 8000) < 1e-3 at the default mean and spread",
        lo=1,
    )
    keep_observations: int = knob(
        5,
        "observations kept in full (SWE-agent's last_n_observations n)",
        f"{_SWEAGENT}: 'used in the original paper to elide all but the last 5 "
        f"observations'; {_MARCONI}: collapse_except_last=5",
        lo=1,
    )
    collapse_every: int = knob(
        1,
        "steps between advances of the collapse cut-off (SWE-agent's polling)",
        f"{_SWEAGENT}: polling defaults to 1 (the cut-off moves every step)",
        lo=1,
    )
    tool_median_s: float = knob(
        5.0,
        "median tool running time between turns (s)",
        "assumption: seconds for a shell command, edit or test run in the agent's "
        f"container; {_MARCONI} adds Poisson(avg_response_time) s, a run parameter",
        gt=0,
    )
    tool_sigma: float = knob(
        1.0,
        "log-spread of tool times",
        "assumption: 5-95% range ~1 s to ~26 s at the default median",
        lo=0,
    )

    def check(self) -> None:
        self.require_ordered("min_steps", "mean_steps", "max_steps")
        self.require_ordered("observation_min_tokens", "observation_max_tokens")


@dataclass(frozen=True)
class _Shared:
    system: np.ndarray  # the system prompt every session starts with
    placeholder: np.ndarray  # the ids that replace a collapsed observation


def collapsed_count(turn: int, keep: int, every: int) -> int:
    """Observations collapsed in turn ``turn``'s prompt (SWE-agent's omit indices)."""
    return max(0, ((1 + turn) // every) * every - keep - 1)


class SWEBenchGenerator(WorkloadGenerator):
    """Agent episodes: shared system prompt + task, then action/observation steps."""

    name: ClassVar[str] = "swebench"
    description: ClassVar[str] = (
        "SWE-agent-like episodes: shared 1.6K-token system prompt + issue, ~20 steps of "
        "action/observation, observations older than the last 5 collapsed"
    )
    Params: ClassVar[type[GeneratorParams]] = SWEBenchParams

    def shared(self, rng: np.random.Generator, max_context: int) -> _Shared:
        p: SWEBenchParams = self.params  # type: ignore[assignment]
        if p.system_prompt_tokens + 2 > max_context:
            raise TwinError(
                f"--max-context {max_context} leaves no room after the "
                f"{p.system_prompt_tokens}-token system prompt (it needs a task token and an "
                "action token too); raise it or lower --set system_prompt_tokens"
            )
        return _Shared(
            system=token_ids(rng, p.system_prompt_tokens, p.vocab_size),
            placeholder=token_ids(rng, PLACEHOLDER_TOKENS, p.vocab_size),
        )

    def session(self, rng: np.random.Generator, shared: Any, max_context: int) -> Iterator[Turn]:
        p: SWEBenchParams = self.params  # type: ignore[assignment]
        system, placeholder = shared.system, shared.placeholder
        n_steps = turn_count(rng, p.min_steps, p.mean_steps, p.max_steps)

        # Turn 0: system + task -> first action, clipped to fit.
        n_task = lognormal_int(rng, p.task_mean_tokens, p.task_sigma, 1, p.task_max_tokens)
        n_act = lognormal_int(rng, p.action_mean_tokens, p.action_sigma, 1, p.action_max_tokens)
        n_task, n_act = clip_turn(n_task, n_act, max_context - len(system))
        task = token_ids(rng, n_task, p.vocab_size)
        action = token_ids(rng, n_act, p.vocab_size)
        yield Turn(0.0, np.concatenate((system, task)), False, action)

        # After system + task: a_1, o_1, a_2, o_2, ...; collapsed o_i point at the placeholder.
        history: list[np.ndarray] = [action]
        obs_at: list[int] = []  # index in history of observation i + 1
        prompt_len = len(system) + n_task + n_act  # previous prompt + its output
        collapsed = 0
        log_median = math.log(p.tool_median_s)
        for t in range(1, n_steps):
            # Draw everything first, in a fixed order, so that the collapse knobs
            # never shift the random stream (equal seeds give equal episodes).
            n_obs = lognormal_int(
                rng,
                p.observation_mean_tokens,
                p.observation_sigma,
                p.observation_min_tokens,
                p.observation_max_tokens,
            )
            n_act = lognormal_int(rng, p.action_mean_tokens, p.action_sigma, 1, p.action_max_tokens)
            think = float(rng.lognormal(log_median, p.tool_sigma))
            obs = token_ids(rng, n_obs, p.vocab_size)
            action = token_ids(rng, n_act, p.vocab_size)

            target = collapsed_count(t, p.keep_observations, p.collapse_every)
            newly = [obs_at[i] for i in range(collapsed, target)]
            full_len = prompt_len + n_obs - sum(len(history[j]) - len(placeholder) for j in newly)
            if full_len + n_act > max_context:
                return  # the agent ran out of context: the episode ends here
            history.append(obs)
            obs_at.append(len(history) - 1)
            if newly:
                for j in newly:
                    history[j] = placeholder
                collapsed = target
                prompt = np.concatenate((system, task, *history))
                yield Turn(think, prompt, False, action)
            else:
                yield Turn(think, obs, True, action)
            history.append(action)
            prompt_len = full_len + n_act
