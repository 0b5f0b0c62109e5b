"""``twin reproduce``: the claims table's structure, its verdict rule, and a small real run."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from twin.cli import app
from twin.cli.main import run as run_cli
from twin.errors import TwinError
from twin.replay import Trace
from twin.reports.reproduce import PAPERS, get_paper
from twin.reports.reproduce.base import VERDICTS, Check, Recipe, magnitude, trend, verdict
from twin.reports.reproduce.block_reuse import block_reuse
from twin.reports.reproduce.marconi import Marconi
from twin.reports.reproduce.render import Facts, render_report
from twin.reports.reproduce.runner import REPLAYS_FILE, Run, generate

TINY = {True: {"chat": 3, "sharegpt": 3, "swebench": 2}, False: {}}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, list]:
    out = tmp_path_factory.mktemp("repro")
    run = Run(Marconi(TINY), out, quick=True)
    return run, run.execute()


def test_verdict_rule() -> None:
    ok, bad = trend("up", True), trend("up", False)
    near, far = magnitude("x", 10.0, 15.0), magnitude("x", 10.0, 25.0)
    assert near.passed and not far.passed
    assert not magnitude("x", 10.0, -10.0).passed  # wrong sign is never close
    assert not magnitude("x", 10.0, None).passed
    assert verdict([ok, near]) == "yes"
    assert verdict([ok, far]) == "qualitatively"
    assert verdict([bad, near]) == "no"
    with pytest.raises(ValueError):
        verdict([])


def test_registry_names_only_real_papers() -> None:
    assert "marconi" in PAPERS
    with pytest.raises(TwinError, match="available: marconi"):
        get_paper("no-such-paper")


def test_unknown_paper_is_one_line_exit_2(tmp_path: Path, capsys) -> None:
    assert run_cli(["reproduce", "nope", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown paper 'nope'" in err and "\n" not in err
    assert not (tmp_path / "o").exists()


def test_block_reuse_counts_kv_and_one_state_per_hit() -> None:
    a = list(range(96))  # three blocks of 32
    trace = Trace.from_pairs([(a, [1000]), (a[:64] + [5] * 40, [7])], "t")
    r = block_reuse(trace, 32)
    # First request caches 3 blocks; the second hits 2 (KV of both, the SSM state of the 2nd)
    # and caches one more block of its own.
    assert (r.blocks, r.kv_reused, r.ssm_reused) == (4, 2, 1)


def test_claims_table_structure(tiny_run) -> None:
    _, claims = tiny_run
    assert [c.number for c in claims] == list(range(1, 10))
    for c in claims:
        assert c.paper and c.twin and c.section and c.commands
        assert c.verdict in VERDICTS
        assert c.verdict == verdict(c.checks)
        assert all(isinstance(k, Check) and k.kind in ("trend", "magnitude") for k in c.checks)
        assert any(k.kind == "trend" for k in c.checks)
    # The paper's headline numbers are quoted, not the twin's.
    assert "4.5x" in claims[0].paper and "34.4x" in claims[0].paper
    assert "17.4 GB" in claims[8].paper
    # Claim 9's arithmetic is the 7B hybrid's: 10K tokens of KV + 625 checkpoints.
    assert claims[8].twin.startswith("17.4 GB, 3.3x")


def test_printed_command_reruns_the_point(tiny_run, monkeypatch) -> None:
    run, claims = tiny_run
    cmd = next(c for c in claims[0].commands if " -p marconi" in c)
    args = [*shlex.split(cmd)[1:], "--json"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    rate = got["results"][0]["token_hit_rate"]
    stored = json.loads((run.out / REPLAYS_FILE).read_text())
    assert any(abs(v["token_hit_rate"] - rate) < 1e-12 for v in stored.values())


def test_rerun_computes_nothing(tiny_run, monkeypatch) -> None:
    run, claims = tiny_run

    def fail(*_a, **_k):
        raise AssertionError("a finished point was computed again")

    monkeypatch.setattr("twin.reports.reproduce.runner.run_replay", fail)
    monkeypatch.setattr("twin.reports.sweep.run_point", fail)
    again = Run(Marconi(TINY), run.out, quick=True).execute()
    assert [(c.twin, c.verdict) for c in again] == [(c.twin, c.verdict) for c in claims]


def test_report_files(tiny_run, tmp_path: Path) -> None:
    _, claims = tiny_run
    facts = Facts("marconi", "cite", "twin reproduce marconi --quick", "quick", "0", ())
    paths = render_report(tmp_path, facts, claims, ["a note"])
    html = (tmp_path / "report.html").read_text()
    md = (tmp_path / "report.md").read_text()
    assert [p.name for p in paths][-3:] == ["claims.json", "report.md", "report.html"]
    assert {"fig-claim1.svg", "fig-claim3.svg", "fig-claim4.svg"} <= {p.name for p in paths}
    assert html.count("<svg") == 3 and "![" in md
    assert "<script" not in html and "http" not in html.split("<body>")[1].split("github.com")[0]
    assert md.count("## Claim ") == 9
    data = json.loads((tmp_path / "claims.json").read_text())
    assert [c["verdict"] for c in data["claims"]] == [c.verdict for c in claims]


@pytest.mark.slow
def test_ray_reproduction_matches_local(tiny_run, tmp_path: Path) -> None:
    ray = pytest.importorskip("ray")
    run, claims = tiny_run
    try:
        remote = Run(Marconi(TINY), tmp_path, quick=True, executor="ray").execute()
    finally:
        ray.shutdown()
    assert [(c.twin, c.verdict) for c in remote] == [(c.twin, c.verdict) for c in claims]
    assert json.loads((tmp_path / REPLAYS_FILE).read_text()) == json.loads(
        (run.out / REPLAYS_FILE).read_text()
    )


FAKE_ARTIFACT = '''
class RadixCache:
    """Stands in for the artifact's cache: counts what the driver asks of it."""

    def __init__(self, capacity_bytes, use_logical_ts, eff_weight, **kwargs):
        self.capacity, self.kwargs, self.looked, self.inserted = capacity_bytes, kwargs, 0, 0

    def match_prefix(self, tokens):
        self.looked += len(tokens)

    def insert(self, token_ids, state_at_leaf, state_at_branchoff):
        assert state_at_leaf == state_at_branchoff
        self.inserted += len(token_ids)

    def get_tree_size(self):
        return self.inserted

    def get_cache_stats(self, verbose=True):
        return (0.5, self.looked / self.inserted, 0, 0, 0)
'''


def test_artifact_driver_replays_every_request(tmp_path: Path, monkeypatch) -> None:
    from twin.reports.reproduce.artifact import ENV, checkout, run_artifact

    monkeypatch.setenv(ENV, str(tmp_path))
    with pytest.raises(TwinError, match="not a checkout of the Marconi artifact"):
        checkout()
    for name in ("radix_cache_hybrid.py", "radix_cache_vllm.py"):
        (tmp_path / name).write_text(FAKE_ARTIFACT)
    assert checkout() == tmp_path
    path = tmp_path / "w.parquet"
    generate(Recipe("w", "chat", 3, 1.0), path)
    trace = Trace.load(path)
    shape = {"num_ssm_layers": 24, "num_attn_layers": 4, "num_mlp_layers": 28, "d": 4096, "n": 128}
    got = run_artifact(str(tmp_path), str(path), "vllm+", 10**9, shape)
    total = sum(len(f) for f in trace.fulls)
    assert got["token_hit_rate"] == pytest.approx(trace.prompt_tokens / total)
    assert got["request_hit_rate"] == 0.5
