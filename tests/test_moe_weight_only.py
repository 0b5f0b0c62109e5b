"""Four-bit weight-only experts (mxfp4, int4: W4A16) and TensorRT-LLM's min-latency nvfp4
MoE kernel (issue 31): formats, the silicon rows' reading, pricing and selection."""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import Any

import pytest
from silicon_rows import silicon_row

from twin import precision as px
from twin.costmodel import CostModel
from twin.costmodel import formulas as fm
from twin.costmodel import latency as lat
from twin.costmodel import moe_families as moef
from twin.costmodel import moe_features as moe_ft
from twin.costmodel.precision_kernels import SHARED_AS_LINEAR_NOTE, priced_precision
from twin.costmodel.profile_store import resolve_profile
from twin.costmodel.routing import routing_for
from twin.costmodel.series_term import series_key
from twin.errors import TwinError
from twin.hardware import get_gpu
from twin.presets import get_model
from twin.validate import silicon as sil

GPT_OSS_QUANT = {
    "quant_method": "mxfp4",
    "modules_to_not_convert": ["model.layers.*.self_attn", "lm_head"],
}
# moonshotai/Kimi-K2.5's quantization_config (as aiconfigurator-core 0.12.0 caches it).
KIMI_QUANT: dict[str, Any] = {
    "quant_method": "compressed-tensors",
    "format": "pack-quantized",
    "config_groups": {
        "group_0": {
            "input_activations": None,
            "targets": ["Linear"],
            "weights": {
                "group_size": 32,
                "num_bits": 4,
                "strategy": "group",
                "symmetric": True,
                "type": "int",
            },
        }
    },
    "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*"],
}


def test_weight_only_formats_bytes_and_peak() -> None:
    int4, mxfp4 = px.WEIGHT_FORMATS["int4"], px.WEIGHT_FORMATS["mxfp4"]
    assert int4.bytes_per_param == Fraction(9, 16)  # 4 bits + one bf16 scale per 32
    assert mxfp4.bytes_per_param == Fraction(17, 32)  # 4 bits + one E8M0 scale per 32
    for fmt in (int4, mxfp4):
        assert fmt.act_bytes is None and fmt.flops_peak == "flops" and not fmt.fp4
        assert fm.get_formula(fmt.moe_kernel).flops_peak == "flops"
    assert px.MOE_TABLE_MODES["int4_wo"] == "int4"
    # W4A16 runs on Hopper; W4A4 (nvfp4) still does not, in one line
    kimi = dataclasses.replace(get_model("kimi-k2.5"), precision="bf16", moe_precision="int4")
    px.check_runs_on(kimi, get_gpu("h100"))
    with pytest.raises(TwinError, match=r"^--precision nvfp4: H100 SXM5 has no FP4 tensor"):
        px.check_runs_on(px.with_precision(kimi, "nvfp4", None), get_gpu("h100"))


def test_int4_experts_weight_bytes() -> None:
    m = dataclasses.replace(get_model("kimi-k2.5"), precision="bf16", moe_precision="int4")
    dense, experts, other = m.param_parts
    assert m.weight_bytes == 2 * dense + experts * 9 // 16 + 2 * other
    assert m.weight_bytes < 0.3 * dataclasses.replace(m, moe_precision=None).weight_bytes


def test_the_checkpoint_says_which_layers_are_four_bit() -> None:
    assert sil.weight_only_checkpoint({"quantization_config": GPT_OSS_QUANT}) == (
        "bf16",
        "mxfp4",
    )
    assert sil.weight_only_checkpoint({"quantization_config": KIMI_QUANT}) == ("bf16", "int4")
    group128 = {**KIMI_QUANT, "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int"}}}}
    attention_too = {**KIMI_QUANT, "ignore": ["lm_head"]}
    for quant in (group128, attention_too, {"quant_method": "fp8"}):
        assert sil.weight_only_checkpoint({"quantization_config": quant}) is None
    assert sil.weight_only_checkpoint({}) is None


@pytest.mark.parametrize(
    ("system", "gpu", "backend", "native"),
    [
        ("h200_sxm", "h200", "trtllm", "weight-only"),
        ("b200_sxm", "b200", "trtllm", "as stored"),
        ("h200_sxm", "h200", "sglang", "weight-only"),
        ("b200_sxm", "b200", "sglang", ""),
    ],
)
def test_nvfp4_columns_on_hopper_read_the_checkpoint(
    system: str, gpu: str, backend: str, native: str
) -> None:
    row = silicon_row(system=system, backend=backend)  # vLLM reads it on every GPU (below)
    got = sil.row_precision(row, {"quantization_config": GPT_OSS_QUANT}, True, None, gpu)
    assert isinstance(got, sil.RowPrecision)
    if native == "weight-only":  # no FP4 tensor cores: the checkpoint's mxfp4 weight-only
        assert (got.weights, got.moe, got.kv, got.native) == ("bf16", "mxfp4", "bf16", True)
        assert "run weight-only on h200" in got.why
    elif native:  # TensorRT-LLM loads it as stored on Blackwell too, the fp8 KV pairing kept
        assert (got.weights, got.moe, got.kv, got.native) == ("bf16", "mxfp4", "fp8", True)
        assert "loaded as stored by trtllm" in got.why
    else:  # SGLang on Blackwell: the columns, as before
        assert (got.weights, got.native) == ("nvfp4", False)


def test_vllm_reads_the_mxfp4_checkpoint_on_blackwell_too() -> None:
    """vLLM loads gpt-oss's mxfp4 experts and bf16 linear layers as stored on every GPU;
    on Blackwell the KV cache keeps the columns' pairing (fp8, which InferenceMAX's
    gptoss_fp4_b200.sh runs)."""
    got = sil.row_precision(
        silicon_row(system="b200_sxm"), {"quantization_config": GPT_OSS_QUANT}, True, None, "b200"
    )
    assert isinstance(got, sil.RowPrecision)
    assert (got.weights, got.moe, got.kv, got.native) == ("bf16", "mxfp4", "fp8", True)
    assert "loaded as stored by vllm" in got.why
    hopper = sil.row_precision(
        silicon_row(), {"quantization_config": GPT_OSS_QUANT}, True, None, "h200"
    )
    assert isinstance(hopper, sil.RowPrecision) and hopper.kv == "bf16"  # as before
    # without the row's own checkpoint the columns stand
    cols = sil.row_precision(silicon_row(system="b200_sxm"), {}, True, None, "b200")
    assert isinstance(cols, sil.RowPrecision) and cols.weights == "nvfp4"
    # Kimi-K2.5's fp4 rows ran NVIDIA's nvfp4 checkpoint: the int4 config does not win
    kimi = silicon_row(system="b200_sxm", model_path="moonshotai/Kimi-K2.5")
    got = sil.row_precision(kimi, {"quantization_config": KIMI_QUANT}, True, None, "b200")
    assert isinstance(got, sil.RowPrecision) and (got.weights, got.native) == ("nvfp4", False)


def test_int4_columns_read_the_checkpoint_and_ask_aiconfigurator_without_modes() -> None:
    row = silicon_row(model_path="moonshotai/Kimi-K2.5", precision="int4")
    row = dataclasses.replace(row, gemm_quant_mode="int4_wo", moe_quant_mode="int4_wo")
    got = sil.row_precision(row, {"quantization_config": KIMI_QUANT}, True, None, "h200")
    assert isinstance(got, sil.RowPrecision)
    assert (got.weights, got.moe, got.kv, got.native) == ("bf16", "int4", "bf16", True)
    # without the row's own checkpoint the columns stand: int4 linear layers, not priced
    assert sil.row_precision(row, {}, True, None, "h200") == "precision int4 not priced"

    class Plan:
        model_id = "moonshotai/Kimi-K2.5"
        native_quant = True

    plan: Any = Plan()
    plan.row = row
    args = sil.cli_estimate_args(plan, "agg")
    assert args["gemm_quant_mode"] is None and args["moe_quant_mode"] is None
    plan.native_quant = False
    assert sil.cli_estimate_args(plan, "agg")["moe_quant_mode"] == "int4_wo"


def test_hopper_profiles_price_the_weight_only_experts() -> None:
    gpt_oss = dataclasses.replace(get_model("gpt-oss-120b"), moe_precision="mxfp4")
    priced = priced_precision(gpt_oss, resolve_profile("h200", None, "trtllm"))
    assert priced.keys["moe"] == "moe_mxfp4" and "expert" not in priced.keys
    kimi = dataclasses.replace(get_model("kimi-k2.5"), precision="bf16", moe_precision="int4")
    priced = priced_precision(kimi, resolve_profile("h200", None, "vllm"))
    assert priced.keys["moe"] == "moe_int4_wo" and "expert" not in priced.keys
    assert priced.notes["shared expert"] == SHARED_AS_LINEAR_NOTE
    # a profile whose tables never timed int4 experts refuses them in one line
    with pytest.raises(TwinError, match=r"^moe_precision int4: profile h200-trtllm has no int4"):
        priced_precision(kimi, resolve_profile("h200", None, "trtllm"))
    step = CostModel(kimi, resolve_profile("h200", None, "vllm"), 8).decode([4096] * 4)
    assert isinstance(step, float) and step > 0


def _moe_seconds(cm: CostModel, m: Any, t: int, key: str) -> float:
    """The routed experts of one step of ``t`` tokens as the fit ``key`` prices them."""
    prof, ep = cm.profile, 8
    act, weight = px.gemm_operand_bytes(px.moe_format(m), m.dtype_bytes)
    rows = t * m.moe_top_k
    load = routing_for(m).rank_load(t, m.moe_n_experts, m.moe_top_k, ep)
    active = load.active
    f, b, w = moe_ft.moe_sums(load.rows, active, m.d_model, cm.expert_width, 2, 2, act, weight)
    extras = {
        "weight_elems": w,
        "routed_elems": float(rows * m.d_model),
        "tile_bytes": moe_ft.moe_tile_bytes(m.d_model, cm.expert_width, 2, weight),
        "active_experts": active,
    }
    fit = prof.kernels[key]
    # the measured shape's per-shape term (twin.costmodel.series_term), if the table has it
    coefs = None
    if fit.series is not None:
        sk = series_key(m.d_model, m.moe_d_ff, m.moe_top_k, m.moe_n_experts, 8 // ep, ep)
        coefs = fit.series.coefficients(sk)
    scale = 1.0 if coefs is None else math.exp(fit.series.log_factor(coefs, t))  # type: ignore[union-attr]
    return scale * m.n_moe_layers * lat.predict(key, fit.params, prof.peaks, f, b, extras)


def test_trtllm_small_steps_take_the_min_latency_kernel() -> None:
    m = px.with_precision(get_model("deepseek-r1"), "nvfp4", "fp8")
    prof = resolve_profile("b200", None, "trtllm")
    assert priced_precision(m, prof).keys["moe_small"] == "moe_nvfp4_min_latency"
    assert "moe_small" not in priced_precision(m, resolve_profile("b200", None, "vllm")).keys
    cm = CostModel(m, prof, 8, ep=8)
    at = moef.MOE_MIN_LATENCY_MAX_TOKENS
    for t, key in ((at, "moe_nvfp4_min_latency"), (at + 1, "moe_nvfp4")):
        step = cm.step((), [1000] * t, breakdown=True)
        got = step.items["moe"]["moe"]  # type: ignore[union-attr]
        assert got == pytest.approx(_moe_seconds(cm, m, t, key), rel=1e-9), t
    # the fitted min-latency kernel is the faster one at small steps (as measured)
    assert _moe_seconds(cm, m, 8, "moe_nvfp4_min_latency") < _moe_seconds(cm, m, 8, "moe_nvfp4")


def test_the_min_latency_rows_are_a_family_of_their_own() -> None:
    pytest.importorskip("aiconfigurator_core")
    from twin.calibration.aic_moe import moe_rows
    from twin.calibration.aic_tables import system_dir

    fams = {f.kernel: f for f in moe_rows(system_dir("b200"), "trtllm")}
    small, default = fams["moe_nvfp4_min_latency"], fams["moe_nvfp4"]
    assert small.kernel_source == moef.MOE_MIN_LATENCY_SOURCE != default.kernel_source
    assert (
        small.rows and max(r["shape"]["t"] for r in small.rows) == moef.MOE_MIN_LATENCY_MAX_TOKENS
    )
    assert "moe_int4_wo" not in fams and "moe_mxfp4" in fams
