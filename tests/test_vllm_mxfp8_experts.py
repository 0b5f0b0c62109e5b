"""vLLM's mxfp4 experts with mxfp8 activations on Blackwell (``--set
moe_backend=flashinfer_trtllm_afp8``, what InferenceMAX's B200 gpt-oss script asks for with
``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1``): priced by the profile's ``moe_mxfp4_mxfp8``
fit, read from SGLang's table of the same FlashInfer kernel
(``calibration.aic_moe.mxfp8_activation_rows``)."""

from __future__ import annotations

import dataclasses

import pytest
from silicon_rows import planned, silicon_row
from test_vllm_marlin_experts import expert_s, gpt_oss_request

from twin.calibration import aic_moe
from twin.calibration import aic_tables as at
from twin.costmodel import formulas as fm
from twin.costmodel import moe_families as moef
from twin.costmodel.profile_store import resolve_profile
from twin.engine.modes import get_mode
from twin.errors import TwinError
from twin.presets import get_model
from twin.validate import silicon as sil

FAMILY = moef.moe_mxfp8_activation_kernel("mxfp4")


def test_the_family_prices_with_the_mxfp4_experts_features_and_peak():
    """So its fit can stand in for ``moe_mxfp4``'s (``Profile.with_experts_fit``)."""
    mine, theirs = fm.get_formula(FAMILY), fm.get_formula("moe_mxfp4")
    assert (mine.extras, mine.serial, mine.flops_peak, mine.bytes_peak) == (
        theirs.extras,
        theirs.serial,
        theirs.flops_peak,
        theirs.bytes_peak,
    )
    assert FAMILY in fm.MOE_VARIANTS


@pytest.mark.parametrize("gpu", ["b200", "b300"])
def test_mxfp8_activations_price_gpt_oss_experts_faster_than_bf16_ones(gpu):
    profile = resolve_profile(gpu, None, "vllm")
    fit = profile.kernels[FAMILY]
    assert fit.provenance["kernel_source"] == "sglang_flashinfer_trtllm_moe"
    swapped = profile.with_experts_fit("moe_mxfp4", FAMILY, "--set x")
    assert swapped.kernels["moe_mxfp4"] is fit
    assert {k: v for k, v in swapped.kernels.items() if k != "moe_mxfp4"} == {
        k: v for k, v in profile.kernels.items() if k != "moe_mxfp4"
    }
    # NVIDIA's tables (SGLang 0.5.14, the same kernel in both activation formats, TP 1):
    # mxfp8 / bf16 0.76-0.81 at 8-256 tokens, 0.26-0.37 at 4,096-16,384.
    for tokens in (8, 64, 256):
        ratio = expert_s(profile, FAMILY, tokens) / expert_s(profile, "moe_mxfp4", tokens)
        assert 0.6 < ratio < 0.95, (tokens, ratio)
    for tokens in (8192, 16384):
        ratio = expert_s(profile, FAMILY, tokens) / expert_s(profile, "moe_mxfp4", tokens)
        assert 0.2 < ratio < 0.45, (tokens, ratio)


def test_a_profile_without_the_fit_is_refused_in_one_line():
    with pytest.raises(TwinError, match="--set moe_backend=flashinfer_trtllm_afp8: profile") as e:
        resolve_profile("h200", None, "vllm").with_experts_fit(
            "moe_mxfp4", FAMILY, "--set moe_backend=flashinfer_trtllm_afp8"
        )
    assert "no moe_mxfp4_mxfp8 fit" in str(e.value) and "\n" not in str(e.value)


def test_the_rows_are_sglangs_of_the_flashinfer_kernel_for_vllm_only():
    pytest.importorskip("aiconfigurator_core")
    system = at.system_dir("b200")
    (family,) = aic_moe.mxfp8_activation_rows(system, "vllm")
    assert family.kernel == FAMILY and family.framework == "SGLang"
    assert family.kernel_source == "sglang_flashinfer_trtllm_moe"
    shapes = {(r["shape"]["d"], r["shape"]["e"], r["shape"]["k"]) for r in family.rows}
    assert (2880, 128, 4) in shapes  # gpt-oss-120b's
    assert aic_moe.mxfp8_activation_rows(system, "sglang") == []


def test_the_vllm_flag_takes_mxfp8_activations_for_mxfp4_experts_only():
    vllm = get_mode("vllm==0.19.0")
    gpt_oss = get_model("gpt-oss-120b")
    flags = vllm.settings(gpt_oss, {"moe_backend": "flashinfer_trtllm_afp8"})["engine_flags"]
    assert flags == {"moe_backend": "flashinfer_trtllm_afp8"}
    fp8 = dataclasses.replace(gpt_oss, precision="fp8", moe_precision=None)
    with pytest.raises(TwinError, match="fp8 experts under it are not modelled"):
        vllm.settings(fp8, {"moe_backend": "flashinfer_trtllm_afp8"})


def test_a_b200_run_with_mxfp8_activations_prefills_and_decodes_faster(tmp_path):
    out = gpt_oss_request(tmp_path, "b200", ("auto", "flashinfer_trtllm_afp8"))
    fast, base = out["flashinfer_trtllm_afp8"], out["auto"]
    assert fast.ttft_s < 0.8 * base.ttft_s
    assert fast.tpot_s < base.tpot_s


def test_a_planned_b200_gpt_oss_row_sets_mxfp8_activations():
    pytest.importorskip("aiconfigurator_core")  # the model's config.json comes from the extra
    imax = "source_file=2026-04-06.csv; model=GPT-OSS-120B; silicon_concurrency=4"
    row = silicon_row(source=imax, backend_version="0.15.1", system="b200_sxm")
    plan = planned(row, isl=1024, osl=1024, concurrency=4, tp=1)
    assert plan.deployment["sets"]["moe_backend"] == "flashinfer_trtllm_afp8"
    assert sil.vllm_moe_backend(row, "defaults") is None  # vLLM's own default: bf16
