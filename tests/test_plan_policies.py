"""The prefix-cache policy of a dedicated cache as an axis of ``twin plan`` (issue 37):
``--policies`` multiplies each dedicated ``--cache-gb`` size (never the shared pool,
whose policy is the engine mode's), each candidate carries its policy into its label,
its sweep point, its reproduce command and plan.json, and a bad name is one line."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from test_bad_input import assert_clean_error

from twin.cli.main import run
from twin.errors import TwinError
from twin.reports.plan import plan
from twin.reports.plan_inputs import cache_choices
from twin.reports.plan_result import Candidate
from twin.reports.sweep import RESULTS_FILE

MODEL, GPU, SLO = "tiny-transformer", "h200", "p95_ttft<=1s"


def test_cache_choices_pair_dedicated_sizes_with_each_policy() -> None:
    assert cache_choices(["auto", "2"]) == [("auto", ""), ("2", "")]
    assert cache_choices(["auto", "2", "4"], ["vanilla", "marconi"]) == [
        ("auto", ""),
        ("2", "vanilla"),
        ("2", "marconi"),
        ("4", "vanilla"),
        ("4", "marconi"),
    ]
    with pytest.raises(TwinError, match="--policies: unknown policy 'lfu'"):
        cache_choices(["2"], ["lfu"])
    with pytest.raises(TwinError, match="given twice"):
        cache_choices(["2"], ["marconi", "marconi"])
    with pytest.raises(TwinError, match="'oracle' is a hindsight bound"):
        cache_choices(["2"], ["oracle"])


def test_a_candidates_policy_is_its_sweep_points() -> None:
    own = Candidate(GPU, "vllm", 1, "2")
    marconi = Candidate(GPU, "vllm", 1, "2", cache_policy="marconi")
    pooled = Candidate(GPU, "vllm", 1, "auto")
    assert own.policy == "vllm+" and marconi.policy == "marconi" and pooled.policy == "vllm"
    assert marconi.label == "h200 vllm tp1 2 GB marconi cache"
    assert own.label == "h200 vllm tp1 2 GB cache"
    assert marconi.to_dict()["cache_policy"] == "marconi"
    assert own.to_dict()["cache_policy"] is None


def test_a_plan_searches_each_policy_and_reproduces_it(tmp_path: Path) -> None:
    wl = tmp_path / "w.parquet"
    gen = ["workload", "generate", "fixed", "-n", "20", "--session-rate", "2", "-o", str(wl)]
    assert run(gen) == 0
    out = tmp_path / "plan"
    found = plan(
        wl,
        out,
        model=MODEL,
        slos=[SLO],
        gpus=[GPU],
        engines=["vllm"],
        tp=[1],
        cache=["auto", "2"],
        policies=["vanilla", "marconi"],
        seeds=1,
    )
    by_label = {c.candidate.label: c for c in found.candidates}
    # The shared pool once (the mode's own), the dedicated size once a policy.
    assert sorted(by_label) == [
        "h200 vllm tp1 2 GB marconi cache",
        "h200 vllm tp1 2 GB vanilla cache",
        "h200 vllm tp1 shared pool",
    ]
    for res in by_label.values():
        command = shlex.split(found.command_for(res.candidate, 1))
        if res.candidate.cache == "auto":
            assert "--policy" not in command
        else:
            assert command[command.index("--policy") + 1] == res.candidate.cache_policy
    # Each dedicated candidate ran its own sweep point, under its own policy.
    keys = {c.candidate.cache_policy: c.trial(1).key for c in found.candidates if c.trial(1)}
    assert keys["vanilla"] != keys["marconi"]
    rows = pq.read_table(out / RESULTS_FILE).to_pylist()
    assert {r["policy"] for r in rows if r["cache_gb"] == 2.0} == {"vanilla", "marconi"}
    doc = json.loads((out / "plan.json").read_text())
    assert doc["schema_version"] == 8 and doc["cache_policies"] == ["vanilla", "marconi"]
    assert {c["cache_policy"] for c in doc["candidates"]} == {None, "vanilla", "marconi"}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--cache-gb", "2", "--policies", "fastest"], "--policies: unknown policy 'fastest'"),
        (["--cache-gb", "2", "--policies", "marconi,marconi"], "given twice"),
        (["--cache-gb", "2", "--policies", "oracle"], "hindsight bound"),
    ],
)
def test_bad_policies_are_one_line_errors(capsys, tmp_path: Path, extra, message) -> None:
    wl = tmp_path / "w.parquet"
    gen = ["workload", "generate", "fixed", "-n", "2", "--session-rate", "1", "-o", str(wl)]
    assert run(gen) == 0
    argv = ["plan", str(wl), "--slo", SLO, *extra, "--out", str(tmp_path / "o")]
    assert_clean_error(capsys, argv, tmp_path, message)
