"""``twin simulate``: the command, its outputs and its errors."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from twin.cli import app
from twin.errors import TwinError
from twin.workloads.examples import example_path
from twin.workloads.reader import Workload

runner = CliRunner()


SMALL = ["--model", "tiny-hybrid", "--cache-gb", "0.001"]


def _invoke(*args: str):
    return runner.invoke(app, ["simulate", *args])


def test_no_workload_runs_the_bundled_example(tmp_path):
    out = tmp_path / "sim"
    result = _invoke("--out", str(out), *SMALL)
    assert result.exit_code == 0, result.output
    assert "bundled 'chat' example" in result.output
    assert "TTFT" in result.output and "token hit rate" in result.output
    # the profile's provenance is shown per kernel family (h100: NVIDIA's vLLM tables)
    assert "GEMM: measured" in result.output and "datasheet" in result.output
    provenance = json.loads((out / "summary.json").read_text())["profile"]["provenance"]
    assert "attention: measured (vLLM" in provenance
    assert "alpha per replica" in result.output  # the default policy is marconi
    summary_alpha = json.loads((out / "summary.json").read_text())["replicas"][0]["policy"]
    assert f"{summary_alpha['alpha']:.1f} (" in result.output
    table = pq.read_table(out / "requests.parquet")
    assert table.num_rows == Workload.open(example_path("chat")).num_rows
    for col in (
        "session_id",
        "turn",
        "replica",
        "arrival_s",
        "queue_s",
        "prefill_s",
        "ttft_s",
        "tpot_s",
        "e2e_s",
        "input_tokens",
        "hit_tokens",
        "checkpoints",
    ):
        assert col in table.column_names
    summary = json.loads((out / "summary.json").read_text())
    assert summary["profile"]["gpu"] == "h100"
    assert set(summary["ttft_s"]) == {"mean", "p5", "p50", "p90", "p95", "p99"}


def test_json_output_is_the_summary_file(tmp_path):
    out = tmp_path / "sim"
    path = str(example_path("system-prompt"))
    result = _invoke(
        path,
        "--out",
        str(out),
        "--json",
        "--replicas",
        "2",
        "--router",
        "prefix-aware",
        "--policy",
        "sglang+",
        "--gpu",
        "a100",
        "--seed",
        "3",
        "--warmup-s",
        "5",
        *SMALL,
    )
    assert result.exit_code == 0, result.output
    printed = result.stdout[result.stdout.index("{") :]
    assert printed == (out / "summary.json").read_text()
    summary = json.loads(printed)
    assert summary["config"]["router"] == "prefix-aware" and summary["seed"] == 3
    assert summary["requests"]["warmup_excluded"] > 0
    assert summary["profile"]["gpu"] == "a100"


def test_policy_options_and_session_rate(tmp_path):
    result = _invoke(
        "--out",
        str(tmp_path),
        "--policy",
        "marconi",
        "--policy-option",
        "alpha=0.7",
        "--session-rate",
        "2",
        "--until-s",
        "60",
        "--json",
        *SMALL,
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout[result.stdout.index("{") :])
    assert summary["replicas"][0]["policy"]["alpha"] == 0.7
    assert summary["config"]["session_rate"] == 2.0
    arrivals = pq.read_table(tmp_path / "requests.parquet").column("arrival_s").to_pylist()
    assert max(arrivals) <= 60.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "lru"], "valid policies"),
        (["--policy", "oracle"], "hindsight"),
        (["--router", "random"], "valid routers"),
        (["--gpu", "h100", "--profile", "x.json"], "not both"),
        (["--gpu", "tpu"], "no profile"),
        (["--policy-option", "alpha"], "KEY=VALUE"),
        # Regression (issue 17): sglang+ used to take marconi's alpha and ignore it.
        (["-p", "sglang+", "--policy-option", "alpha=0.7"], "for policy 'sglang+'"),
        (["--max-running", "512", "--max-batched-tokens", "256"], "max-running"),
        (["--cache-gb", "500"], "no memory left"),
        (["--model", "gpt-5"], "valid names"),
    ],
)
def test_bad_input_is_one_clear_error(tmp_path, args, message):
    result = _invoke("--out", str(tmp_path / "o"), *args)
    assert result.exit_code != 0
    assert isinstance(result.exception, TwinError), result.output
    assert message in str(result.exception)
    assert not (tmp_path / "o" / "summary.json").exists()


def test_help_has_examples():
    result = _invoke("--help")
    assert result.exit_code == 0
    assert "Examples" in result.output and "--session-rate" in result.output


def test_the_command_is_the_library_run_builder(tmp_path):
    from twin.engine import build_run

    result = _invoke("--out", str(tmp_path / "cli"), "--seed", "2", "--json", *SMALL)
    assert result.exit_code == 0, result.output
    run = build_run(example_path("chat"), model="tiny-hybrid", cache_gb=0.001, seed=2)
    assert run.config.memory.gpu_memory_bytes == 80 * 2**30  # the default h100 profile's memory
    run.simulate(tmp_path / "lib")
    assert (tmp_path / "lib" / "summary.json").read_text() == (
        tmp_path / "cli" / "summary.json"
    ).read_text()
    assert (tmp_path / "lib" / "requests.parquet").read_bytes() == (
        tmp_path / "cli" / "requests.parquet"
    ).read_bytes()
