"""TensorRT-LLM's fp8 absorbed BMM on SM120 (RTX PRO 6000): the activation's quantisation
kernel runs a serial token loop per program (``mla_bmm.bmm_quant_steps``), the
``quant_steps`` feature of the ``mla_bmm*`` families (issue 34)."""

from __future__ import annotations

import pytest
from aic_refit import assert_heldout, refit_family

from twin.calibration import aic_mla
from twin.calibration.aic_tables import system_dir
from twin.costmodel import formulas as fm
from twin.costmodel import latency as lat
from twin.costmodel import mla_bmm as mbmm
from twin.costmodel.fit_upgrade import upgrade_fit
from twin.costmodel.profile import KernelFit
from twin.costmodel.profile_store import load_profile

SOURCE = mbmm.TRTLLM_FP8_BMM_SOURCE
RTX_SMS = 188


def test_quant_rule_is_tensorrt_llm_fp8_bmm_on_sm120_only() -> None:
    assert mbmm.bmm_quant_rule("rtx-pro-6000", SOURCE)
    assert not mbmm.bmm_quant_rule("rtx-pro-6000", "trtllm_bmm_out")  # the bf16 BMM
    assert not mbmm.bmm_quant_rule("h100", SOURCE)  # SM90 quantises with a CUDA kernel
    assert not mbmm.bmm_quant_rule("l40s", SOURCE)
    assert not mbmm.bmm_quant_rule("b200", "trtllm_bmm_out_dequant_bf16")


def test_quant_steps_are_a_programs_tokens_times_its_grids_waves() -> None:
    """64 programs a head, each every 64th token: 64 tokens one step, 80 two; 128 heads
    of one 512-element block are 8,192 one-warp programs, two waves of 188 x 32."""
    assert mbmm.bmm_quant_steps(True, 64, 1, 512, RTX_SMS) == 1.0
    assert mbmm.bmm_quant_steps(True, 80, 1, 512, RTX_SMS) == 2.0
    assert mbmm.bmm_quant_steps(True, 20_480, 1, 512, RTX_SMS) == 320.0
    assert mbmm.bmm_quant_steps(True, 64, 64, 128, RTX_SMS) == 1.0  # 4,096 <= 6,016 slots
    assert mbmm.bmm_quant_steps(True, 64, 128, 512, RTX_SMS) == 2.0
    assert mbmm.bmm_quant_steps(False, 20_480, 1, 512, RTX_SMS) == 0.0
    assert mbmm.bmm_quant_steps(True, 20_480, 1, 512, 0) == 0.0  # no SM count


def test_a_bmm_fit_of_the_older_form_prices_as_before() -> None:
    """A ``hbm_roofline+waves+l2_bytes`` fit (every profile before session 29) reads
    ``quant_steps`` with a zero coefficient: whatever the steps, the same price."""
    fit = KernelFit(
        model="hbm_roofline+waves+l2_bytes",
        params={"t0_s": 6e-6, "eff_flops": 0.1, "eff_bytes": 1.0, "p": 5.0}
        | {"c_waves": 2.6e-6, "c_l2_bytes": 2e-13},
    )
    upgrade_fit(fit, fm.get_formula("mla_bmm_fp8"))
    assert fit.params["c_quant_steps"] == 0.0
    peaks = load_profile("rtx-pro-6000", "trtllm").peaks
    price = lat.compile_fast("mla_bmm_fp8", fit.params, peaks)
    feats = mbmm.mla_bmm_features(4096, 16, 512, 128, 2, 1.0, 1.0, RTX_SMS, None)
    assert price(*feats, 0.0) == price(*feats, 64.0)


def test_shipped_rtx_trtllm_fp8_bmm_fit_reads_the_quantisation() -> None:
    """The RTX PRO 6000 TensorRT-LLM ``mla_bmm_fp8`` fit (regenerated in session 29)
    prices each serial step (~1.3 us) and carries its held-out errors: 18.4 / 61.8% ->
    6.1 / 22.1% (median / P90). A regeneration that lost the rule fails here."""
    fit = load_profile("rtx-pro-6000", "trtllm").kernels["mla_bmm_fp8"]
    assert fit.provenance["kernel_source"] == SOURCE
    assert fit.params["c_quant_steps"] > 5e-7
    assert_heldout(fit, 0.07, 0.25)


@pytest.mark.slow
def test_rtx_trtllm_fp8_bmm_refit_follows_the_quantisation_loop() -> None:
    """NVIDIA's RTX PRO 6000 TensorRT-LLM 1.3.0rc20 BMM table, fp8 rows, refitted: the
    rows carry the steps and the held-out median / P90 is within 7% / 25% (without the
    steps 18.4 / 61.8%: one head of W_UV at 20,480 tokens, 0.47 ms, priced at a tenth)."""
    pytest.importorskip("aiconfigurator_core")
    peaks = load_profile("rtx-pro-6000", "trtllm").peaks
    families = aic_mla.bmm_rows(system_dir("rtx-pro-6000"), "trtllm")
    rows, fit = refit_family(families, "mla_bmm_fp8", peaks)
    assert {r["quant_steps"] > 0 for r in rows} == {True}
    assert_heldout(fit, 0.07, 0.25)
