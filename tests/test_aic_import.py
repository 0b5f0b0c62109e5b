"""Import and fit of NVIDIA's kernel tables, on the small tables in ``tests/data/aic``.

Those tables have the database's layout and schema; their latencies come from the
twin's own models at known parameters (``tests/data/aic/make_tables.py``), so the
fits must recover them. None of this needs ``aiconfigurator-core`` installed.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from twin.calibration.aic_dense import gemm_rows
from twin.calibration.aic_families import read_families
from twin.calibration.aic_import import (
    fit_family,
    import_profile,
    impossible,
    refit_matches,
    without_families,
)
from twin.calibration.merge import merge_profiles
from twin.cli import app
from twin.cli.calibrate import _refit_names
from twin.costmodel import CostModel
from twin.costmodel import features as ft
from twin.costmodel import latency as lat
from twin.costmodel.profile import Profile
from twin.costmodel.profile_store import load_profile
from twin.errors import TwinError
from twin.hardware import get_gpu
from twin.precision import with_precision
from twin.presets import get_model

DATA = Path(__file__).parent / "data" / "aic" / "systems" / "data"


@pytest.fixture(scope="module")
def imported() -> Profile:
    return import_profile("h100", "vllm", root=DATA)


def test_reader_keeps_bf16_rows_of_the_engines_default_kernel() -> None:
    fams = {f.kernel: f for f in read_families("h100", "vllm", root=DATA)}
    assert set(fams) == {
        "gemm",
        "attn_prefill",
        "attn_decode",
        "conv1d",
        "conv1d_update",
        "allreduce_2gpu",
        "allreduce_8gpu",
        # NCCL's all-reduce alone (an engine's fallback above its custom all-reduce)
        "allreduce_nccl_2gpu",
        "allreduce_nccl_8gpu",
        # the precision families: the fp8 GEMM rows and the fp8-KV attention rows
        "gemm_fp8",
        "attn_prefill_fp8kv",
        "attn_decode_fp8kv",
        # issue 34: the fused-MoE rows (balanced, gated)
        "moe",
    }
    assert len(fams["gemm"].rows) == 37  # 36 bf16 shapes + the impossible one; fp8 apart
    assert len(fams["gemm_fp8"].rows) == 36
    assert len(fams["attn_prefill"].rows) == 24  # fa4 and fp8-KV rows dropped
    assert len(fams["attn_prefill_fp8kv"].rows) == 24
    # fp8 KV: the K/V rows are read at 1 byte, the queries at 2
    row = fams["attn_decode_fp8kv"].rows[0]
    b, c, h, kvh = (row["shape"][x] for x in ("b", "c", "h", "kvh"))
    assert row["bytes"] == 2 * 2 * b * h * 128 + 1 * 2 * b * (c + 1) * kvh * 128
    assert fams["attn_prefill"].kernel_source == "vllm_flash_attn_fa3"
    assert (fams["gemm"].framework, fams["gemm"].version) == ("vLLM", "0.24.0")
    assert fams["conv1d"].framework == "TensorRT-LLM"
    # Generation attention: ``step`` is the cached length, so the query reads step + 1 keys.
    row = fams["attn_decode"].rows[0]
    assert row["shape"]["c"] == 15
    assert row["score_elems"] == row["shape"]["h"] * row["shape"]["b"] * 16
    # All-reduce: message_size counts elements (2 bytes); graph-mode custom rows, NCCL above.
    ar = fams["allreduce_2gpu"]
    assert [r["shape"]["bytes"] for r in ar.rows] == [
        2 << e for e in (10, 12, 14, 16, 18, 20, 22, 26)
    ]
    assert "NCCL" in ar.framework and "custom" in ar.framework


def test_fits_recover_the_generating_parameters(imported: Profile) -> None:
    spec = importlib.util.spec_from_file_location("make_tables", DATA.parents[1] / "make_tables.py")
    assert spec is not None and spec.loader is not None
    tables = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tables)
    TRUE = tables.TRUE
    peaks = imported.peaks
    assert peaks["fp8_flops"] == get_gpu("h100").fp8_flops  # the precision fits' peak
    for kernel in TRUE:
        fit = imported.kernels[kernel]
        assert fit.provenance["source"] == "measured"
        assert fit.heldout_median_rel_err is not None and fit.heldout_median_rel_err < 0.05, kernel
        # The fitted model predicts the true one (no jitter) within 6% on fresh shapes.
        if kernel == "gemm":
            for m, k, n in ((2, 2048, 2048), (512, 4096, 8192), (3000, 1024, 14336)):
                f, b, ex = ft.gemm_features(m, k, n, 2)
                want = lat.predict(kernel, TRUE[kernel], peaks, f, b, ex)
                got = lat.predict(kernel, fit.params, peaks, f, b, ex)
                assert got == pytest.approx(want, rel=0.06)


def test_the_fp8_fits_price_an_fp8_model_faster_than_bf16(imported: Profile) -> None:
    llama = get_model("llama-3-8b")
    fp8 = with_precision(llama, "fp8", "fp8")
    assert imported.precisions() == ["bf16", "fp8"]
    bf16_cm, fp8_cm = CostModel(llama, imported), CostModel(fp8, imported)
    # A large GEMM: the fp8 fit (FP8 peak, 1-byte weights) beats the bf16 one.
    assert fp8_cm._proj(4096, 4096, 14336) < 0.75 * bf16_cm._proj(4096, 4096, 14336)
    assert fp8_cm._gemm(4096, 4096, 14336) == bf16_cm._gemm(4096, 4096, 14336)  # LM head
    assert fp8_cm.prefill(8192) < bf16_cm.prefill(8192)
    assert fp8_cm.decode([4096] * 64) < bf16_cm.decode([4096] * 64)  # half the KV read
    label = fp8_cm.provenance
    assert label.startswith("GEMM: measured fp8 (vLLM 0.24.0 CutlassFP8ScaledMMLinearKernel")
    assert "LM head: measured (vLLM 0.24.0 torch.nn.functional.linear" in label
    assert "attention: measured fp8 KV (vLLM 0.24.0 vllm_flash_attn_fa3, H100 SXM5)" in label
    # bf16 runs keep the profile's own label, which never names a precision fit
    assert bf16_cm.provenance == imported.provenance_label and "fp8" not in bf16_cm.provenance
    with pytest.raises(TwinError, match=r"no fp8-block GEMM fit; it prices bf16, fp8$"):
        CostModel(with_precision(llama, "fp8-block", None), imported)


def test_keep_fits_keeps_every_family_it_has_and_adds_the_rest(imported: Profile) -> None:
    bf16_only = Profile.from_dict(imported.to_dict())
    for key in ("gemm_fp8", "attn_prefill_fp8kv", "attn_decode_fp8kv"):
        del bf16_only.kernels[key]
    bf16_only.kernels["gemm"].params["t0_s"] *= 1.5  # a fit the import would not reproduce
    again = import_profile("h100", "vllm", root=DATA, keep=bf16_only)
    assert again.kernels["gemm"].to_dict() == bf16_only.kernels["gemm"].to_dict()
    assert again.kernels["gemm_fp8"].to_dict() == imported.kernels["gemm_fp8"].to_dict()
    assert again.provenance["added"]["families"] == [
        "gemm_fp8",
        "attn_prefill_fp8kv",
        "attn_decode_fp8kv",
    ]
    with pytest.raises(TwinError, match="--keep-fits: a profile of h100"):
        import_profile("h100", "sglang", root=DATA, keep=bf16_only)


def test_refit_fits_the_named_families_again_and_keeps_the_rest(imported: Profile) -> None:
    kept = Profile.from_dict(imported.to_dict())
    kept.kernels["gemm"].params["t0_s"] *= 1.5  # fits the import would not reproduce
    kept.kernels["moe"].params["t0_s"] *= 1.5
    assert without_families(kept, ["moe"]).kernels.keys() == kept.kernels.keys() - {"moe"}
    assert refit_matches("moe_fp8", ["moe"]) and not refit_matches("gemm_fp8", ["moe"])
    again = import_profile("h100", "vllm", root=DATA, keep=kept, refit=("moe",))
    assert again.kernels["gemm"].to_dict() == kept.kernels["gemm"].to_dict()
    assert again.kernels["moe"].to_dict() == imported.kernels["moe"].to_dict()
    assert list(again.kernels) == list(imported.kernels)
    assert again.provenance["added"] == {
        "date": again.provenance["added"]["date"],
        "families": ["moe"],
        "refit": ["moe"],
    }


def test_refit_takes_a_group_of_families() -> None:
    """``--refit mla`` covers every MLA family, ``mla_module`` the modules only; a group is
    a key's leading words, not any prefix."""
    assert _refit_names("mla,mla_module,moe,gemm_fp8") == ("mla", "mla_module", "moe", "gemm_fp8")
    assert refit_matches("mla_module_decode_fp8_block_fp8kv", ["mla_module"])
    assert refit_matches("mla_bmm_fp8", ["mla"]) and not refit_matches("mla_bmm", ["mla_module"])
    with pytest.raises(TwinError, match="--refit 'ml': not a kernel family"):
        _refit_names("ml")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--refit", "moe"], "--refit: names families of the --keep-fits profile"),
        (["--refit", "moe,,gemm"], "--refit 'moe,,gemm': an empty entry"),
        (["--refit", "experts"], "--refit 'experts': not a kernel family"),
        (["--refit", "moe,moe"], "--refit 'moe,moe': a family named twice"),
    ],
)
def test_calibrate_refit_is_refused_in_one_line(args: list[str], needle: str) -> None:
    res = CliRunner().invoke(app, ["calibrate", "--from", "aiconfigurator", "--gpu", "h100", *args])
    assert isinstance(res.exception, TwinError) and needle in str(res.exception)


def test_impossible_rows_are_flagged_excluded_and_counted(imported: Profile) -> None:
    peaks = get_gpu("h100").peaks()
    gemm = imported.kernels["gemm"]
    assert gemm.n_flagged == 1
    assert gemm.n_shapes == 36  # the flagged row is not among the fitted shapes
    f, b, _ = ft.gemm_features(4096, 4096, 14336, 2)
    row = {"flops": f, "bytes": b, "median_s": 1e-6}
    assert impossible("gemm", row, peaks) == "above peak FLOP/s"
    row["median_s"] = 1e-3
    assert impossible("gemm", row, peaks) is None


def test_missing_families_stay_datasheet_and_the_mixture_says_so(imported: Profile) -> None:
    assert imported.source == "mixed"
    for kernel in ("ssm_scan", "ssm_step", "elementwise", "copy_d2d"):
        assert imported.kernels[kernel].provenance["source"] == "datasheet"
    label = imported.provenance_label
    assert "attention: measured (vLLM 0.24.0 vllm_flash_attn_fa3, H100 SXM5)" in label
    assert "causal conv1d: measured (TensorRT-LLM 1.3.0rc20 causal_conv1d, H100 SXM5)" in label
    assert label.endswith("SSM scan, element-wise, copies: datasheet")


def test_profile_round_trips_and_prices_a_model(imported: Profile, tmp_path: Path) -> None:
    path = imported.save(tmp_path / "h100-vllm.json")
    again = Profile.load(path)
    assert again.to_dict() == imported.to_dict()
    cm = CostModel(get_model("marconi-hybrid-7b"), again, tp=2)
    assert cm.prefill(4096) > cm.prefill(1024) > 0
    # The decode conv is priced by its own fit; tp=2's all-reduce by the 2-GPU fit.
    assert cm.decode([1000] * 8, breakdown=True).by_kernel["conv1d"] > 0
    fit = again.kernels["allreduce_2gpu"]
    nbytes = 512 * 4096 * 2
    want = lat.predict("allreduce_2gpu", fit.params, again.peaks, *ft.allreduce_features(nbytes, 2))
    assert cm._allreduce(512) == pytest.approx(want)


def test_tp_without_a_fitted_gpu_count_falls_back_to_the_ring(imported: Profile) -> None:
    cm = CostModel(get_model("llama-3-8b"), imported, tp=4)  # only 2 and 8 GPUs were fitted
    ring = (
        imported.peaks["allreduce_latency_s"]
        + 2 * 3 / 4 * 100 * 4096 * 2 / (imported.peaks["interconnect_bw"])
    )
    assert math.isclose(cm._allreduce(100), ring, rel_tol=1e-12)


def test_merge_takes_each_family_from_the_first_that_measured_it(imported: Profile) -> None:
    own = load_profile("h100-datasheet")
    own.source = "measured"  # stands in for an own-GPU measurement of every family
    own.provenance = {"date": "2026-11-23"}
    merged = merge_profiles([imported, own], ["nvidia.json", "own.json"])
    assert merged.kernels["gemm"].provenance["merged_from"] == "nvidia.json"
    assert merged.kernels["ssm_scan"].provenance["merged_from"] == "own.json"
    assert merged.kernels["ssm_scan"].provenance["source"] == "measured"
    assert "SSM scan, element-wise, copies: measured on H100 SXM5, 2026-11-23" in (
        merged.provenance_label
    )
    with pytest.raises(TwinError, match="merge profiles of one GPU"):
        merge_profiles([imported, load_profile("a100-datasheet")], ["a", "b"])


def test_a_malformed_table_is_refused_with_file_row_and_column(tmp_path: Path) -> None:
    table = tmp_path / "h100_sxm" / "gemm" / "vllm" / "0.24.0" / "gemm_perf.parquet"
    table.parent.mkdir(parents=True)
    pq.write_table(
        pa.Table.from_pylist([{"gemm_dtype": "bfloat16", "m": 1, "n": 2, "k": 3, "latency": -1.0}]),
        table,
    )
    with pytest.raises(TwinError, match=r"gemm_perf.parquet, row 0, column 'latency'"):
        read_families("h100", "vllm", root=tmp_path)


def test_uncovered_gpu_and_unknown_engine_are_refused() -> None:
    with pytest.raises(TwinError, match="covers"):
        read_families("l4", "vllm", root=DATA)
    with pytest.raises(TwinError, match="--engine 'tgi'"):
        read_families("h100", "tgi", root=DATA)


def test_gemm_rows_outside_the_fit_domain_are_counted_not_fitted(tmp_path: Path) -> None:
    fam = gemm_rows(DATA / "h100_sxm", "vllm")
    assert fam is not None
    narrow = dict(fam.rows[0], shape={"m": 8, "n": 32, "k": 1024})  # a 32-wide product
    fam.rows.append(narrow)
    fit = fit_family(fam, get_gpu("h100").peaks(), "H100 SXM5")
    assert fit is not None
    assert fit.provenance["rows_outside_domain"] == 1
    assert fit.n_shapes == 36 and fit.n_flagged == 1


def test_calibrate_cli_merges_and_refuses_bad_sources(imported: Profile, tmp_path: Path) -> None:
    a = imported.save(tmp_path / "a.json")
    b = load_profile("h100-datasheet").save(tmp_path / "b.json")
    out = tmp_path / "m.json"
    res = CliRunner().invoke(
        app, ["calibrate", "--merge", str(a), "--merge", str(b), "--out", str(out), "--json"]
    )
    assert res.exit_code == 0, res.output
    merged = Profile.load(out)
    assert merged.kernels["gemm"].provenance["merged_from"] == str(a)
    res = CliRunner().invoke(app, ["calibrate", "--merge", str(a), "--merge", str(b)])
    assert isinstance(res.exception, TwinError) and "--out" in str(res.exception)
    res = CliRunner().invoke(app, ["calibrate", "--from", "mlperf", "--gpu", "h100"])
    assert isinstance(res.exception, TwinError) and "'aiconfigurator'" in str(res.exception)
    assert not (tmp_path / "h100-vllm.json").exists()


def _gemm_and_scale_tables(root: Path, engine: str, scale: bool = True) -> Path:
    """A one-release GEMM table (two fp8 shapes, one bf16) and, with ``scale``, its
    compute-scale table (one of the two fp8 (m, k) pairs timed)."""
    system = root / "h100_sxm"
    table = system / "gemm" / engine / "1.3.0rc20" / "gemm_perf.parquet"
    table.parent.mkdir(parents=True)
    rows = [
        {"gemm_dtype": "fp8", "m": 8, "n": 4096, "k": 4096, "latency": 0.015},
        {"gemm_dtype": "fp8", "m": 4096, "n": 4096, "k": 4096, "latency": 0.2},
        {"gemm_dtype": "bfloat16", "m": 8, "n": 4096, "k": 4096, "latency": 0.01},
    ]
    pq.write_table(pa.Table.from_pylist(rows), table)
    if scale:
        cs = system / "quantize" / engine / "1.3.0rc20" / "computescale_perf.parquet"
        cs.parent.mkdir(parents=True)
        pq.write_table(
            pa.Table.from_pylist([{"m": 8, "k": 4096, "quant_dtype": "fp8", "latency": 0.008}]),
            cs,
        )
    return system


def test_tensorrt_llm_fp8_gemms_are_read_at_a_static_input_scale(tmp_path: Path) -> None:
    # TensorRT-LLM's collector timed a dynamic scale (an amax pass) in every fp8 row; its
    # compute-scale table times that pass per (m, k), and it is taken off where timed.
    system = _gemm_and_scale_tables(tmp_path, "trtllm")
    fam = gemm_rows(system, "trtllm", "fp8")
    assert fam is not None
    assert [r["median_s"] for r in fam.rows] == pytest.approx([0.007e-3, 0.2e-3])
    assert fam.kernel_source.endswith(", static input scale")
    assert fam.tables[-1] == "h100_sxm/quantize/trtllm/1.3.0rc20/computescale_perf.parquet"
    # bf16 rows are never touched.
    bf16 = gemm_rows(system, "trtllm")
    assert bf16 is not None and bf16.rows[0]["median_s"] == pytest.approx(0.01e-3)


def test_static_fp8_rows_only_where_the_collector_timed_a_dynamic_scale(tmp_path: Path) -> None:
    # vLLM's collector builds its fp8 rows static: the same tables leave them as measured.
    vllm = gemm_rows(_gemm_and_scale_tables(tmp_path / "v", "vllm"), "vllm", "fp8")
    assert vllm is not None
    assert [r["median_s"] for r in vllm.rows] == pytest.approx([0.015e-3, 0.2e-3])
    assert "static" not in vllm.kernel_source
    # No compute-scale table: TensorRT-LLM's rows stay as measured, and say nothing.
    bare = gemm_rows(_gemm_and_scale_tables(tmp_path / "t", "trtllm", False), "trtllm", "fp8")
    assert bare is not None and bare.rows[0]["median_s"] == pytest.approx(0.015e-3)
    assert len(bare.tables) == 1 and "static" not in bare.kernel_source
