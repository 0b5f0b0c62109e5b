"""Decode runs priced in one go equal the step-by-step price (issue 16).

A measured attention decode kernel (a p-norm roofline) is not affine in the
context, so the engine prices each step of a decode run; the cost model
prices the full-attention part per step and the rest once. Every shipped profile
and preset must agree with ``CostModel.step`` to the bit.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from twin.costmodel import CostModel
from twin.costmodel.profile_store import load_profile, shipped_profiles
from twin.engine.cost import CostModelPricer
from twin.presets import PRICED_PRESETS, get_model

RNG = np.random.default_rng(16)


def _even(batch: int, context: int) -> list[int]:
    base, extra = divmod(context, batch)
    return [base + 1] * extra + [base] * (batch - extra)


@pytest.mark.parametrize("profile", sorted(shipped_profiles()))
def test_decode_steps_equal_the_step_price(profile: str) -> None:
    prof = load_profile(profile)
    for name in sorted(PRICED_PRESETS):
        cm = CostModel(get_model(name), prof)
        for batch in (1, 3, 64, 257):
            contexts = [int(c) * batch for c in RNG.integers(0, 40_000, 6)] + [0, 7]
            fast = cm.decode_steps_s(batch, contexts)
            assert fast == [cm.step((), _even(batch, c)) for c in contexts], (name, batch)


def test_a_sliding_window_is_priced_per_sequence() -> None:
    model = dataclasses.replace(get_model("tiny-transformer"), sliding_window=16)
    cm = CostModel(model, load_profile("h100-datasheet"))
    assert cm.decode_steps_s(4, [0, 40, 400]) == [cm.step((), _even(4, c)) for c in (0, 40, 400)]


def test_the_pricer_times_a_non_affine_run_like_each_step() -> None:
    measured = [p for p in sorted(shipped_profiles()) if not p.endswith("datasheet")]
    pricer = CostModelPricer(CostModel(get_model("marconi-hybrid-7b"), load_profile(measured[0])))
    batch, context = 24, 24 * 900
    for steps in (1, 50, 300):  # the loop and the array form (``_ARRAY_STEPS``)
        run = pricer.decode_run(batch, context, steps)
        each = [pricer.step_time((), batch, context + i * batch) for i in range(steps)]
        assert list(run) == each
    # Remembered prices (a run planned again over steps already priced) are the same.
    overlap = pricer.decode_run(batch, context + 250 * batch, 100)
    each = [pricer.step_time((), batch, context + i * batch) for i in range(250, 350)]
    assert list(overlap) == each


def test_a_step_priced_from_its_decode_summary_equals_the_step_of_its_spread() -> None:
    prof = load_profile(sorted(shipped_profiles())[0])
    windowed = dataclasses.replace(get_model("tiny-transformer"), sliding_window=16)
    for model in [*(get_model(name) for name in sorted(PRICED_PRESETS)), windowed]:
        cm = CostModel(model, prof)
        for batch in (0, 1, 3, 64):
            for _ in range(4):
                chunks = [
                    (int(n), int(c)) for n, c in RNG.integers(1, 3000, (int(RNG.integers(0, 3)), 2))
                ]
                if not chunks and not batch:
                    continue
                context = int(RNG.integers(0, 9000)) * max(batch, 1) if batch else 0
                context += int(RNG.integers(0, max(batch, 1)))
                want = cm.step(chunks, _even(batch, context) if batch else [])
                assert cm.step_spread(chunks, batch, context) == want, (model.name, batch)
