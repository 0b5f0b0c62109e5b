"""A mixed step priced by compiled code equals the Python path to the bit (issue 16).

``CostModel.compile_steps`` hands ``step_spread`` of at most one prefill chunk to
``twin.costmodel.compiled.step_seconds``: the Python path's own scalar rules (the
step's sums, the mixers' and the head's features, the roofline) compiled by numba, and
the compiled module's own packing of a model's constants and assembly of the parts and
the host time. The engine's outputs stay byte-identical only if the packing and the
assembly are right and numba's code gives CPython's floats (the same libm ``pow``, int64
counts), so every price equals the Python path's exactly (``==``):
every shipped profile and preset (full and sliding-window attention, Mamba2, Mamba-1,
GDN), tensor parallelism, both host modes, random chunks, batches and contexts; and where
it does not serve, Python answers.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twin.costmodel import CostModel
from twin.costmodel import compiled as sk
from twin.costmodel.model import MAX_TOKENS
from twin.costmodel.profile_store import load_profile, shipped_profiles
from twin.engine import make_pricer
from twin.errors import TwinError
from twin.presets import PRICED_PRESETS, get_model

RNG = np.random.default_rng(16)


def _pair(model_name: str, profile: str, tp: int = 1, **profile_changes: object) -> tuple:
    """A compiled cost model and a plain one (the oracle) of the same model and profile."""
    prof = load_profile(profile)
    if profile_changes:
        prof = dataclasses.replace(prof, **profile_changes)
    compiled, plain = (
        CostModel(get_model(model_name), prof, tp),
        CostModel(get_model(model_name), prof, tp),
    )
    compiled.compile_steps()
    return compiled, plain


def _random_steps(n: int) -> list[tuple[list[tuple[int, int]], int, int]]:
    steps = []
    for _ in range(n):
        chunks = []
        if RNG.random() < 0.9:
            chunks = [(int(RNG.integers(1, 9000)), int(RNG.integers(0, 1 << RNG.integers(1, 18))))]
        batch = int(RNG.integers(0, 300)) if RNG.random() < 0.8 else 0
        context = int(RNG.integers(0, 40_000)) * batch + int(RNG.integers(0, max(batch, 1)))
        if chunks or batch:
            steps.append((chunks, batch, context))
    return steps


def _served(name: str) -> bool:
    cm = CostModel(get_model(name), load_profile("h100"))
    return sk.pack_step(cm) is not None


def test_the_kernel_serves_every_preset() -> None:
    # MLA steps are priced in Python (twin.costmodel.mla_pricing): the kernel declines them.
    mla = {n for n in PRICED_PRESETS if get_model(n).mixer_counts.get("mla")}
    assert mla and {n for n in PRICED_PRESETS if _served(n)} == set(PRICED_PRESETS) - mla
    kinds = {k for n in set(PRICED_PRESETS) - mla for k in get_model(n).mixer_counts}
    assert kinds == {"attention", "swa", "mamba2", "mamba1", "gdn"}


@pytest.mark.parametrize("profile", sorted(shipped_profiles()))
def test_compiled_steps_equal_the_python_steps_on_every_profile_and_preset(profile: str) -> None:
    steps = _random_steps(25)
    for name in sorted(n for n in PRICED_PRESETS if _served(n)):
        compiled, plain = _pair(name, profile)
        assert compiled._step_kernel is not None
        for chunks, batch, context in steps:
            got = compiled.step_spread(chunks, batch, context)
            assert got == plain.step_spread(chunks, batch, context), (name, chunks, batch, context)


def test_compiled_steps_equal_the_step_of_the_spread_contexts() -> None:
    for name in ("marconi-hybrid-7b", "gemma-3-4b", "tiny-moe-hybrid"):
        compiled, plain = _pair(name, "h100")
        for chunks, batch, context in _random_steps(40):
            base, extra = divmod(context, batch) if batch else (0, 0)
            decodes = [base + 1] * extra + [base] * (batch - extra)
            assert compiled.step_spread(chunks, batch, context) == plain.step(chunks, decodes)


def test_tensor_parallel_steps_are_priced_alike() -> None:
    for name in ("marconi-hybrid-7b", "zamba2-7b", "qwen3.5-9b", "jamba-1.5-mini", "gpt-oss-20b"):
        compiled, plain = _pair(name, "h100", tp=2)
        for chunks, batch, context in _random_steps(30):
            assert compiled.step_spread(chunks, batch, context) == plain.step_spread(
                chunks, batch, context
            )


@pytest.mark.parametrize("mode", ["add", "max"])
def test_host_time_added_or_a_floor_is_priced_as_in_python(mode: str) -> None:
    for per_layer in (0.0, 2e-6, 4e-4):  # none, added or under the kernels, over them
        seconds = {"attention": per_layer, "ssm": per_layer, "mlp": per_layer, "head": 1e-6}
        overhead = {"mode": mode, "seconds": seconds}
        compiled, plain = _pair("marconi-hybrid-7b", "h100-vllm", layer_overhead=overhead)
        for chunks, batch, context in [*_random_steps(20), ([(1, 0)], 0, 0), ([], 1, 0)]:
            got = compiled.step_spread(chunks, batch, context)
            assert got == plain.step_spread(chunks, batch, context), (per_layer, chunks, batch)


@settings(max_examples=300, deadline=None)
@given(
    chunk=st.one_of(st.none(), st.tuples(st.integers(1, 200_000), st.integers(0, 2_000_000))),
    batch=st.integers(0, 1024),
    per_seq=st.integers(0, 1_000_000),
    extra=st.integers(0, 1023),
)
def test_random_steps_give_the_python_price(
    chunk: tuple[int, int] | None, batch: int, per_seq: int, extra: int
) -> None:
    compiled, plain = _MODELS
    chunks = [chunk] if chunk is not None else []
    context = per_seq * batch + (extra % batch if batch else 0)
    assert compiled.step_spread(chunks, batch, context) == plain.step_spread(chunks, batch, context)


_MODELS = _pair("marconi-hybrid-7b", "h100")


def test_what_the_kernel_does_not_take_python_prices_or_refuses() -> None:
    compiled, plain = _MODELS
    # Two chunks, counts past the int64-safe bound, no work at all: the Python path.
    for chunks, batch, context in (
        ([(5, 0), (7, 3)], 4, 40),
        ([(3, MAX_TOKENS)], 2, 10),
        ([(3, 5)], 2, MAX_TOKENS + 1),
        ([], 0, 0),
    ):
        assert compiled.step_spread(chunks, batch, context) == plain.step_spread(
            chunks, batch, context
        )
    for chunks, batch, context in (([(0, 5)], 1, 1), ([(4, -1)], 1, 1), ([(4, 1)], 3, -7)):
        with pytest.raises(TwinError):
            compiled.step_spread(chunks, batch, context)


def test_the_engines_pricer_compiles_its_steps() -> None:
    pricer = make_pricer(get_model("marconi-hybrid-7b"), load_profile("h100"), 1)
    assert pricer.cost_model._step_kernel is not None
    plain = CostModel(get_model("marconi-hybrid-7b"), load_profile("h100"))
    assert pricer.step_time([(300, 1200)], 12, 12 * 5000) == plain.step_spread(
        [(300, 1200)], 12, 12 * 5000
    )
