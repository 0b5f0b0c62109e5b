"""Scoring against measured serving runs (issue 31): ``twin.validate.silicon``'s reading,
split, row planning, metrics and end-to-end runs, on the hand-made sample
(``silicon_small``) and the installed package's CSV. Tests that need
``aiconfigurator_core`` skip without it."""

from __future__ import annotations

import csv
import hashlib
import json
import math
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from silicon_small import CONFIGS, EXPRESSED, REASONS, SMALL, _layout, _rows, predict_records

from twin.errors import TwinError
from twin.presets import get_model
from twin.validate import silicon as sil
from twin.validate.silicon import aiconfigurator as sil_aic
from twin.validate.silicon import harness as sil_harness
from twin.validate.silicon import precision as sil_precision

# What each expressed row is priced at (twin.precision), and where that was read.
PRICED = {
    "tiny_h100_vllm_agg_64x8_c2_tp1": ("bf16, bf16 KV", "checkpoint torch_dtype bfloat16"),
    "tiny_h200_sglang_agg_64x8_c3_tp2": ("bf16, bf16 KV", "precision column bf16"),
    "tiny_b200_trtllm_agg_128x16_c4_tp1": ("bf16, bf16 KV", "checkpoint torch_dtype"),
    "tiny_h100_vllm_agg_64x8_c2_fp8": ("fp8, fp8 KV", "gemm_quant_mode fp8"),
    "tiny_h100_vllm_agg_64x8_c2_quantckpt": ("fp8, fp8 KV", "the checkpoint's quantisation"),
    "tiny_b200_trtllm_agg_64x8_c2_nvfp4": ("nvfp4, fp8 KV", "gemm_quant_mode nvfp4"),
    "tiny_b200_vllm_agg_64x8_c2_suffix": ("nvfp4, fp8 KV", "the name's -NVFP4 suffix"),
    "tiny_h100_sglang_agg_64x8_c2_dp2": ("bf16, bf16 KV", "checkpoint torch_dtype"),
}


# ------------------------------------------------------------------ parsing
def test_reads_the_package_format() -> None:
    rows = _rows()
    assert len(rows) == len(REASONS) + len(EXPRESSED) == 20
    r = rows["tiny_h200_sglang_agg_64x8_c3_tp2"]
    assert (r.backend, r.model_path, r.system, r.precision, r.mode) == (
        "sglang",
        "tiny/Tiny-Llama-Instruct",
        "h200_sxm",
        "bf16",
        "agg",
    )
    assert (r.isl, r.osl, r.batch_size, r.tp, r.pp, r.moe_ep) == (64, 8, 3, 2, 1, 1)
    assert r.concurrency == 3  # from silicon_data_source
    assert (r.ttft_ms, r.tpot_ms) == (95.0, 5.5)
    assert r.attention_dp is None  # empty in the file
    assert r.group == "Tiny-Llama-Instruct|h200_sxm|sglang|bf16"
    assert rows["tiny_h100_vllm_agg_64x8_noc"].concurrency is None
    assert rows["tiny_h100_vllm_agg_64x8_c2_nottft"].ttft_ms is None
    assert rows["tiny_h100_vllm_agg_64x8_c2_tp1"].precision_label == "unspecified"


def _write(path: Path, rows: list[dict[str, str]], fields: list[str]) -> Path:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return path


def _small_dicts() -> tuple[list[dict[str, str]], list[str]]:
    with SMALL.open(newline="") as f:
        reader = csv.DictReader(f)
        return list(reader), list(reader.fieldnames or [])


def test_bad_files_are_one_line_errors(tmp_path: Path) -> None:
    rows, fields = _small_dicts()
    with pytest.raises(TwinError, match=r"missing column 'silicon_tpot_ms'"):
        sil.read_rows(
            _write(tmp_path / "a.csv", rows, [f for f in fields if f != "silicon_tpot_ms"])
        )
    bad = [dict(r) for r in rows]
    bad[2]["isl"] = "long"
    with pytest.raises(TwinError, match=r"b.csv, row 3, column 'isl': expected an integer"):
        sil.read_rows(_write(tmp_path / "b.csv", bad, fields))
    bad = [dict(r) for r in rows]
    bad[1]["silicon_ttft_ms"] = "fast"
    with pytest.raises(TwinError, match=r"row 2, column 'silicon_ttft_ms': expected a number"):
        sil.read_rows(_write(tmp_path / "c.csv", bad, fields))
    with pytest.raises(TwinError, match=r"row 2, column 'id': duplicate id"):
        sil.read_rows(_write(tmp_path / "d.csv", [rows[0], rows[0]], fields))
    with pytest.raises(TwinError, match="no such file"):
        sil.read_rows(tmp_path / "missing.csv")
    with pytest.raises(TwinError) as err:
        sil.read_rows(_write(tmp_path / "e.csv", bad, fields))
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------ the split rule
def test_split_is_the_first_hex_digit_of_the_ids_sha256() -> None:
    # sha256("hello") = 2cf24dba...: fit; sha256("abc") = ba7816bf...: held out.
    assert sil.split_of("hello") == sil.FIT
    assert sil.split_of("abc") == sil.HELD_OUT
    for digit in "0123456789abcdef":
        row_id = next(
            f"row-{i}"
            for i in range(10_000)
            if hashlib.sha256(f"row-{i}".encode()).hexdigest()[0] == digit
        )
        assert sil.split_of(row_id) == (sil.FIT if digit in "01234567" else sil.HELD_OUT)
    # A real row of the package's CSV (sha256 starts with d).
    real = "qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_sglang_agg_1024x128_c16_tp2_epnone_1"
    assert hashlib.sha256(real.encode()).hexdigest()[0] == "d"
    assert sil.split_of(real) == sil.HELD_OUT
    rows = _rows()
    assert rows["tiny_h100_vllm_agg_64x8_c2_tp1"].split == sil.FIT
    assert rows["tiny_a100pcie_vllm_agg_64x8_c2"].split == sil.HELD_OUT
    # held out by its id, but the tp1 row holds the same measurement: fit
    assert sil.split_of("tiny_h100_vllm_disagg_64x8_c2") == sil.HELD_OUT
    assert rows["tiny_h100_vllm_disagg_64x8_c2"].split == sil.FIT


def test_a_measurement_seen_in_fit_is_fit_under_every_id() -> None:
    """The InferenceMAX dumps repeat one measurement under several ids: a held-out row
    whose measurement (TTFT, TPOT, lengths, concurrency, system, backend) a fit row also
    holds is fit, so held-out scores count only measurements never fitted on."""
    rows = _rows()
    fit = rows["tiny_h100_vllm_agg_64x8_c2_tp1"]
    held = rows["tiny_a100pcie_vllm_agg_64x8_c2"]
    assert sil.split_of(fit.id) == sil.FIT and sil.split_of(held.id) == sil.HELD_OUT
    copy = replace(
        held,
        ttft_ms=fit.ttft_ms,
        tpot_ms=fit.tpot_ms,
        isl=fit.isl,
        osl=fit.osl,
        concurrency=fit.concurrency,
        system=fit.system,
        backend=fit.backend,
    )
    other = replace(copy, tpot_ms=(fit.tpot_ms or 0) + 0.05)  # another measurement
    marked = {r.id: r for r in sil.mark_copies([fit, copy])}
    assert marked[copy.id].copy_in_fit and marked[copy.id].split == sil.FIT
    # a copy written to 0.01 ms (the Kimi-K2.5 gap-analysis file's) is the same measurement
    rounded = replace(copy, ttft_ms=round(fit.ttft_ms or 0, 2), tpot_ms=round(fit.tpot_ms or 0, 2))
    assert sil.mark_copies([fit, rounded])[1].split == sil.FIT
    assert not marked[fit.id].copy_in_fit
    assert sil.mark_copies([fit, other])[1].split == sil.HELD_OUT
    assert sil.mark_copies([replace(copy, ttft_ms=None)])[0].split == sil.HELD_OUT
    # read_rows applies it: the file's rows are marked when read
    assert all(not r.copy_in_fit or sil.split_of(r.id) == sil.HELD_OUT for r in _rows().values())


# ------------------------------------------------------------------ row -> run
def test_every_reason_and_every_expressed_row() -> None:
    rows = _rows()
    for row_id, reason in REASONS.items():
        assert sil.plan_row(rows[row_id], CONFIGS) == reason, row_id
    for row_id, (gpu, engine, tp, c, model_id) in EXPRESSED.items():
        plan = sil.plan_row(rows[row_id], CONFIGS)
        assert isinstance(plan, sil.RowPlan), (row_id, plan)
        assert (plan.gpu, plan.engine, plan.tp, plan.concurrency, plan.model_id) == (
            gpu,
            engine,
            tp,
            c,
            model_id,
        )
        assert plan.warmup == 0  # the warm-up phase drains before the measured one
        assert plan.requests == sil.MEASURED_ROUNDS * c
        assert plan.model.name == model_id and plan.model.n_attention_layers == 4
        label, why = PRICED[row_id]
        assert plan.priced == label and why in plan.precision, (row_id, plan.precision)
        weights, kv = label.split(", ")
        assert (plan.model.precision, f"{plan.model.kv_dtype} KV") == (weights, kv)
    unspecified = sil.plan_row(rows["tiny_h100_vllm_agg_64x8_c2_tp1"], CONFIGS)
    assert isinstance(unspecified, sil.RowPlan)
    assert "checkpoint torch_dtype bfloat16" in unspecified.precision
    plans, reasons = sil.plan_rows(rows.values(), CONFIGS)
    assert {p.row.id for p in plans} == set(EXPRESSED)
    assert reasons == Counter(REASONS.values())


def test_clients_over_several_aggregated_workers_run_one_workers_share() -> None:
    """416 clients over batch 13 were 32 workers (aiconfigurator's benchmark rule sizes
    an aggregated deployment's clients as workers x batch): the twin runs one worker
    with 13 clients; a count that is the batch, or no multiple of it, is one worker."""
    row = _rows()["tiny_b200_trtllm_agg_128x16_c4_tp1"]
    spread = replace(row, concurrency=416, batch_size=13)
    assert sil.agg_workers(spread) == 32
    plan = sil.plan_row(spread, CONFIGS)
    assert isinstance(plan, sil.RowPlan)
    assert (plan.workers, plan.concurrency) == (32, 13)
    assert plan.requests == sil.MEASURED_ROUNDS * 13
    assert sil.agg_workers(replace(row, concurrency=13, batch_size=13)) == 1
    assert sil.agg_workers(replace(row, concurrency=20, batch_size=13)) == 1
    assert sil.agg_workers(replace(row, concurrency=8, batch_size=None)) == 1
    # attention DP: the batch is per rank, so 8 clients over batch 2 at dp 4 are one worker
    dp = replace(row, concurrency=8, batch_size=2, attention_dp=4)
    assert sil.agg_workers(dp) == 1
    assert sil.agg_workers(replace(dp, concurrency=16)) == 2


def test_a_rows_precision_becomes_the_models() -> None:
    """The fp8 row's model holds half the weight bytes (1 byte per linear weight; the
    embeddings, LM head and norms stay bf16) and half the KV bytes per token of the
    bf16 row's; the aiconfigurator pairing puts fp8 weights with an fp8 KV cache."""
    rows = _rows()
    bf16 = sil.plan_row(rows["tiny_h100_vllm_agg_64x8_c2_tp1"], CONFIGS)
    fp8 = sil.plan_row(rows["tiny_h100_vllm_agg_64x8_c2_fp8"], CONFIGS)
    assert isinstance(bf16, sil.RowPlan) and isinstance(fp8, sil.RowPlan)
    linear, _, other = bf16.model.param_parts
    assert bf16.model.weight_bytes == 2 * (linear + other)
    assert fp8.model.weight_bytes == linear + 2 * other
    assert fp8.model.kv_bytes_per_token * 2 == bf16.model.kv_bytes_per_token
    assert "KV: aiconfigurator's pairing" in fp8.precision


def test_sglang_at_its_defaults_keeps_the_checkpoints_kv_dtype() -> None:
    """SGLang's --kv-cache-dtype auto (0.5.6.post2 ModelRunner.init_memory_pool): fp8 weights
    quantised from a bf16 checkpoint that names no KV quantisation keep a bf16 cache; vLLM's
    row runs aiconfigurator's deployment, whose pairing is fp8; a checkpoint's own
    kv_cache_quant_algo wins either way."""
    rows = _rows()
    vllm_row = rows["tiny_h100_vllm_agg_64x8_c2_fp8"]
    bf16 = sil.plan_row(rows["tiny_h100_vllm_agg_64x8_c2_tp1"], CONFIGS)
    vllm = sil.plan_row(vllm_row, CONFIGS)
    sglang = sil.plan_row(replace(vllm_row, backend="sglang"), CONFIGS)
    assert isinstance(bf16, sil.RowPlan) and isinstance(vllm, sil.RowPlan)
    assert isinstance(sglang, sil.RowPlan)
    assert vllm.priced == "fp8, fp8 KV" and sglang.priced == "fp8, bf16 KV"
    assert "sglang's --kv-cache-dtype auto" in sglang.precision
    assert sglang.model.kv_bytes_per_token == bf16.model.kv_bytes_per_token
    assert sglang.model.weight_bytes == vllm.model.weight_bytes
    said = sil.RowPrecision("fp8", "fp8", kv_from_checkpoint=True)
    config = {"torch_dtype": "bfloat16"}
    r1 = get_model("deepseek-r1")  # no indexer: the checkpoint's rule
    assert sil.engine_default_kv(said, "sglang", {}, config, r1, "h100") is said
    paired = sil.RowPrecision("fp8", "fp8")
    assert sil.engine_default_kv(paired, "sglang", {}, config, r1, "h100").kv == "bf16"
    assert sil.engine_default_kv(paired, "sglang", {"sets": {}}, config, r1, "h100").kv == "bf16"
    assert sil.engine_default_kv(paired, "trtllm", {}, config, r1, "h100") is paired


def test_sglang_rows_from_0562_ran_the_generators_mixed_chunks() -> None:
    """aiconfigurator's SGLang rule (ai-dynamo/aiconfigurator #257/#258, 2026-01-19):
    ``--enable-mixed-chunk`` and ``--max-running-requests`` the batch (its ``--max-prefill-
    tokens isl + 1500`` is refused by the rows' admissions: SGLang's default stands); the
    collection's rows run it from 0.5.6.post2 (the first SGLang template added after the
    rule, #265) and keep SGLang's defaults on 0.5.1.post1. No KV dtype is written, so a
    bf16 checkpoint keeps SGLang's bf16 cache."""
    base = _rows()["tiny_h100_vllm_agg_64x8_c2_fp8"]
    row = replace(base, backend="sglang", backend_version="0.5.6.post2", isl=1000)
    row = replace(row, concurrency=160, batch_size=160)
    sets = {"enable_mixed_chunk": "true", "max_running_requests": "160"}
    assert sil.deployment(row, "sglang") == {"sets": sets}
    assert sil.deployment(replace(row, backend_version="0.5.8.post1"), "sglang") == {"sets": sets}
    assert sil.deployment(replace(row, backend_version="0.5.1.post1"), "sglang") == {}
    assert sil.deployment(row, "sglang", "defaults") == {}
    assert sil.deployment(row, "sglang", "aiconfigurator") == {"sets": sets}
    # The rule is the aiconfigurator collection's: an InferenceMAX SGLang row of the same
    # release keeps SGLang's defaults even under the generator's deployment kind.
    imax = replace(row, source="source_file=2026-04-06.csv; silicon_concurrency=160")
    assert sil.harness_of(imax) is sil.INFERENCEMAX
    assert sil.deployment(replace(imax, backend_version="0.5.9"), "sglang", "aiconfigurator") == {}
    assert sil.aiconfigurator_deployment(replace(row, backend_version="0.5.1.post1"), "sglang")
    plan = sil.plan_row(replace(row, isl=64, concurrency=2, batch_size=2), CONFIGS)
    assert isinstance(plan, sil.RowPlan)
    assert plan.priced == "fp8, bf16 KV"
    assert plan.deployment["sets"]["enable_mixed_chunk"] == "true"
    paired = sil.RowPrecision("fp8", "fp8")
    named = {"sets": {"kv_cache_dtype": "fp8_e4m3"}}
    r1 = get_model("deepseek-r1")
    assert (
        sil.engine_default_kv(paired, "sglang", named, {"torch_dtype": "bfloat16"}, r1, "h100")
        is paired
    )


def test_checkpoint_quantisation_and_kv_are_read() -> None:
    hf = {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}
    assert sil_precision._checkpoint_quant({}, hf) == "nvfp4"
    assert sil_precision._checkpoint_kv({}, hf) == "fp8"
    block = {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
    assert sil_precision._checkpoint_quant(block, None) == "fp8-block"
    assert sil_precision._checkpoint_kv(block, None) is None  # not said: the pairing decides
    gptq = {"quantization_config": {"quant_method": "gptq"}}
    assert (
        sil_precision._checkpoint_quant(gptq, None) == "precision of the gptq checkpoint not priced"
    )
    assert sil_precision._checkpoint_quant({"torch_dtype": "bfloat16"}, None) == ""


def test_model_config_candidates() -> None:
    assert sil.config_candidates("meta-llama/Llama-3.1-8B-Instruct") == [
        "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Meta-Llama-3.1-8B-Instruct",
        "meta-llama/Llama-3.1-8B",
        "meta-llama/Meta-Llama-3.1-8B",
    ]
    assert sil.config_candidates("Qwen/Qwen3-32B") == ["Qwen/Qwen3-32B"]
    # A quantised repository: its own name, then the base model's.
    assert sil.config_candidates("nvidia/Llama-3.1-8B-Instruct-FP8")[:2] == [
        "nvidia/Llama-3.1-8B-Instruct-FP8",
        "nvidia/Llama-3.1-8B-Instruct",
    ]
    assert sil.config_candidates("Qwen/Qwen3-32B-FP8-Static-PerTensor")[1] == "Qwen/Qwen3-32B"
    # ... found under another organisation when its own has none cached
    assert sil.find_config(CONFIGS, "other/Tiny-Llama-NVFP4") == (
        "tiny/Tiny-Llama",
        CONFIGS / "tiny--Tiny-Llama_config.json",
    )
    assert sil.find_config(CONFIGS, "other/Nothing") is None
    assert sil.config_file(Path("c"), "Qwen/Qwen3-32B") == Path("c/Qwen--Qwen3-32B_config.json")


def test_system_and_engine_maps() -> None:
    gpus = sil.system_gpus()
    for system, gpu in {
        "h100_sxm": "h100",
        "h200_sxm": "h200",
        "b200_sxm": "b200",
        "b300_sxm": "b300",
        "gb200": "gb200",
        "gb300": "gb300",
    }.items():
        assert gpus[system] == gpu
    from twin.engine.modes import ENGINE_MODES

    assert set(sil.ENGINE_OF_BACKEND.values()) <= set(ENGINE_MODES)


def test_select_filters() -> None:
    rows = list(_rows().values())
    assert {r.system for r in sil.select(rows, systems=["H200_SXM"])} == {"h200_sxm"}
    assert {r.backend for r in sil.select(rows, backends=["trtllm"])} == {"trtllm"}
    got = sil.select(rows, models=["tiny-odd", "MLA"])
    assert {r.model_path for r in got} == {"tiny/Tiny-Odd", "tiny/Tiny-MLA"}
    assert sil.select(rows) == rows


# ------------------------------------------------------------------ the metrics
def test_ape_mape_mdape() -> None:
    assert sil.ape(110.0, 100.0) == pytest.approx(10.0)
    assert sil.ape(50.0, 100.0) == pytest.approx(50.0)
    assert sil.mape([10.0, 50.0, 30.0, 2.0]) == pytest.approx(23.0)
    assert sil.mdape([10.0, 50.0, 30.0, 2.0]) == pytest.approx(20.0)
    assert sil.mdape([10.0, 50.0, 30.0]) == pytest.approx(30.0)
    assert math.isnan(sil.mape([])) and math.isnan(sil.mdape([]))


def _result(row_id: str, split: str, backend: str, ttft: tuple, tpot: tuple, aic=None) -> dict:
    out = {
        "id": row_id,
        "split": split,
        "backend": backend,
        "group": f"M|h100_sxm|{backend}|unspecified",
        "silicon_ttft_ms": ttft[0],
        "twin_ttft_ms": ttft[1],
        "silicon_tpot_ms": tpot[0],
        "twin_tpot_ms": tpot[1],
        "twin_ttft_ape": sil.ape(ttft[1], ttft[0]),
        "twin_tpot_ape": sil.ape(tpot[1], tpot[0]),
    }
    if aic is not None:
        out.update(
            aic_ttft_ms=aic[0],
            aic_tpot_ms=aic[1],
            aic_ttft_ape=sil.ape(aic[0], ttft[0]),
            aic_tpot_ape=sil.ape(aic[1], tpot[0]),
        )
    return out


def test_summary_per_split_backend_and_group() -> None:
    results = [
        _result("a", sil.FIT, "vllm", (100.0, 110.0), (10.0, 9.0), aic=(100.0, 10.0)),
        _result("b", sil.FIT, "vllm", (100.0, 150.0), (10.0, 12.0)),
        _result("c", sil.FIT, "sglang", (200.0, 100.0), (20.0, 20.0), aic=(300.0, 30.0)),
        _result("d", sil.HELD_OUT, "vllm", (100.0, 80.0), (10.0, 10.5)),
        {"id": "e", "split": sil.HELD_OUT, "backend": "vllm", "twin_error": "does not fit"},
    ]
    s = sil.summarize(results, Counter({"x": 2, "y": 5}), rows_read=12)
    assert s["rows"] == {
        "read": 12,
        "not_expressed": 7,
        "expressed": 5,
        "predicted": 4,
        "twin_refused": 1,
    }
    assert list(s["not_expressed"]) == ["y", "x"]  # most rows first
    assert s["twin_refused"] == {"does not fit": 1}
    fit = s["splits"][sil.FIT]
    twin = fit["overall"]["twin"]
    assert twin["n"] == 3
    assert twin["ttft_mape"] == pytest.approx((10 + 50 + 50) / 3)
    assert twin["ttft_mdape"] == pytest.approx(50.0)
    assert twin["tpot_mape"] == pytest.approx((10 + 20 + 0) / 3)
    assert twin["ttft_median_ratio"] == pytest.approx(1.1)
    aic = fit["overall"]["aiconfigurator"]
    assert aic["n"] == 2 and aic["ttft_mape"] == pytest.approx(25.0)
    assert fit["overall"]["twin_on_aiconfigurator_rows"]["ttft_mape"] == pytest.approx(30.0)
    assert fit["by_backend"]["vllm"]["twin"]["n"] == 2
    assert fit["by_precision"]["vllm | bf16, bf16 KV"]["twin"]["n"] == 2
    assert fit["by_group"]["M|h100_sxm|sglang|unspecified"]["twin"]["tpot_mape"] == 0.0
    held = s["splits"][sil.HELD_OUT]["overall"]
    assert held["twin"]["n"] == 1 and "aiconfigurator" not in held
    assert s["splits"]["all"]["overall"]["twin"]["n"] == 4


# ------------------------------------------------------------------ end to end
def test_one_tiny_row_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = _rows()
    plan = sil.plan_row(rows["tiny_h100_vllm_agg_64x8_c2_tp1"], CONFIGS)
    assert isinstance(plan, sil.RowPlan)
    monkeypatch.setattr(sil_aic, "aiconfigurator_available", lambda: False)
    result = sil.score_row(plan, aiconfigurator=True)
    assert result["aic_error"] == sil.AIC_NOT_INSTALLED
    assert "twin_error" not in result
    for key in ("twin_ttft_ms", "twin_tpot_ms", "twin_ttft_p50_ms", "twin_tpot_p50_ms"):
        assert math.isfinite(result[key]) and result[key] > 0, key
    # Two clients, 64-token prompts: TTFT is at least one prefill, TPOT one decode step,
    # and a request waits no longer than the other client's request.
    assert result["twin_ttft_ms"] >= result["twin_tpot_ms"] * 0.1
    assert result["twin_peak_running"] <= 2
    assert result["twin_preemptions"] == 0
    assert result["twin_ttft_ape"] == pytest.approx(sil.ape(result["twin_ttft_ms"], 120.5))
    assert result["split"] == sil.FIT and result["engine"] == "vllm"
    again = sil.score_row(plan)  # seeded by the row id: the same prediction
    assert again["twin_ttft_ms"] == result["twin_ttft_ms"]
    assert again["twin_tpot_ms"] == result["twin_tpot_ms"]

    summary = sil.summarize([result], Counter({"precision int4_wo not priced": 1}), rows_read=2)
    table, js = sil.write_outputs(tmp_path / "out", [result], summary)
    with table.open(newline="") as f:
        written = list(csv.DictReader(f))
    assert [r["id"] for r in written] == [plan.row.id]
    assert float(written[0]["twin_ttft_ms"]) == pytest.approx(result["twin_ttft_ms"], rel=1e-5)
    assert written[0]["aic_ttft_ms"] == ""
    data = json.loads(js.read_text())
    assert data["splits"]["fit"]["overall"]["twin"]["n"] == 1
    assert data["not_expressed"] == {"precision int4_wo not priced": 1}


def test_the_measured_phase_starts_from_an_idle_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both harnesses drain their warm-up before the measured phase, so the twin runs
    that phase alone: with one round measured it runs exactly ``c`` requests, every
    client's first at t = 0, and the prediction is their mean."""
    rows = _rows()
    monkeypatch.setattr(sil_harness, "AIPERF", sil.Harness("aiperf", 1, 1.0))
    plan = sil.plan_row(rows["tiny_b200_trtllm_agg_128x16_c4_tp1"], CONFIGS)
    assert isinstance(plan, sil.RowPlan)
    assert (plan.requests, plan.warmup) == (4, 0)
    result, seen = predict_records(plan, monkeypatch)
    assert len(seen) == 4
    assert {r.arrival_s for r in seen} == {0.0}
    measured = seen
    expected = sum(r.ttft_s for r in measured) / 4 * 1e3
    assert result["twin_ttft_ms"] == pytest.approx(expected)


def test_a_run_the_twin_refuses_is_reported_not_raised() -> None:
    rows = _rows()
    plan = sil.plan_row(rows["tiny_h100_vllm_agg_64x8_c2_tp1"], CONFIGS)
    assert isinstance(plan, sil.RowPlan)
    # 10 TB of weights: build_run refuses (they do not fit the GPU); a reported failure.
    huge = dict(plan.model_fields, vocab_size=2_000_000_000_000)
    result = sil.score_row(replace(plan, model_fields=huge))
    assert result.get("twin_error") and "\n" not in result["twin_error"]
    assert result.get("twin_ttft_ms") is None and result["twin_ttft_ape"] is None


# ------------------------------------------------------------------ the installed package
def test_the_package_csv_and_its_configs() -> None:
    pytest.importorskip("aiconfigurator_core")
    rows = {r.id: r for r in sil.read_rows()}
    assert len(rows) > 1000
    qwen = next(
        r
        for r in rows.values()
        if r.model_path == "Qwen/Qwen3-32B"
        and r.system == "h100_sxm"
        and r.backend == "vllm"
        and r.mode == "agg"
        and not r.precision
    )
    plan = sil.plan_row(qwen)
    assert isinstance(plan, sil.RowPlan)
    assert plan.model_id == "Qwen/Qwen3-32B"
    assert plan.model.n_params == pytest.approx(32.8e9, rel=0.01)
    llama = next(r for r in rows.values() if r.model_path == "meta-llama/Llama-3.1-8B-Instruct")
    plan = sil.plan_row(llama)
    if isinstance(plan, sil.RowPlan):  # the bf16 TensorRT-LLM rows
        assert plan.model_id == "meta-llama/Meta-Llama-3.1-8B"
    else:
        assert plan.startswith("precision")
    _, reasons = sil.plan_rows(rows.values())
    assert reasons[sil.REASON_DISAGG] == sum(r.mode == "disagg" for r in rows.values())


def test_deepseek_rows_with_expert_parallelism_are_planned() -> None:
    """MLA is priced (issue 34): DeepSeek's aggregated TP x EP rows run on the preset (its
    deepseek_v3 config has no twin.hf_config importer), attention-DP rows too."""
    pytest.importorskip("aiconfigurator_core")
    rows = [
        r
        for r in sil.read_rows()
        if r.model_path == "deepseek-ai/DeepSeek-R1" and r.system == "h200_sxm" and r.mode == "agg"
    ]
    ep = next(
        r for r in rows if r.backend == "trtllm" and (r.moe_ep or 1) > 1 and r.attention_dp == 1
    )
    plan = sil.plan_row(ep)
    assert isinstance(plan, sil.RowPlan), plan
    assert plan.ep == ep.moe_ep and plan.tp == ep.tp and plan.model.mixer_counts["mla"] == 61
    # Attention-DP rows run at --dp-attention on tp_size x attention_dp_size GPUs.
    dp = next(r for r in rows if (r.attention_dp or 1) > 1 and (r.tp or 1) * r.attention_dp <= 8)
    plan = sil.plan_row(dp)
    assert isinstance(plan, sil.RowPlan), plan
    assert (plan.tp, plan.dp, plan.ep) == (
        (dp.tp or 1) * dp.attention_dp,
        dp.attention_dp,
        dp.moe_ep,
    )


@pytest.mark.parametrize(
    ("backend", "source", "csv_columns", "ran"),
    [
        # tp 8, ep 8 on one node, written with the GPUs multiplied by ep (SGLang, TRT)
        ("sglang", "db-dump/2026-04-27; silicon_concurrency=4", (64, 1, 8, 8), (8, 1, 1, 8)),
        ("trtllm", "source_file=2026-04-06.csv; x=1", (16, 1, 4, 4), (4, 1, 1, 4)),
        # ... with attention DP (TensorRT-LLM's enable_attention_dp)
        ("trtllm", "db-dump/2026-04-27; y=2", (1, 64, 8, 8), (1, 8, 1, 8)),
        # vLLM's --enable-expert-parallel at tp 4, written as attention DP 4 and ep 16
        ("vllm", "db-dump/2026-04-27; z=3", (4, 4, 1, 16), (4, 1, 1, 4)),
        ("vllm", "source_file=2026-04-06.csv", (2, 2, 1, 4), (2, 1, 1, 2)),
        # tp 2, ep 2 (the smallest square the CSV could misread as tp 4, moe tp 2 x ep 2)
        ("sglang", "db-dump/2026-04-27", (4, 1, 2, 2), (2, 1, 1, 2)),
        # already the run's layout: unchanged
        ("sglang", "source_file=2026-04-06.csv", (8, 1, 1, 8), (8, 1, 1, 8)),
        ("trtllm", "source_file=2026-03-25.csv", (1, 8, 1, 8), (1, 8, 1, 8)),
        ("trtllm", "db-dump/2026-04-27", (4, 1, 4, 1), (4, 1, 4, 1)),
        # not an InferenceMAX row (aiconfigurator's own collection): the columns stand
        ("trtllm", "source_file=/data/gb200/trtllm/deepseek_r1.csv", (4, 1, 2, 2), (4, 1, 2, 2)),
    ],
)
def test_an_inferencemax_rows_layout_is_the_one_it_ran(
    backend: str, source: str, csv_columns: tuple[int, ...], ran: tuple[int, ...]
) -> None:
    tp, dp, moe_tp, moe_ep = csv_columns
    row = replace(
        _rows()["tiny_h100_vllm_agg_64x8_c2_tp1"],
        backend=backend,
        source=source,
        tp=tp,
        attention_dp=dp,
        moe_tp=moe_tp,
        moe_ep=moe_ep,
        concurrency=64,
        batch_size=64 // dp,  # the CSV's rule: clients = attention_dp_size x batch_size
    )
    read = sil.inferencemax_layout(row)
    assert _layout(read) == ran
    assert (read.tp or 1) * (read.attention_dp or 1) == (read.moe_tp or 1) * (read.moe_ep or 1)
    changed = ran != csv_columns
    assert bool(read.csv_layout) == changed
    # one server ran the row's clients (InferenceMAX runs one per configuration)
    assert sil.agg_workers(read) == 1
    if changed:
        assert read.batch_size * read.attention_dp == read.concurrency
    if changed:
        assert read.csv_layout == (
            f"tp_size {tp}, attention_dp_size {dp}, moe_tp_size {moe_tp}, moe_ep_size {moe_ep}"
        )


def test_the_package_rows_run_on_the_gpus_their_ids_name() -> None:
    """Every InferenceMAX row whose id names its layout (``..._tp8_ep8_1010``,
    ``..._tp8_0_ep8_0_974``) is read at that many GPUs and that expert parallelism (but
    the rows collected before the search space named one, read at their script's), and
    its GB200 rows the CSV calls aggregated are refused as the disaggregated runs they
    were."""
    pytest.importorskip("aiconfigurator_core")
    import re

    named = re.compile(r"_tp(\d+)(?:_0)?_ep(\d+)")
    rows = [r for r in sil.read_rows() if sil.harness_of(r) is sil.INFERENCEMAX]
    checked = 0
    for r in rows:
        found = named.search(r.id)
        # the rows collected before the search space: their ids name the CSV's ep 1
        # (inferencemax_trtllm_script_layout)
        if found is None or r.mode != "agg" or r.csv_layout.startswith("script"):
            continue
        gpus, ep = int(found.group(1)), int(found.group(2))
        assert ((r.tp or 1) * (r.attention_dp or 1), r.moe_ep or 1) == (gpus, ep), r.id
        checked += 1
    assert checked > 1000
    assert all(sil.agg_workers(r) == 1 for r in rows if r.mode == "agg")
    assert sum(bool(r.csv_layout) for r in rows) > 400
    gb200 = next(r for r in rows if r.system == "gb200" and r.mode == "agg")
    assert sil.plan_row(gb200) == sil.REASON_INFERENCEMAX_DISAGG
