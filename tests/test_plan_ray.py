"""``twin plan --executor ray`` (issue 37): a plan's steps run as ray tasks through the
sweep's ray executor (one spec per candidate in one batch). Ray is an optional extra:
without it the flag is one line; the search itself is checked against an in-process
stand-in for ray's task API, and against a real local ray where it is installed."""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from test_bad_input import assert_clean_error

from twin.cli.main import run
from twin.reports.plan import plan
from twin.reports.sweep import RESULTS_FILE

HAS_RAY = importlib.util.find_spec("ray") is not None


def _fake_ray() -> types.ModuleType:
    """Ray's task API as run_on_ray uses it, run inline in this process (one node)."""
    ray = types.ModuleType("ray")
    state = {"up": False}

    class Ref:
        def __init__(self, value: Any) -> None:
            self.value = value

    def remote(**_: Any) -> Any:
        def wrap(fn: Any) -> Any:
            return types.SimpleNamespace(remote=lambda *a: Ref(fn(*a)))

        return wrap

    def wait(refs: list[Ref], num_returns: int = 1, timeout: float | None = None) -> Any:
        return refs[:num_returns], refs[num_returns:]

    context = types.SimpleNamespace(get_node_id=lambda: "f" * 56)
    ray.__dict__.update(
        is_initialized=lambda: state["up"],
        init=lambda **_: state.update(up=True),
        shutdown=lambda: state.update(up=False),
        remote=remote,
        put=lambda v: v,
        get=lambda ref: ref.value,
        wait=wait,
        cancel=lambda ref: None,
        cluster_resources=lambda: {"CPU": 1},
        get_runtime_context=lambda: context,
    )
    return ray


def _workload(tmp_path: Path) -> Path:
    w = tmp_path / "w.parquet"
    args = ["workload", "generate", "fixed", "--isl", "2048", "--osl", "8", "-n", "100"]
    assert run([*args, "--session-rate", "1", "-o", str(w)]) == 0
    return w


def _plan(w: Path, out: Path, **kw: Any) -> Any:
    return plan(
        w,
        out,
        model="tiny-transformer",
        slos=["p95_ttft<=0.7ms"],
        session_rate=15000.0,
        duration_s=0.15,
        gpus=["h100", "h200"],
        engines=["vllm"],
        tp=[1],
        seeds=1,
        **kw,
    )


def test_a_plan_on_ray_tasks_equals_the_local_one(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TWIN_PROFILES_DIR", str(tmp_path / "profiles"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "node"))
    (tmp_path / "node").mkdir()
    w = _workload(tmp_path)
    local = _plan(w, tmp_path / "local")
    monkeypatch.setitem(sys.modules, "ray", _fake_ray())
    remote = _plan(w, tmp_path / "ray", executor="ray")
    assert remote.counts == local.counts
    assert remote.winner is not None and local.winner is not None
    assert remote.winner.candidate == local.winner.candidate
    assert remote.winner.replicas == local.winner.replicas
    rows = lambda d: sorted(pq.read_table(d / RESULTS_FILE).to_pylist(), key=str)  # noqa: E731
    assert rows(tmp_path / "ray") == rows(tmp_path / "local")
    # Every point ran as a task (one node here), said in plan.json.
    assert remote.nodes == {"f" * 56: remote.points_run} and remote.points_run > 1
    doc = json.loads((tmp_path / "ray" / "plan.json").read_text())
    assert doc["ray_nodes"] == {"f" * 56: remote.points_run}
    assert "ray_nodes" not in json.loads((tmp_path / "local" / "plan.json").read_text())


@pytest.mark.skipif(HAS_RAY, reason="ray is installed: the missing-extra line cannot show")
def test_without_ray_the_flag_is_one_line(capsys, tmp_path: Path) -> None:
    argv = ["plan", "--slo", "p95_ttft<=1s", "--executor", "ray", "--out", str(tmp_path / "o")]
    assert_clean_error(capsys, argv, tmp_path, "ray is not installed")


def test_an_unknown_executor_is_one_line(capsys, tmp_path: Path) -> None:
    argv = ["plan", "--slo", "p95_ttft<=1s", "--executor", "dask", "--out", str(tmp_path / "o")]
    assert_clean_error(capsys, argv, tmp_path, "--executor 'dask'")


@pytest.mark.slow
def test_a_plan_on_a_real_local_ray(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("ray")
    monkeypatch.setenv("TWIN_PROFILES_DIR", str(tmp_path / "profiles"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    w = _workload(tmp_path)
    local = _plan(w, tmp_path / "local")
    remote = _plan(w, tmp_path / "ray", executor="ray")
    assert remote.winner is not None and local.winner is not None
    assert (remote.winner.candidate, remote.winner.replicas) == (
        local.winner.candidate,
        local.winner.replicas,
    )
    assert sum(remote.nodes.values()) == remote.points_run
