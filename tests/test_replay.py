"""``twin.replay`` and the ``twin replay`` command."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from token_seqs import a
from typer.testing import CliRunner

from twin.cli import app
from twin.errors import TwinError
from twin.presets import get_model
from twin.replay import Trace, replay
from twin.workload_stats import summarize
from twin.workloads import Workload, WorkloadRow, WorkloadWriter

runner = CliRunner()
HYBRID = get_model("tiny-hybrid")


@pytest.fixture
def workload(tmp_path):
    """Two conversations behind one system prompt, plus a one-off request."""
    system = np.arange(500, 540, dtype=np.int32)
    rows = []
    for sid in range(3):
        rows.append(
            WorkloadRow(
                sid, 0, float(sid), None, np.r_[system, a(sid, 7, 8)], False, a(60 + sid, 61), 2
            )
        )
    for sid in range(3):
        rows.append(WorkloadRow(sid, 1, None, 2.0, a(9, 9, sid), True, a(70, 71, 72), 3))
    rows.append(WorkloadRow(3, 0, 9.0, None, a(1, 2, 3), False, a(4), 1))
    path = tmp_path / "w.parquet"
    with WorkloadWriter(path, {"generator": "test"}) as w:
        w.write_all(rows)
    return path


def test_replay_counts(workload):
    r = replay(workload, "tiny-hybrid", 10**9, "sglang+")
    # Turn 0: third system-prompt occurrence hits 40; turn 1: each hits its turn 0 (45 tokens).
    assert r.requests == 7 and r.hit_tokens == 40 + 3 * 45
    assert r.prompt_tokens == 3 * 43 + 3 * 48 + 3
    assert r.token_hit_rate == pytest.approx(r.hit_tokens / r.prompt_tokens)
    assert r.request_hit_rate == pytest.approx(4 / 7)
    assert r.flops_saved == pytest.approx(
        HYBRID.prefill_flops(40, 0).total + 3 * HYBRID.prefill_flops(45, 0).total
    )
    assert r.flops_total == pytest.approx(
        sum(HYBRID.prefill_flops(n, 0).total for n in [43] * 3 + [48] * 3 + [3])
    )
    assert r.kv_bytes + r.ssm_bytes <= r.peak_bytes <= r.capacity_bytes
    assert r.ssm_bytes == r.checkpoints_admitted * HYBRID.ssm_checkpoint_bytes  # none evicted
    assert r.checkpoints_hit == 4 and r.evictions == 0 and r.alpha is None


def test_transformer_unbounded_reaches_the_infinite_cache_ceiling(workload):
    ceiling = summarize(Workload.open(workload))["infinite_cache"]["hit_tokens"]
    for policy in ("sglang+", "marconi"):
        assert replay(workload, "tiny-transformer", 10**12, policy).hit_tokens == ceiling
    assert replay(workload, "tiny-hybrid", 10**12, "marconi").hit_tokens < ceiling


def test_oracle_reports_its_alpha_and_grid(workload):
    kv, ck = HYBRID.kv_bytes_per_token, HYBRID.ssm_checkpoint_bytes
    r = replay(workload, HYBRID, 60 * kv + 2 * ck, "oracle")
    assert r.alpha in [float(k) for k in r.details["grid"]] and len(r.details["grid"]) == 21
    assert r.hit_tokens == max(r.details["grid"].values())


def test_oracle_grid_over_processes_equals_in_process(workload):
    # The shared alpha-grid pool (policies.grid) returns runs in grid order.
    kv, ck = HYBRID.kv_bytes_per_token, HYBRID.ssm_checkpoint_bytes
    one = replay(workload, HYBRID, 60 * kv + 2 * ck, "oracle", {"jobs": 1})
    two = replay(workload, HYBRID, 60 * kv + 2 * ck, "oracle", {"jobs": 2})
    assert one.details == two.details and one.hit_tokens == two.hit_tokens


def test_trace_is_materialised_once_and_reusable(workload):
    trace = Trace.load(workload)
    assert trace.num_requests == 7 and len(trace.fulls[3]) == 43 + 2 + 3 + 3
    a1 = replay(trace, "tiny-hybrid", 10**9, "marconi").hit_tokens
    assert a1 == replay(trace, "tiny-hybrid", 10**9, "sglang+").hit_tokens


def test_bad_names_are_user_errors(workload):
    with pytest.raises(TwinError, match="unknown policy"):
        replay(workload, "tiny-hybrid", 10**9, "fifo")
    with pytest.raises(TwinError, match="unknown model"):
        replay(workload, "gpt-9", 10**9, "vanilla")


def invoke(*args: str):
    return runner.invoke(app, list(args), env={"COLUMNS": "250"})


def test_cli_table_and_json(workload):
    result = invoke(
        "replay",
        str(workload),
        "--model",
        "tiny-hybrid",
        "--cache-gb",
        "1",
        "--policy",
        "vanilla,sglang+,vllm+",
        "--block-size",
        "4",
    )
    assert result.exit_code == 0, result.output
    for word in ("vanilla", "sglang+", "vllm+", "token hit", "ckpts hit/admitted"):
        assert word in result.output
    result = invoke(
        "replay",
        str(workload),
        "-m",
        "tiny-hybrid",
        "--cache-gb",
        "1",
        "-p",
        "marconi,oracle",
        "--json",
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["model"] == "tiny-hybrid" and data["capacity_bytes"] == 10**9
    assert [r["policy"] for r in data["results"]] == ["marconi", "oracle"]
    assert data["results"][0]["hit_tokens"] == 40 + 3 * 45


def test_cli_refuses_bad_names(workload):
    result = invoke("replay", str(workload), "-m", "tiny-hybrid", "--cache-gb", "1", "-p", "lfu")
    assert isinstance(result.exception, TwinError) and "valid policies" in str(result.exception)
    result = invoke("replay", str(workload), "-m", "nope", "--cache-gb", "1")
    assert isinstance(result.exception, TwinError) and "unknown model" in str(result.exception)
    result = invoke("replay", "--help")
    assert result.exit_code == 0 and "twin replay chat.parquet" in result.output


def test_cli_fixed_alpha_requests_file_and_model_set(workload, tmp_path):
    kv, ck = HYBRID.kv_bytes_per_token, HYBRID.ssm_checkpoint_bytes
    out = tmp_path / "hits.parquet"
    gb = str((60 * kv + 2 * ck) / 1e9)
    args = ["replay", str(workload), "-m", "tiny-hybrid", "--cache-gb", gb, "-p"]
    result = invoke(
        *args, "sglang+,marconi", "--policy-option", "alpha=1.5", "--requests", str(out), "--json"
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    marconi = data["results"][1]
    assert marconi["alpha"] == 1.5 and marconi["details"]["alpha_source"] == "fixed"
    assert marconi["details"]["rules"] == "reference"
    rows = pq.read_table(out).to_pylist()
    assert [r["policy"] for r in rows] == ["sglang+"] * 7 + ["marconi"] * 7
    by_policy = {r["policy"]: r for r in data["results"]}
    for name in ("sglang+", "marconi"):
        mine = [r for r in rows if r["policy"] == name]
        assert [r["request"] for r in mine] == list(range(7))
        assert sum(r["hit_tokens"] for r in mine) == by_policy[name]["hit_tokens"]
        assert all((r["hit_node"] >= 0) == (r["hit_tokens"] > 0) for r in mine)
        assert [r["input_tokens"] for r in mine] == [43] * 3 + [48] * 3 + [3]
    # An option no named policy takes is refused, naming the flag.
    result = invoke(*args, "sglang+", "--policy-option", "alpha=1")
    assert isinstance(result.exception, TwinError) and "--policy-option alpha" in str(
        result.exception
    )
    # --model-set changes the shape and the name says so.
    result = invoke(*args, "marconi", "--model-set", "ssm_d_state=4", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["model"] == "tiny-hybrid[ssm_d_state=4]"


def test_cli_table_shows_the_tuned_alpha_and_its_grid(workload):
    kv, ck = HYBRID.kv_bytes_per_token, HYBRID.ssm_checkpoint_bytes
    gb = str((60 * kv + 2 * ck) / 1e9)
    result = invoke("replay", str(workload), "-m", "tiny-hybrid", "--cache-gb", gb, "-p", "oracle")
    assert result.exit_code == 0, result.output
    assert "(oracle)" not in result.output and "(hindsight)" in result.output
    assert "oracle alpha grid (score / best): 0.0:" in result.output
