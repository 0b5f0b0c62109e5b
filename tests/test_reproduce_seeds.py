"""``twin reproduce prompt-cache`` and ``twin reproduce jenga``: claims tables and small runs."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from twin.cli import app
from twin.cli.main import run as run_cli
from twin.reports.reproduce import PAPERS, jenga_runs
from twin.reports.reproduce import prompt_cache_runs as pc
from twin.reports.reproduce.base import VERDICTS, Check, magnitude_range, verdict
from twin.reports.reproduce.jenga import Jenga
from twin.reports.reproduce.jenga_runs import summarise
from twin.reports.reproduce.prompt_cache import PromptCache
from twin.reports.reproduce.render import Facts, render_report
from twin.reports.reproduce.runner import COMPUTED_FILE, Run, generate

TINY = {True: 4, False: 4}


@pytest.fixture(scope="module")
def pc_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, list]:
    run = Run(PromptCache(TINY), tmp_path_factory.mktemp("pc"), quick=True)
    return run, run.execute()


@pytest.fixture(scope="module")
def jenga_claims(tmp_path_factory: pytest.TempPathFactory) -> list:
    return Run(Jenga(), tmp_path_factory.mktemp("jenga"), quick=True).execute()


def _structure(claims: list, n: int) -> None:
    assert [c.number for c in claims] == list(range(1, n + 1))
    for c in claims:
        assert c.paper and c.twin and c.section and c.commands
        assert c.verdict in VERDICTS and c.verdict == verdict(c.checks)
        assert all(isinstance(k, Check) and k.kind in ("trend", "magnitude") for k in c.checks)
        assert any(k.kind == "trend" for k in c.checks)


def test_registry_has_the_three_seeds() -> None:
    assert {"marconi", "prompt-cache", "jenga"} <= set(PAPERS)


def test_range_magnitude_widens_the_point_rule() -> None:
    assert magnitude_range("x", 5, 10, 2.5).passed and magnitude_range("x", 5, 10, 20).passed
    assert not magnitude_range("x", 5, 10, 2.4).passed
    assert not magnitude_range("x", 5, 10, 20.1).passed
    assert not magnitude_range("x", 5, 10, None).passed


def test_prompt_cache_claims_table(pc_run) -> None:
    _, claims = pc_run
    _structure(claims, 4)
    assert "5-10x" in claims[0].paper and "1.5-3x" in claims[1].paper
    assert "twin-only" in claims[3].paper and claims[3].section == "not in the paper"
    # The checks read the numbers: claim 1's magnitude check names the twin's speedup.
    shown = claims[0].twin.split("x")[0]
    assert any(shown[:3] in k.what for k in claims[0].checks if k.kind == "magnitude")
    assert claims[2].figure is not None


def test_prompt_cache_printed_command_reruns_the_point(pc_run, tmp_path: Path) -> None:
    """The host-storage `twin simulate` command printed under claim 2 gives the same TTFTs."""
    run, claims = pc_run
    cmd = next(c for c in claims[1].commands if "storage=host" in c)
    base = next(c for c in claims[1].commands if "-p vanilla" in c)
    ttft = {}
    for name, c in (("pc", cmd), ("vanilla", base)):
        args = shlex.split(c)[1:]
        args[args.index("--out") + 1] = str(tmp_path / name)
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 0, res.output
        t = pq.read_table(tmp_path / name / "requests.parquet").to_pydict()
        ttft[name] = {
            r: (x, h) for r, x, h in zip(t["row"], t["ttft_s"], t["hit_tokens"], strict=True)
        }
    warm = [r for r, (_, h) in ttft["pc"].items() if h > 0]
    speedup = np.mean([ttft["vanilla"][r][0] for r in warm]) / np.mean(
        [ttft["pc"][r][0] for r in warm]
    )
    stored = json.loads((run.out / COMPUTED_FILE).read_text())
    hosts = [v["host"]["speedup"] for v in stored.values() if v.get("host")]
    assert any(abs(speedup - h) < 1e-9 for h in hosts)


def test_prompt_cache_rerun_computes_nothing(pc_run, monkeypatch) -> None:
    run, claims = pc_run

    def fail(*_a, **_k):
        raise AssertionError("a finished computation was run again")

    monkeypatch.setattr("twin.reports.reproduce.runner.run_computation", fail)
    again = Run(PromptCache(TINY), run.out, quick=True).execute()
    assert [(c.twin, c.verdict) for c in again] == [(c.twin, c.verdict) for c in claims]


def test_prompt_cache_host_copy_costs_more_than_gpu(tmp_path: Path) -> None:
    """The library's own numbers on one tiny workload: both storages beat vanilla, GPU most."""
    path = tmp_path / "w.parquet"
    generate(pc.recipe("w", 2000, sessions=4), path)
    got = pc.speedups(str(path))
    assert got["gpu"]["warm_requests"] == got["host"]["warm_requests"] > 0
    assert got["gpu"]["speedup"] > got["host"]["speedup"] > 1


def test_jenga_claims_table(jenga_claims) -> None:
    _structure(jenga_claims, 3)
    assert "1.80x" in jenga_claims[0].paper and "4.92x" in jenga_claims[0].paper
    assert "79.6%" in jenga_claims[1].paper
    # A plain Transformer's pages are the same under both allocators: its check holds.
    assert jenga_claims[2].verdict == "yes"
    _, rows = jenga_claims[2].table
    assert rows and all(r[3] == r[4] for r in rows)  # fit paged == fit Jenga
    # The twin's own numbers behind claims 1 and 2: heterogeneous models fit more
    # requests under Jenga's pages, serve more, and use more of the memory.
    s = jenga_runs.run("h100", (4000,))["summary"]
    assert s["fit_mean_heterogeneous"] > 1 and s["throughput_max"] > 1
    assert s["utilisation_gain_max"] > 0 and s["transformer_unchanged"] is True
    assert all(k.passed for c in jenga_claims[:2] for k in c.checks if k.kind == "trend")


def test_jenga_summary_arithmetic() -> None:
    row = {"paged_utilisation": 0.5, "jenga_utilisation": 0.9, "throughput_ratio": 2.0}
    rows = [
        {**row, "family": "hybrid", "paged_requests": 10, "jenga_requests": 30},
        {**row, "family": "hybrid", "paged_requests": 10, "jenga_requests": 10,
         "throughput_ratio": 1.0, "jenga_utilisation": 0.6},
        {**row, "family": "Transformer", "paged_requests": 5, "jenga_requests": 5,
         "throughput_ratio": 1.0, "jenga_utilisation": 0.5},
    ]  # fmt: skip
    s = summarise(rows)
    assert s["throughput_mean_heterogeneous"] == pytest.approx(1.5)
    assert s["throughput_max"] == 2.0
    assert (s["fit_mean_heterogeneous"], s["fit_max"]) == (2.0, 3.0)
    assert s["utilisation_gain_max"] == pytest.approx(0.4)
    assert s["transformer_unchanged"] is True
    rows[2]["jenga_requests"] = 6
    assert summarise(rows)["transformer_unchanged"] is False


def test_report_files_and_cli(jenga_claims, tmp_path: Path) -> None:
    facts = Facts("jenga", "cite", "twin reproduce jenga", "quick", "0", ())
    paths = render_report(tmp_path / "r", facts, jenga_claims, ["a note"])
    assert [p.name for p in paths][-3:] == ["claims.json", "report.md", "report.html"]
    md = (tmp_path / "r" / "report.md").read_text()
    assert md.count("## Claim ") == 3
    assert run_cli(["reproduce", "jenga", "--quick", "--out", str(tmp_path / "cli")]) == 0
    data = json.loads((tmp_path / "cli" / "claims.json").read_text())
    assert [c["verdict"] for c in data["claims"]] == [c.verdict for c in jenga_claims]
    assert "none for this paper" in data["artifact"]
