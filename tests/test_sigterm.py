"""SIGTERM (``kill PID``, a scheduler's stop, ``timeout``) of a command with worker processes
(issue 32): it stops its workers, removes its temporaries, keeps the previous complete
outputs (or leaves no half-made set), releases its output folder and exits with 143
(128 + SIGTERM), saying ``terminated``.

Each command is started as a real subprocess with two workers; the test waits (polling
``/proc``, no fixed sleeps) until both workers exist, sends SIGTERM to the command alone,
then checks every worker gone, the exit status, and what is left in the output folder,
``$TMPDIR`` and the workload cache. The in-process tests hold the commit's deferral: a
SIGTERM arriving while a set is being renamed into place waits for the renames.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_orphans import COMMANDS, ROOT, reap, start_with_workers, wait_gone

from twin import atomic
from twin.atomic import OutputSet, read_manifest
from twin.cli.main import TERMINATED_EXIT, _sigterm_raises, run
from twin.errors import Terminated
from twin.workloads.examples import example_path

# The commands of tests/test_orphans.py whose workers exist for seconds; the slow ones run
# longer before their workers start (simulate's alpha grid comes at the first eviction).
NAMES = ["report-capacity", "replay-oracle", "simulate-marconi", "plan"]
SLOW = {"simulate-marconi", "plan"}
PREVIOUS = {  # a complete set in the output folder before the run: it must survive whole
    "simulate-marconi": [
        *("simulate", str(example_path("chat")), "-m", "tiny-hybrid"),
        *("--cache-gb", "0.001", "--until-s", "20", "--out", "{d}/out"),
    ],
}


def _leftovers(folder: Path) -> list[str]:
    """Hidden entries (temporaries, journals, lock files) anywhere under ``folder``."""
    if not folder.exists():
        return []
    return sorted(str(p.relative_to(folder)) for p in folder.rglob(".*"))


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in NAMES]
)
def test_sigterm_stops_workers_and_leaves_nothing_half_done(tmp_path: Path, name: str) -> None:
    tmpdir, cache = tmp_path / "tmp", tmp_path / "cache"
    tmpdir.mkdir()
    cache.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TMPDIR": str(tmpdir),
        "XDG_CACHE_HOME": str(cache),
    }
    argv = [a.format(d=tmp_path) for a in COMMANDS[name]]
    old = None
    if name in PREVIOUS:
        before = [a.format(d=tmp_path) for a in PREVIOUS[name]]
        done = subprocess.run([sys.executable, "-m", "twin", *before], env=env, check=False)
        assert done.returncode == 0
        old = _files(tmp_path / "out")
        argv.append("--force")
    proc, workers = start_with_workers(name, argv, env, stderr=subprocess.PIPE)
    try:
        proc.send_signal(signal.SIGTERM)  # the command alone, as `kill PID` does
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == TERMINATED_EXIT, (proc.returncode, err[-2000:])
        assert err.strip().splitlines()[-1] == "terminated", err[-2000:]
        assert wait_gone(workers) == []
        out = tmp_path / "out"
        assert _leftovers(out) == [], f"{name}: left {_leftovers(out)}"
        assert list(tmpdir.iterdir()) == [] and _leftovers(cache) == []
        if old is not None:  # the previous complete set, byte for byte
            assert _files(out) == old
            read_manifest(out)
        elif (out / "manifest.json").exists():
            read_manifest(out)  # a complete set, never a half-made one
    finally:
        reap(proc, workers)


def test_a_sigterm_during_a_commit_waits_for_its_renames(tmp_path: Path, monkeypatch) -> None:
    """The set is renamed into place whole, then ``Terminated`` is raised; no journal left."""
    real = atomic._finish

    def finish(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # arrives while the renames run
        return real(*args, **kwargs)

    monkeypatch.setattr(atomic, "_finish", finish)
    out = tmp_path / "out"
    with _sigterm_raises():
        outputs = OutputSet(out, ["a.txt", "b.txt"], "test")
        outputs.write_text("a.txt", "new a")
        outputs.write_text("b.txt", "new b")
        with pytest.raises(Terminated):
            outputs.commit()
    assert {p.name for p in out.iterdir()} == {"a.txt", "b.txt", "manifest.json"}
    assert read_manifest(out)["files"].keys() == {"a.txt", "b.txt"}


def test_a_sigterm_before_the_commit_keeps_the_previous_set(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with OutputSet(out, ["a.txt"], "test") as first:
        first.write_text("a.txt", "old")
    with _sigterm_raises(), pytest.raises(Terminated), OutputSet(out, ["a.txt"], "test") as s:
        s.write_text("a.txt", "new")
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises at once; never reached in full
    assert (out / "a.txt").read_text() == "old"
    assert _leftovers(out) == []


def test_the_handler_is_the_previous_one_again_after_a_command(tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGTERM)
    assert run(["models", "list", "--json"]) == 0
    assert signal.getsignal(signal.SIGTERM) is before
