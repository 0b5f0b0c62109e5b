"""vLLM's Marlin MoE kernel for mxfp4 experts (``--set moe_backend=marlin``, what
InferenceMAX's Hopper gpt-oss scripts ask for with ``VLLM_MXFP4_USE_MARLIN=1``): priced
from the profile's Marlin WNA16 fit with the compute term NVIDIA's Marlin mxfp4 table
says (``twin.costmodel.engine_kernels.MARLIN_EXPERT_SCALE``)."""

from __future__ import annotations

import dataclasses
import statistics

import pytest
from silicon_rows import planned, silicon_row
from test_engine_helpers import single_turns

import twin.precision as px
from twin.calibration import aic_moe
from twin.calibration import aic_tables as at
from twin.costmodel import moe_families as moef
from twin.costmodel import moe_features as moe_ft
from twin.costmodel.engine_kernels import MARLIN_EXPERT_SCALE
from twin.costmodel.latency import predict
from twin.costmodel.model import CostModel
from twin.costmodel.profile_store import resolve_profile
from twin.engine.modes import get_mode
from twin.errors import TwinError
from twin.presets import get_model
from twin.validate import silicon as sil

GPT_OSS = {"hidden_size": 2880, "inter_size": 2880, "topk": 4, "num_experts": 128}


def expert_s(profile, family: str, tokens: int, moe_tp: int = 1) -> float:
    """One fused-MoE launch of gpt-oss-120b's experts at ``tokens`` tokens, priced with
    ``family``'s fit of ``profile`` (as the fits are made: ``aic_moe.moe_row``, with the
    fit's kernel source, whose token tile the serving step prices too)."""
    fit = profile.kernels[family]
    shape = {
        **GPT_OSS,
        "num_tokens": tokens,
        "moe_tp_size": moe_tp,
        "moe_ep_size": 1,
        "kernel_source": str(fit.provenance.get("kernel_source", "")),
    }
    # the mxfp8-activation family's rows carry the table's own mode (its token tile)
    mxfp8 = family == moef.moe_mxfp8_activation_kernel("mxfp4")
    mode = moe_ft.MXFP8_ACTIVATION_MODE if mxfp8 else None
    row = aic_moe.moe_row(shape, px.WEIGHT_FORMATS["mxfp4"], family, 1.0, table_mode=mode)
    extras = {k: v for k, v in row.items() if k not in ("kernel", "flops", "bytes", "median_s")}
    extras.pop("shape")
    return predict(family, fit.params, profile.peaks, row["flops"], row["bytes"], extras)


@pytest.mark.parametrize("gpu", ["h200", "h100"])
def test_marlin_prices_gpt_oss_prefill_experts_at_about_twice_oai_triton(gpu):
    profile = resolve_profile(gpu, None, "vllm")
    marlin = profile.with_marlin_experts("moe_mxfp4")
    fit, wna16 = marlin.kernels["moe_mxfp4"], profile.kernels["moe_int4_wo"]
    assert fit.params["eff_flops"] == pytest.approx(
        wna16.params["eff_flops"] / MARLIN_EXPERT_SCALE[("moe_mxfp4", gpu)]
    )
    assert {k: v for k, v in fit.params.items() if k != "eff_flops"} == {
        k: v for k, v in wna16.params.items() if k != "eff_flops"
    }
    assert fit.series is None and "MARLIN_EXPERT_SCALE" in fit.provenance["label"]
    # Prefill: compute-bound, Marlin at ~1.5-2.5x OAI Triton's time (NVIDIA's tables:
    # 190-250 against 540-560 TFLOP/s on H200).
    for tokens in (4096, 8192):
        ratio = expert_s(marlin, "moe_mxfp4", tokens) / expert_s(profile, "moe_mxfp4", tokens)
        assert 1.5 < ratio < 3.0, (tokens, ratio)
    # Decode: weight-bound, within 25% of the OAI price (the measured TPOT did not move).
    for tokens in (1, 8, 32):
        ratio = expert_s(marlin, "moe_mxfp4", tokens) / expert_s(profile, "moe_mxfp4", tokens)
        assert 0.5 < ratio < 1.25, (tokens, ratio)
    # The other families are untouched.
    assert {k: v for k, v in marlin.kernels.items() if k != "moe_mxfp4"} == {
        k: v for k, v in profile.kernels.items() if k != "moe_mxfp4"
    }


@pytest.mark.parametrize("gpu", ["h200", "h100"])
def test_the_factor_is_nvidias_marlin_mxfp4_table(gpu):
    """The factor makes the median of table / price 1 over the Marlin mxfp4 table's
    balanced rows of 2,048 tokens or more (the comment at MARLIN_EXPERT_SCALE)."""
    pytest.importorskip("aiconfigurator_core")
    table = at.system_dir(gpu) / "moe/vllm/0.24.0/moe_perf.parquet"
    source = "vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts_situ_as_silu"
    rows = [
        r
        for r in at._read(table)
        if r.get("distribution") == "balanced"
        and r.get("kernel_source") == source
        and int(r["num_tokens"]) >= 2048
    ]
    assert len(rows) == 84
    marlin = resolve_profile(gpu, None, "vllm").with_marlin_experts("moe_mxfp4")
    fit = marlin.kernels["moe_mxfp4"]
    ratios = []
    for r in rows:
        row = aic_moe.moe_row(r, px.WEIGHT_FORMATS["mxfp4"], "moe_mxfp4", r["latency"])
        extras = {k: v for k, v in row.items() if k not in ("kernel", "flops", "bytes")}
        extras.pop("median_s"), extras.pop("shape")
        price = predict("moe_mxfp4", fit.params, marlin.peaks, row["flops"], row["bytes"], extras)
        ratios.append(price / row["median_s"])
    assert statistics.median(ratios) == pytest.approx(1.0, abs=0.02)


def test_a_gpu_without_a_marlin_mxfp4_timing_is_refused_in_one_line():
    with pytest.raises(TwinError, match="no Marlin moe_mxfp4 timing") as err:
        resolve_profile("b200", None, "vllm").with_marlin_experts("moe_mxfp4")
    assert "\n" not in str(err.value)


def test_the_vllm_flag_takes_auto_or_marlin_and_refuses_formats_it_does_not_model():
    vllm = get_mode("vllm==0.19.0")  # the release whose --moe-backend was read
    gpt_oss = get_model("gpt-oss-120b")
    assert vllm.settings(gpt_oss, {"moe_backend": "marlin"})["engine_flags"] == {
        "moe_backend": "marlin"
    }
    with pytest.raises(TwinError, match="moe_backend=cutlass: expected one of auto, marlin,"):
        vllm.settings(gpt_oss, {"moe_backend": "cutlass"})
    fp8 = dataclasses.replace(gpt_oss, precision="fp8", moe_precision=None)
    with pytest.raises(TwinError, match="moe_backend=marlin: fp8 experts under it are not"):
        vllm.settings(fp8, {"moe_backend": "marlin"})
    vllm.settings(get_model("llama-3-8b"), {"moe_backend": "marlin"})  # no experts: no effect
    with pytest.raises(TwinError, match=r"not a flag of vLLM 0\.33\.0"):  # its source not read
        get_mode("vllm").settings(gpt_oss, {"moe_backend": "marlin"})


def gpt_oss_request(tmp_path, gpu: str, backends: tuple[str, ...]) -> dict:
    """One 8,192-token request of gpt-oss-120b on vLLM 0.19.0 on ``gpu``: its record under
    each ``--set moe_backend`` of ``backends``."""
    from twin.engine.run import build_run

    path = single_turns(tmp_path / "w.parquet", [0.0], prompt_len=8192, output_len=9)
    out = {}
    for backend in backends:
        run_ = build_run(
            path,
            model="gpt-oss-120b",
            gpu=gpu,
            engine="vllm==0.19.0",
            sets={"moe_backend": backend},
            concurrency=1,
        )
        records = []
        run_.simulate(on_record=records.append)
        out[backend] = records[0]
    return out


def test_a_marlin_run_prefills_slower_and_decodes_about_the_same(tmp_path):
    out = gpt_oss_request(tmp_path, "h200", ("auto", "marlin"))
    assert out["marlin"].ttft_s > 1.5 * out["auto"].ttft_s
    assert out["marlin"].tpot_s == pytest.approx(out["auto"].tpot_s, rel=0.15)


def test_inferencemax_hopper_gpt_oss_rows_run_marlin():
    imax = "source_file=2026-04-06.csv; model=GPT-OSS-120B; silicon_concurrency=4"
    row = silicon_row(source=imax, backend_version="0.18.0")
    assert sil.vllm_moe_backend(row) == "marlin"
    assert sil.vllm_moe_backend(dataclasses.replace(row, system="h100_sxm")) == "marlin"
    assert sil.vllm_moe_backend(row, "defaults") is None  # vLLM's own default: Triton
    b200 = dataclasses.replace(row, system="b200_sxm")  # its script's mxfp8 activations
    assert sil.vllm_moe_backend(b200) == "flashinfer_trtllm_afp8"
    other = dataclasses.replace(row, model_path="MiniMaxAI/MiniMax-M2.5")
    assert sil.vllm_moe_backend(other) is None


def test_a_planned_hopper_gpt_oss_row_sets_marlin():
    pytest.importorskip("aiconfigurator_core")  # the model's config.json comes from the extra
    imax = "source_file=2026-04-06.csv; model=GPT-OSS-120B; silicon_concurrency=4"
    row = silicon_row(source=imax, backend_version="0.18.0")
    plan = planned(row, isl=1024, osl=1024, concurrency=4, tp=1)
    assert plan.deployment["sets"]["moe_backend"] == "marlin"


def test_the_v0_10_2_hopper_gpt_oss_rows_before_the_marlin_line_run_marlin():
    # The 2025-11-02 rows (no release named; the vllm/vllm-openai:v0.10.2 image, scripts
    # with no VLLM_MXFP4_USE_MARLIN): 0.10.2's get_mxfp4_backend falls to Marlin on SM90
    # without triton_kernels, which that image lacks (sil.inferencemax_vllm's reading).
    imax = (
        "source_file=2026-04-06.csv; model=GPT-OSS-120B; silicon_concurrency=64; "
        "measured=2025-11-02T00:00:00.000Z; wip=False"
    )
    row = silicon_row(source=imax, backend_version="", isl=1024, osl=1024, concurrency=64, tp=1)
    for system in ("h200_sxm", "h100_sxm"):
        hopper = dataclasses.replace(row, system=system)
        assert sil.vllm_moe_backend(hopper) == "marlin"
        assert planned(hopper).deployment["sets"]["moe_backend"] == "marlin"


def unpadded(profile):
    """``profile`` with its Marlin mxfp4 fit's padding taken off (the shape as served)."""
    fit = profile.kernels["moe_mxfp4"]
    prov = {k: v for k, v in fit.provenance.items() if not k.startswith("moe_pad")}
    return dataclasses.replace(
        profile, kernels={**profile.kernels, "moe_mxfp4": dataclasses.replace(fit, provenance=prov)}
    )


@pytest.mark.parametrize("gpu", ["h200", "h100"])
def test_marlin_prices_gpt_oss_experts_at_the_padded_shape_vllm_runs(gpu):
    """vLLM pads Marlin's mxfp4 experts (``engine_kernels.MARLIN_MXFP4_PAD``): gpt-oss's
    hidden 2,880 -> 3,072, the rank's intermediate 2,880 / TP -> 2,944 / 1,536 / 768 / 384
    at TP 1 / 2 / 4 / 8; the padded output is all-reduced."""
    marlin = resolve_profile(gpu, None, "vllm").with_marlin_experts("moe_mxfp4")
    fit = marlin.kernels["moe_mxfp4"]
    assert (fit.provenance["moe_pad_hidden"], fit.provenance["moe_pad_width"]) == (256, 128)
    flat, model = unpadded(marlin), get_model("gpt-oss-120b")
    for tp, width in ((1, 2944), (2, 1536), (4, 768), (8, 384)):
        padded, plain = CostModel(model, marlin, tp), CostModel(model, flat, tp)
        assert (padded._moe_d, padded._moe_width) == (3072, width)
        assert (plain._moe_d, plain._moe_width) == (2880, 2880 // tp)
        assert padded._moe_fit[3] > plain._moe_fit[3]  # the weight tile's bytes, padded
        # a compute-bound prefill's experts: about the FLOPs' ratio (1.09 / 1.14)
        flops = 3072 * width / (2880 * 2880 / tp)
        a = padded.prefill(8192, breakdown=True).items["moe"]
        b = plain.prefill(8192, breakdown=True).items["moe"]
        assert 1.03 < a["moe"] / b["moe"] <= flops + 1e-9, (tp, a["moe"] / b["moe"])
        if tp > 1:  # the all-reduce of the padded hidden states
            assert a["allreduce"] > b["allreduce"]
        # decode: the weights streamed grow too
        a = padded.decode([1000] * 64, breakdown=True).items["moe"]["moe"]
        b = plain.decode([1000] * 64, breakdown=True).items["moe"]["moe"]
        assert a > 1.03 * b


def test_unpadded_experts_keep_their_shape():
    """The OAI Triton mxfp4 fit (vLLM's Hopper default) records no padding: the model's."""
    cm = CostModel(get_model("gpt-oss-120b"), resolve_profile("h200", None, "vllm"), 2)
    assert (cm._moe_d, cm._moe_width) == (2880, 1440)
