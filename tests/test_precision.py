"""Precision (issue 31): ``--precision`` and ``--kv-dtype`` from the model's bytes to the
kernel fits, the refusals, and the outputs that say what was priced (``twin.precision``,
``twin.costmodel.precision_kernels``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_bad_input import assert_clean_error

from twin import precision as px
from twin.cli.main import run
from twin.costmodel import CostModel
from twin.costmodel.precision_kernels import BF16_ATTENTION_NOTE
from twin.costmodel.profile_store import load_profile
from twin.errors import TwinError
from twin.presets import get_model
from twin.workloads.examples import example_path

# Llama-3.1-8B has Llama-3-8B's shapes (32 layers, d 4096, FFN 14336, 8 KV heads of 128,
# vocab 128,256, untied embeddings): the preset ``llama-3-8b``.
LLAMA = get_model("llama-3-8b")
# Its parameters by hand: per layer QKV 4096 x (4096 + 2 x 1024), O 4096 x 4096 and the
# gated MLP 3 x 4096 x 14336 are linear (218,103,808 x 32 layers); the embeddings and LM
# head (2 x 128,256 x 4096) and the 65 RMSNorm weight vectors are not.
LINEAR = 32 * (4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336)
OTHER = 2 * 128_256 * 4096 + 65 * 4096
WEIGHT_BYTES = {
    "bf16": 16_060_522_496,  # 8,030,261,248 parameters x 2
    "fp8": 9_081_200_640,  # linear x 1 + the rest x 2
    "fp8-block": 9_082_904_576,  # + one fp32 scale per 128 x 128 block: linear / 4096
    "nvfp4": 6_027_747_328,  # linear x (1/2 + 1/16) + the rest x 2
    "mxfp4": 5_809_643_520,  # linear x (1/2 + 1/32) + the rest x 2
}


def test_llama_3_1_8b_weight_bytes_at_each_precision() -> None:
    assert LLAMA.param_parts == (LINEAR, 0, OTHER)
    assert LLAMA.n_params == 8_030_261_248
    for name, want in WEIGHT_BYTES.items():
        assert px.with_precision(LLAMA, name, None).weight_bytes == want, name
    assert WEIGHT_BYTES["fp8"] == LINEAR + 2 * OTHER
    assert WEIGHT_BYTES["nvfp4"] == LINEAR * 9 // 16 + 2 * OTHER


def test_kv_bytes_per_token_at_fp8_and_states_keep_their_width() -> None:
    fp8 = px.with_precision(LLAMA, None, "fp8")
    assert LLAMA.kv_bytes_per_token == 32 * 2 * 8 * 128 * 2 == 131_072
    assert fp8.kv_bytes_per_token == 65_536
    assert fp8.weight_bytes == LLAMA.weight_bytes  # the KV cache is not the weights
    hybrid = get_model("qwen3.5-9b")
    hybrid_fp8 = px.with_precision(hybrid, "fp8", "fp8")
    assert hybrid_fp8.kv_bytes_per_token * 2 == hybrid.kv_bytes_per_token
    assert hybrid_fp8.ssm_checkpoint_bytes == hybrid.ssm_checkpoint_bytes


def test_moe_experts_follow_unless_set_apart() -> None:
    moe = get_model("qwen3.5-35b-a3b")
    dense_linear, experts, other = moe.param_parts
    assert experts > dense_linear > 0
    fp8 = px.with_precision(moe, "fp8", None)
    assert fp8.weight_bytes == dense_linear + experts + 2 * other
    import dataclasses

    mixed = dataclasses.replace(moe, moe_precision="mxfp4")
    assert mixed.weight_bytes == 2 * dense_linear + experts * 17 // 32 + 2 * other
    assert px.describe(mixed) == "bf16 weights, mxfp4 experts, bf16 KV"


def test_a_profile_with_an_fp8_gemm_fit_prices_fp8_faster_at_a_large_shape() -> None:
    profile = load_profile("h100")  # vLLM's kernels: the fp8 and fp8-block GEMM fits
    bf16, fp8 = CostModel(LLAMA, profile), CostModel(px.with_precision(LLAMA, "fp8", None), profile)
    big = (8192, 4096, 14336)
    assert fp8._proj(*big) < 0.85 * bf16._proj(*big)
    assert fp8._head(1, 1, None) == bf16._head(1, 1, None)  # the LM head stays bf16
    assert fp8.prefill(8192) < bf16.prefill(8192)


def test_bf16_is_the_default_to_the_bit() -> None:
    profile = load_profile("h100", "sglang")
    default = CostModel(LLAMA, profile)
    explicit = CostModel(px.with_precision(LLAMA, "bf16", "bf16"), profile)
    for cm in (default, explicit):
        assert cm.priced.keys == {} and cm.kv_elem_bytes == 2
    assert explicit.prefill(3000, 1000) == default.prefill(3000, 1000)
    assert explicit.decode([2048] * 48) == default.decode([2048] * 48)
    assert explicit.provenance == default.provenance == profile.provenance_label
    assert px.info(LLAMA) == {}


def test_fp8_kv_takes_the_fp8_kv_attention_fits_or_says_the_bf16_ones_are_used() -> None:
    kv = px.with_precision(LLAMA, None, "fp8")
    cm = CostModel(kv, load_profile("h100"))
    assert cm.kernel_keys["attn_decode"] == "attn_decode_fp8kv" and cm.kv_elem_bytes == 1
    assert "attention: measured fp8 KV (vLLM 0.24.0" in cm.provenance
    # l40s-vllm: its fp8-KV rows are not vLLM's default kernel there, so no fp8-KV fit
    l40s = load_profile("l40s")
    assert "attn_decode_fp8kv" not in l40s.kernels
    cm = CostModel(kv, l40s)
    assert cm.kernel_keys["attn_decode"] == "attn_decode" and cm.kv_elem_bytes == 2
    assert BF16_ATTENTION_NOTE in cm.provenance


def test_a_precision_the_profile_cannot_price_is_refused_in_one_line() -> None:
    nvfp4 = px.with_precision(LLAMA, "nvfp4", None)
    with pytest.raises(TwinError) as err:
        CostModel(nvfp4, load_profile("h100"))
    # the GPU cannot run it at all: refused before any fit is looked up (issue 34)
    assert str(err.value) == (
        "--precision nvfp4: H100 SXM5 has no FP4 tensor cores (nvfp4 needs Blackwell; "
        "model 'llama-3-8b')"
    )
    assert CostModel(nvfp4, load_profile("b200", "trtllm")).priced.keys["linear"] == "gemm_nvfp4"
    with pytest.raises(
        TwinError, match=r"no mxfp4 GEMM fit; it prices bf16, fp8, fp8-block, nvfp4$"
    ):
        CostModel(px.with_precision(LLAMA, "mxfp4", None), load_profile("b200"))
    with pytest.raises(TwinError, match=r"profile h100 has no fp8 GEMM fit; it prices bf16$"):
        CostModel(px.with_precision(LLAMA, "fp8", None), load_profile("h100-datasheet"))


def test_bad_values_are_one_line_naming_the_flag() -> None:
    with pytest.raises(TwinError, match=r"--precision 'int8': expected one of bf16, fp8, "):
        px.with_precision(LLAMA, "int8", None)
    with pytest.raises(TwinError, match=r"--kv-dtype 'fp4': expected one of bf16, fp8$"):
        px.with_precision(LLAMA, None, "fp4")
    with pytest.raises(TwinError, match=r"field 'kv_dtype' must be one of bf16, fp8"):
        LLAMA.from_dict({**LLAMA.to_dict(derived=False), "kv_dtype": "int8"})
    assert px.model_sets("FP8", "fp8") == ["precision=fp8", "kv_dtype=fp8"]
    assert px.model_sets(None, None) == []


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["simulate", "--precision", "fp16"], "--precision 'fp16': expected one of"),
        (["simulate", "--kv-dtype", "e5m2"], "--kv-dtype 'e5m2': expected one of bf16, fp8"),
        (
            ["simulate", "-m", "llama-3-8b", "--precision", "nvfp4"],
            "--precision nvfp4: H100 SXM5 has no FP4 tensor cores",
        ),
        (
            ["cost", "-m", "llama-3-8b", "--gpu", "h200", "--precision", "mxfp4"],
            "--precision mxfp4: profile h200-vllm has no mxfp4 GEMM fit",
        ),
        (["models", "show", "llama-3-8b", "--kv-dtype", "int4"], "--kv-dtype 'int4'"),
        (
            [
                "replay",
                str(example_path("chat")),
                "-m",
                "llama-3-8b",
                "--cache-gb",
                "1",
                "--precision",
                "fp6",
            ],
            "--precision 'fp6'",
        ),
    ],
)
def test_the_cli_options_errors(tmp_path: Path, capsys, argv: list[str], needle: str) -> None:
    if argv[0] == "simulate":
        argv = [*argv, "--out", str(tmp_path / "sim")]
    assert_clean_error(capsys, argv, tmp_path, needle)


def test_report_capacity_refuses_an_unpriced_precision_before_any_work(
    tmp_path: Path, capsys
) -> None:
    argv = ["report", "capacity", str(example_path("chat")), "-m", "tiny-transformer"]
    argv += ["--gpu", "l40s", "--precision", "mxfp4", "--out", str(tmp_path / "rep")]
    assert_clean_error(capsys, argv, tmp_path, "profile l40s-vllm has no mxfp4 GEMM fit")


def test_cost_and_models_show_say_the_precision(capsys) -> None:
    argv = ["cost", "-m", "llama-3-8b", "--gpu", "h200", "--lengths", "2048", "--batches", "8"]
    assert run([*argv, "--precision", "fp8-block", "--kv-dtype", "fp8", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["precision"], doc["kv_dtype"]) == ("fp8-block", "fp8")
    assert doc["kernels_priced"]["linear"] == "gemm_fp8_block"
    assert doc["provenance_label"].startswith("GEMM: measured fp8-block (vLLM 0.24.0")
    assert run(argv) == 0
    plain = capsys.readouterr().out
    assert "fp8" not in plain  # bf16: the output as it was
    assert run(["models", "show", "llama-3-8b", "--precision", "fp8", "--kv-dtype", "fp8"]) == 0
    shown = capsys.readouterr().out
    assert "precision: fp8 weights, fp8 KV" in shown
    assert "65,536" in shown and f"{WEIGHT_BYTES['fp8']:,}" in shown


def test_simulate_at_fp8_holds_more_in_its_pool_and_the_summary_says_so(tmp_path: Path) -> None:
    base = [
        "simulate",
        str(example_path("chat")),
        "-m",
        "llama-3-8b",
        "--gpu",
        "h200",
        "--engine",
        "vllm",
        "--concurrency",
        "4",
        "--until-s",
        "20",
    ]
    assert run([*base, "--out", str(tmp_path / "bf16")]) == 0
    assert (
        run([*base, "--precision", "fp8", "--kv-dtype", "fp8", "--out", str(tmp_path / "fp8")]) == 0
    )
    bf16 = json.loads((tmp_path / "bf16" / "summary.json").read_text())
    fp8 = json.loads((tmp_path / "fp8" / "summary.json").read_text())
    assert "precision" not in bf16["profile"]  # a bf16 summary keeps its bytes
    assert (fp8["profile"]["precision"], fp8["profile"]["kv_dtype"]) == ("fp8", "fp8")
    assert fp8["profile"]["provenance"].startswith("GEMM: measured fp8 (vLLM 0.24.0")
    # 8 GB less of weights and half the bytes per token: the pool holds over twice the tokens
    pool_bf16, pool_fp8 = bf16["memory_budget_bytes"], fp8["memory_budget_bytes"]
    assert pool_fp8 - pool_bf16 == pytest.approx(
        WEIGHT_BYTES["bf16"] - WEIGHT_BYTES["fp8"], rel=1e-6
    )
    assert fp8["tpot_s"]["mean"] < bf16["tpot_s"]["mean"]


def test_the_shipped_bf16_fits_are_the_tables_fits() -> None:
    """The profiles gained their precision families with ``--keep-fits``: every bf16 fit
    is the one fitted before. Refitting from the installed tables reproduces it (to the
    least-squares solver's tolerance), and the fp8 fit too."""
    pytest.importorskip("aiconfigurator_core")
    from twin.calibration.aic_import import import_profile
    from twin.costmodel import features as ft
    from twin.costmodel import latency as lat

    shipped = load_profile("h100")
    fresh = import_profile("h100", "vllm")
    assert set(shipped.kernels) == set(fresh.kernels)
    act, weight = px.gemm_operand_bytes(px.WEIGHT_FORMATS["fp8"], 2)
    for m, k, n in ((1, 4096, 4096), (512, 4096, 14336), (8192, 8192, 28672)):
        for key, feats in (
            ("gemm", ft.gemm_features(m, k, n, 2)),
            ("gemm_fp8", ft.gemm_features_at(m, k, n, 2, act, weight)),
        ):
            got = lat.predict(key, shipped.kernels[key].params, shipped.peaks, *feats)
            want = lat.predict(key, fresh.kernels[key].params, fresh.peaks, *feats)
            assert got == pytest.approx(want, rel=1e-6), (key, m, k, n)
    for key in ("attn_prefill", "attn_decode", "attn_decode_fp8kv"):
        for name, v in fresh.kernels[key].params.items():
            assert shipped.kernels[key].params[name] == pytest.approx(v, rel=1e-5), (key, name)
