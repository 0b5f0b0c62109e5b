"""``fixed``: benchmark-style load, one request per session with set input and output lengths.

What serving benchmarks send: ``vllm bench serve --dataset-name random``,
genai-perf / AIPerf synthetic prompts and the ISL/OSL rows of end-to-end
tables (e.g. NVIDIA aiconfigurator's) all describe load as independent
requests of ``isl`` input tokens that each produce exactly ``osl`` output
tokens. Every session is therefore one turn (open loop; think time plays no
part) whose prompt is random token ids.

Lengths are ``fixed`` (every request the same), ``uniform`` in
[floor(len * (1 - spread)), ceil(len * (1 + spread))] as vLLM's
``--random-range-ratio`` draws them, or ``lognormal`` with mean ``len`` and
log-spread ``spread`` (``lognormal_int``, as the other kinds draw lengths).

Shared prefix: with ``prefix_len`` > 0, a fraction ``prefix_share`` of the
requests start with one ``prefix_len``-token prefix drawn once per workload
(vLLM's ``--random-prefix-len`` gives it to every request). Unlike vLLM, whose
``--random-input-len`` excludes the prefix, ``isl`` counts the whole prompt,
prefix included, so the input length a user asks for is the one simulated.

Context cap: the prompt is clipped to ``--max-context`` - 1 tokens and the
output to what is left, as the other kinds clip; a cap that cannot hold the
prefix and one output token is refused.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from twin.errors import TwinError
from twin.limits import MAX_SEQUENCE_TOKENS
from twin.workloads.generators.base import (
    GeneratorParams,
    Turn,
    WorkloadGenerator,
    knob,
    knob_error,
    lognormal_int,
    token_ids,
)

# vLLM's benchmark request sampler: vllm/benchmarks/datasets.py, class RandomDataset
# (DEFAULT_INPUT_LEN = 1024, DEFAULT_OUTPUT_LEN = 128, DEFAULT_RANGE_RATIO = 0.0,
# DEFAULT_PREFIX_LEN = 0; lengths uniform in [floor(len * (1 - r)), ceil(len * (1 + r))]
# with r in [0, 1) and the output at least 1; one prefix drawn per run, prepended).
_VLLM = "vLLM vllm/benchmarks/datasets.py RandomDataset"
DISTRIBUTIONS = ("fixed", "uniform", "lognormal")


@dataclass(frozen=True)
class FixedParams(GeneratorParams):
    """Knobs of the ``fixed`` kind."""

    isl: int = knob(
        1024,
        "input length of a request (tokens), the shared prefix included: the fixed length, "
        "the uniform range's centre or the lognormal mean",
        f"{_VLLM}: --random-input-len default 1024",
        lo=1,
    )
    osl: int = knob(
        128,
        "output length of a request (tokens): each request produces exactly this many "
        "(benchmarks ignore end-of-sequence)",
        f"{_VLLM}: --random-output-len default 128",
        lo=1,
    )
    isl_dist: str = knob(
        "fixed",
        "how input lengths vary: fixed, uniform or lognormal",
        f"{_VLLM}: fixed unless --random-range-ratio > 0, then uniform; lognormal is "
        "this project's length model for right-skewed lengths (lognormal_int)",
    )
    osl_dist: str = knob(
        "fixed",
        "how output lengths vary: fixed, uniform or lognormal",
        "as isl_dist",
    )
    isl_spread: float = knob(
        0.0,
        "uniform: input lengths in [isl * (1 - s), isl * (1 + s)], s < 1; lognormal: the "
        "log-spread sigma (mean stays isl); 0 with isl_dist fixed",
        f"{_VLLM}: --random-range-ratio default 0.0, in [0, 1)",
        lo=0,
    )
    osl_spread: float = knob(
        0.0,
        "as isl_spread, for output lengths",
        f"{_VLLM}: --random-range-ratio applies to output lengths too (lower bound at least 1)",
        lo=0,
    )
    prefix_len: int = knob(
        0,
        "tokens of one prefix shared by a prefix_share fraction of the requests (counted "
        "in isl; 0: none)",
        f"{_VLLM}: --random-prefix-len default 0 (vLLM adds it on top of the input length)",
        lo=0,
    )
    prefix_share: float = knob(
        1.0,
        "fraction of the requests that start with the shared prefix (each request is a coin "
        "flip); the rest are random throughout",
        f"{_VLLM}: every request gets the prefix (1.0)",
        lo=0,
        hi=1,
    )

    def check(self) -> None:
        for which in ("isl", "osl"):
            _check_lengths(which, getattr(self, f"{which}_dist"), getattr(self, f"{which}_spread"))
        if self.prefix_len == 0 and self.prefix_share != 1.0:
            raise knob_error("prefix_share", self.prefix_share, "applies only with prefix_len > 0")
        shortest = _shortest(self.isl, self.isl_dist, self.isl_spread)
        if self.prefix_len > shortest:
            bound = {
                "fixed": f"isl={self.isl}",
                "uniform": f"the shortest uniform prompt, floor(isl * (1 - isl_spread)) = "
                f"{shortest}",
                "lognormal": f"the lognormal mean isl={self.isl}",
            }[self.isl_dist]
            raise knob_error(
                "prefix_len",
                self.prefix_len,
                f"the prefix is part of the prompt, so it must be <= {bound}",
            )


def _check_lengths(which: str, dist: str, spread: float) -> None:
    if dist not in DISTRIBUTIONS:
        raise knob_error(f"{which}_dist", dist, f"expected one of {', '.join(DISTRIBUTIONS)}")
    if dist == "fixed" and spread != 0:
        raise knob_error(
            f"{which}_spread", spread, f"applies only with {which}_dist uniform or lognormal"
        )
    if dist != "fixed" and spread == 0:
        raise knob_error(
            f"{which}_dist", dist, f"needs {which}_spread > 0 (at 0 every length is {which})"
        )
    if dist == "uniform" and spread >= 1:
        raise knob_error(
            f"{which}_spread", spread, "a uniform spread must be < 1 (vLLM's range ratio rule)"
        )


def _bounds(length: int, spread: float, floor: int) -> tuple[int, int]:
    """The uniform range [floor(len * (1 - s)), ceil(len * (1 + s))], its low end >= ``floor``."""
    return max(floor, math.floor(length * (1 - spread))), math.ceil(length * (1 + spread))


def _shortest(length: int, dist: str, spread: float) -> int:
    """The shortest input a distribution draws (lognormal: clipped at the prefix, so its mean)."""
    if dist == "uniform":
        return _bounds(length, spread, 1)[0]
    return length


def _draw(rng: np.random.Generator, length: int, dist: str, spread: float, floor: int) -> int:
    """One length, never below ``floor`` (uncapped above: the caller clips to the context)."""
    if dist == "fixed":
        return length
    if dist == "uniform":
        lo, hi = _bounds(length, spread, floor)
        return int(rng.integers(lo, hi + 1))
    return lognormal_int(rng, length, spread, floor, MAX_SEQUENCE_TOKENS)


class FixedGenerator(WorkloadGenerator):
    """Independent requests of set input and output lengths, optionally sharing a prefix."""

    name: ClassVar[str] = "fixed"
    description: ClassVar[str] = (
        "benchmark-style single requests: isl input tokens (1024) and exactly osl output "
        "tokens (128), fixed, uniform or lognormal lengths, an optional shared prefix"
    )
    Params: ClassVar[type[GeneratorParams]] = FixedParams

    def shared(self, rng: np.random.Generator, max_context: int) -> np.ndarray:
        p: FixedParams = self.params  # type: ignore[assignment]
        if p.prefix_len + 1 > max_context:
            raise TwinError(
                f"--max-context {max_context} is too small: prefix_len {p.prefix_len} and one "
                "output token must fit; raise it or lower prefix_len"
            )
        return token_ids(rng, p.prefix_len, p.vocab_size)

    def session(self, rng: np.random.Generator, shared: Any, max_context: int) -> Iterator[Turn]:
        p: FixedParams = self.params  # type: ignore[assignment]
        prefix: np.ndarray = shared
        # Lognormal inputs are clipped at the prefix so that a prefixed prompt holds it whole.
        n_in = _draw(rng, p.isl, p.isl_dist, p.isl_spread, max(1, p.prefix_len))
        n_out = _draw(rng, p.osl, p.osl_dist, p.osl_spread, 1)
        prefixed = p.prefix_len > 0 and rng.random() < p.prefix_share
        n_in = min(n_in, max_context - 1)  # >= prefix_len: shared() checked the cap
        n_out = min(n_out, max_context - n_in)
        if prefixed:
            rest = token_ids(rng, n_in - len(prefix), p.vocab_size)
            prompt = np.concatenate((prefix, rest))
        else:
            prompt = token_ids(rng, n_in, p.vocab_size)
        yield Turn(0.0, prompt, False, token_ids(rng, n_out, p.vocab_size))
