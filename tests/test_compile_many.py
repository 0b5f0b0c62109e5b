"""A kernel's array form prices every element as its scalar form does, to the bit (issue 16).

``CostModel.decode_steps_s`` prices a whole decode run with
``latency.compile_many``; the engine's outputs stay byte-identical only if each
element equals ``compile_fast``'s price exactly, zero features included.
"""

from __future__ import annotations

import numpy as np
import pytest

from twin.costmodel import latency as lat
from twin.costmodel.formulas import get_formula
from twin.costmodel.profile_store import load_profile, shipped_profiles


@pytest.mark.parametrize("profile", sorted(shipped_profiles()))
def test_array_prices_equal_scalar_prices(profile: str) -> None:
    prof = load_profile(profile)
    rng = np.random.default_rng(16)
    for name, kernel in sorted(prof.kernels.items()):
        formula = get_formula(name)
        if formula.floor or len(formula.extras) > 2:
            # The all-to-alls (a floor on every family since session 24; DeepEP's three
            # extra terms) have only the general form: A2APrice prices them with
            # compile_kernel, never compile_fast.
            continue
        fast = lat.compile_fast(name, kernel.params, prof.peaks)
        many = lat.compile_many(name, kernel.params, prof.peaks)
        n = 400
        flops = rng.uniform(0, 1e13, n) * (rng.random(n) > 0.1)
        nbytes = rng.uniform(0, 1e10, n) * (rng.random(n) > 0.1)
        x, y = rng.uniform(0, 1e8, n), rng.uniform(0, 1e6, n)
        got = many(flops, nbytes, x, y)
        columns = (flops.tolist(), nbytes.tolist(), x.tolist(), y.tolist())
        want = [fast(*v) for v in zip(*columns, strict=True)]
        assert got.tolist() == want, name
        # Scalars broadcast against arrays (a decode run's fixed features).
        assert many(flops, 1e9, 0.0, 5.0).tolist() == [fast(f, 1e9, 0.0, 5.0) for f in flops]


def test_a_negative_compute_side_is_priced_like_the_scalar_form() -> None:
    prof = load_profile(sorted(shipped_profiles())[0])
    params = dict(prof.kernels["attn_decode"].params)
    fast = lat.compile_fast("attn_decode", params, prof.peaks)
    many = lat.compile_many("attn_decode", params, prof.peaks)
    flops, nbytes = np.array([0.0, 1e12, 0.0, 1e12]), np.array([1e9, 0.0, 0.0, 1e9])
    assert many(flops, nbytes).tolist() == [fast(f, b) for f, b in zip(flops, nbytes, strict=True)]
