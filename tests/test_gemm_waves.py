"""The dense GEMM families' wave feature (``features.gemm_wave_k``): its values at known
shapes, a fit that finds a wave step, and the pricing paths that pass it."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from synthetic_fit import refit_truth

from twin.costmodel import features as ft
from twin.costmodel import formulas as fm
from twin.costmodel import latency as lat
from twin.costmodel import moe_families as moef
from twin.costmodel.fit_upgrade import upgrade_fit
from twin.costmodel.profile import KernelFit

H100_SMS = 132  # twin.hardware.SM_COUNTS["h100"]
PEAKS = {"flops": 989e12, "mem_bw": 3.35e12}


def test_wave_k_at_known_shapes() -> None:
    # 128 x 1024 output: 8 tiles of 128 x 128, one wave on 132 SMs, all of k.
    assert ft.gemm_wave_k(128, 1024, 4096, H100_SMS) == 4096
    # One row more: a second row of tiles (16), still one wave.
    assert ft.gemm_wave_k(129, 1024, 4096, H100_SMS) == 4096
    # 132 column tiles fill the SMs at 128 rows; 129 rows take a second wave.
    assert ft.gemm_wave_k(128, 132 * 128, 4096, H100_SMS) == 4096
    assert ft.gemm_wave_k(129, 132 * 128, 4096, H100_SMS) == 2 * 4096
    # Grouped: 8 products of 10 rows x 256 columns = 16 tiles, 4 waves on 4 SMs.
    assert ft.gemm_wave_k(10, 256, 512, 4, groups=8) == 4 * 512
    # No SM count, no rows: no waves.
    assert ft.gemm_wave_k(128, 1024, 4096, None) == 0.0
    assert ft.gemm_wave_k(0, 1024, 4096, H100_SMS) == 0


def test_wave_k_never_falls_as_rows_grow() -> None:
    waves = [ft.gemm_wave_k(m, 7168, 2048, H100_SMS) for m in range(1, 4200, 7)]
    assert all(b >= a for a, b in itertools.pairwise(waves))
    assert waves[-1] > waves[0]


def test_features_carry_the_waves_of_the_sm_count() -> None:
    _, _, extras = ft.gemm_features(129, 4096, 132 * 128, 2, H100_SMS)
    assert extras == {"weight_elems": 4096 * 132 * 128, "wave_k": 2 * 4096}
    _, _, q = ft.gemm_features_at(129, 4096, 132 * 128, 2, 1.0, 1.0, H100_SMS)
    assert q["wave_k"] == 2 * 4096
    assert ft.gemm_features(129, 4096, 1024, 2)[2]["wave_k"] == 0.0  # no SM count


@pytest.mark.parametrize("kernel", ["gemm", *(f"gemm_{m}" for m in moef.PRECISION_GEMMS)])
def test_every_gemm_family_reads_the_waves(kernel: str) -> None:
    assert fm.get_formula(kernel).extras == ("weight_elems", "wave_k")


def test_fit_finds_a_wave_step() -> None:
    """Timings with a cost per wave: the fit prices the step where m crosses a tile row
    that adds a wave, which a smooth roofline could not."""
    kernel = "gemm"
    truth = {
        "t0_s": 4e-6,
        "eff_flops": 0.7,
        "eff_bytes": 0.8,
        "p": 3.0,
        "c_weight_elems": 0.0,
        "c_wave_k": 1e-8,
    }
    shapes = [
        (m, k, n)
        for m in (1, 16, 64, 128, 129, 256, 257, 512, 1024, 2048, 4096)
        for k, n in ((1024, 1024), (4096, 4096), (4096, 132 * 128), (8192, 2048), (2048, 28672))
    ]
    features = (ft.gemm_features(m, k, n, 2, H100_SMS) for m, k, n in shapes)
    fitted = refit_truth(kernel, truth, PEAKS, features)

    def price(m: int) -> float:
        flops, nbytes, extras = ft.gemm_features(m, 4096, 132 * 128, 2, H100_SMS)
        return lat.predict(kernel, fitted, PEAKS, flops, nbytes, extras)

    # 128 -> 129 rows: a second wave of 132 tiles; the price steps by a wave's k-loop.
    assert price(129) / price(128) > 1.3
    assert price(130) == pytest.approx(price(129), rel=0.01)


def test_an_old_fit_prices_as_before() -> None:
    """A fit written before the waves (``roofline+weight_elems``) reads with ``c_wave_k``
    0 (``fit_upgrade.upgrade_fit``): its prices are what they were, the waves passed or not."""
    params = {"t0_s": 4e-6, "eff_flops": 0.7, "eff_bytes": 0.8, "p": 3.0, "c_weight_elems": 1e-13}
    fit = KernelFit(model="roofline+weight_elems", params=dict(params))
    upgrade_fit(fit, fm.get_formula("gemm"))
    assert fit.model == "roofline+weight_elems+wave_k"
    assert fit.params == {**params, "c_wave_k": 0.0}
    flops, nbytes, extras = ft.gemm_features(129, 4096, 132 * 128, 2, H100_SMS)
    fast = lat.compile_fast("gemm", fit.params, PEAKS)
    priced = fast(flops, nbytes, extras["weight_elems"], extras["wave_k"])
    assert priced == fast(flops, nbytes, extras["weight_elems"])


def test_a_gpu_sweeps_gemm_rows_carry_the_waves_of_its_sms() -> None:
    """``twin calibrate`` on a GPU records each GEMM row's waves at the GPU's SMs (the
    sweep context's ``sms``), as a serving step on that GPU prices them; on a CPU (no SM
    count) none (helper review36: the rows were written with ``wave_k`` 0, so the fit
    never saw the feature it is priced with)."""
    from twin.calibration.kernels import SweepContext, registry
    from twin.presets import get_model

    def ctx(sms: int | None) -> SweepContext:
        return SweepContext(None, "cuda", None, 2, "quick", get_model("tiny-hybrid"), sms=sms)

    gemm = registry()["gemm"]
    shape = {"m": 129, "k": 4096, "n": 132 * 128}
    assert gemm.measured_features(shape, ctx(H100_SMS)) == ft.gemm_features(
        129, 4096, 132 * 128, 2, H100_SMS
    )
    assert gemm.measured_features(shape, ctx(H100_SMS))[2]["wave_k"] == 2 * 4096
    assert gemm.measured_features(shape, ctx(None))[2]["wave_k"] == 0.0


def test_a_serving_gemm_prices_the_waves_of_its_gpu() -> None:
    """A serving step's bf16 GEMM passes the waves at the profile's GPU's SMs, as the fit's
    rows carry them: the shipped H100 vLLM fit prices 129 rows x 132 column tiles (two
    waves) at its features with ``wave_k``, above the same price without."""
    from twin.costmodel import CostModel
    from twin.costmodel.profile_store import resolve_profile
    from twin.presets import get_model

    prof = resolve_profile("h100", None, "vllm")
    fit = prof.kernels["gemm"]
    assert fit.params["c_wave_k"] > 0
    cm = CostModel(get_model("llama-3-8b"), prof)
    assert cm.sms == H100_SMS
    fast = lat.compile_fast("gemm", fit.params, prof.peaks)
    flops, nbytes, extras = ft.gemm_features(129, 4096, 132 * 128, 2, H100_SMS)
    want = fast(flops, nbytes, extras["weight_elems"], extras["wave_k"])
    assert cm._gemm(129, 4096, 132 * 128) == want
    assert want > fast(flops, nbytes, extras["weight_elems"])


VLLM_FP8 = ft.VLLM_CUTLASS_FP8_SOURCE
H100_DEVICE = "NVIDIA H100 80GB HBM3"


def test_the_tile_rule_is_the_kernels_and_the_gpus() -> None:
    """vLLM's per-tensor fp8 CUTLASS GEMM on Hopper reads its sm90 dispatch's tiles; the
    same kernel on Blackwell, and every other kernel, the one default tile."""
    rule = ft.VLLM_SM90_FP8_TILES
    assert ft.gemm_tile_rule(VLLM_FP8, H100_DEVICE) == rule
    assert ft.gemm_tile_rule(VLLM_FP8, "NVIDIA H200") == rule
    assert ft.gemm_tile_rule(VLLM_FP8, "NVIDIA B200") == ""
    assert ft.gemm_tile_rule("sglang_sgl_kernel_fp8_scaled_mm", H100_DEVICE) == ""
    assert ft.gemm_tile_rule("torch.nn.functional.linear", H100_DEVICE) == ""


def test_vllm_sm90_fp8_tiles_by_rows() -> None:
    """``scaled_mm_sm90_fp8_dispatch.cuh``: 64 x 64 tiles to 64 rows, 64 x 128 to 128, 128 x
    128 above; the waves weighted by the tile's area in 128 x 128 tiles."""
    rule, k, n = ft.VLLM_SM90_FP8_TILES, 4096, 132 * 128
    # 64 rows: 264 tiles of 64 x 64, two waves of a quarter tile's k-loop each.
    assert ft.gemm_wave_k(64, n, k, H100_SMS, tiles=rule) == 2 * 0.25 * k
    # 65 rows: 2 x 132 tiles of 64 x 128: two waves of half a tile.
    assert ft.gemm_wave_k(65, n, k, H100_SMS, tiles=rule) == 2 * 0.5 * k
    # 129 rows: the default 128 x 128, as without a rule.
    assert ft.gemm_wave_k(129, n, k, H100_SMS, tiles=rule) == ft.gemm_wave_k(129, n, k, H100_SMS)
    # A 1-row decode GEMM of 1024 columns: 16 small tiles, one wave of a quarter tile.
    assert ft.gemm_wave_k(1, 1024, k, H100_SMS, tiles=rule) == 0.25 * k
    assert ft.gemm_wave_k(1, 1024, k, None, tiles=rule) == 0.0
    # Grouped and vectorised (a decode run's steps): element by element as scalars.
    rows = np.array([1.0, 64.0, 65.0, 500.0])
    got = ft.gemm_wave_k(rows, 2048, 512, 4, 8, rule)
    assert list(got) == [ft.gemm_wave_k(float(m), 2048, 512, 4, 8, rule) for m in rows]


@pytest.mark.parametrize("n", [1024, 1280, 4096, 7168, 132 * 128, 28672])
def test_vllm_sm90_fp8_waves_never_fall_as_rows_grow(n: int) -> None:
    waves = [
        ft.gemm_wave_k(m, n, 4096, H100_SMS, tiles=ft.VLLM_SM90_FP8_TILES) for m in range(1, 600)
    ]
    assert all(b >= a for a, b in itertools.pairwise(waves))


def test_reader_and_serving_read_the_same_tiles() -> None:
    """The shipped H100 vLLM fp8 fit: its provenance names the kernel and device the rule
    reads, and a serving fp8 projection prices the waves at that rule, not the default."""
    import dataclasses

    from twin.costmodel import CostModel
    from twin.costmodel.profile_store import resolve_profile
    from twin.presets import get_model

    prof = resolve_profile("h100", None, "vllm")
    fit = prof.kernels["gemm_fp8"]
    rule = ft.gemm_tile_rule(fit.provenance["kernel_source"], fit.provenance["device"])
    assert rule == ft.VLLM_SM90_FP8_TILES
    cm = CostModel(dataclasses.replace(get_model("llama-3-8b"), precision="fp8"), prof)
    assert cm._linear_q is not None
    price, act, weight, tiles, quant = cm._linear_q
    assert tiles == rule
    m, k, n = 64, 4096, 132 * 128
    sums = ft.gemm_sums_at(m, k, n, cm.elem_bytes, act, weight)
    qb = ft.act_quant_bytes(m, k, cm.elem_bytes, quant)
    own = price(*sums, ft.gemm_wave_k(m, n, k, H100_SMS, 1, rule), qb)
    assert cm._proj(m, k, n) == own
    assert own != price(*sums, ft.gemm_wave_k(m, n, k, H100_SMS), qb)
    # B200's fit of the same kernel keeps the default tile.
    b200 = resolve_profile("b200", None, "vllm").kernels["gemm_fp8"].provenance
    assert ft.gemm_tile_rule(b200["kernel_source"], b200["device"]) == ""
