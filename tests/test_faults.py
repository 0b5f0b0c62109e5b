"""Faults and concurrency: kills, interrupts, stale temporaries, concurrent writers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from twin import atomic
from twin.atomic import MANIFEST_FILE, read_manifest, remove_stale_tmp, write_text_atomic
from twin.cli import app
from twin.engine.config import MemoryConfig
from twin.errors import TwinError
from twin.reports.sweep import RESULTS_FILE, SweepSpec, grid, resolve, run_sweep
from twin.workloads.examples import example_path

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--model", "tiny-hybrid", "--cache-gb", "0.001"]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie (exited, not yet reaped by its parent) counts as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def _wait_gone(pids: list[int], limit_s: float = 30.0) -> list[int]:
    deadline = time.monotonic() + limit_s
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if not _gone(p)]
        time.sleep(0.2)
    return alive


# --- stale temporaries ------------------------------------------------------------------


def test_stale_tmp_of_a_dead_process_is_removed_by_the_next_writer(tmp_path: Path) -> None:
    target = tmp_path / "summary.json"
    dead = tmp_path / f".summary.json.tmp-{_dead_pid()}"
    nested = tmp_path / f"..summary.json.tmp-{_dead_pid()}.tmp-{_dead_pid()}"
    live = tmp_path / f".summary.json.tmp-{os.getppid()}"  # a live process: kept
    other = tmp_path / f".other.json.tmp-{_dead_pid()}"  # another name: not ours to judge
    for p in (dead, nested, live, other):
        p.write_text("half")
    write_text_atomic(target, "{}")
    assert target.read_text() == "{}"
    assert not dead.exists() and not nested.exists()
    assert live.exists() and other.exists()
    assert remove_stale_tmp(target) == []


# --- simulate: outputs as a set, --force --------------------------------------------------


def test_simulate_commits_its_outputs_as_a_set(tmp_path: Path) -> None:
    out = tmp_path / "sim"
    res = CliRunner().invoke(app, ["simulate", "--out", str(out), *SMALL])
    assert res.exit_code == 0, res.output
    manifest = read_manifest(out)
    assert set(manifest["files"]) == {"requests.parquet", "summary.json"}
    assert not [p for p in out.iterdir() if ".tmp-" in p.name]
    # Another run's summary beside this run's requests is refused, naming the file.
    (out / "summary.json").write_text(json.dumps({"other": "run"}))
    with pytest.raises(TwinError, match=r"summary\.json: does not belong"):
        read_manifest(out)


def test_a_kill_between_renames_is_finished_by_the_next_look(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "sim"
    res = CliRunner().invoke(app, ["simulate", "--out", str(out), *SMALL])
    assert res.exit_code == 0, res.output
    old_summary = (out / "summary.json").read_bytes()
    real_replace = os.replace

    def replace_then_die(src, dst):  # "killed" after renaming requests.parquet
        if Path(dst).name == "summary.json":
            raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(atomic.os, "replace", replace_then_die)
    args = ["simulate", "--out", str(out), "--force", "--seed", "3", *SMALL]
    res = CliRunner().invoke(app, args)
    assert res.exit_code != 0
    monkeypatch.undo()
    # Mid-way: the new requests.parquet beside the old summary.json; the commit's journal
    # names the rest, whose temporaries are whole.
    assert (out / "summary.json").read_bytes() == old_summary
    assert [p.name for p in out.glob(".manifest.json.commit-*")]
    # The next look at the folder finishes the commit: the new set, whole, and vouched for.
    manifest = read_manifest(out)
    assert set(manifest["files"]) == {"requests.parquet", "summary.json"}
    assert json.loads((out / "summary.json").read_text())["seed"] == 3
    assert sorted(p.name for p in out.iterdir()) == [
        MANIFEST_FILE,
        "requests.parquet",
        "summary.json",
    ]


def test_second_simulate_into_one_out_refuses_without_force(tmp_path: Path) -> None:
    out = tmp_path / "sim"
    first = CliRunner().invoke(app, ["simulate", "--out", str(out), *SMALL])
    assert first.exit_code == 0, first.output
    before = (out / "summary.json").read_bytes()
    again = CliRunner().invoke(app, ["simulate", "--out", str(out), "--seed", "5", *SMALL])
    assert isinstance(again.exception, TwinError)
    assert "--force" in str(again.exception) and "another run" in str(again.exception)
    assert (out / "summary.json").read_bytes() == before
    forced = CliRunner().invoke(
        app, ["simulate", "--out", str(out), "--seed", "5", "--force", *SMALL]
    )
    assert forced.exit_code == 0, forced.output
    assert json.loads((out / "summary.json").read_text())["seed"] == 5
    read_manifest(out)


# --- sweeps: two writers in one folder -----------------------------------------------------


def test_two_sweeps_into_one_out_keep_each_others_points(tmp_path: Path) -> None:
    spec = resolve(
        SweepSpec(workload=str(example_path("system-prompt")), model="tiny-hybrid", gpu="h100")
    )
    mine = grid([0.0005, 0.002], ["vllm+"], [None], 1)
    theirs = grid([0.0005, 0.002], ["marconi"], [None], 1)
    started = []

    def other_sweep_runs_meanwhile(point, row):
        # The other sweep runs to completion between this sweep's first and second point.
        if not started:
            started.append(point)
            run_sweep(spec, theirs, tmp_path)

    run_sweep(spec, mine, tmp_path, on_point=other_sweep_runs_meanwhile)
    rows = pq.read_table(tmp_path / RESULTS_FILE).to_pylist()
    assert sorted((r["policy"], r["cache_gb"]) for r in rows) == [
        ("marconi", 0.0005),
        ("marconi", 0.002),
        ("vllm+", 0.0005),
        ("vllm+", 0.002),
    ]


# --- the process pool: SIGKILL and Ctrl-C ---------------------------------------------------

_POOL_SCRIPT = textwrap.dedent(
    """
    import faulthandler, os, signal, sys, time
    from twin.workers import run_in_pool

    # SIGUSR1 writes every thread's stack: what a parent that hangs is waiting on.
    STACKS = open(os.path.join(sys.argv[1], "stacks.txt"), "w")
    faulthandler.register(signal.SIGUSR1, file=STACKS, all_threads=True)

    def slow(i, folder):
        open(os.path.join(folder, f"worker-{os.getpid()}"), "w").close()
        time.sleep(300)
        return i

    if __name__ == "__main__":
        run_in_pool(slow, range(8), lambda i: (i, sys.argv[1]), 2, lambda i, r: None)
    """
)


# The alpha grid's pool (Marconi's bootstrap, the oracle): the same guard (issue 32).
_GRID_SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    from twin.policies.grid import map_alphas

    def slow(folder, alpha):
        open(os.path.join(folder, f"worker-{os.getpid()}"), "w").close()
        time.sleep(300)
        return alpha

    if __name__ == "__main__":
        list(map_alphas(slow, (sys.argv[1],), (0.0, 0.5, 1.0, 1.5), jobs=2))
    """
)


def _live_ctrl_c() -> None:
    # As in a terminal's foreground job. A background job of a non-interactive shell
    # (a CI run started with ``&``) starts with SIGINT ignored, and the pool's parent
    # would inherit that: the /proc masks of the flake this test had showed SigIgn
    # with SIGINT set.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start_pool(tmp_path: Path, code: str = _POOL_SCRIPT) -> tuple[subprocess.Popen, list[int]]:
    script = tmp_path / "pool.py"
    script.write_text(code)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path)],
        env=env,
        start_new_session=True,
        preexec_fn=_live_ctrl_c,
    )
    deadline = time.monotonic() + 60
    pids: list[int] = []
    while len(pids) < 2 and time.monotonic() < deadline:
        pids = [int(p.name.split("-")[1]) for p in tmp_path.glob("worker-*")]
        time.sleep(0.1)
    assert len(pids) == 2, "the pool never started its workers"
    return proc, pids


@pytest.mark.parametrize("code", [_POOL_SCRIPT, _GRID_SCRIPT], ids=["sweep", "alpha-grid"])
def test_sigkill_of_the_sweep_takes_its_workers_down(tmp_path: Path, code: str) -> None:
    proc, workers = _start_pool(tmp_path, code)
    proc.kill()
    proc.wait()
    assert _wait_gone(workers) == [], "pool workers outlived their SIGKILLed parent"


def test_ctrl_c_with_jobs_stops_the_pool_without_finishing_points(tmp_path: Path) -> None:
    proc, workers = _start_pool(tmp_path)
    os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the whole group
    try:
        # The points sleep 300 s each: finishing them first would blow this limit.
        rc = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        # An intermittent failure under a loaded machine: say where the parent waits.
        # Its signal masks (SigPnd/ShdPnd pending, SigBlk blocked, SigIgn ignored, SigCgt
        # caught; SIGINT is bit 1) say whether the Ctrl-C reached it at all.
        status = Path(f"/proc/{proc.pid}/status")
        masks = [ln for ln in status.read_text().splitlines() if "Sig" in ln or "Pnd" in ln]
        os.kill(proc.pid, signal.SIGUSR1)
        time.sleep(2)
        stacks = (tmp_path / "stacks.txt").read_text()
        pytest.fail(f"the pool's parent outlived Ctrl-C by 60 s; {masks}; its threads:\n{stacks}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert rc != 0
    assert _wait_gone(workers) == []


# --- a sweep that outgrows its GPU ----------------------------------------------------------


def test_points_that_cannot_run_are_reported_not_fatal(tmp_path: Path) -> None:
    out = tmp_path / "cap"
    args = ["report", "capacity", str(example_path("system-prompt")), "-m", "tiny-hybrid"]
    args += ["--cache-gb", "0.002,100", "--policies", "vllm+,marconi", "--out", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    rows = pq.read_table(out / RESULTS_FILE).to_pylist()
    bad = [r for r in rows if r["infeasible"]]
    assert {r["cache_gb"] for r in bad} == {100.0} and len(bad) == 2
    assert all(r["ttft_p95_ms"] is None for r in bad)
    assert all(r["ttft_p95_ms"] > 0 for r in rows if not r["infeasible"])
    md = (out / "report.md").read_text()
    assert "Points that cannot run" in md and "100 GB cache: no memory left" in md
    assert "100 GB cache" in (out / "report.html").read_text()


def test_a_sweep_where_nothing_fits_is_one_clear_error(tmp_path: Path) -> None:
    out = tmp_path / "cap"
    args = ["report", "capacity", str(example_path("system-prompt")), "-m", "tiny-hybrid"]
    args += ["--cache-gb", "100", "--policies", "vllm+", "--out", str(out)]
    res = CliRunner().invoke(app, args)
    assert isinstance(res.exception, TwinError)
    assert "no point of the sweep can run" in str(res.exception)
    assert "100 GB cache" in str(res.exception)


def test_report_capacity_defaults_fit_the_default_model_on_the_default_gpu() -> None:
    import inspect

    from twin.cli.report import capacity
    from twin.costmodel.profile_store import device_memory_bytes, resolve_profile
    from twin.engine import EngineConfig, memory_budget
    from twin.presets import resolve_model

    params = inspect.signature(capacity).parameters
    model = resolve_model(params["model"].default)
    prof = resolve_profile(None, None)
    for text in params["cache_gb"].default.default.split(","):
        config = EngineConfig(
            memory=MemoryConfig(
                cache_bytes=int(float(text) * 1e9), gpu_memory_bytes=device_memory_bytes(prof)
            )
        )
        assert memory_budget(model, config) > 0


@pytest.mark.parametrize("jobs", [1, 2])
def test_sweep_progress_moves_within_points(tmp_path: Path, jobs: int) -> None:
    spec = resolve(
        SweepSpec(workload=str(example_path("system-prompt")), model="tiny-hybrid", gpu="h100")
    )
    points = grid([0.001], ["vllm+", "marconi"], [None], 1)
    steps: list[float] = []
    run_sweep(spec, points, tmp_path, jobs=jobs, progress=steps.append)
    assert sum(steps) == pytest.approx(len(points))
    partial = [s for s in steps if 0 < s < 0.99]
    assert partial, f"progress only ticked once per point: {steps}"
