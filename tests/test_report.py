"""The capacity sweep, its recommendation, its reports and `twin report capacity`."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import typer
from typer.testing import CliRunner

from reports.analysis import (
    Recommendation,
    Slo,
    aggregate,
    parse_slo,
    recommend,
    verdict,
    winner,
)
from reports.perrequest import BIN_HIT_COLUMN, BIN_INPUT_COLUMN, CDF_COLUMN
from reports.render import HTML_FILE, MD_FILE
from reports.sweep import RESULTS_FILE, SCHEMA, SweepSpec, grid, resolve, run_sweep
from twin.cli import report
from twin.errors import TwinError
from workloads.examples import example_path

WORKLOAD = example_path("system-prompt")


def _spec() -> SweepSpec:
    return resolve(SweepSpec(workload=str(WORKLOAD), model="tiny-hybrid", gpu="h100"))


# --- the SLO parser ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "pct", "metric", "ms"),
    [
        ("p95_ttft<=500ms", 95, "ttft", 500.0),
        ("p50_ttft<=200ms", 50, "ttft", 200.0),
        (" P99_TTFT <= 1.5 s ", 99, "ttft", 1500.0),
        ("p95_tpot<50ms", 95, "tpot", 50.0),
    ],
)
def test_parse_slo(text: str, pct: int, metric: str, ms: float) -> None:
    slo = parse_slo(text)
    assert (slo.percentile, slo.metric, slo.threshold_ms) == (pct, metric, ms)
    assert slo.column == f"{metric}_p{pct}_ms"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "p95<=500ms",
        "p95_ttft>=500ms",
        "p95_ttft<=500",
        "p95_ttft<=fast",
        "p42_ttft<=1s",
        "p95_ttft<=0ms",
        "p5_tpot<=1s",
    ],
)
def test_parse_slo_rejects(text: str) -> None:
    with pytest.raises(TwinError, match="--slo"):
        parse_slo(text)


# --- the recommendation from a hand-made table -------------------------------------------


def _row(policy: str, cache: float, p95: float, seed: int = 0) -> dict[str, object]:
    return {
        "policy": policy,
        "session_rate": None,
        "cache_gb": cache,
        "seed": seed,
        "ttft_p95_ms": p95,
    }


def test_recommendation_is_smallest_cache_meeting_slo() -> None:
    rows = [
        # marconi meets 500 ms from 20 GB (mean of seeds 480 and 500 = 490)
        _row("marconi", 10, 700),
        _row("marconi", 10, 720, 1),
        _row("marconi", 20, 480),
        _row("marconi", 20, 500, 1),
        _row("marconi", 40, 300),
        _row("marconi", 40, 310, 1),
        # vllm+ only at 40 GB; 20 GB mean is 505 (one seed under, the mean over)
        _row("vllm+", 10, 900),
        _row("vllm+", 10, 910, 1),
        _row("vllm+", 20, 490),
        _row("vllm+", 20, 520, 1),
        _row("vllm+", 40, 450),
        _row("vllm+", 40, 460, 1),
        # sglang+ never
        _row("sglang+", 10, 990),
        _row("sglang+", 40, 800),
    ]
    agg = aggregate(rows)
    cell = next(a for a in agg if a["policy"] == "marconi" and a["cache_gb"] == 20)
    assert cell["ttft_p95_ms"] == pytest.approx(490)
    # t(0.975, 1) * sd / sqrt(2) with sd = 14.142: 12.706 * 10 = 127.06
    assert cell["ttft_p95_ms_ci"] == pytest.approx(127.06, rel=1e-3)
    recs = {r.policy: r for r in recommend(agg, parse_slo("p95_ttft<=500ms"), 2, 4)}
    assert recs["marconi"].cache_gb == 20 and recs["marconi"].value_ms == pytest.approx(490)
    assert recs["vllm+"].cache_gb == 40
    assert recs["sglang+"].cache_gb is None and not recs["sglang+"].meets
    assert all(r.gpus == 8 for r in recs.values())
    best = winner(list(recs.values()))
    assert best is not None and best.policy == "marconi"
    text = " ".join(verdict(list(recs.values()), parse_slo("p95_ttft<=500ms")))
    assert (
        "marconi meets" in text and "20 GB" in text and "vllm+ comes next: it needs 40 GB" in text
    )
    assert "sglang+: none in the sweep" in text


def test_winner_tie_goes_to_lower_metric() -> None:
    agg = aggregate([_row("a", 20, 400), _row("b", 20, 300), _row("c", 10, 900)])
    best = winner(recommend(agg, Slo(95, "ttft", 500.0), 1, 1))
    assert best is not None and best.policy == "b"
    assert winner(recommend(agg, Slo(95, "ttft", 100.0), 1, 1)) is None


# --- a real sweep --------------------------------------------------------------------------


def test_sweep_rows_columns_and_resume(tmp_path: Path) -> None:
    spec = _spec()
    points = grid([0.0005, 0.002], ["vllm+", "marconi"], [None], 2)
    assert len(points) == 8
    seen: list[object] = []
    first = run_sweep(spec, points, tmp_path, on_point=lambda p, r: seen.append(p))
    assert (first.computed, first.skipped, len(seen)) == (8, 0, 8)
    table = pq.read_table(tmp_path / RESULTS_FILE)
    assert table.num_rows == 8 and table.schema.names == SCHEMA.names
    rows = table.to_pylist()
    assert {(r["cache_gb"], r["policy"], r["seed"]) for r in rows} == {
        (p.cache_gb, p.policy, p.seed) for p in points
    }
    assert all(r["ttft_p95_ms"] > 0 and 0 <= r["token_hit_rate"] <= 1 for r in rows)
    for r in rows:  # the per-request digest agrees with the engine's own summary
        q = r[CDF_COLUMN]
        assert len(q) == 101 and all(a <= b for a, b in itertools.pairwise(q))
        assert q[95] == pytest.approx(r["ttft_p95_ms"], rel=1e-3)
        assert sum(r[BIN_INPUT_COLUMN]) > 0
        assert all(0 <= h <= i for h, i in zip(r[BIN_HIT_COLUMN], r[BIN_INPUT_COLUMN], strict=True))
    assert {r["workload_sha256"] for r in rows} == {spec.workload_sha256}

    seen.clear()
    again = run_sweep(spec, points, tmp_path, on_point=lambda p, r: seen.append(p))
    assert (again.computed, again.skipped, seen) == (0, 8, [])
    assert again.rows == first.rows
    # One more cache size: only its points run; the old rows stay in the file.
    more = grid([0.0005, 0.002, 0.01], ["vllm+", "marconi"], [None], 2)
    third = run_sweep(spec, more, tmp_path)
    assert (third.computed, third.skipped) == (4, 8)
    assert pq.read_table(tmp_path / RESULTS_FILE).num_rows == 12


def test_sweep_in_processes_matches_in_process(tmp_path: Path) -> None:
    spec = _spec()
    points = grid([0.001], ["vllm+", "marconi"], [2.0], 1)
    one = run_sweep(spec, points, tmp_path / "a", jobs=1)
    two = run_sweep(spec, points, tmp_path / "b", jobs=2)
    assert one.rows == two.rows


# --- the CLI and the reports ---------------------------------------------------------------


def _cli() -> typer.Typer:
    # The real registration lives in twin.cli; a local root keeps this test independent.
    root = typer.Typer()
    root.add_typer(report.app, name="report")

    @root.callback()
    def _root() -> None:
        """twin"""

    return root


def test_cli_writes_self_contained_report(tmp_path: Path) -> None:
    out = tmp_path / "cap"
    args = [
        "report",
        "capacity",
        str(WORKLOAD),
        "-m",
        "tiny-hybrid",
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
    res = CliRunner().invoke(_cli(), args)
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
    again = CliRunner().invoke(_cli(), args)
    assert again.exit_code == 0 and "0 point(s) simulated, 8 found" in again.output

    # Results written before the per-request columns existed: the report still
    # renders, without the CDF and hit-by-length figures.
    table = pq.read_table(out / RESULTS_FILE)
    pq.write_table(
        table.drop_columns([CDF_COLUMN, BIN_INPUT_COLUMN, BIN_HIT_COLUMN]), out / RESULTS_FILE
    )
    old = CliRunner().invoke(_cli(), args)
    assert old.exit_code == 0 and "0 point(s) simulated, 8 found" in old.output, old.output
    page = (out / HTML_FILE).read_text()
    assert page.count("<svg") == 9 and "TTFT CDF" not in page


def test_cli_cdf_cache_must_be_swept(tmp_path: Path) -> None:
    args = [
        "report",
        "capacity",
        str(WORKLOAD),
        "-m",
        "tiny-hybrid",
        "--cache-gb",
        "0.001",
        "--cdf-cache-gb",
        "5",
        "--out",
        str(tmp_path / "x"),
    ]
    res = CliRunner().invoke(_cli(), args)
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
        "report",
        "capacity",
        str(WORKLOAD),
        "-m",
        "tiny-hybrid",
        flag,
        value,
        "--out",
        str(tmp_path / "x"),
    ]
    res = CliRunner().invoke(_cli(), args)
    assert isinstance(res.exception, TwinError) and message in str(res.exception)
    assert not (tmp_path / "x").exists()  # rejected before any work


def test_verdict_names_where_each_policy_wins() -> None:
    slo = parse_slo("p95_ttft<=500ms")
    recs = [
        Recommendation("marconi", 1.0, 20.0, 300.0, 1),
        Recommendation("sglang+", 1.0, 40.0, 300.0, 1),
        Recommendation("marconi", 2.0, 40.0, 400.0, 1),
        Recommendation("sglang+", 2.0, 20.0, 450.0, 1),
    ]
    text = " ".join(verdict(recs, slo))
    assert "runner-up" not in text
    assert "Where each policy wins: marconi at 1 sessions/s; sglang+ at 2 sessions/s." in text


# --- one engine-config builder (issue 17 regression) ---------------------------------


def test_sweep_points_build_the_config_simulate_builds_keeping_every_field():
    from reports.sweep import Point
    from twin.costmodel.profile_store import resolve_profile
    from twin.engine import build_config

    prof = resolve_profile("h100", None)
    settings = (
        ("replicas", 2),
        ("memory_utilization", 0.5),
        ("policy_options", {"alpha": 1.0, "block_size": 16}),
    )
    spec = SweepSpec(workload=str(WORKLOAD), model="tiny-hybrid", gpu="h100", settings=settings)
    marconi = spec.config(Point(1.5, "marconi", 2.0, 3), prof)
    # What `twin simulate -r 2 --gpu-mem-util 0.5 --cache-gb 1.5 -p marconi
    # --policy-option alpha=1.0 --session-rate 2 --seed 3` builds:
    assert marconi == build_config(
        prof,
        cache_gb=1.5,
        replicas=2,
        memory_utilization=0.5,
        policy="marconi",
        policy_options={"alpha": 1.0},
        session_rate=2.0,
        seed=3,
    )
    assert marconi.memory_utilization == 0.5 and marconi.gpu_memory_bytes == 80e9
    # Shared options: each swept policy takes its own.
    assert spec.config(Point(1.5, "vllm+", None, 0), prof).policy_options == {"block_size": 16}
    # A fixed engine setting is part of the resume key.
    plain = SweepSpec(workload=str(WORKLOAD), model="tiny-hybrid", gpu="h100")
    point = Point(1.5, "marconi", None, 0)
    assert spec.key(point) != plain.key(point)
    with pytest.raises(TwinError, match="memory-utilization"):
        resolve(SweepSpec(str(WORKLOAD), "tiny-hybrid", settings=(("memory_utilization", 2.0),)))


def test_capacity_report_is_a_library_call(tmp_path: Path) -> None:
    from reports.capacity import capacity_report

    out = tmp_path / "cap"
    found = capacity_report(
        WORKLOAD,
        out,
        model="tiny-hybrid",
        gpu="h100",
        cache_gb=[0.0005, 0.002],
        policies=["vllm+", "marconi"],
        slo="p95_ttft<=1s",
        settings={"replicas": 2},
    )
    assert found.computed == 4 and found.skipped == 0 and len(found.rows) == 4
    assert {r["replicas"] for r in found.rows} == {2}
    assert sorted(r.policy for r in found.recommendations) == ["marconi", "vllm+"]
    assert (out / HTML_FILE).is_file() and (out / MD_FILE).is_file()
    again = capacity_report(
        WORKLOAD,
        out,
        model="tiny-hybrid",
        gpu="h100",
        cache_gb=[0.002],
        policies=["marconi"],
        settings={"replicas": 2},
    )
    assert again.computed == 0 and again.skipped == 1  # resumed from results.parquet
    with pytest.raises(TwinError, match="cdf-cache-gb"):
        capacity_report(WORKLOAD, out, model="tiny-hybrid", cache_gb=[1.0], cdf_cache_gb=2.0)


def test_model_set_reaches_every_point_and_its_resume_key(tmp_path: Path) -> None:
    """--model-set: the sweep simulates the changed shape and keys its rows apart."""
    base = _spec()
    changed = resolve(
        SweepSpec(
            workload=str(WORKLOAD), model="tiny-hybrid", gpu="h100", model_set=("ssm_d_state=4",)
        )
    )
    points = grid([0.0005], ["marconi"], [None], 1)
    assert base.key(points[0]) != changed.key(points[0])
    rows = [run_sweep(s, points, tmp_path / str(i)).rows[0] for i, s in enumerate((base, changed))]
    assert rows[0]["model"] == "tiny-hybrid"
    assert rows[1]["model"] == "tiny-hybrid[ssm_d_state=4]"
    # The points really ran the changed shape: its SSM states occupy the cache differently.
    assert rows[1]["ssm_bytes_mean"] != rows[0]["ssm_bytes_mean"]


def test_gpu_count_is_swept_in_one_report_with_cache_per_gpu(tmp_path: Path) -> None:
    """Issue 18: --replicas 1,2 sweeps the GPU count (replicas x tp) in one report; the
    recommendation and the tables show the cache per replica and per GPU (cache / tp)."""
    from reports.capacity import capacity_report

    out = tmp_path / "gpus"
    found = capacity_report(
        WORKLOAD,
        out,
        model="tiny-hybrid",
        gpu="h100",
        cache_gb=[0.002],
        policies=["marconi"],
        session_rates=[2.0],
        replicas=[1, 2],
        slo="p95_ttft<=10s",
        settings={"tp": 2},
    )
    assert found.computed == 2
    assert sorted((r["replicas"], r["tp"]) for r in found.rows) == [(1, 2), (2, 2)]
    assert len({r["key"] for r in found.rows}) == 2  # each GPU count its own resume key
    # Each point's engine configuration has its own replica count, the fixed tp.
    points = grid([0.002], ["marconi"], [2.0], 1, [1, 2])
    assert [found.spec.config(p).replicas for p in points] == [1, 2]
    assert {found.spec.config(p).tp for p in points} == {2}
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
    res = CliRunner().invoke(_cli(), args)
    assert isinstance(res.exception, TwinError) and "--replicas" in str(res.exception)
    assert not (tmp_path / "x").exists()


def test_engine_modes_and_their_flags_are_swept_in_their_shared_pool(tmp_path: Path) -> None:
    """Issue 14: the policy axis takes engine modes with flags; each runs once per rate in
    its shared KV pool (the row's cache is the pool's size); auto runs a policy there too."""
    from reports.capacity import capacity_report
    from reports.sweep import AUTO_GB, engine_variant

    assert engine_variant("vllm+") is None
    assert engine_variant("sglang[mamba_scheduler_strategy=extra_buffer;page_size=1]") == (
        "sglang",
        {"mamba_scheduler_strategy": "extra_buffer", "page_size": "1"},
    )
    points = grid([1.0, 2.0], ["vllm", "marconi"], [None], 1)
    assert [(p.policy, p.cache_gb) for p in points] == [
        ("vllm", AUTO_GB),
        ("marconi", 1.0),
        ("marconi", 2.0),
    ]
    extra = "sglang[mamba_scheduler_strategy=extra_buffer]"
    found = capacity_report(
        WORKLOAD,
        tmp_path / "engines",
        model="tiny-hybrid",
        gpu="h100",
        cache_gb=["auto"],
        policies=["vllm", "sglang", extra, "marconi"],
    )
    rows = {r["policy"]: r for r in found.rows}
    assert set(rows) == {"vllm", "sglang", extra, "marconi"}
    pool = rows["vllm"]["cache_gb"]
    assert pool > 10 and all(r["cache_gb"] == pool for r in rows.values())
    assert rows["vllm"]["token_hit_rate"] != rows["sglang"]["token_hit_rate"]
    assert len({r["key"] for r in rows.values()}) == 4
    # One of its figures as a PNG, drawn by the report's code (the README's picture).
    from reports.png import report_png

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
