"""Scoring against measured serving runs (issue 31): ``twin.validate.silicon``.

The hand-made ``tests/data/silicon_sample_small.csv`` has the package CSV's exact
columns: three expressible rows (vLLM, SGLang, TensorRT-LLM) and one row for each
reason a row is not expressed; ``tests/data/silicon_configs`` holds tiny configs named
as the package's ``model_configs``. Tests that need ``aiconfigurator_core`` skip
without it.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import math
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from twin.engine.config import EngineConfig, SchedulerConfig
from twin.engine.dp_attention import adp_balance
from twin.engine.modes import get_mode
from twin.engine.run import build_run
from twin.errors import TwinError
from twin.presets import get_model
from twin.validate import silicon as sil
from twin.validate.silicon import aiconfigurator as sil_aic
from twin.validate.silicon import harness as sil_harness
from twin.validate.silicon import precision as sil_precision
from twin.validate.silicon import score as sil_score

DATA = Path(__file__).parent / "data"
SMALL = DATA / "silicon_sample_small.csv"
CONFIGS = DATA / "silicon_configs"

REASONS = {
    "tiny_h100_vllm_disagg_64x8_c2": sil.REASON_DISAGG,
    "tiny_h100_vllm_agg_64x8_c2_pp2": sil.REASON_PP,
    "tiny_h100_sglang_agg_64x8_c2_ep4": sil.REASON_EP,
    "tiny_h100_vllm_agg_64x8_c2_int4": "precision int4 not priced",
    "tiny_h100_trtllm_agg_64x8_c2_nvfp4": (
        "precision nvfp4 not priced by profile h100-trtllm (it prices bf16, fp8, fp8-block; "
        "H100 SXM5 has no FP4 tensor cores)"
    ),
    "tiny_h100_vllm_agg_64x8_noc": sil.REASON_NO_CONCURRENCY,
    "tiny_a100pcie_vllm_agg_64x8_c2": "no twin profile for system a100_pcie",
    "tiny_h100_vllm_agg_64x8_c2_nocfg": "no cached model config (<org>--<name>_config.json)",
    # An MLA config without its latent's keys (twin.hf_moe reads DeepSeek-V3's).
    "tiny_h100_sglang_agg_64x8_c2_mla": "model config not importable (model_type deepseek_v3)",
    "tiny_h100_trtllm_agg_64x8_c2_tp16": (
        "tp_size 16: no measured all-reduce at 16 GPUs in the h100 profile"
    ),
    "tiny_h100_vllm_agg_64x8_c2_tp4_odd": "tp_size 4 does not divide the 6 attention heads",
    "tiny_h100_vllm_agg_64x8_c2_nottft": sil.REASON_NO_MEASUREMENT,
}
EXPRESSED = {
    # id: (gpu, engine, tp, concurrency, model config used)
    "tiny_h100_vllm_agg_64x8_c2_tp1": ("h100", "vllm", 1, 2, "tiny/Tiny-Llama"),
    "tiny_h200_sglang_agg_64x8_c3_tp2": ("h200", "sglang", 2, 3, "tiny/Tiny-Llama"),
    "tiny_b200_trtllm_agg_128x16_c4_tp1": ("b200", "trtllm", 1, 4, "tiny/Tiny-Llama"),
    "tiny_h100_vllm_agg_64x8_c2_fp8": ("h100", "vllm", 1, 2, "tiny/Tiny-Llama"),
    "tiny_h100_vllm_agg_64x8_c2_quantckpt": ("h100", "vllm", 1, 2, "tiny/Tiny-Llama-FP8"),
    "tiny_b200_trtllm_agg_64x8_c2_nvfp4": ("b200", "trtllm", 1, 2, "tiny/Tiny-Llama"),
    "tiny_b200_vllm_agg_64x8_c2_suffix": ("b200", "vllm", 1, 2, "tiny/Tiny-Llama"),
    # attention DP: tp_size 2 x attention_dp_size 2 = 4 GPUs, 2 attention ranks
    "tiny_h100_sglang_agg_64x8_c2_dp2": ("h100", "sglang", 4, 2, "tiny/Tiny-Llama"),
}
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


def _rows() -> dict[str, sil.SiliconRow]:
    return {r.id: r for r in sil.read_rows(SMALL)}


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
    monkeypatch.setattr(sil_harness, "AIPERF", sil.Harness("aiperf", 1, sil.WARMUP_ROUNDS, 1.0))
    plan = sil.plan_row(rows["tiny_b200_trtllm_agg_128x16_c4_tp1"], CONFIGS)
    assert isinstance(plan, sil.RowPlan)
    assert (plan.requests, plan.warmup) == (4, 0)
    seen = []
    from twin.engine import run as engine_run

    original = engine_run.Run.simulate

    def spy(self, *args, on_record=None, **kwargs):  # type: ignore[no-untyped-def]
        def both(rec):  # type: ignore[no-untyped-def]
            seen.append(rec)
            on_record(rec)

        return original(self, *args, on_record=both, **kwargs)

    monkeypatch.setattr(engine_run.Run, "simulate", spy)
    result = sil.predict(plan)
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


def _layout(row: sil.SiliconRow) -> tuple[int | None, ...]:
    return (row.tp, row.attention_dp, row.moe_tp, row.moe_ep)


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


# ------------------------------------------------------------------ the benchmark
def _script(name: str, filename: str) -> Any:
    """``benchmarks/<filename>`` loaded as the module ``name``."""
    import importlib.util

    path = Path(__file__).parents[1] / "benchmarks" / filename
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _bench() -> Any:
    return _script("bench_silicon", "bench_silicon.py")


def test_bench_spread() -> None:
    spread = _bench().spread
    assert spread(list(range(10)), None) == list(range(10))
    assert spread(list(range(10)), 3) == [0, 3, 6]
    assert spread(list(range(4)), 9) == [0, 1, 2, 3]
    assert spread(list(range(4)), 0) == []


def _silicon_rows(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``benchmarks/silicon_rows.py`` (it imports ``bench_silicon`` by name)."""
    import sys

    monkeypatch.setitem(sys.modules, "bench_silicon", _bench())
    return _script("bench_silicon_rows", "silicon_rows.py")


def test_silicon_rows_deployment_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--deployment``: c-N is the row's concurrency minus N, DEL drops the key, numbers
    and booleans are read as such; a malformed pair is one line, exit 2."""
    rows = _silicon_rows(monkeypatch)

    @dataclasses.dataclass(frozen=True)
    class Plan:  # the two RowPlan fields the change reads
        concurrency: int
        deployment: dict[str, Any]

    plan = Plan(16, {"max_running": 16, "eager_prefill_s": 0.05, "max_batched_tokens": 2560})
    assert rows.changed(plan, []) is plan
    out = rows.changed(
        plan,
        [
            ("max_running", "c-1"),
            ("eager_prefill_s", "DEL"),
            ("max_batched_tokens", "512"),
            ("memory_utilization", "0.8"),
            ("sets", "true"),
        ],
    )
    assert out.deployment == {
        "max_running": 15,
        "max_batched_tokens": 512,
        "memory_utilization": 0.8,
        "sets": True,
    }
    assert plan.deployment["max_running"] == 16  # the plan itself is left as it was
    with pytest.raises(ValueError, match="c-N"):
        rows.changed(plan, [("max_running", "c-x")])
    # a name build_run lacks is refused before any row runs (each row would fail alone)
    with pytest.raises(TwinError, match=r"^'max_runing': not a setting of a run"):
        rows.changed(plan, [("max_runing", "4")])
    predictions = tmp_path / "p.csv"
    predictions.write_text("id,split,group\n")
    with pytest.raises(SystemExit) as exit_info:
        rows.main([str(predictions), "--deployment", "max_running", "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "expected KEY=VALUE" in capsys.readouterr().err


def test_bench_runs_without_aiconfigurator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without the ``aiconfigurator`` package the benchmark says so and still scores."""
    bench = _bench()
    for where in (sil, sil_aic):  # the benchmark's check and the scorer's
        monkeypatch.setattr(where, "aiconfigurator_available", lambda: False)
    results = tmp_path / "silicon.json"
    argv = ["--csv", str(SMALL), "--configs", str(CONFIGS), "--jobs", "1", "--limit", "1"]
    argv += ["--out", str(tmp_path / "out"), "--results", str(results)]
    assert bench.main(argv) == 0
    printed = capsys.readouterr().out
    assert "aiconfigurator not installed" in printed
    data = json.loads(results.read_text())
    assert data["aiconfigurator"] == sil.AIC_NOT_INSTALLED
    rows = data["summary"]["rows"]
    assert (rows["read"], rows["expressed"], rows["left_out_by_limit"]) == (
        20,
        1,
        len(EXPRESSED) - 1,
    )
    assert rows["not_expressed"] == len(REASONS)
    assert (tmp_path / "out" / "predictions.csv").is_file()
    nothing = ["--models", "nothing", "--out", str(tmp_path / "o2"), "--results", str(results)]
    assert bench.main([*argv[:2], *nothing]) == 0
    assert bench.main(["--csv", str(tmp_path / "none.csv")]) == 2
    assert "no such file" in capsys.readouterr().out


# ------------------------------------------------------------------ the rows' deployment
def test_deployment_is_aiconfigurators_benchmark_rule() -> None:
    """aiconfigurator 0.12.0 ``generator/rule_plugin/benchmark/{vllm,trtllm}.rule``, agg:
    ``max_num_tokens = max_batch_size + isl + 1500`` (TensorRT-LLM rounded up to 32-token
    blocks), ``max_batch_size`` the row's batch size. Worked by hand for c = 8, 1,024
    tokens: 8 + 1,024 + 1,500 = 2,532; 2,560 in whole 32-token blocks."""
    row = replace(_rows()["tiny_h100_vllm_agg_64x8_c2_tp1"], isl=1024, concurrency=8, batch_size=8)
    assert sil.deployment(row, "vllm") == {
        "sets": {"max_num_batched_tokens": "2532", "max_num_seqs": "8"}
    }
    # ... and the templates' free_gpu_memory_fraction default(0.80).
    trt = {"max_batched_tokens": 2560, "max_running": 8, "memory_utilization": 0.8}
    assert sil.aiconfigurator_deployment(row, "trtllm") == trt
    assert sil.deployment(row, "trtllm", "aiconfigurator-all") == trt
    # Applied where the fit rows say the rows ran with it: vLLM's, and TensorRT-LLM's
    # with its overlap scheduler modelled (decisions.md).
    assert sil.deployment(row, "trtllm") == trt
    assert sil.deployment(row, "trtllm", "defaults") == {}
    # SGLang's generated limits apply from 0.5.6.post2 on only (the next test).
    assert sil.deployment(row, "sglang") == {}
    assert sil.deployment(row, "vllm", "defaults") == {}
    # The batch size column wins over the concurrency (they are equal on every bf16 row).
    assert sil.aiconfigurator_deployment(replace(row, batch_size=16), "trtllm")["max_running"] == 16
    with pytest.raises(TwinError, match="deployment 'x'"):
        sil.deployment(row, "vllm", "x")
    plan = sil.plan_row(_rows()["tiny_h100_vllm_agg_64x8_c2_tp1"], CONFIGS)
    assert isinstance(plan, sil.RowPlan)
    assert plan.deployment == {"sets": {"max_num_batched_tokens": "1566", "max_num_seqs": "2"}}
    plan = sil.plan_row(_rows()["tiny_h100_vllm_agg_64x8_c2_tp1"], CONFIGS, "defaults")
    assert isinstance(plan, sil.RowPlan) and plan.deployment == {}


def test_inferencemax_llama_70b_trtllm_rows_hold_contexts_at_1k_1k_below_8_gpus() -> None:
    """The Llama-3.1-70B TensorRT-LLM scripts' batch waiting (20 iterations, 0.9 of the
    token budget) at ISL/OSL 1k/1k and fewer than 8 GPUs; none elsewhere, nor for
    another model; the flags reach the trtllm mode's scheduler options."""
    imax = replace(
        _rows()["tiny_h100_vllm_agg_64x8_c2_tp1"],
        source="source_file=2026-04-06.csv; model=x; silicon_concurrency=4",
        model_path="meta-llama/Llama-3.1-70B",
        backend="trtllm",
        isl=1024,
        osl=1024,
        concurrency=4,
    )
    wait = {"batch_wait_timeout_iters": "20", "batch_wait_max_tokens_ratio": "0.9"}
    for tp in (1, 2, 4):
        row = replace(imax, tp=tp)
        assert sil.deployment(row, "trtllm") == {"max_batched_tokens": 16384, "sets": wait}
    for other in (replace(imax, tp=8), replace(imax, osl=8192), replace(imax, isl=8192)):
        assert sil.deployment(other, "trtllm") == {"max_batched_tokens": 16384}
    gptoss = replace(imax, model_path="openai/gpt-oss-120b")
    assert sil.deployment(gptoss, "trtllm") == {"max_batched_tokens": 20000}
    assert sil.deployment(imax, "trtllm", "defaults") == {}
    options = get_mode("trtllm").settings(get_model("tiny-transformer"), wait)
    assert options["scheduler_options"]["batch_wait_timeout_iters"] == 20


def test_inferencemax_gptoss_trtllm_rows_balance_their_attention_dp_contexts() -> None:
    """InferenceMAX's gpt-oss TensorRT-LLM script writes ``attention_dp_config:
    {enable_balance: true}`` under attention DP and nothing else of it: the balance at
    ``AttentionDpConfig``'s defaults (timeout 50, batching wait 10 iterations); no
    balance without attention DP or in another collection."""

    gptoss = replace(
        _rows()["tiny_h100_vllm_agg_64x8_c2_tp1"],
        source="source_file=2026-04-06.csv; model=GPT-OSS-120B; silicon_concurrency=64",
        model_path="openai/gpt-oss-120b",
        system="b200_sxm",
        backend="trtllm",
        isl=1024,
        osl=1024,
        tp=1,
        attention_dp=2,
        moe_ep=2,
        concurrency=64,
    )
    sets = {"attention_dp_balance": "true"}
    assert sil.deployment(gptoss, "trtllm") == {"max_batched_tokens": 20000, "sets": sets}
    assert sil.deployment(replace(gptoss, attention_dp=1, tp=2), "trtllm") == {
        "max_batched_tokens": 20000
    }
    aiperf = replace(gptoss, source="source_file=aiconfigurator.csv; model=x")
    assert sil.inferencemax_adp_balance(aiperf) == {}
    options = get_mode("trtllm").settings(get_model("tiny-transformer"), sets)["scheduler_options"]
    config = EngineConfig(scheduling=SchedulerConfig(scheduler_options=options, max_running=512))
    balance = adp_balance(config, object())  # type: ignore[arg-type]  # no tau: one a step
    assert balance is not None and (balance.timeout, balance.batching) == (50, 10)


def test_the_inferencemax_collection_runs_with_its_own_harness(tmp_path: Path) -> None:
    """A row of the "2026-04-06.csv" collection is measured by InferenceMAX's client:
    10 x c measured requests after 2 x c warm-ups, lengths uniform in [0.8 x, 1 x], and
    its scripts' server limits (vLLM 8,192 tokens / 512 sequences; TensorRT-LLM 16,384
    tokens for Llama-3.1-70B); other rows keep aiconfigurator's harness."""
    rows = _rows()
    base = rows["tiny_h100_vllm_agg_64x8_c2_tp1"]
    assert sil.harness_of(base) is sil.AIPERF
    imax = replace(base, source="source_file=2026-04-06.csv; model=x; silicon_concurrency=2")
    assert sil.harness_of(imax) is sil.INFERENCEMAX
    # the same pipeline's other dumps (they share measurements with it)
    for source in (
        "source_file=2026-03-25.csv; model=x; silicon_concurrency=2",
        "db-dump/2026-04-27; config_id=1; silicon_concurrency=2",
    ):
        assert sil.harness_of(replace(base, source=source)) is sil.INFERENCEMAX
    assert sil.harness_of(replace(base, source="x; db-dump/2026")) is sil.AIPERF
    plan = sil.plan_row(imax, CONFIGS)
    assert isinstance(plan, sil.RowPlan)
    assert (plan.warmup, plan.requests, plan.range_ratio) == (0, 20, 0.8)
    assert plan.deployment == {"sets": {"max_num_batched_tokens": "8192", "max_num_seqs": "512"}}
    llama = replace(imax, model_path="meta-llama/Llama-3.1-70B")
    assert sil.deployment(llama, "trtllm") == {"max_batched_tokens": 16384}
    r1 = replace(imax, model_path="deepseek-ai/DeepSeek-R1", isl=8192, concurrency=32)
    assert sil.deployment(r1, "trtllm") == {"max_batched_tokens": 8320}  # 8,288 -> 64s
    # the db-dump names the same runs by their architecture
    dump = replace(r1, model_path="deepseek-ai/DeepSeek-V3", source="db-dump/2026-04-27; x")
    assert sil.deployment(dump, "trtllm") == {"max_batched_tokens": 8320}
    assert sil.deployment(imax, "trtllm") == sil.deployment(imax, "sglang") == {}
    # the old choice stays one flag away
    assert sil.deployment(imax, "vllm", "aiconfigurator") == sil.aiconfigurator_deployment(
        imax, "vllm"
    )
    # lengths as benchmark_serving.py draws them: uniform integers in [int(0.8 x), x]
    import pyarrow.parquet as pq

    path = sil.write_workload(tmp_path / "w.parquet", 1000, 100, 400, seed=7, range_ratio=0.8)
    table = pq.read_table(path).to_pydict()
    isls = [len(t) for t in table["input_tokens"]]
    osls = table["output_len"]
    assert min(isls) >= 800 and max(isls) <= 1000 and len(set(isls)) > 50
    assert min(osls) >= 80 and max(osls) <= 100 and len(set(osls)) > 10
    exact = pq.read_table(sil.write_workload(tmp_path / "e.parquet", 64, 8, 5, seed=7))
    assert {len(t) for t in exact.column("input_tokens").to_pylist()} == {64}


def test_the_kimi_gap_analysis_rows_are_inferencemax_runs() -> None:
    """``kimi-k2.5-gap-analysis.csv`` rows run InferenceMAX's client and vLLM limits
    (8,192 tokens, 512 sequences), not aiconfigurator's generated ``c + isl + 1500``; in
    the package's CSV each of them equals an InferenceMAX row to its two decimals at the
    same lengths, clients, system, release and layout (the evidence for the rule)."""
    base = _rows()["tiny_h100_vllm_agg_64x8_c2_tp1"]
    gap = replace(base, source="source_file=kimi-k2.5-gap-analysis.csv; silicon_concurrency=2")
    assert sil.harness_of(gap) is sil.INFERENCEMAX
    assert sil.deployment(gap, "vllm") == {
        "sets": {"max_num_batched_tokens": "8192", "max_num_seqs": "512"}
    }
    pytest.importorskip("aiconfigurator_core")
    rows = sil.read_rows()
    gaps = [r for r in rows if "kimi-k2.5-gap-analysis.csv" in r.source]
    assert len(gaps) == 47

    def run(r: sil.SiliconRow) -> tuple[object, ...]:
        layout = (r.tp, r.moe_tp, r.moe_ep, r.attention_dp)
        return (r.isl, r.osl, r.concurrency, r.system, r.backend_version, layout)

    imax = {
        (run(r), round(r.ttft_ms, 2), round(r.tpot_ms, 2))
        for r in rows
        if r.ttft_ms is not None
        and r.tpot_ms is not None
        and "gap-analysis" not in r.source
        and sil.harness_of(r) is sil.INFERENCEMAX
    }
    assert all((run(r), r.ttft_ms, r.tpot_ms) in imax for r in gaps)


def test_the_deployments_budget_splits_a_wave_of_contexts(tmp_path: Path) -> None:
    """Four clients send 1,024-token prompts at once to TensorRT-LLM: under the engine's
    default 8,192 tokens the four contexts run in one iteration (one first-token time);
    under the row's deployment (4 + 1,024 + 1,500 = 2,528 tokens, 79 whole blocks; whole
    contexts) two fit an iteration, so the first tokens come in two waves and the mean
    TTFT grows. A harness that dropped the deployment would see one wave."""
    from twin.metrics import RequestRecord

    path = sil.write_workload(tmp_path / "w.parquet", 1024, 4, 4, seed=1)

    def first_tokens(**kw: object) -> list[float]:
        records: list[RequestRecord] = []
        run = build_run(
            path,
            model="llama-3-8b",
            gpu="h100",
            engine="trtllm",
            concurrency=4,
            frontend_s=0.0,  # all four reach the engine at t = 0
            **kw,
        )
        run.simulate(on_record=records.append)
        return sorted({round(r.first_token_s, 9) for r in records})

    assert len(first_tokens()) == 1
    row = replace(_rows()["tiny_b200_trtllm_agg_128x16_c4_tp1"], isl=1024)
    settings = sil.aiconfigurator_deployment(row, "trtllm")
    assert settings == {"max_batched_tokens": 2528, "max_running": 4, "memory_utilization": 0.8}
    assert len(first_tokens(**settings)) == 2


def test_trtllm_rows_run_with_the_overlap_scheduler() -> None:
    """TensorRT-LLM's overlap scheduler is on unless disabled (``TorchLlmArgs``
    ``disable_overlap_scheduler`` false; aiconfigurator's rule keeps it on): every
    aggregated TensorRT-LLM row runs with it, whatever the deployment; not under attention
    DP (not modelled on a rank) or pipeline stages, not for another engine."""
    row = _rows()["tiny_b200_trtllm_agg_128x16_c4_tp1"]
    assert sil.trtllm_overlap_scheduler(row) == {"overlap_scheduler": "true"}
    assert sil.trtllm_overlap_scheduler(replace(row, attention_dp=2)) == {}
    assert sil.trtllm_overlap_scheduler(replace(row, pp=2)) == {}  # a pipeline refuses it
    assert sil.trtllm_overlap_scheduler(replace(row, backend="vllm")) == {}
    for kind in ("benchmark", "defaults"):
        plan = sil.plan_row(row, CONFIGS, kind)
        assert isinstance(plan, sil.RowPlan)
        assert plan.deployment["sets"] == {"overlap_scheduler": "true"}
    plan = sil.plan_row(row, CONFIGS, "benchmark", pool=True)  # a disaggregated pool: off
    assert isinstance(plan, sil.RowPlan) and "sets" not in plan.deployment


def _inferencemax_r1(**fields: Any) -> sil.SiliconRow:
    """A B200 DeepSeek-R1 row of InferenceMAX's 2026-03-25 collection at 4 clients."""
    return replace(
        _rows()["tiny_h100_vllm_agg_64x8_c2_tp1"],
        source="source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=4",
        model_path="deepseek-ai/DeepSeek-R1",
        system="b200_sxm",
        concurrency=4,
        **fields,
    )


def test_inferencemax_mtp_rows_run_with_mtp() -> None:
    """InferenceMAX's DeepSeek-R1 TensorRT-LLM runs on B200 in the 1.2.0rc6.post3 image
    are its ``-mtp`` configurations: MTP with 3 drafts (1 with attention DP); the
    post2 image, other systems and aiconfigurator's collection run without."""
    model = get_model("deepseek-r1")
    row = _inferencemax_r1(backend="trtllm", backend_version="1.2.0rc6.post3", isl=64)
    spec = sil.inferencemax_speculation(row, model)
    assert spec is not None and (spec["method"], spec["num_speculative_tokens"]) == ("mtp", 3)
    dp = sil.inferencemax_speculation(replace(row, attention_dp=8), model)
    assert dp is not None and dp["num_speculative_tokens"] == 1
    for other in (
        replace(row, backend_version="1.2.0rc6.post2"),
        replace(row, system="h200_sxm"),
        replace(row, source="/x/aic-auto-gap-analysis/y.csv; silicon_concurrency=4"),
        replace(row, model_path="meta-llama/Llama-3.1-70B"),
    ):
        assert sil.inferencemax_speculation(other, model) is None
    assert sil_score._deployment_text({"max_batched_tokens": 1152, "speculative": spec}) == (
        f"max_batched_tokens=1152 speculative=mtp:3@{spec['acceptance_length']:.2f}"
    )
    # the -mtp scripts' limits: (3 + 1) x 4 clients + 64 + 64 in 64s, max_batch_size CONC
    share = {"memory_utilization": 0.8}  # the scripts' free_gpu_memory_fraction
    assert sil.deployment(row, "trtllm") == {"max_batched_tokens": 192, "max_running": 4, **share}
    # the plain scripts': c + ISL + 64 in 64s, at least 8192
    plain = replace(row, backend_version="1.2.0rc6.post2", isl=1024)
    assert sil.deployment(plain, "trtllm") == {"max_batched_tokens": 8192, **share}


@pytest.mark.parametrize(
    ("system", "precision", "lengths", "conc", "tp", "ran"),
    [
        # fp4 B200 (dsr1_fp4_b200_trt_slurm.sh): EP above 32 clients at tp 4, DP from 256
        ("b200_sxm", "fp4", (1024, 1024), 32, 4, (4, 1, 4, 1)),
        ("b200_sxm", "fp4", (1024, 1024), 128, 4, (4, 1, 1, 4)),
        ("b200_sxm", "fp4", (1024, 8192), 256, 4, (1, 4, 1, 4)),
        # ... at 8k/1k DP with EP above 32; tp 8 1k/1k EP above 8
        ("b200_sxm", "fp4", (8192, 1024), 64, 8, (1, 8, 1, 8)),
        ("b200_sxm", "fp4", (8192, 1024), 32, 8, (8, 1, 8, 1)),
        ("b200_sxm", "fp4", (1024, 1024), 16, 8, (8, 1, 1, 8)),
        ("b200_sxm", "fp4", (1024, 1024), 8, 8, (8, 1, 8, 1)),
        # fp8 B200 and H200: EP always; DP above 32 (B200 1k/1k, H200 8k/1k) or 64
        ("b200_sxm", "fp8", (1024, 1024), 32, 8, (8, 1, 1, 8)),
        ("b200_sxm", "fp8", (1024, 1024), 64, 8, (1, 8, 1, 8)),
        ("h200_sxm", "fp8", (1024, 1024), 64, 8, (8, 1, 1, 8)),
        ("h200_sxm", "fp8", (8192, 1024), 64, 8, (1, 8, 1, 8)),
        # lengths no branch names: the scripts' defaults (fp4 EP 1, fp8 EP = TP; no DP)
        ("b200_sxm", "fp4", (2048, 1024), 512, 8, (8, 1, 8, 1)),
        ("b200_sxm", "fp8", (2048, 1024), 512, 8, (8, 1, 1, 8)),
        ("h200_sxm", "fp8", (2048, 1024), 512, 8, (8, 1, 1, 8)),
    ],
)
def test_inferencemax_trtllm_rows_before_the_search_space_run_their_scripts_layout(
    system: str,
    precision: str,
    lengths: tuple[int, int],
    conc: int,
    tp: int,
    ran: tuple[int, int, int, int],
) -> None:
    """InferenceMAX's DeepSeek-R1 TensorRT-LLM rows that name no image and were measured
    before 2025-11-03 (the CSV writes them ep 1, no attention DP) ran the 1.1.0rc2.post2
    image with the layout their script chose from tp, the lengths and the clients, and
    its budget without the 8192 floor; a row naming its image, measured later, of
    another engine or already carrying a layout keeps its columns."""
    isl, osl = lengths
    source = f"source_file=2026-04-06.csv; model=DeepSeek-R1; silicon_concurrency={conc}; "
    row = _inferencemax_r1(
        backend="trtllm",
        backend_version="",
        precision=precision,
        tp=tp,
        attention_dp=1,
        moe_tp=tp,
        moe_ep=1,
        isl=isl,
        osl=osl,
        batch_size=conc,
    )
    measured = source + "measured=2025-11-02T00:00:00.000Z; wip=False"
    row = replace(row, system=system, concurrency=conc, source=measured)
    read = sil.inferencemax_trtllm_script_layout(row)
    assert _layout(read) == ran
    assert read.backend_version == "1.1.0rc2.post2"
    assert read.batch_size * read.attention_dp == conc
    assert read.csv_layout.startswith("script layout")
    assert (read.tp or 1) * (read.attention_dp or 1) == (read.moe_tp or 1) * (read.moe_ep or 1)
    tokens = sil.deployment(read, "trtllm")["max_batched_tokens"]
    assert tokens == -(-(conc + isl + 64) // 64) * 64  # no 8192 floor
    for kept in (
        replace(row, backend_version="1.2.0rc6.post2"),
        replace(row, source=source + "measured=2025-11-03T00:00:00.000Z"),
        replace(row, backend="vllm"),
        replace(row, moe_tp=1, moe_ep=tp),
        replace(row, model_path="meta-llama/Llama-3.1-70B"),
    ):
        assert sil.inferencemax_trtllm_script_layout(kept) == kept


def test_inferencemax_1_1_0rc2_mtp_runs_are_told_apart_by_their_measured_day() -> None:
    """The 1.1.0rc2.post2 image served InferenceMAX's plain and -mtp DeepSeek-R1
    TensorRT-LLM configurations; the rows measured on 2026-01-14 (the sweep of the commit
    that added the -mtp ones) ran MTP (3 drafts, 1 with attention DP), with the -mtp
    scripts' token budget; rows of other days run plain, with the 1.1.0rc2 scripts' budget
    (no 8192 floor)."""
    model = get_model("deepseek-r1")
    day = "source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=4; measured="
    row = replace(
        _inferencemax_r1(backend="trtllm", backend_version="1.1.0rc2.post2", precision="fp8", tp=8),
        system="h200_sxm",
        isl=1024,
        osl=8192,
        source=day + "2026-01-14T22:26:21Z; wip=False",
    )
    assert sil.measured_on(row) == "2026-01-14"
    spec = sil.inferencemax_speculation(row, model)
    assert spec is not None and (spec["method"], spec["num_speculative_tokens"]) == ("mtp", 3)
    # the other dump's stamp of the same sweep, and B200
    other_dump = replace(row, source=day + "2026-01-14T00:00:00.000Z; wip=False")
    assert sil.inferencemax_mtp_drafts(other_dump) == 3
    assert sil.inferencemax_mtp_drafts(replace(row, system="b200_sxm")) == 3
    assert sil.inferencemax_mtp_drafts(replace(row, attention_dp=8, tp=1)) == 1
    # (3 + 1) x 4 clients + 1024 + 64 in 64s, max_batch_size = CONC
    assert sil.deployment(row, "trtllm") == {
        "max_batched_tokens": 1152,
        "max_running": 4,
        "memory_utilization": 0.75,  # the H200 script's free_gpu_memory_fraction
    }
    for plain in (
        replace(row, source=day + "2025-12-15T00:00:00.000Z"),
        replace(row, source=day + "2026-01-28T06:18:44Z"),
        replace(row, source="source_file=2026-03-25.csv; model=DeepSeek-R1"),
        replace(row, backend_version="1.2.0rc6.post2", source=row.source),
    ):
        assert sil.inferencemax_mtp_drafts(plain) is None
    # the plain 1.1.0rc2 scripts: CONC + ISL + 64 in 64s, without the 8192 floor
    plain = replace(row, source=day + "2025-12-15T00:00:00.000Z", concurrency=64)
    assert sil.deployment(plain, "trtllm") == {
        "max_batched_tokens": 1152,
        "memory_utilization": 0.75,
    }
    later = replace(plain, system="b200_sxm", backend_version="1.2.0rc6.post2")
    assert sil.deployment(later, "trtllm") == {
        "max_batched_tokens": 8192,
        "memory_utilization": 0.8,
    }


def test_inferencemax_deepseek_trtllm_attention_dp_rows_run_their_scripts_limits() -> None:
    """InferenceMAX's DeepSeek-R1 TensorRT-LLM scripts hold contexts across attention-DP
    ranks (``attention_dp_config``: balance on, 60 iterations, no batching wait) and their
    -mtp scripts size ``--max_batch_size`` per rank (CONC / TP in 1.1.0rc2.post2, CONC / 4
    for fp4 and CONC / 8 for fp8 in 1.2.0rc6.post3) and ``--max_num_tokens`` from it."""
    balance = {
        "attention_dp_balance": "true",
        "attention_dp_timeout_iters": "60",
        "attention_dp_batching_wait_iters": "0",
    }
    day = "source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=256; measured="
    mtp = replace(
        _inferencemax_r1(backend="trtllm", backend_version="1.1.0rc2.post2", precision="fp8", tp=1),
        system="h200_sxm",
        isl=1024,
        osl=1024,
        concurrency=256,
        attention_dp=8,
        source=day + "2026-01-14T22:26:21Z; wip=False",
    )
    assert sil.inferencemax_mtp_drafts(mtp) == 1
    # MTP 1: (1 + 1) x 256 / 8 + 1024 + 64 = 1152 tokens, 32 requests a rank
    assert sil.deployment(mtp, "trtllm") == {
        "max_batched_tokens": 1152,
        "max_running": 32,
        "memory_utilization": 0.75,  # the H200 script's free_gpu_memory_fraction
        "sets": balance,
    }
    post3 = replace(mtp, system="b200_sxm", backend_version="1.2.0rc6.post3", osl=8192)
    fp4 = replace(post3, precision="fp4")
    assert sil.deployment(fp4, "trtllm")["max_running"] == 64  # 256 / 4
    assert sil.deployment(fp4, "trtllm")["max_batched_tokens"] == 1216  # 2 x 64 + 1088
    assert sil.deployment(post3, "trtllm")["max_running"] == 32  # fp8: 256 / 8
    assert sil.inferencemax_mtp_batch(replace(fp4, concurrency=2)) == 2  # below the divisor
    # the plain scripts: the budget as before, no --max_batch_size, the balance
    plain = replace(fp4, backend_version="1.2.0rc6.post2")
    assert sil.deployment(plain, "trtllm") == {
        "max_batched_tokens": 8192,
        "memory_utilization": 0.8,
        "sets": {**balance, "moe_backend": "CUTLASS"},  # the fp4 script's backend under DP
    }
    # no attention DP: no balance, max_batch_size CONC, the fp4 script's TRTLLM experts
    alone = replace(fp4, attention_dp=1, tp=8, concurrency=4)
    assert sil.inferencemax_adp_balance(alone) == {}
    assert sil.deployment(alone, "trtllm")["sets"] == {"moe_backend": "TRTLLM"}
    assert sil.inferencemax_mtp_batch(alone) == 4
    # another engine or collection: none
    assert sil.inferencemax_adp_balance(replace(plain, backend="sglang")) == {}


def test_inferencemax_deepseek_trtllm_rows_keep_their_scripts_kv_share() -> None:
    """Every InferenceMAX DeepSeek-R1 TensorRT-LLM script writes
    ``kv_cache_config.free_gpu_memory_fraction``: 0.75 on H200, 0.8 on B200, with the
    fp8 1.2.0rc6.post2 script's 0.7 (1k/8k, 256 clients) and 0.75 (8k/1k on 4 GPUs)
    and the fp8 1.2.0rc6.post3 (-mtp) script's 0.7 under attention DP; the engine's
    default (no ``memory_utilization``) for other models and collections."""
    day = "source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=32; measured="
    fp8 = replace(
        _inferencemax_r1(backend="trtllm", backend_version="1.2.0rc6.post2", precision="fp8"),
        isl=8192,
        osl=1024,
        tp=4,
        concurrency=32,
        source=day + "2026-01-29T15:27:29Z; wip=False",
    )
    assert sil.deployment(fp8, "trtllm")["memory_utilization"] == 0.75  # 8k/1k on 4 GPUs
    assert sil.deployment(replace(fp8, tp=8), "trtllm")["memory_utilization"] == 0.8
    wide = replace(fp8, isl=1024, osl=8192, tp=1, attention_dp=8, concurrency=256)
    assert sil.deployment(wide, "trtllm")["memory_utilization"] == 0.7
    mtp = replace(wide, backend_version="1.2.0rc6.post3")  # the -mtp script under DP
    assert sil.inferencemax_mtp_drafts(mtp) == 1
    assert sil.deployment(mtp, "trtllm")["memory_utilization"] == 0.7
    alone = replace(mtp, tp=8, attention_dp=1, concurrency=4)
    assert sil.deployment(alone, "trtllm")["memory_utilization"] == 0.8
    fp4 = replace(fp8, precision="fp4")
    assert sil.deployment(fp4, "trtllm")["memory_utilization"] == 0.8
    h200 = replace(fp8, system="h200_sxm", backend_version="1.1.0rc2.post2", tp=8)
    assert sil.deployment(h200, "trtllm")["memory_utilization"] == 0.75
    # another engine or model: no share of the scripts'
    assert sil.inferencemax_kv_fraction(replace(fp8, backend="sglang")) is None
    llama = replace(
        fp8,
        model_path="meta-llama/Llama-3.1-70B-Instruct",
        source="source_file=2026-03-25.csv; model=Llama-3.1-70B; silicon_concurrency=32",
    )
    assert "memory_utilization" not in sil.deployment(llama, "trtllm")


def test_inferencemax_deepseek_fp8_trtllm_experts_priced_by_the_scripts_moe_backend() -> None:
    """Each InferenceMAX DeepSeek-R1 fp8 TensorRT-LLM script's ``moe_config.backend`` (read
    at the commit its rows ran); a DEEPGEMM run on B200 and a CUTLASS run on H200 price the
    checkpoint's block-scaled experts with the fp8-block table (the kernel each GPU's table
    times); B200's TRTLLM backend, other GPUs and per-tensor checkpoints keep the price."""
    from twin.validate.silicon.precision import trtllm_block_experts

    backend = sil.inferencemax_trtllm_moe_backend
    fp8 = _inferencemax_r1(
        backend="trtllm", backend_version="1.2.0rc6.post2", precision="fp8", tp=8, moe_ep=1
    )
    fp8 = replace(fp8, isl=1024, osl=1024)
    assert backend(fp8) == "TRTLLM"
    assert backend(replace(fp8, concurrency=256)) == "TRTLLM"  # no 1k/1k branch at ec7bafaae
    assert backend(replace(fp8, osl=8192, concurrency=256)) == "DEEPGEMM"
    assert backend(replace(fp8, osl=8192, concurrency=128)) == "TRTLLM"  # from 256 only
    post3 = replace(fp8, backend_version="1.2.0rc6.post3")
    assert (backend(post3), backend(replace(post3, attention_dp=8))) == ("TRTLLM", "DEEPGEMM")
    rc2 = replace(fp8, backend_version="1.1.0rc2.post2")
    assert (backend(rc2), backend(replace(rc2, system="h200_sxm"))) == ("DEEPGEMM", "CUTLASS")
    assert backend(replace(fp8, precision="fp4")) is None
    assert backend(replace(fp8, backend="sglang")) is None
    block = {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
    per_tensor = sil.RowPrecision("fp8", "fp8")
    got = trtllm_block_experts(per_tensor, block, "DEEPGEMM", "b200")
    assert (got.weights, got.moe, got.label) == (
        "fp8",
        "fp8-block",
        "fp8, fp8-block experts, fp8 KV",
    )
    assert trtllm_block_experts(per_tensor, block, "CUTLASS", "h200").moe == "fp8-block"
    for config, moe_backend, gpu in (
        (block, "TRTLLM", "b200"),  # TRTLLMGenFusedMoE: no table of its kernel
        (block, "DEEPGEMM", "h200"),
        (block, None, "b200"),
        ({"quantization_config": {"quant_method": "fp8"}}, "DEEPGEMM", "b200"),
    ):
        assert trtllm_block_experts(per_tensor, config, moe_backend, gpu) is per_tensor


def test_inferencemax_deepseek_trtllm_scripts_capture_piecewise_graphs_and_delay_batching() -> None:
    """Where the row's InferenceMAX script (read at the commit its sweep ran) turns the
    piecewise CUDA graphs on, a row without MTP gets no eager host time; the fp8 B200 plain
    script's DELAY_BATCHING holds contexts (40 iterations, 0.8) at 1k/1k from 64 clients.
    Other images, GPUs and collections keep the eager context step."""
    r1 = get_model("deepseek-r1")
    wait = {"batch_wait_timeout_iters": "40", "batch_wait_max_tokens_ratio": "0.8"}
    fp8 = _inferencemax_r1(
        backend="trtllm", backend_version="1.2.0rc6.post2", precision="fp8", tp=8, moe_ep=1
    )

    def piecewise(row: sil.SiliconRow, isl: int, osl: int, conc: int) -> bool:
        return sil.inferencemax_trtllm_piecewise(replace(row, isl=isl, osl=osl, concurrency=conc))

    # fp8, plain (ec7bafaae): 1k/1k and 8k/1k from 64 clients, 1k/8k at 128
    assert [piecewise(fp8, 1024, 1024, c) for c in (4, 32, 64, 128)] == [0, 0, 1, 1]
    assert [piecewise(fp8, 1024, 8192, c) for c in (64, 128, 256)] == [0, 1, 0]
    assert [piecewise(fp8, 8192, 1024, c) for c in (32, 64)] == [0, 1]
    c64 = replace(fp8, isl=1024, osl=1024, concurrency=64)
    assert sil.eager_prefill_s(c64, r1, "b200") == 0.0
    assert sil.eager_prefill_s(replace(c64, concurrency=8), r1, "b200") > 0.05
    share = {"memory_utilization": 0.8}  # the script's free_gpu_memory_fraction
    assert sil.deployment(c64, "trtllm") == {"max_batched_tokens": 8192, **share, "sets": wait}
    c32 = replace(c64, concurrency=32)
    assert sil.deployment(c32, "trtllm") == {"max_batched_tokens": 8192, **share}
    assert "sets" not in sil.deployment(replace(c64, osl=8192, concurrency=128), "trtllm")
    # fp4, plain (6eecc0e66): 1k/1k with tp 8 and ep 8 only; no batch waiting
    fp4 = replace(fp8, precision="fp4", moe_ep=8)
    assert piecewise(fp4, 1024, 1024, 64) and not piecewise(fp4, 1024, 8192, 64)
    assert not piecewise(replace(fp4, tp=4, moe_ep=4), 1024, 1024, 64)
    fp4_sets = sil.deployment(replace(fp4, isl=1024, osl=1024, concurrency=64), "trtllm")["sets"]
    assert fp4_sets == {"moe_backend": "TRTLLM"}  # no batch waiting in the fp4 script
    # fp8 -mtp (5d517074c): on but for narrow clients and attention DP
    mtp8 = replace(fp8, backend_version="1.2.0rc6.post3")
    assert [piecewise(mtp8, 1024, 1024, c) for c in (4, 8)] == [0, 1]
    assert [piecewise(mtp8, 8192, 1024, c) for c in (16, 32)] == [0, 1]
    assert not piecewise(replace(mtp8, attention_dp=8, tp=1), 1024, 1024, 64)
    # an MTP row keeps the eager context step (its measured TTFT shows no change with the
    # graphs)
    mtp8_c8 = replace(mtp8, isl=1024, osl=1024, concurrency=8)
    assert sil.inferencemax_trtllm_piecewise(mtp8_c8)
    assert sil.eager_prefill_s(mtp8_c8, r1, "b200") > 0.05
    # fp4 -mtp (0aae52d4c): 1k/1k at 32 and 64 clients, 128 without attention DP; 1k/8k 64
    mtp4 = replace(fp4, backend_version="1.2.0rc6.post3")
    assert [piecewise(mtp4, 1024, 1024, c) for c in (8, 32, 64, 128)] == [0, 1, 1, 1]
    assert not piecewise(replace(mtp4, attention_dp=8, tp=1), 1024, 1024, 128)
    assert piecewise(mtp4, 1024, 8192, 64) and not piecewise(mtp4, 8192, 1024, 64)
    # no script read: the eager context step stays
    for other in (
        replace(c64, backend_version="1.1.0rc2.post2"),
        replace(c64, system="h200_sxm"),
        replace(c64, backend_version=""),
        replace(c64, source="/x/aic-auto-gap-analysis/y.csv; silicon_concurrency=64"),
    ):
        assert not sil.inferencemax_trtllm_piecewise(other)
        assert sil.inferencemax_deepseek_batch_wait(other) == {}


def test_inferencemax_sglang_deepseek_rows_run_with_its_scripts_flags() -> None:
    """The v0.5.9 DeepSeek SGLang configurations' flags, for the rows only one of them
    covers (by GPU, precision, tp, lengths and clients); other rows: SGLang's defaults."""
    row = _inferencemax_r1(
        backend="sglang", backend_version="0.5.9", precision="fp4", tp=8, isl=1024, osl=1024
    )
    sets = sil.deployment(row, "sglang")["sets"]
    assert sets["scheduler_recv_interval"] == "10" and sets["max_running_requests"] == "256"
    many = sil.deployment(replace(row, concurrency=64), "sglang")["sets"]
    assert many["scheduler_recv_interval"] == "30" and many["chunked_prefill_size"] == "16384"
    assert sil.deployment(replace(row, concurrency=256), "sglang") == {}  # no fp4 config
    fp8 = replace(row, precision="fp8")
    tp4 = sil.deployment(replace(fp8, tp=4, isl=8192, concurrency=32), "sglang")["sets"]
    assert (tp4["max_running_requests"], tp4["scheduler_recv_interval"]) == ("32", "10")
    plain = sil.deployment(replace(fp8, concurrency=64), "sglang")["sets"]
    assert plain["max_running_requests"] == "128" and "speculative_algorithm" not in plain
    # beyond the plain configuration's 64 clients only the -mtp one ran
    mtp = sil.deployment(replace(fp8, concurrency=256), "sglang")["sets"]
    assert (mtp["max_running_requests"], mtp["speculative_algorithm"]) == ("512", "NEXTN")
    assert mtp["speculative_num_draft_tokens"] == "3"
    h200 = replace(fp8, system="h200_sxm")
    assert sil.deployment(h200, "sglang")["sets"]["max_running_requests"] == "512"
    for other in (replace(row, backend_version="0.5.8.post1"), replace(row, model_path="x/y")):
        assert sil.deployment(other, "sglang") == {}


def test_inferencemax_sglang_deepseek_h200_script_keeps_sglangs_default_kv(tmp_path: Path) -> None:
    """``dsr1_fp8_h200.sh`` passes no ``--kv-cache-dtype``: SGLang 0.5.9's ``auto`` keeps the
    model's bf16 cache for DeepSeek-R1's block-fp8 checkpoint (no ``kv_cache_quant_algo``);
    the B200 script passes ``fp8_e4m3`` (the pairing), and a row no H200 configuration
    covers is not read."""
    config = json.loads((CONFIGS / "tiny--Tiny-Llama_config.json").read_text())
    block = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}
    config.update(num_attention_heads=8, num_key_value_heads=8, quantization_config=block)
    (tmp_path / "deepseek-ai--DeepSeek-R1_config.json").write_text(json.dumps(config))
    b200 = _inferencemax_r1(backend="sglang", backend_version="0.5.9", precision="fp8", tp=8)
    b200 = replace(b200, isl=64, osl=8)
    h200 = replace(b200, system="h200_sxm")
    plans = [sil.plan_row(r, tmp_path) for r in (h200, b200)]
    assert all(isinstance(p, sil.RowPlan) for p in plans)
    assert [p.priced for p in plans if isinstance(p, sil.RowPlan)] == [
        "fp8, bf16 KV",
        "fp8, fp8 KV",
    ]
    assert sil.inferencemax_sglang_default_kv(h200)
    for other in (b200, replace(h200, concurrency=128), replace(h200, backend_version="0.5.8")):
        assert not sil.inferencemax_sglang_default_kv(other)


def test_inferencemax_sglang_qwen35_rows_run_with_its_scripts_flags() -> None:
    """InferenceMAX's Qwen3.5-397B SGLang configurations: every script disables the radix
    cache, polls for requests every 10 iterations (30 from 16 clients) on B200/B300, caps
    the running requests (128, or the clients) and sets the chunk; B200 fp8 at tp 4 without
    expert parallelism is the -mtp configuration (EAGLE over the model's MTP layer, 3
    steps, 4 draft tokens); H200 polls every iteration; the B300 v0.5.9 rows ran the B200
    fp8 configurations (the same images and search spaces). The gap-analysis copies of
    these rows are InferenceMAX's measurements (its harness)."""
    row = replace(
        _inferencemax_r1(backend="sglang", backend_version="0.5.9", precision="fp8", tp=8),
        model_path="Qwen/Qwen3.5-397B-A17B",
        moe_ep=1,
    )
    sets = sil.deployment(row, "sglang")["sets"]
    assert sets == {
        "disable_radix_cache": "true",
        "max_running_requests": "128",
        "mem_fraction_static": "0.82",
        "chunked_prefill_size": "32768",
        "max_prefill_tokens": "32768",
        "scheduler_recv_interval": "10",
    }
    assert (
        sil.deployment(replace(row, concurrency=16), "sglang")["sets"]["scheduler_recv_interval"]
        == "30"
    )
    mtp = sil.deployment(replace(row, tp=4, concurrency=64), "sglang")["sets"]
    assert (mtp["speculative_algorithm"], mtp["speculative_num_draft_tokens"]) == ("NEXTN", "4")
    assert (mtp["max_running_requests"], mtp["mem_fraction_static"]) == ("64", "0.8")
    ep4 = sil.deployment(replace(row, tp=4, moe_ep=4, concurrency=64), "sglang")["sets"]
    assert "speculative_algorithm" not in ep4 and ep4["max_running_requests"] == "128"
    h200 = sil.deployment(replace(row, system="h200_sxm", moe_ep=8), "sglang")["sets"]
    assert "scheduler_recv_interval" not in h200 and h200["chunked_prefill_size"] == "16384"
    b300 = replace(row, system="b300_sxm", backend_version="0.5.10.post1", tp=4)
    assert sil.deployment(b300, "sglang")["sets"]["max_running_requests"] == "4"
    bf16 = replace(row, precision="bf16", backend_version="nightly-dev-20260216-d3bae71e")
    assert sil.deployment(bf16, "sglang")["sets"]["mem_fraction_static"] == "0.82"
    fp4 = replace(row, precision="fp4", backend_version="nightly-dev-20260402-d7256eb6", tp=4)
    assert sil.deployment(fp4, "sglang")["sets"]["mem_fraction_static"] == "0.85"
    # the B300 v0.5.9 rows are the B200 fp8 configurations run on B300: tp 4 ep 1 drafts
    b300_mtp = replace(b300, backend_version="0.5.9", concurrency=64)
    assert sil.deployment(b300_mtp, "sglang")["sets"] == mtp
    b300_plain = replace(b300, backend_version="0.5.9", tp=8, concurrency=4)
    assert sil.deployment(b300_plain, "sglang")["sets"] == sets
    gap = replace(row, source="source_file=qwen3.5-397b-gap-analysis.csv; silicon_concurrency=4")
    assert sil.harness_of(gap) is sil.INFERENCEMAX
    assert sil.deployment(gap, "sglang")["sets"] == sets


def test_inferencemax_glm5_h200_sglang_runs_its_scripts_memory_and_a_bf16_cache() -> None:
    """InferenceMAX's GLM-5 H200 SGLang script (image glm5-hopper) sets only
    ``--mem-fraction-static 0.85`` and no KV dtype, so SGLang's default for a
    sparse-attention model on Hopper, bf16, holds; on Blackwell (fp8 there), for other
    models and where the deployment names a KV dtype the precision is kept."""
    row = replace(
        _inferencemax_r1(backend="sglang", backend_version="glm5-hopper", precision="fp8", tp=8),
        model_path="zhipuai/GLM-5",
        system="h200_sxm",
        concurrency=64,
    )
    assert sil.deployment(row, "sglang") == {"sets": {"mem_fraction_static": "0.85"}}
    b200 = replace(row, system="b200_sxm", backend_version="nightly-dev")
    fp8 = sil.RowPrecision("fp8", "fp8", "fp8-block", "KV: aiconfigurator's pairing")
    glm, r1 = get_model("glm-5"), get_model("deepseek-r1")
    limits = sil.deployment(row, "sglang")
    assert sil.inferencemax_sglang_default_kv(row) and not sil.inferencemax_sglang_default_kv(b200)
    hopper = sil.engine_default_kv(fp8, "sglang", limits, {}, glm, "h200")
    assert hopper.kv == "bf16" and "sparse-attention default" in hopper.why
    assert sil.engine_default_kv(fp8, "sglang", limits, {}, glm, "b200") == fp8
    bf16 = replace(fp8, kv="bf16")  # Blackwell's default is fp8 (compute cap. 10)
    assert sil.engine_default_kv(bf16, "sglang", limits, {}, glm, "b200").kv == "fp8"
    assert sil.engine_default_kv(bf16, "sglang", limits, {}, glm, "a100") == bf16
    assert sil.engine_default_kv(fp8, "sglang", limits, {}, r1, "h200") == fp8
    # vLLM's ``auto`` is the model's dtype, bf16 where the config names none (the vLLM rows
    # whose script names no KV dtype take it: ``inferencemax_vllm_default_kv``)
    assert sil.engine_default_kv(fp8, "vllm", limits, {}, glm, "h200").kv == "bf16"
    named = {"sets": {"kv_cache_dtype": "fp8_e4m3"}}
    assert sil.engine_default_kv(fp8, "sglang", named, {}, glm, "h200") == fp8


def test_sglang_eager_prefill_prices_a_host_floor_per_launched_kernel(
    tmp_path: Path,
) -> None:
    """SGLang runs prefills without CUDA graphs before 0.5.10, and in every release before
    0.5.23 for the architectures whose piecewise graphs it turns off (GLM-5's DSA) and
    for multimodal configs (Qwen3.5): a MoE model's prefill step adds its eager
    kernels' host time (launches by layer part x a fitted time per GPU); none for
    dense models, other engines, attention DP or a GPU without a fit."""
    from twin.engine.host_time import EagerPrefillPricer

    r1 = get_model("deepseek-r1")
    n = sil.SGLANG_EAGER_LAUNCHES
    # 61 MLA layers, 58 MoE layers with a shared expert, 3 dense MLP layers
    launches = 61 * n["mla"] + 58 * (n["moe"] + n["shared_expert"]) + 3 * n["mlp"]
    assert sil.eager_launches(r1) == launches
    # Qwen3-235B (94 plain attention + MoE layers, no shared expert) launches about as
    # many kernels as DeepSeek-R1 though it has 1.6x its MoE layers.
    qwen = get_model("qwen3-235b-a22b")
    assert sil.eager_launches(qwen) == 94 * (n["attention"] + n["moe"])
    assert abs(sil.eager_launches(qwen) - launches) < 0.05 * launches
    hybrid = get_model("qwen3.5-397b-a17b")  # gated attention, GDN, shared experts
    assert sil.eager_launches(hybrid) == (
        15 * (n["attention"] + n["attention_gate"])
        + 45 * n["gdn"]
        + 60 * (n["moe"] + n["shared_expert"])
    )
    per_launch = sil.SGLANG_EAGER_LAUNCH_S
    row = _inferencemax_r1(backend="sglang", backend_version="0.5.9", precision="fp8", tp=8)
    floor = sil.eager_prefill_s(row, r1, "b200")
    assert floor == pytest.approx(per_launch["b200"] * launches) and floor > 0.1
    assert sil.eager_prefill_s(replace(row, system="h200_sxm"), r1, "h200") == pytest.approx(
        per_launch["h200"] * launches
    )
    assert sil.eager_prefill_s(replace(row, backend_version="0.5.6.post2"), r1, "b200") == floor
    # (an H200 row: InferenceMAX's B200 DeepSeek scripts pass flags that turn the graphs
    # off, test_inferencemax_scripts_flags_turn_sglang_0510_piecewise_graphs_off)
    h200 = replace(row, system="h200_sxm")
    for version in ("0.5.10.post1", "0.5.23", "nightly-dev", ""):
        assert sil.eager_prefill_s(replace(h200, backend_version=version), r1, "h200") == 0.0
    # GLM-5 (piecewise graphs off for its architecture) and a multimodal config prefill
    # eagerly in 0.5.10.post1 and in a nightly build, not from 0.5.23.
    glm = get_model("glm-5")
    for version in ("0.5.10.post1", "nightly-dev", "glm5-hopper", "0.5.9"):
        later = replace(row, backend_version=version)
        assert sil.eager_prefill_s(later, glm, "b200") == pytest.approx(
            per_launch["b200"] * sil.eager_launches(glm)
        )
        assert sil.eager_prefill_s(later, r1, "b200", multimodal=True) == floor
    assert sil.eager_prefill_s(replace(row, backend_version="0.5.23"), glm, "b200") == 0.0
    assert sil.eager_prefill_s(row, get_model("llama-3-8b"), "b200") == 0.0  # no MoE layer
    assert sil.eager_prefill_s(replace(row, backend="vllm"), r1, "b200") == 0.0
    assert sil.eager_prefill_s(replace(row, backend="vllm"), glm, "b200") == 0.0
    assert sil.eager_prefill_s(replace(row, attention_dp=8, tp=1), r1, "b200") == 0.0
    assert sil.eager_prefill_s(row, r1, "h100") == 0.0  # no fitted host time
    # The floor reaches the engine: the run's outermost pricer holds the prefill steps to it.
    path = sil.write_workload(tmp_path / "w.parquet", 64, 4, 2, 1)
    run = build_run(path, model=r1, gpu="b200", engine="sglang", tp=8, eager_prefill_s=floor)
    assert isinstance(run.pricer, EagerPrefillPricer) and run.pricer.floor_s == floor
    # The host time is in series with the kernels (measured: docs/decisions.md), for a
    # short prompt and a long one alike: an 8k prompt's step is its kernels plus the floor.
    for n in (64, 8192):
        kernels = run.pricer.inner.step_time([(n, 0)], 0, 0)
        assert run.pricer.step_time([(n, 0)], 0, 0) == pytest.approx(kernels + floor)
    assert run.pricer.inner.step_time([(8192, 0)], 0, 0) > floor  # GPU-bound, still added
    assert run.pricer.step_time([], 4, 256) == run.pricer.inner.step_time([], 4, 256)


def test_inferencemax_sglang_rows_without_a_release_ran_a_release_before_0510() -> None:
    """InferenceMAX's SGLang DeepSeek rows that name no release were measured in
    November 2025, before that collection first ran an SGLang 0.5.10 image (2026-04-14):
    their prefill is eager (no piecewise graphs before 0.5.10) and they ran the v0.5.5
    era scripts' flags (fp4: 256 requests, 16384 chunk; fp8: tp 8 at 4-64 clients, 128
    requests, 32768). A row without a measurement date, measured from that day on, or of
    another collection keeps SGLang's defaults and no host time."""
    r1 = get_model("deepseek-r1")
    src = "source_file=2026-04-06.csv; model=DeepSeek-R1; silicon_concurrency=4; "
    row = replace(
        _inferencemax_r1(
            backend="sglang", backend_version="", precision="fp4", tp=4, isl=1024, osl=1024
        ),
        source=src + "measured=2025-11-10T00:00:00.000Z; wip=False",
    )
    assert sil.measured_on(row) == "2025-11-10" and sil.inferencemax_sglang_unnamed(row)
    eager = sil.SGLANG_EAGER_LAUNCH_S["b200"] * sil.eager_launches(r1)
    assert sil.eager_prefill_s(row, r1, "b200") == pytest.approx(eager) and eager > 0.1
    sets = sil.deployment(row, "sglang")["sets"]
    assert (sets["max_running_requests"], sets["chunked_prefill_size"]) == ("256", "16384")
    assert sets["scheduler_recv_interval"] == "10"
    fp8 = replace(row, precision="fp8", tp=8)
    assert sil.deployment(fp8, "sglang")["sets"]["max_running_requests"] == "128"
    assert sil.deployment(replace(fp8, concurrency=128), "sglang") == {}  # no -mtp yet
    assert sil.deployment(replace(fp8, tp=4, isl=8192), "sglang") == {}  # tp 8 only
    assert sil.eager_prefill_s(fp8, r1, "b200") == pytest.approx(eager)
    # (H200: the B200 scripts' MoE runner alone would make a prefill eager)
    h200 = replace(fp8, system="h200_sxm")
    assert sil.eager_prefill_s(h200, r1, "h200") == pytest.approx(
        sil.SGLANG_EAGER_LAUNCH_S["h200"] * sil.eager_launches(r1)
    )
    undated = replace(h200, source=src + "wip=False")
    later = replace(h200, source=src + "measured=2026-04-14T00:00:00.000Z")
    aiperf = replace(row, source="/x/aic-auto-gap-analysis/y.csv; measured=2025-11-10")
    for other in (undated, later, aiperf, replace(row, backend="trtllm")):
        assert not sil.inferencemax_sglang_unnamed(other)
    for other in (undated, later, aiperf):
        assert sil.eager_prefill_s(other, r1, "h200") == 0.0
        assert sil.deployment(other, "sglang") == {}


def test_inferencemax_scripts_flags_turn_sglang_0510_piecewise_graphs_off() -> None:
    """InferenceMAX's B200/B300 DeepSeek scripts pass ``--moe-runner-backend
    flashinfer_trtllm`` (and the fp4 ones ``--enable-symm-mem``), under which SGLang
    0.5.10.post1 turns its piecewise prefill graphs off: the B300 rows prefill eagerly at
    B300's host time per launch, fp4 and fp8 alike; the H200 script passes neither, and
    from 0.5.23 the graphs are captured whatever the flags. The B300 scripts are the B200
    recipes: fp4's flags at tp 4 and 8, fp8's plain ones where only the plain
    configuration ran (beyond 64 clients only the -mtp one: defaults)."""
    r1 = get_model("deepseek-r1")
    row = replace(
        _inferencemax_r1(
            backend="sglang", backend_version="0.5.10.post1", precision="fp4", tp=4, isl=1024
        ),
        system="b300_sxm",
        osl=1024,
        concurrency=64,
    )
    eager = sil.SGLANG_EAGER_LAUNCH_S["b300"] * sil.eager_launches(r1)
    fp8 = replace(row, precision="fp8")
    for graphs_off in (row, fp8):
        assert sil.inferencemax_no_piecewise(graphs_off)
        assert sil.eager_prefill_s(graphs_off, r1, "b300") == pytest.approx(eager)
    h200 = replace(fp8, system="h200_sxm")
    assert not sil.inferencemax_no_piecewise(h200)
    assert sil.eager_prefill_s(h200, r1, "h200") == 0.0  # 0.5.10.post1 with its graphs
    assert sil.eager_prefill_s(replace(row, model_path="x/y"), r1, "b300") == 0.0
    assert sil.eager_prefill_s(replace(row, backend_version="0.5.23"), r1, "b300") == 0.0
    sets = sil.deployment(row, "sglang")["sets"]
    assert (sets["max_running_requests"], sets["scheduler_recv_interval"]) == ("256", "30")
    tp8 = sil.deployment(replace(fp8, tp=8), "sglang")["sets"]
    assert (tp8["max_running_requests"], tp8["chunked_prefill_size"]) == ("128", "32768")
    tp4 = sil.deployment(replace(fp8, isl=8192, concurrency=16), "sglang")["sets"]
    assert (tp4["max_running_requests"], tp4["mem_fraction_static"]) == ("32", "0.95")
    assert sil.deployment(replace(fp8, tp=8, concurrency=128), "sglang") == {}
    assert sil.deployment(replace(row, backend_version="0.5.9"), "sglang") == {}


def test_trtllm_context_steps_are_eager_on_moe_rows(tmp_path: Path) -> None:
    """TensorRT-LLM's PyTorch backend runs a batch holding a context request without a
    CUDA graph in every release: a MoE row's context step adds its launches
    times the GPU's fitted host time per launch (B200, H200, H100), under attention DP
    too (one rank's context puts every rank's step in eager mode:
    ``twin.engine.dp_attention.DPReplica``); none for dense models or another GPU; the
    plan carries it to the engine."""
    r1, gptoss = get_model("deepseek-r1"), get_model("gpt-oss-120b")
    per_launch = sil.TRTLLM_EAGER_LAUNCH_S
    assert set(per_launch) == {"b200", "h200", "h100"}
    row = _inferencemax_r1(backend="trtllm", backend_version="1.2.0rc6.post2", tp=8)
    floor = sil.eager_prefill_s(row, r1, "b200")
    assert floor == pytest.approx(per_launch["b200"] * sil.eager_launches(r1)) and floor > 0.05
    # the same launch count on H200 at its own host time; every release (a nightly too)
    h200 = replace(row, system="h200_sxm", backend_version="1.1.0rc2.post2")
    assert sil.eager_prefill_s(h200, r1, "h200") == pytest.approx(
        per_launch["h200"] * sil.eager_launches(r1)
    )
    assert sil.eager_prefill_s(replace(row, backend_version=""), r1, "b200") == floor
    # gpt-oss: 36 attention layers (half windowed) and 36 MoE layers, fewer launches
    assert sil.eager_prefill_s(row, gptoss, "b200") == pytest.approx(
        per_launch["b200"] * 36 * (sil.SGLANG_EAGER_LAUNCHES["attention"] + 13)
    )
    assert sil.eager_prefill_s(row, get_model("llama-3-8b"), "b200") == 0.0  # dense
    assert sil.eager_prefill_s(replace(row, attention_dp=8, tp=1), r1, "b200") == floor
    assert sil.eager_prefill_s(row, r1, "b300") == 0.0  # no fitted host time
    h100 = replace(row, system="h100_sxm", backend_version="1.0.0rc3")
    assert sil.eager_prefill_s(h100, r1, "h100") == pytest.approx(15e-6 * sil.eager_launches(r1))
    # the plan of a measured TensorRT-LLM MoE row carries the floor into its run
    pytest.importorskip("aiconfigurator_core")
    rows = {r.id: r for r in sil.read_rows()}
    rid = "2026_03_25_deepseek_r1_b200_sxm_trtllm_fp8_agg_1024x8192_c4_tp8_0_ep1_0_1187"
    plan = sil.plan_row(rows[rid])
    assert isinstance(plan, sil.RowPlan)
    assert plan.deployment["eager_prefill_s"] == pytest.approx(floor)


def test_silicon_compare_sets_two_runs_side_by_side(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``benchmarks/silicon_compare.py``: MAPE per split and group before and after, the
    rows whose prediction changed, and aiconfigurator on the rows it estimated only."""
    compare = _script("silicon_compare", "silicon_compare.py")
    head = (
        "id,split,model_path,system,backend,"
        "silicon_ttft_ms,silicon_tpot_ms,twin_ttft_ms,twin_tpot_ms"
    )
    rows = [
        "a,fit,org/M,h200_sxm,sglang,200,10,100,10",
        "b,fit,org/M,h200_sxm,sglang,100,10,100,12",
    ]
    before = tmp_path / "before.csv"
    before.write_text("\n".join([head, *rows]) + "\n", encoding="utf-8")
    after = tmp_path / "after.csv"
    after.write_text(
        "\n".join([head, rows[0].replace(",100,10", ",150,10"), rows[1]]) + "\n",
        encoding="utf-8",
    )
    aic = tmp_path / "aic.csv"
    aic.write_text("id,aic_ttft_ms,aic_tpot_ms\na,100,11\nb,,\n", encoding="utf-8")
    out = tmp_path / "compare.json"
    assert compare.main([str(before), str(after), "--aic", str(aic), "--out", str(out)]) == 0
    table = json.loads(out.read_text(encoding="utf-8"))
    group = table["fit|M|h200_sxm|sglang"]
    assert group == table["fit|ALL"]
    assert (group["rows"], group["rows_changed"]) == (2, 1)
    assert (group["ttft_mape_before"], group["ttft_mape_after"]) == (25.0, 12.5)
    assert (group["tpot_mape_before"], group["tpot_mape_after"]) == (10.0, 10.0)
    # aiconfigurator estimated row a only: its error and the twin's on that row
    assert (group["aic_ttft_rows"], group["aic_ttft_mape"]) == (1, 50.0)
    assert group["twin_ttft_mape_on_aic_rows"] == 25.0
    # a missing file, or a CSV without ids (with rows or a header alone), is one line
    # naming the file and exit status 2
    capsys.readouterr()
    noid, header = tmp_path / "noid.csv", tmp_path / "header.csv"
    noid.write_text("x,y\n1,2\n", encoding="utf-8")
    header.write_text("x,y\n", encoding="utf-8")
    for bad in (tmp_path / "missing.csv", noid, header):
        with pytest.raises(SystemExit) as stop:
            compare.main([str(bad), str(after)])
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(bad) in err


def test_bench_reuses_aiconfigurator_estimates(tmp_path: Path) -> None:
    """``--aic-from``: an earlier run's estimates by row id, with their errors recomputed;
    a file without the columns or with a bad number is one line naming it."""
    bench = _bench()
    good = tmp_path / "predictions.csv"
    good.write_text(
        "id,aic_ttft_ms,aic_tpot_ms,aic_error\na,100.0,10.0,\nb,,,RuntimeError: OOM\nc,,,\n",
        encoding="utf-8",
    )
    found = bench.read_aic_estimates(good)
    assert set(found) == {"a", "b"}  # c has no estimate: it is estimated again
    result = {"silicon_ttft_ms": 200.0, "silicon_tpot_ms": 8.0}
    bench.reuse_aic(result, found["a"])
    assert (result["aic_ttft_ms"], result["aic_ttft_ape"]) == (100.0, 50.0)
    assert result["aic_tpot_ape"] == pytest.approx(25.0)
    failed = {"silicon_ttft_ms": 200.0, "silicon_tpot_ms": 8.0}
    bench.reuse_aic(failed, found["b"])
    assert failed["aic_error"] == "RuntimeError: OOM" and failed["aic_ttft_ape"] is None
    assert "gpus" not in result  # only aiconfigurator's columns are copied
    # An estimate made at another layout of the row (its GPUs, the ``tp`` column) is
    # estimated again; one without the column is reused.
    laid = tmp_path / "laid.csv"
    laid.write_text(
        "id,tp,aic_ttft_ms,aic_tpot_ms,aic_error\na,4,100.0,10.0,\nb,2,90.0,9.0,\n",
        encoding="utf-8",
    )
    assert set(bench.reusable(bench.read_aic_estimates(laid), {"a": 2, "b": 2})) == {"b"}
    assert set(bench.reusable(found, {"a": 2, "b": 8, "z": 1})) == {"a", "b"}
    bad = tmp_path / "bad.csv"
    bad.write_text("id,aic_ttft_ms,aic_tpot_ms,aic_error\na,fast,1,\n", encoding="utf-8")
    with pytest.raises(TwinError, match=r"bad.csv: row 2, column aic_ttft_ms: not a number"):
        bench.read_aic_estimates(bad)
    with pytest.raises(TwinError, match="no column 'aic_error'"):
        (tmp_path / "x.csv").write_text("id,aic_ttft_ms,aic_tpot_ms\n", encoding="utf-8")
        bench.read_aic_estimates(tmp_path / "x.csv")
    with pytest.raises(TwinError, match="no such file"):
        bench.read_aic_estimates(tmp_path / "missing.csv")


def test_bench_resumes_a_stopped_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--resume`` scores only the rows a stopped run's journal lacks (a line cut short
    runs again) and writes what an unbroken run writes; another selection's journal, or
    a journal left without ``--resume``, is one line."""
    bench = _bench()
    for where in (sil, sil_aic):
        monkeypatch.setattr(where, "aiconfigurator_available", lambda: False)
    out = tmp_path / "out"
    argv = ["--csv", str(SMALL), "--configs", str(CONFIGS), "--jobs", "1", "--limit", "2"]
    argv += ["--out", str(out), "--results", str(tmp_path / "silicon.json")]
    monkeypatch.setattr(bench.Journal, "close", lambda self: None)  # a run that stopped
    assert bench.main(argv) == 0
    unbroken = (out / "predictions.csv").read_bytes()
    journal = out / bench.JOURNAL
    header, first, second = journal.read_text(encoding="utf-8").splitlines()
    journal.write_text(f"{header}\n{first}\n{second[:20]}", encoding="utf-8")
    (out / "predictions.csv").unlink()
    assert bench.main(argv) == 2  # the journal is there and --resume was not given
    assert "--resume to go on" in capsys.readouterr().out
    assert bench.main([*argv[:-4], "--limit", "1", *argv[-4:], "--resume"]) == 2
    assert "its rows differs" in capsys.readouterr().out
    scored: list[str] = []
    score_row = sil.score_row

    def counting(plan: Any, aic: bool) -> dict[str, Any]:
        scored.append(plan.row.id)
        return score_row(plan, aic)

    monkeypatch.setattr(sil, "score_row", counting)
    assert bench.main([*argv, "--resume"]) == 0
    ids = [line.split(",")[0] for line in unbroken.decode().splitlines()[1:]]
    assert json.loads(first)["id"] == ids[0] and scored == [ids[1]]

    def rows(text: str) -> list[dict[str, str]]:  # all but the wall time, which varies
        return [
            {k: v for k, v in r.items() if k != "twin_wall_s"}
            for r in csv.DictReader(io.StringIO(text))
        ]

    assert rows((out / "predictions.csv").read_text()) == rows(unbroken.decode())


def test_model_named_matches_a_rows_model_path_by_name() -> None:
    row = replace(
        _rows()["tiny_h200_sglang_agg_64x8_c3_tp2"], model_path="meta-llama/Llama-3.1-70B-FP8"
    )
    assert sil_harness.model_named(row, ("gpt-oss-120b", "llama-3.1-70b")) == "llama-3.1-70b"
    assert sil_harness.model_named(row, {"Llama-3.1-70B": 16384}) == "Llama-3.1-70B"  # either case
    assert sil_harness.model_named(row, ("llama-3.1-8b", "deepseek-r1")) is None
    first = sil_harness.model_named(row, ("llama", "llama-3.1-70b"))
    assert first == "llama"  # the first of the names that matches
    assert sil.select([row], ["LLAMA-3.1-70B"]) == [row]
    assert sil.select([row], ["qwen3"]) == []


def test_inferencemax_mtp_rows_accept_drafts_by_one_rule_across_engines() -> None:
    """Every InferenceMAX -mtp row, SGLang's NEXTN (DeepSeek-R1 fp8 at 2 drafts, Qwen3.5-397B
    fp8 at 3, 0.5.9) and TensorRT-LLM's MTP (DeepSeek-R1, 3 drafts, 1 with attention DP),
    prices its drafts by the one fitted rule: the first draft accepted with one rate, each
    later one (given those before) with another, no higher one (the fit found them equal),
    so the acceptance length is
    ``1 + a + a b + a b^2 ...``, below the MTP default (DeepSeek-V3's second-token
    acceptance); the plain configurations' rows run no drafts."""
    first, later = sil.INFERENCEMAX_MTP_ACCEPTANCE
    assert 0 < later <= first < 1

    def length(drafts: int) -> float:
        return 1 + sum(first * later**i for i in range(drafts))

    qwen35 = replace(get_model("qwen3.5-397b-a17b"), mtp_layers=1)
    r1_model = get_model("deepseek-r1")
    r1 = replace(
        _inferencemax_r1(backend="sglang", backend_version="0.5.9", precision="fp8", tp=8),
        concurrency=256,
    )
    qwen = replace(r1, model_path="Qwen/Qwen3.5-397B-A17B", tp=4, moe_ep=1, concurrency=64)
    unfitted = {
        k: v
        for k, v in sil.deployment(r1, "sglang")["sets"].items()
        if k != "speculative_acceptance"
    }
    default = get_mode("sglang").settings(r1_model, unfitted)["speculative"]
    for row, drafts in ((r1, 2), (qwen, 3)):
        sets = sil.deployment(row, "sglang")["sets"]
        assert sets["speculative_acceptance"] == sil.inferencemax_mtp_acceptance(drafts)
        # the checkpoint's MTP layer (the preset carries none; the scorer reads the config)
        model = r1_model if row is r1 else qwen35
        spec = get_mode("sglang").settings(model, dict(sets))["speculative"]
        assert spec["acceptance_length"] == pytest.approx(length(drafts))
    assert length(2) < default["acceptance_length"]
    plain = sil.deployment(replace(r1, concurrency=64), "sglang")["sets"]
    assert "speculative_acceptance" not in plain
    # TensorRT-LLM's -mtp image (1.2.0rc6.post3): 3 drafts, 1 with attention DP
    trt = _inferencemax_r1(backend="trtllm", backend_version="1.2.0rc6.post3", isl=64)
    for row, drafts in ((trt, 3), (replace(trt, attention_dp=8), 1)):
        spec = sil.inferencemax_speculation(row, r1_model)
        assert spec is not None and spec["num_speculative_tokens"] == drafts
        assert spec["acceptance_length"] == pytest.approx(length(drafts))


def test_inferencemax_dsr1_fp8_points_both_configurations_cover_split_by_the_ci_database() -> None:
    """Where the plain and the -mtp DeepSeek-R1 fp8 B200 SGLang configurations cover the
    same point (tp 8, 4-64 clients), a measurement the CI database names under the plain
    configuration (``config_id=87``, its last float digit aside) runs plain, the other
    measurement of that point runs the -mtp script; a point the database names no run of
    stays plain."""
    plain = replace(
        _inferencemax_r1(backend="sglang", backend_version="0.5.9", precision="fp8", tp=8),
        moe_ep=1,
        ttft_ms=183.17,
        tpot_ms=8.759948,
    )
    named = replace(
        plain,
        id="dsr1_b200_sglang_fp8_agg_1024x1024_c4_cfg87",
        source="db-dump/2026-04-27; config_id=87; silicon_concurrency=4",
        model_path="deepseek-ai/DeepSeek-V3",
        tpot_ms=8.759948000000001,
    )
    mtp = replace(plain, id="mtp", ttft_ms=206.71, tpot_ms=6.7032)
    alone = replace(plain, id="alone", concurrency=8)
    marked = {r.id: r for r in sil.mark_configurations([plain, named, mtp, alone])}
    sets = {k: sil.deployment(r, "sglang")["sets"] for k, r in marked.items()}
    assert "speculative_algorithm" not in sets[plain.id]
    assert sets[plain.id]["max_running_requests"] == "128"
    assert sets["mtp"]["speculative_algorithm"] == "NEXTN"
    assert sets["mtp"]["max_running_requests"] == "512"
    assert "speculative_algorithm" not in sets["alone"]


def test_inferencemax_deepseek_fp4_trtllm_experts_priced_by_the_scripts_moe_backend() -> None:
    """Each InferenceMAX DeepSeek-R1 fp4 TensorRT-LLM script's ``moe_config.backend`` (read
    at the commit its rows ran): CUTLASS under attention DP, else TRTLLM, but by lengths and
    clients in the 2025-12-15 sweep's script; the row's run sets ``moe_backend`` to it and
    prices the nvfp4 experts with that kernel's fit at every step (TRTLLM-gen above 128
    tokens, CUTLASS at 128 and below)."""
    from twin import precision as px
    from twin.costmodel.profile_store import load_profile
    from twin.engine.run import priced_profile, trtllm_moe_backend_profile

    backend = sil.inferencemax_trtllm_fp4_moe_backend
    fp4 = _inferencemax_r1(
        backend="trtllm", backend_version="1.2.0rc6.post3", precision="fp4", tp=8, moe_ep=1
    )
    fp4 = replace(fp4, isl=1024, osl=1024, concurrency=128)
    assert (backend(fp4), backend(replace(fp4, attention_dp=8))) == ("TRTLLM", "CUTLASS")
    assert backend(replace(fp4, backend_version="1.2.0rc6.post2")) == "TRTLLM"
    dec15 = replace(
        fp4,
        backend_version="1.1.0rc2.post2",
        source=fp4.source.replace("model=", "measured=2025-12-15T00:00:00Z; model="),
    )
    assert backend(dec15) == "TRTLLM"
    assert backend(replace(dec15, concurrency=256)) == "CUTLASS"  # by clients, not DP
    assert backend(replace(dec15, isl=8192, concurrency=64)) == "CUTLASS"
    # the script's thresholds: 8k/1k above 32 clients, 1k/8k from 256
    assert backend(replace(dec15, isl=8192, concurrency=32)) == "TRTLLM"
    assert backend(replace(dec15, osl=8192, concurrency=128)) == "TRTLLM"
    assert backend(replace(dec15, osl=8192, concurrency=256)) == "CUTLASS"
    assert backend(replace(fp4, backend_version="1.0.0rc3")) is None  # an image not read
    assert backend(replace(fp4, precision="fp8")) is None
    assert backend(replace(fp4, system="h200_sxm")) is None
    assert sil.deployment(fp4, "trtllm")["sets"]["moe_backend"] == "TRTLLM"

    profile = load_profile("b200", "trtllm")
    expert = px.WEIGHT_FORMATS["nvfp4"]
    gen = trtllm_moe_backend_profile(expert, profile, "TRTLLM").kernels
    assert gen["moe_nvfp4"] == profile.kernels["moe_nvfp4_trtllm_gen"]
    assert gen["moe_nvfp4_min_latency"] == profile.kernels["moe_nvfp4_min_latency"]
    cutlass = trtllm_moe_backend_profile(expert, profile, "CUTLASS").kernels
    assert cutlass["moe_nvfp4_min_latency"] == profile.kernels["moe_nvfp4"]
    assert gen["moe_nvfp4_trtllm_gen"] != profile.kernels["moe_nvfp4_min_latency"]
    # the run reads it through the mode's flag (priced_profile)
    r1 = replace(get_model("deepseek-r1"), precision="nvfp4")
    flagged = priced_profile(r1, profile, "trtllm", {"moe_backend": "TRTLLM"})
    assert flagged.kernels["moe_nvfp4"] == profile.kernels["moe_nvfp4_trtllm_gen"]
