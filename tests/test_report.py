"""`twin report capacity` and the capacity report as a library call: the files it writes,
its figures, its flags (the analysis and the sweep: test_report_analysis, test_report_sweep)."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from report_helpers import judge_steady_state
from typer.testing import CliRunner

from twin.cli import app
from twin.errors import TwinError
from twin.reports.capacity import capacity_report
from twin.reports.capacity_request import CapacityRequest, Deployment, SweepAxes, Targets
from twin.reports.perrequest import BIN_HIT_COLUMN, BIN_INPUT_COLUMN, CDF_COLUMN
from twin.reports.render import HTML_FILE, MD_FILE
from twin.reports.sweep import AUTO_GB, RESULTS_FILE, engine_variant, grid
from twin.workloads.examples import example_path

WORKLOAD = example_path("system-prompt")
# `twin report capacity` on the example, with the tiny hybrid model.
CAPACITY = ["report", "capacity", str(WORKLOAD), "-m", "tiny-hybrid"]


# --- the CLI and the reports ---------------------------------------------------------------


def test_cli_writes_self_contained_report(tmp_path: Path) -> None:
    out = tmp_path / "cap"
    args = [
        *CAPACITY,
        "--gpu",
        "h100",
        "--cache-gb",
        "0.0005,0.002",
        "--policies",
        "vllm+,marconi",
        "--session-rates",
        "1,3",
        "--slo",
        "p95_ttft<=1s",
        "--out",
        str(out),
    ]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "8 point(s) simulated" in res.output
    page = (out / HTML_FILE).read_text()
    # No external resource of any kind: every src/href is local or absent.
    refs = re.findall(r"""(?:src|href)\s*=\s*["']([^"']*)""", page)
    assert not [r for r in refs if r.startswith(("http://", "https://", "//"))]
    assert "<script" not in page and "<link" not in page
    # 2 rates x (TTFT, hit, FLOPs saved, composition, TTFT CDF, hit by length)
    # + TTFT vs rate, all inline
    assert page.count("<svg") == 13 and "<img" not in page
    for caption in (
        "Prefill FLOPs saved vs cache size",
        "Mean cache composition",
        "TTFT CDF at 0.002 GB",
        "Token hit rate by input length at 0.002 GB",
    ):
        assert page.count(f"<figcaption>{caption}") == 2, caption
    assert "<h2>Load</h2>" in page and "maximum sustainable load" in page
    # the profile's provenance per kernel family (h100: NVIDIA's tables + datasheet)
    assert "attention: measured (vLLM" in page and "copies: datasheet" in page
    assert "sha256" in page
    md = (out / MD_FILE).read_text()
    figs = re.findall(r"\]\((fig-[^)]+\.svg)\)", md)
    assert len(figs) == 13 and all((out / f).is_file() for f in figs)
    for stem in ("flops-vs-cache", "composition", "ttft-cdf", "hit-by-length"):
        assert {f"fig-{stem}-1.svg", f"fig-{stem}-3.svg"} <= set(figs), stem
    assert "| policy |" in md and "## Load" in md and "max sustainable rate" in md
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and "0 point(s) simulated, 8 found" in again.output

    # Results written before the per-request columns existed: the report still
    # renders, without the CDF and hit-by-length figures.
    table = pq.read_table(out / RESULTS_FILE)
    pq.write_table(
        table.drop_columns([CDF_COLUMN, BIN_INPUT_COLUMN, BIN_HIT_COLUMN]), out / RESULTS_FILE
    )
    old = CliRunner().invoke(app, args)
    assert old.exit_code == 0 and "0 point(s) simulated, 8 found" in old.output, old.output
    page = (out / HTML_FILE).read_text()
    assert page.count("<svg") == 9 and "TTFT CDF" not in page


def test_cli_cdf_cache_must_be_swept(tmp_path: Path) -> None:
    args = [
        *CAPACITY,
        "--cache-gb",
        "0.001",
        "--cdf-cache-gb",
        "5",
        "--out",
        str(tmp_path / "x"),
    ]
    res = CliRunner().invoke(app, args)
    assert isinstance(res.exception, TwinError) and "--cdf-cache-gb" in str(res.exception)
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--cache-gb", "", "comma-separated"),
        ("--cache-gb", "10,x", "not a number"),
        ("--policies", "marconi,lru9", "unknown policy 'lru9'"),
        ("--policies", ",", "comma-separated"),
        ("--session-rates", "0", "must be > 0"),
        ("--slo", "p95_ttft=500ms", "--slo"),
    ],
)
def test_cli_bad_flags(tmp_path: Path, flag: str, value: str, message: str) -> None:
    args = [
        *CAPACITY,
        flag,
        value,
        "--out",
        str(tmp_path / "x"),
    ]
    res = CliRunner().invoke(app, args)
    assert isinstance(res.exception, TwinError) and message in str(res.exception)
    assert not (tmp_path / "x").exists()  # rejected before any work


def test_capacity_report_is_a_library_call(tmp_path: Path) -> None:
    out = tmp_path / "cap"
    two = Deployment(model="tiny-hybrid", gpu="h100", settings={"replicas": 2})
    found = capacity_report(
        CapacityRequest(
            WORKLOAD,
            two,
            SweepAxes(cache_gb=[0.0005, 0.002], policies=["vllm+", "marconi"]),
            Targets(slo="p95_ttft<=1s"),
        ),
        out,
    )
    assert found.computed == 4 and found.skipped == 0 and len(found.rows) == 4
    assert {r["replicas"] for r in found.rows} == {2}
    assert sorted(r.policy for r in found.recommendations) == ["marconi", "vllm+"]
    assert (out / HTML_FILE).is_file() and (out / MD_FILE).is_file()
    again = capacity_report(
        CapacityRequest(WORKLOAD, two, SweepAxes(cache_gb=[0.002], policies=["marconi"])), out
    )
    assert again.computed == 0 and again.skipped == 1  # resumed from results.parquet
    with pytest.raises(TwinError, match="cdf-cache-gb"):
        tiny = Deployment(model="tiny-hybrid")
        capacity_report(
            CapacityRequest(WORKLOAD, tiny, SweepAxes(cache_gb=[1.0]), cdf_cache_gb=2.0), out
        )


def test_gpu_count_is_swept_in_one_report_with_cache_per_gpu(tmp_path: Path, monkeypatch) -> None:
    """Issue 18: --replicas 1,2 sweeps the GPU count (replicas x tp) in one report; the
    recommendation and the tables show the cache per replica and per GPU (cache / tp)."""
    judge_steady_state(monkeypatch)
    out = tmp_path / "gpus"
    found = capacity_report(
        CapacityRequest(
            WORKLOAD,
            Deployment(model="tiny-hybrid", gpu="h100", settings={"tp": 2}),
            SweepAxes(cache_gb=[0.002], policies=["marconi"], session_rates=[2.0], replicas=[1, 2]),
            Targets(slo="p95_ttft<=10s"),
        ),
        out,
    )
    assert found.computed == 2
    assert sorted((r["replicas"], r["tp"]) for r in found.rows) == [(1, 2), (2, 2)]
    assert len({r["key"] for r in found.rows}) == 2  # each GPU count its own resume key
    # Each point's engine configuration has its own replica count, the fixed tp.
    points = grid([0.002], ["marconi"], [2.0], 1, [1, 2])
    assert [found.spec.config(p).cluster.replicas for p in points] == [1, 2]
    assert {found.spec.config(p).cluster.tp for p in points} == {2}
    assert [a["gpus"] for a in found.aggregate] == [2, 4]
    recs = sorted(found.recommendations, key=lambda r: r.gpus)
    assert [(r.gpus, r.cache_gb, r.cache_gb_per_gpu) for r in recs] == [
        (2, 0.002, 0.001),
        (4, 0.002, 0.001),
    ]
    md = (out / MD_FILE).read_text()
    assert "per GPU" in md and "1, 2 replicas (swept) x tp 2 = 2, 4 GPUs" in md
    assert "on 2 GPU(s)" in md and "on 4 GPU(s)" in md  # a verdict per GPU count
    assert "marconi, 4 GPU(s)" in (out / HTML_FILE).read_text()  # figures group by count
    # The CLI parses the list; a fraction is refused before any work.
    args = ["report", "capacity", str(WORKLOAD), "-r", "1,1.5", "-o", str(tmp_path / "x")]
    res = CliRunner().invoke(app, args)
    assert isinstance(res.exception, TwinError) and "--replicas" in str(res.exception)
    assert not (tmp_path / "x").exists()


def test_engine_modes_and_their_flags_are_swept_in_their_shared_pool(tmp_path: Path) -> None:
    """Issue 14: the policy axis takes engine modes with flags; each runs once per rate in
    its shared KV pool (the row's cache is the pool's size); auto runs a policy there too."""
    assert engine_variant("vllm+") is None
    assert engine_variant("sglang[mamba_radix_cache_strategy=extra_buffer;page_size=1]") == (
        "sglang",
        {"mamba_radix_cache_strategy": "extra_buffer", "page_size": "1"},
    )
    points = grid([1.0, 2.0], ["vllm", "marconi"], [None], 1)
    assert [(p.policy, p.cache_gb) for p in points] == [
        ("vllm", AUTO_GB),
        ("marconi", 1.0),
        ("marconi", 2.0),
    ]
    extra = "sglang[mamba_radix_cache_strategy=no_buffer]"  # 0.5.23's auto: extra_buffer
    found = capacity_report(
        CapacityRequest(
            WORKLOAD,
            Deployment(model="tiny-hybrid", gpu="h100"),
            SweepAxes(cache_gb=["auto"], policies=["vllm", "sglang", extra, "marconi"]),
        ),
        tmp_path / "engines",
    )
    rows = {r["policy"]: r for r in found.rows}
    assert set(rows) == {"vllm", "sglang", extra, "marconi"}
    pool = rows["sglang"]["cache_gb"]
    # SGLang sizes both its variants by its own mem_fraction_static (0.830 on an H100 at
    # tp 1, twin.engine.memory_rules); the paper's world takes 0.9, vLLM 0.33.0 0.92 less
    # its activation peak.
    assert pool > 10 and rows[extra]["cache_gb"] == pool
    assert pool < rows["marconi"]["cache_gb"] < rows["vllm"]["cache_gb"]
    assert rows["vllm"]["token_hit_rate"] != rows["sglang"]["token_hit_rate"]
    assert len({r["key"] for r in rows.values()}) == 4
    # One of its figures as a PNG, drawn by the report's code (the README's picture).
    from twin.reports.png import report_png

    stem = re.search(r"\((fig-[^)]+)\.svg\)", (tmp_path / "engines" / MD_FILE).read_text())
    assert stem is not None
    png = report_png(tmp_path / "engines", stem.group(1), tmp_path / "f.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(TwinError, match="the report has"):
        report_png(tmp_path / "engines", "fig-nope", tmp_path / "g.png")


def test_cli_refuses_an_engine_flag_in_the_sweep(capsys, tmp_path: Path) -> None:
    from test_bad_input import assert_clean_error

    argv = ["report", "capacity", str(WORKLOAD), "--policies", "vllm[nope=1],sglang"]
    assert_clean_error(capsys, [*argv, "--out", str(tmp_path / "o")], tmp_path, "no flag 'nope'")
