"""The attention decode families' launch feature (``features.attn_decode_waves_d``): its
values at known shapes, a fit that finds a wave step, an old fit's prices, and the pricing
paths that pass it (the fit reader, the serving step, the compiled step)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from synthetic_fit import refit_truth

from twin.costmodel import features as ft
from twin.costmodel import formulas as fm
from twin.costmodel import latency as lat
from twin.costmodel.fit_upgrade import upgrade_fit
from twin.costmodel.profile import KernelFit

H100_SMS = 132  # twin.hardware.SM_COUNTS["h100"]
PEAKS = {"flops": 989e12, "mem_bw": 3.35e12, "fp8_flops": 1979e12}


def test_waves_d_at_known_shapes() -> None:
    # 16 sequences x 8 KV heads (GQA 4): 128 CTAs, one wave on 132 SMs, x head dim 128.
    assert ft.attn_decode_waves_d(16, 32, 8, 128, H100_SMS) == 128.0
    # 17 sequences: 136 CTAs, a second wave.
    assert ft.attn_decode_waves_d(17, 32, 8, 128, H100_SMS) == 256.0
    # The head dim scales it; the GQA ratio does not up to 64 packed query rows ...
    assert ft.attn_decode_waves_d(16, 8, 8, 64, H100_SMS) == 64.0
    # ... and past them a KV head takes a second block of query rows (MLA's GQA stand-in).
    assert ft.attn_decode_waves_d(100, 128, 1, 288, H100_SMS) == 2 * 288.0
    # No SM count (a datasheet profile's GPU unknown, a CPU) or no batch: none.
    assert ft.attn_decode_waves_d(16, 32, 8, 128, None) == 0.0
    assert ft.attn_decode_waves_d(0, 32, 8, 128, H100_SMS) == 0.0


def test_waves_d_never_falls_as_the_batch_grows_and_ignores_the_keys() -> None:
    waves = [ft.attn_decode_waves_d(b, 64, 8, 128, H100_SMS) for b in range(1, 600)]
    assert all(b >= a for a, b in itertools.pairwise(waves))
    assert waves[-1] > waves[0]
    # The fifth of ``attn_decode_sums`` is it, whatever the keys (the affine decode form).
    for keys in (0, 1, 37 * 1000, np.arange(5) * 4096):
        sums = ft.attn_decode_sums(37, keys, 64, 8, 128, 2, None, H100_SMS)
        assert sums[4] == ft.attn_decode_waves_d(37, 64, 8, 128, H100_SMS)
    assert ft.attn_decode_sums(37, 1000, 64, 8, 128, 2)[4] == 0.0  # no SM count
    # The features' dict carries it under the formula's name.
    extras = ft.attn_decode_features(17, 100, 32, 8, 128, 2, None, H100_SMS)[2]
    assert extras["waves_d"] == 256.0


@pytest.mark.parametrize("kernel", ["attn_decode", "attn_decode_fp8kv"])
def test_both_decode_families_read_the_waves(kernel: str) -> None:
    assert fm.get_formula(kernel).extras == ("score_elems", "tiles", "waves_d")
    assert fm.get_formula(kernel.replace("decode", "prefill")).extras == ("score_elems", "tiles")


def test_fit_finds_a_wave_step() -> None:
    """Timings with a cost per wave x head dim: the fit prices the step where the batch's
    CTAs cross the SMs, which the linear ``tiles`` term cannot."""
    kernel = "attn_decode"
    truth = {
        "t0_s": 5e-6,
        "eff_flops": 0.3,
        "eff_bytes": 0.7,
        "p": 2.0,
        "c_score_elems": 1e-13,
        "c_tiles": 1e-9,
        "c_waves_d": 2e-8,
    }
    features = (
        ft.attn_decode_features(b, c + 1, h, kvh, d, 2, None, H100_SMS)
        for b, c, (h, kvh), d in itertools.product(
            (1, 4, 16, 17, 33, 64, 66, 128, 256), (1, 64, 1024, 8192), ((32, 8), (64, 8)), (64, 128)
        )
    )
    fitted = refit_truth(kernel, truth, PEAKS, features)

    def price(b: int) -> float:
        flops, nbytes, extras = ft.attn_decode_features(b, 2, 32, 8, 128, 2, None, H100_SMS)
        return lat.predict(kernel, fitted, PEAKS, flops, nbytes, extras)

    # 16 -> 17 sequences: a second wave of CTAs; the price steps by about a wave.
    assert price(17) - price(16) > 0.5 * truth["c_waves_d"] * 128


def test_an_old_fit_prices_as_before() -> None:
    """A fit written before the waves (``roofline+score_elems+tiles``) reads with
    ``c_waves_d`` 0 (``fit_upgrade.upgrade_fit``): its prices are what they were, the waves
    passed or not, in every compiled form."""
    params = {
        "t0_s": 9e-6,
        "eff_flops": 0.4,
        "eff_bytes": 0.7,
        "p": 3.0,
        "c_score_elems": 1e-13,
        "c_tiles": 2e-8,
    }
    fit = KernelFit(model="roofline+score_elems+tiles", params=dict(params))
    upgrade_fit(fit, fm.get_formula("attn_decode_fp8kv"))
    assert fit.model == "roofline+score_elems+tiles+waves_d"
    assert fit.params == {**params, "c_waves_d": 0.0}
    sums = ft.attn_decode_sums(17, 17 * 3000, 32, 8, 128, 2, 1, H100_SMS)
    assert sums[4] > 0
    fast = lat.compile_fast("attn_decode_fp8kv", fit.params, PEAKS)
    assert fast(*sums) == fast(*sums[:4])
    many = lat.compile_many("attn_decode_fp8kv", fit.params, PEAKS)
    assert many(*sums).tolist() == many(*sums[:4]).tolist()
    affine = lat.compile_affine("attn_decode_fp8kv", fit.params, PEAKS)
    coeffs = (4.0 * 32 * 128, 2.0 * 17 * 32 * 128, 2.0 * 128 * 8, 32.0, float(8 * 17))
    assert affine(*coeffs, sums[4], 0.0, [51000]) == affine(*coeffs, 0.0, 0.0, [51000])


def test_the_affine_form_prices_the_waves_as_the_scalar_one() -> None:
    """``compile_affine`` adds the waves' term after the tiles' as ``fast`` does: equal to
    the bit with a non-zero ``c_waves_d`` (the association of the sum kept)."""
    from twin.costmodel.decode_pricing import affine_in_keys

    params = {
        "t0_s": 7e-6,
        "eff_flops": 0.37,
        "eff_bytes": 0.71,
        "p": 2.3,
        "c_score_elems": 3.3e-13,
        "c_tiles": 1.7e-8,
        "c_waves_d": 3.1e-9,
    }
    fast = lat.compile_fast("attn_decode", params, PEAKS)
    affine = lat.compile_affine("attn_decode", params, PEAKS)
    heads = (32, 8, 128, 2, 2, H100_SMS, "")
    for batch in (1, 16, 17, 300):
        coeffs = affine_in_keys(batch, heads)
        assert coeffs[5] == ft.attn_decode_waves_d(batch, 32, 8, 128, H100_SMS)
        counts = [batch, batch * 513, batch * 70_001]
        got = affine(*coeffs, counts)
        assert got == [fast(*ft.attn_decode_sums(batch, n, *heads)) for n in counts]


def test_the_fit_reader_passes_the_sms_of_the_tables_gpu() -> None:
    """NVIDIA's decode rows carry the waves at the table's GPU's SMs, as a serving step on
    that GPU prices them (the one features function: ``attn_decode_sums``)."""
    pytest.importorskip("aiconfigurator_core")
    from twin.calibration import aic_dense
    from twin.calibration.aic_tables import system_dir, system_sm_count

    system = system_dir("h100")
    if not system.is_dir():
        pytest.skip("aiconfigurator's H100 tables are not installed")
    sms = system_sm_count(system)
    assert sms == H100_SMS
    fam = aic_dense.attention_rows(system, "vllm", "decode")
    assert fam is not None
    for row in fam.rows[:: max(1, len(fam.rows) // 50)]:
        s = row["shape"]
        want = ft.attn_decode_waves_d(s["b"], s["h"], s["kvh"], s["d"], sms)
        assert row["waves_d"] == want
    assert any(row["waves_d"] > row["shape"]["d"] for row in fam.rows)


def test_a_serving_decode_prices_the_waves_of_its_gpu() -> None:
    """A serving step's attention decode passes the waves at the profile's GPU's SMs: the
    shipped H100 vLLM fit prices them (``c_waves_d`` > 0) in the step, the run of decode
    steps and the compiled step alike (``compiled.step_seconds`` compiles
    ``features.decode_sums``)."""
    from twin.costmodel import CostModel
    from twin.costmodel.profile_store import resolve_profile
    from twin.presets import get_model

    prof = resolve_profile("h100", None, "vllm")
    fit = prof.kernels["attn_decode"]
    assert fit.params["c_waves_d"] > 0
    plain = CostModel(get_model("llama-3-8b"), prof)
    compiled = CostModel(get_model("llama-3-8b"), prof)
    assert compiled.compile_steps()
    heads = plain._attn_heads()
    assert plain.sms == H100_SMS and heads[-2:] == (H100_SMS, ft.FA3_GRID_RULE)  # vLLM: FA3
    fast = lat.compile_fast("attn_decode", fit.params, prof.peaks)
    assert fast(*ft.attn_decode_sums(40, 40 * 2000, *heads)) > fast(
        *ft.attn_decode_sums(40, 40 * 2000, *heads[:-2])
    )
    for batch, context in ((1, 100), (16, 16 * 900), (17, 17 * 900), (200, 200 * 3000)):
        want = plain.step_spread((), batch, context)
        assert compiled.step_spread((), batch, context) == want
        assert plain.decode_steps_s(batch, [context])[0] == want
