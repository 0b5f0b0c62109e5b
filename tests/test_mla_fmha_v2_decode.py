"""TensorRT-LLM's MLA generation through the FMHA v2 decoder runner (A100, L40S, RTX PRO
6000 over a bf16 cache): one CTA per sequence and 64-row block of heads streams all its
keys, no split (``mla_decode_kernels.kernel_decode_rule``, the ``fmha_v2`` launch; issue 34)."""

from __future__ import annotations

import pytest
from aic_refit import assert_heldout, refit_family

from twin.calibration import aic_mla
from twin.calibration.aic_mla import dims
from twin.calibration.aic_tables import system_dir
from twin.costmodel import formulas as fm
from twin.costmodel import latency as lat
from twin.costmodel import mla_decode_kernels as mdk
from twin.costmodel import mla_features as mf
from twin.costmodel.fit_upgrade import upgrade_fit
from twin.costmodel.kernel_formula import FLOOR_PARAM
from twin.costmodel.profile import KernelFit
from twin.costmodel.profile_store import load_profile


@pytest.mark.parametrize("kv_e", [2, 1])
@pytest.mark.parametrize("gpu", ["a100-80gb", "l40s"])
def test_fmha_v2_rule_on_ampere_and_ada_tensorrt_llm_tables(gpu: str, kv_e: int) -> None:
    assert mdk.kernel_decode_rule(gpu, "default", kv_e) == "fmha_v2"
    # the kernels' base rule has none; the decode module takes FMHA v2 through
    # ``module_decode_rule`` (tests/test_mla_module_fmha_v2.py)
    assert mdk.decode_rule(gpu, "default", kv_e) is None


def test_fmha_v2_rule_leaves_the_other_kernels() -> None:
    assert mdk.kernel_decode_rule("rtx-pro-6000", "default", 2) == "fmha_v2"
    assert mdk.kernel_decode_rule("rtx-pro-6000", "default", 1) is None  # a split kernel
    assert mdk.kernel_decode_rule("h100", "default", 2) == "flashmla"  # split: not this kernel
    assert mdk.kernel_decode_rule("h200", "default", 1) == "flashmla"
    assert mdk.kernel_decode_rule("b200", "default", 2) == "trtllm_gen"
    assert mdk.kernel_decode_rule("l40s", "triton", 2) == "triton"  # SGLang's
    assert mdk.kernel_decode_rule("h200", "flash_attention", 2) == "fa3"


def test_fmha_v2_launch_is_one_cta_a_block_reading_every_key() -> None:
    """32 sequences of 1,000 keys at 128 heads: two 64-row CTAs each (64 CTAs, one wave of
    L40S's 142 SMs), the second re-reading the latent, no partials, a CTA's 1,000 keys
    on the critical path; 300 sequences take three waves."""
    d = dims(128)
    ctas, waves, repeat, partials, critical = mdk.mla_decode_launch(
        "fmha_v2", 32, 32_000, 1, d, 2, 142
    )
    assert (ctas, waves, partials, critical) == (64.0, 1.0, 0.0, 1_000.0)
    assert repeat == 2 * (512 + 64) * 32_000
    _, waves, _, _, critical = mdk.mla_decode_launch("fmha_v2", 300, 300_000, 1, dims(16), 2, 142)
    assert (waves, critical) == (3.0, 3_000.0)


@pytest.mark.slow
def test_l40s_trtllm_decode_refit_reads_the_fmha_v2_launch() -> None:
    """TensorRT-LLM 1.0.0's L40S decode table (NVIDIA's), bf16 cache: with the launch the
    held-out P90 is within 28% (without: 5.1 / 30.9%, median / P90)."""
    pytest.importorskip("aiconfigurator_core")
    peaks = load_profile("l40s", "trtllm").peaks
    rows, fit = refit_family(aic_mla.kernel_rows(system_dir("l40s"), "trtllm"), "mla_decode", peaks)
    assert {r["critical_keys"] > 0 for r in rows} == {True}
    assert_heldout(fit, None, 0.28)


def test_a_decode_fit_without_the_floor_prices_as_before() -> None:
    """An ``mla_decode`` fit written before the floor (H200 SGLang's parameters as a fit of
    the form before the floor and the replays' L2 term) reads ``floor_s`` 0: the same price
    at any features; with a floor, at least the floor."""
    shipped = load_profile("h200", "sglang").kernels["mla_decode"]
    gone = (FLOOR_PARAM, "c_l2_bytes")
    fit = KernelFit(
        model="+".join(x for x in shipped.model.split("+") if x not in ("floor", "l2_bytes")),
        params={k: v for k, v in shipped.params.items() if k not in gone},
    )
    upgrade_fit(fit, fm.get_formula("mla_decode"))
    assert fit.params[FLOOR_PARAM] == 0.0 and fit.params["c_l2_bytes"] == 0.0
    peaks = load_profile("h200", "sglang").peaks
    d = dims(16)
    sums = mf.mla_decode_sums(1, 8, d, 2, 2)
    feats = mdk.decode_kernel_features(sums, 0.0, mdk.NO_LAUNCH)[2:]
    price = lat.compile_fast("mla_decode", fit.params, peaks)
    params = dict(fit.params)
    del params[FLOOR_PARAM]
    unfloored = lat.compile_kernel("mla_decode", {**params, FLOOR_PARAM: 0.0}, peaks)
    names = fm.get_formula("mla_decode").features
    assert price(*sums[:2], *feats) == unfloored(*sums[:2], dict(zip(names, feats, strict=True)))
    floored = lat.compile_fast("mla_decode", {**params, FLOOR_PARAM: 1e-3}, peaks)
    assert floored(*sums[:2], *feats) == 1e-3


@pytest.mark.parametrize("gpu", ["a100-80gb", "l40s", "rtx-pro-6000"])
def test_shipped_fmha_v2_decode_fits_read_the_launch_and_the_floor(gpu: str) -> None:
    """The A100 / L40S / RTX PRO 6000 TensorRT-LLM ``mla_decode`` fits (regenerated in
    session 29 with the FMHA v2 launch and the floor) carry a floor of ~10-15 us and a
    critical path's key cost, and the held-out errors they were fitted with (before: A100
    6.6 / 27.9%, L40S 5.1 / 30.9%, RTX PRO 6000 7.2 / 28.0%). L40S's refit with the
    replays' L2 term (session 37) carries a sequence's keys in ``c_seq_keys`` instead (the
    two collinear along its one-launch series; one sequence of 1,024-131,072 keys prices
    within 1.2% of the fit before: docs/decisions.md, helper ``mla37``)."""
    fit = load_profile(gpu, "trtllm").kernels["mla_decode"]
    assert 5e-6 < fit.params[FLOOR_PARAM] < 2e-5
    assert fit.params["c_critical_keys"] > 1e-9 or fit.params["c_seq_keys"] > 1e-9
    assert_heldout(fit, 0.05, 0.18)
