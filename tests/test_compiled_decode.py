"""Decode runs timed by compiled code equal the Python path to the bit (issue 16).

``twin.costmodel.compiled.fill_ends`` prices the attention decode kernel by the
compiled ``latency.roofline_s`` (``latency.compile_affine``'s features), then sums
``decode_pricing.decode_steps``' parts and ``DecodeRun``'s running sums; the engine's
outputs stay byte-identical only if
every end it writes equals ``itertools.accumulate`` over ``CostModel.decode_steps_s``
exactly (``==``, never approx): on every shipped profile and preset, both of
``decode_steps_s``' forms (the loop and the arrays), the kernel's edge branches,
both host modes, and random constants (the same libm ``pow`` as CPython's).
"""

from __future__ import annotations

import dataclasses
from itertools import accumulate

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twin.calibration import load_profile
from twin.costmodel import CostModel
from twin.costmodel import compiled as dk
from twin.costmodel import latency as lat
from twin.costmodel.decode_pricing import decode_steps
from twin.costmodel.profile_store import shipped_profiles
from twin.engine import make_pricer
from twin.engine.cost import CostModelPricer, Durations
from twin.engine.decode_run import DecodeRun
from twin.presets import PRICED_PRESETS, get_model

RNG = np.random.default_rng(16)
# Full GQA attention, no window, no MLA: the presets whose decode runs are priced by parts.
_BY_PARTS = [
    n
    for n in sorted(PRICED_PRESETS)
    if get_model(n).n_attention_layers
    and not get_model(n).sliding_window
    and not get_model(n).mixer_counts.get("mla")
]


def _filled(c: np.ndarray, keys0: int, batch: int, k: int, cuts: list[int]) -> list[float]:
    """The ends of ``k`` steps, filled in chunks ending at ``cuts`` (then the rest)."""
    ends = np.full(k, np.nan)
    done = 0
    for cut in [*sorted(cuts), k]:
        if cut > done:
            dk.fill_ends(c, keys0, batch, ends, done, cut - done)
            done = cut
    return list(ends.tolist())


def _python_ends(cm: CostModel, batch: int, context: int, k: int) -> list[float]:
    return list(accumulate(cm.decode_steps_s(batch, range(context, context + k * batch, batch))))


@pytest.mark.parametrize("profile", sorted(shipped_profiles()))
def test_compiled_ends_equal_the_python_ends_on_every_profile_and_preset(profile: str) -> None:
    prof = load_profile(profile)
    for name in _BY_PARTS:
        cm = CostModel(get_model(name), prof)
        for batch in (1, 3, 64, 257):
            c = cm.decode_run_constants(batch)
            assert c is not None
            for k in (1, 5, 127, 128, 300):  # both of decode_steps_s' forms (_ARRAY_STEPS)
                context = int(RNG.integers(0, 40_000)) * batch + int(RNG.integers(0, batch))
                cuts = RNG.integers(0, k, 2).tolist()
                got = _filled(c, context + batch, batch, k, cuts)
                assert got == _python_ends(cm, batch, context, k), (name, batch, k)


def test_compiled_ends_equal_each_step_priced_in_full() -> None:
    cm = CostModel(get_model("marconi-hybrid-7b"), load_profile("h100"))
    batch, context, k = 24, 24 * 900 + 5, 40
    c = cm.decode_run_constants(batch)
    assert c is not None
    steps = [cm.step_spread((), batch, context + i * batch) for i in range(k)]
    assert _filled(c, context + batch, batch, k, [7]) == list(accumulate(steps))


@pytest.mark.parametrize("mode", ["add", "max"])
def test_host_time_added_or_a_floor_is_priced_as_in_python(mode: str) -> None:
    prof = load_profile("h100")
    for per_layer in (0.0, 3e-6, 2e-4):  # none, added or under the kernels, over them
        seconds = {"attention": per_layer, "ssm": per_layer, "mlp": per_layer, "head": 1e-6}
        overhead = {"mode": mode, "seconds": seconds}
        cm = CostModel(
            get_model("marconi-hybrid-7b"), dataclasses.replace(prof, layer_overhead=overhead)
        )
        for batch in (1, 16):
            c = cm.decode_run_constants(batch)
            assert c is not None
            for context in (0, 1000 * batch, 30_000 * batch):
                got = _filled(c, context + batch, batch, 140, [3, 60])
                assert got == _python_ends(cm, batch, context, 140), (per_layer, batch)


def test_no_compiled_path_where_a_step_is_priced_in_full() -> None:
    prof = load_profile("h100")
    windowed = dataclasses.replace(get_model("tiny-transformer"), sliding_window=16)
    assert CostModel(windowed, prof).decode_run_constants(4) is None
    # windows, MLA (its decode kernels read the context too), or no attention at all
    for name in sorted(set(PRICED_PRESETS) - set(_BY_PARTS)):
        assert CostModel(get_model(name), prof).decode_run_constants(4) is None, name
    # A windowed model's decode steps are priced in full (by the compiled mixed step).
    pricer = make_pricer(get_model("gemma-3-4b"), prof, 1)
    assert pricer.decode_ends(4, 400) is None and pricer.cost_model._step_kernel is not None
    # Host time that is neither added nor a floor: no compiled path, numba not loaded.
    odd = dataclasses.replace(prof, layer_overhead={"mode": "other", "seconds": {}})
    assert CostModel(get_model("gemma-3-4b"), odd).compile_steps() is False
    # An affine batch size is timed in closed form; the pricer offers no filler for it.
    pricer = make_pricer(get_model("marconi-hybrid-7b"), load_profile("h100-datasheet"), 1)
    assert pricer.decode_affine(8) is not None and pricer.decode_ends(8, 800) is None


_PEAKS = {"mem_bw": 1.0, "flops": 1.0}


def _kernel(params: dict[str, float]) -> tuple[str, lat.KernelConstants]:
    """A roofline attention decode kernel, or a bandwidth-only one without ``eff_flops``."""
    name = "attn_decode" if "eff_flops" in params else "copy_d2d"
    return name, lat.kernel_constants(name, params, _PEAKS)


def _python_path(
    params: dict[str, float],
    parts: tuple[float, float, int, list[float], float],
    keys: tuple[float, float, float, float, float, float, float],
    host_s: float,
    host_mode: str,
    counts: list[int],
) -> list[float]:
    """``compile_affine``'s kernel and ``decode_steps``, summed as ``DecodeRun`` sums."""
    name, _ = _kernel(params)
    kernel_s = lat.compile_affine(name, params, _PEAKS)(*keys, counts)
    dense, before, layers, after, head = parts
    steps = decode_steps(dense, before, layers, after, head, kernel_s, host_s, host_mode)
    return list(accumulate(steps))


_coefficient = st.one_of(st.just(0.0), st.floats(1e-12, 1e6))
_roofline = st.fixed_dictionaries(
    {
        "t0_s": st.floats(0.0, 1e-3),
        "eff_bytes": st.floats(1e9, 1e15),
        "eff_flops": st.floats(1e12, 1e18),
        "p": st.one_of(st.floats(0.5, 16.0), st.sampled_from([1.0, 2.0, 4.0])),
        "c_score_elems": st.one_of(st.just(0.0), st.floats(1e-22, 1e-9)),
        "c_tiles": st.one_of(st.just(0.0), st.floats(1e-10, 1e-6)),
        "c_waves_d": st.one_of(st.just(0.0), st.floats(1e-12, 1e-7)),
    }
)
_bandwidth = st.fixed_dictionaries(
    {"t0_s": st.floats(0.0, 1e-3), "eff_bytes": st.floats(1e9, 1e15)}
)


@settings(max_examples=400, deadline=None)
@given(
    params=st.one_of(_roofline, _bandwidth),
    keys=st.tuples(
        _coefficient,
        _coefficient,
        _coefficient,
        _coefficient,
        st.floats(0.0, 1e4),
        st.one_of(st.just(0.0), st.floats(0.0, 1e6)),
        # the keys from which the launch extra applies (TensorRT-LLM Hopper's XQA, mid-run)
        st.one_of(st.just(0.0), st.integers(0, 1 << 25).map(float)),
    ),
    parts=st.tuples(
        st.floats(0.0, 1e-1),
        st.floats(0.0, 1e-1),
        st.integers(1, 80),
        st.lists(st.floats(0.0, 1e-2), max_size=4),
        st.floats(0.0, 1e-2),
    ),
    host=st.tuples(st.floats(0.0, 5e-2), st.sampled_from(["add", "max"])),
    batch=st.integers(1, 512),
    keys0=st.integers(1, 1 << 24),
    k=st.integers(1, 90),
    cut=st.integers(0, 90),
)
def test_random_constants_give_the_python_prices(
    params: dict[str, float],
    keys: tuple[float, float, float, float, float, float, float],
    parts: tuple[float, float, int, list[float], float],
    host: tuple[float, str],
    batch: int,
    keys0: int,
    k: int,
    cut: int,
) -> None:
    # Zero coefficients reach the kernel's a <= 0 and b <= 0 branches.
    c = dk.pack_decode(parts, host[0], host[1] == "max", keys, _kernel(params)[1])
    counts = [keys0 + j * batch for j in range(k)]
    want = _python_path(params, parts, keys, host[0], host[1], counts)
    assert _filled(c, keys0, batch, k, [min(cut, k)]) == want


def test_the_edge_branches_and_both_sides_larger() -> None:
    params = {"t0_s": 1e-5, "eff_bytes": 1e12, "eff_flops": 1e15, "p": 1.4}
    params |= {"c_score_elems": 2e-20, "c_tiles": 2e-8, "c_waves_d": 3e-9}
    kernel = _kernel(params)[1]
    parts = (1e-3, 2e-4, 32, [1e-4, 3e-5], 5e-5)
    counts = [1 + j * 7 for j in range(200)]
    for keys, sides in (
        ((0.0, 1e6, 1e3, 0.0, 0.0, 0.0, 0.0), {"a <= 0"}),
        ((1e9, 0.0, 0.0, 0.0, 4.0, 128.0, 0.0), {"b <= 0"}),
        ((1e2, 1e3, 1e3, 1.0, 4.0, 256.0, 0.0), {"a > b", "a <= b"}),  # compute-, memory-bound
    ):
        fn, b0, bn, xn, y, z, _ = keys
        seen = set()
        for n in counts:  # which branch of ``affine`` each count takes
            a = fn * n * kernel.inv_f + kernel.cx * (xn * n) + kernel.cy * y + kernel.cz * z
            b = (b0 + bn * n) * kernel.inv_b
            seen.add("a <= 0" if a <= 0 else "b <= 0" if b <= 0 else "a > b" if a > b else "a <= b")
        assert seen == sides
        c = dk.pack_decode(parts, 0.0, False, keys, kernel)
        want = _python_path(params, parts, keys, 0.0, "add", counts)
        assert _filled(c, 1, 7, 200, [50]) == want, keys


def test_a_run_filled_by_the_pricer_equals_one_summed_from_decode_run() -> None:
    pricer = make_pricer(get_model("marconi-hybrid-7b"), load_profile("h100"), 1)
    assert isinstance(pricer, CostModelPricer)
    for batch, context, k in ((1, 500, 300), (24, 24 * 900 + 11, 2000), (200, 200 * 7000, 64)):
        fill = pricer.decode_ends(batch, context)
        assert fill is not None
        compiled = DecodeRun(k, fill=fill)

        def price(first: int, n: int, batch: int = batch, context: int = context) -> Durations:
            return pricer.decode_run(batch, context + first * batch, n)

        summed = DecodeRun(k, price=price)
        while compiled.priced < k:
            assert compiled.price_next() == summed.price_next()
        assert compiled.ends is not None and summed.ends is not None
        assert compiled.ends.tolist() == summed.ends.tolist()
        for elapsed in RNG.uniform(0, compiled.end(k), 10).tolist():
            assert compiled.steps_to_reach(elapsed) == summed.steps_to_reach(elapsed)
