"""The absorbed BMM's reduction loop (issue 34, helper mla36): one CTA's K-tile steps
(``mla_bmm.bmm_k_steps``), the ``k_steps`` serial feature of the ``mla_bmm*``
families: W_UV (k = kv_lora = 512) costs more than W_UK (k = nope = 128) in a small launch
at the same FLOPs and bytes."""

from __future__ import annotations

import dataclasses

import pytest
from aic_refit import assert_heldout, refit_family

from twin.calibration import aic_mla
from twin.calibration.aic_tables import system_dir
from twin.costmodel import CostModel
from twin.costmodel import formulas as fm
from twin.costmodel import latency as lat
from twin.costmodel import mla_bmm as mbmm
from twin.costmodel.fit_upgrade import upgrade_fit
from twin.costmodel.profile import KernelFit
from twin.costmodel.profile_store import load_profile
from twin.hardware import get_gpu
from twin.presets import get_model

DSV3 = get_model("deepseek-v3")  # fp8-block weights: the BMMs read ``mla_bmm_fp8``


def test_k_steps_are_one_ctas_k_tiles() -> None:
    assert mbmm.bmm_k_steps(128) == 2.0  # W_UK: q_nope (128) into the latent
    assert mbmm.bmm_k_steps(512) == 8.0  # W_UV: the latent (512) back to v
    assert mbmm.bmm_k_steps(100) == 2.0  # a partial tile is a step


def test_the_formula_prices_k_steps_after_the_smooth_maximum() -> None:
    for key in ("mla_bmm", "mla_bmm_fp8"):
        f = fm.get_formula(key)
        assert f.serial == ("quant_steps", "k_steps")
        assert f.model_name == "hbm_roofline+waves+l2_bytes+small_waves+quant_steps+k_steps"


def test_a_bmm_fit_without_k_steps_prices_as_before() -> None:
    """A fit of the session-29 form reads ``k_steps`` with a zero coefficient: the same
    price at any step count."""
    fit = KernelFit(
        model="hbm_roofline+waves+l2_bytes+quant_steps",
        params={"t0_s": 6e-6, "eff_flops": 0.5, "eff_bytes": 1.0, "p": 5.0}
        | {"c_waves": 2.6e-7, "c_l2_bytes": 2e-13, "c_quant_steps": 0.0},
    )
    upgrade_fit(fit, fm.get_formula("mla_bmm"))
    assert fit.params["c_k_steps"] == 0.0
    peaks = load_profile("h200", "sglang").peaks
    price = lat.compile_fast("mla_bmm", fit.params, peaks)
    feats = mbmm.mla_bmm_features(64, 16, 512, 128, 2, 2.0, 2.0, 132, None)
    assert price(*feats, 0.0) == price(*feats, 0.0, 8.0) == price(*feats, 0.0, 2.0)


def test_the_rows_carry_each_bmms_k_steps() -> None:
    pytest.importorskip("aiconfigurator_core")
    families = aic_mla.bmm_rows(system_dir("gb200"), "sglang")
    rows = [r for f in families for r in f.rows]
    assert {(r["shape"]["k"], r["k_steps"]) for r in rows} == {(128, 2.0), (512, 8.0)}


def test_shipped_bmm_fits_price_the_k_loop() -> None:
    """Every shipped ``mla_bmm*`` fit was refitted with ``k_steps`` (session 36); where the
    tables show W_UV's longer loop (GB200 TensorRT-LLM bf16: ~0.1 us a step) the fit
    prices it, and its held-out errors are the refit's (6.5 / 16.2% before, 5.2 / 13.6%;
    5.9 / 13.9% with ``small_waves``, session 37)."""
    fit = load_profile("gb200", "trtllm").kernels["mla_bmm"]
    assert fit.model == fm.get_formula("mla_bmm").model_name
    assert fit.params["c_k_steps"] > 5e-8
    assert_heldout(fit, 0.06, 0.14)


def test_l40s_trtllm_fp8_bmm_refit_meets_the_target_with_the_k_loop() -> None:
    """NVIDIA's L40S TensorRT-LLM 1.3.0rc20 BMM table, fp8 rows, refitted: with the k-loop
    steps the held-out median / P90 is within 5% / 15% (without: 5.1 / 13.0%, W_UV's
    small launches ~20% over W_UK's priced alike)."""
    pytest.importorskip("aiconfigurator_core")
    peaks = load_profile("l40s", "trtllm").peaks
    families = aic_mla.bmm_rows(system_dir("l40s"), "trtllm")
    rows, fit = refit_family(families, "mla_bmm_fp8", peaks)
    assert {r["k_steps"] for r in rows} == {2.0, 8.0}
    assert fit.params["c_k_steps"] > 5e-8
    assert_heldout(fit, 0.05, 0.15)


def test_the_serving_bmms_price_each_shapes_k_loop() -> None:
    """DeepSeek-V3 on H200 TensorRT-LLM priced by its kernels (``mla_bmm_fp8``; the
    shipped profile's newest release prices MLA by its modules, so they are left out, as
    an engine release before the module tables reads): the absorbed BMMs' price is the
    fit's at each shape's features with its k-loop steps, above the same price without."""
    shipped = load_profile("h200", "trtllm")
    kernels = {k: v for k, v in shipped.kernels.items() if not k.startswith("mla_module")}
    cm = CostModel(DSV3, dataclasses.replace(shipped, kernels=kernels), tp=8)
    assert cm._mla_bmm_fit and cm.priced.keys["mla_bmm"] == "mla_bmm_fp8"
    key = cm.priced.keys["mla_bmm"]
    bmm = lat.compile_fast(key, cm.profile.kernels[key].params, cm.profile.peaks)
    d, e = cm.mla_dims, cm.elem_bytes
    act_b, w_b = cm.priced.mla_bmm_bytes
    sms = get_gpu("h200").sm_count or 0
    rows = 64
    with_k = without = 0.0
    for k, n in ((d.nope, d.kv_lora), (d.kv_lora, d.v)):
        feats = mbmm.mla_bmm_features(rows, d.heads, k, n, e, act_b, w_b, sms, None)
        with_k += bmm(*feats, 0.0, mbmm.bmm_k_steps(k))
        without += bmm(*feats, 0.0, 0.0)
    assert cm._absorbed_bmms(rows) == pytest.approx(with_k, rel=1e-12)
    assert with_k > without + 0.5e-6  # ten steps at the fit's ~0.07 us
