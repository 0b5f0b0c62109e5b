"""``twin replay`` and ``twin simulate`` run on every issue-13 preset (a tiny workload)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from twin.cli import app
from twin.replay import replay
from twin.workloads import WorkloadRow, WorkloadWriter

# (preset, tensor-parallel GPUs on H100s so that the weights fit)
PRESETS = [
    ("qwen3.5-9b", 1),
    ("qwen3.5-35b-a3b", 2),
    ("qwen3-next-80b-a3b", 4),
    ("jamba-1.5-mini", 4),
    ("granite-4.0-h-small", 2),
    ("falcon-h1-7b", 1),
    ("gpt-oss-20b", 1),
    ("gemma-3-4b", 1),
    ("nemotron-h-8b", 1),
    ("tiny-gdn-hybrid", 1),
    ("tiny-mamba1-hybrid", 1),
    ("tiny-swa", 1),
    ("tiny-swa-hybrid", 1),
    ("tiny-parallel", 1),
    ("tiny-moe-hybrid", 1),
]


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    """Two two-turn conversations behind a shared 300-token system prompt."""
    system = np.arange(1000, 1300, dtype=np.int32)
    rows = []
    for sid in range(2):
        first = np.r_[system, np.arange(10 * sid, 10 * sid + 40, dtype=np.int32)]
        rows.append(WorkloadRow(sid, 0, float(sid), None, first, False, None, 8))
        more = np.arange(500 + sid, 560 + sid, dtype=np.int32)
        rows.append(WorkloadRow(sid, 1, None, 1.0, more, True, None, 4))
    path = tmp_path_factory.mktemp("w") / "w.parquet"
    with WorkloadWriter(path, {"generator": "test"}) as w:
        w.write_all(rows)
    return path


@pytest.mark.parametrize(("name", "tp"), PRESETS)
def test_replay_and_simulate(name: str, tp: int, workload, tmp_path) -> None:
    for policy in ("sglang+", "vllm+"):
        r = replay(workload, name, 10**11, policy)
        assert r.requests == 4
        assert r.hit_tokens >= 300  # the second conversation reuses the system prompt
    out = tmp_path / "sim"
    args = ["simulate", str(workload), "-m", name, "--tp", str(tp), "--cache-gb", "4"]
    result = CliRunner().invoke(app, [*args, "-p", "sglang+", "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"]["measured"] == 4
