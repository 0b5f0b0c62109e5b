"""Two commands into one output folder (issue 32): the first holds it from its
existing-output check to its commit, the second is refused at once in one line, exit 2.

Real processes: the first runs the real CLI with its commit held back until the test
says go (so the two overlap whatever the machine's speed); the second is a plain
``python -m twin`` started meanwhile.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from test_report import CAPACITY

from twin.atomic import MANIFEST_FILE, OutputSet, claim, hold, read_manifest
from twin.cli.main import run
from twin.errors import TwinError

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

# Runs `twin ARGS...` in this process with every set commit held until the file GO
# exists; READY says the command got as far as its commit (its folder held since its
# checks).
_HELD_BACK = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from twin import atomic
    from twin.cli.main import run

    ready, go, args = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
    commit = atomic.OutputSet.commit

    def held_commit(self, *a, **k):
        ready.touch()
        while not go.exists():
            time.sleep(0.05)
        return commit(self, *a, **k)

    atomic.OutputSet.commit = held_commit
    sys.exit(run(args))
    """
)

SIM = ["simulate", "-m", "tiny-hybrid", "--cache-gb", "0.001"]
REPORT = [
    *CAPACITY,
    "--cache-gb",
    "0.001",
    "--policies",
    "vllm+",
]


def _twin(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "twin", *args], env=ENV, capture_output=True, text=True, timeout=300
    )


def _one_error_line(res: subprocess.CompletedProcess[str], needle: str) -> str:
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    assert needle in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(
    "argv",
    [SIM, pytest.param(REPORT, marks=pytest.mark.slow)],
    ids=["simulate", "report-capacity"],
)
def test_a_second_command_into_a_held_folder_is_refused_at_once(
    tmp_path: Path, argv: list[str]
) -> None:
    out = tmp_path / "out"
    ready, go = tmp_path / "ready", tmp_path / "go"
    script = tmp_path / "held.py"
    script.write_text(_HELD_BACK)
    first = subprocess.Popen(
        [sys.executable, str(script), str(ready), str(go), *argv, "--out", str(out)],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while not ready.exists():
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the first command never reached its commit"
            time.sleep(0.05)
        # The first holds the folder, its outputs written under temporary names only.
        second = _twin(*argv, "--out", str(out))
        _one_error_line(second, "another twin command is writing into this folder now")
        assert not (out / MANIFEST_FILE).exists()
        go.touch()
        _, err = first.communicate(timeout=240)
        assert first.returncode == 0, err
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    read_manifest(out)  # the first run's set, whole
    if argv is SIM:
        assert json.loads((out / "summary.json").read_text())["seed"] == 0
        # The folder is free again: a third run sees the first's outputs and needs --force.
        _one_error_line(_twin(*SIM, "--out", str(out)), "--force")


def test_a_held_folder_is_refused_in_process_and_freed_after(tmp_path: Path) -> None:
    out = tmp_path / "sim"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from twin.atomic import claim\n"
            "with claim(sys.argv[1]):\n    print('held', flush=True); time.sleep(60)",
            str(out),
        ],
        env=ENV,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        with pytest.raises(TwinError, match="another twin command"), claim(out):
            pass
        assert run([*SIM, "--out", str(out)]) == 2
    finally:
        proc.kill()
        proc.wait()
    # The hold died with its process (an flock): the folder is free.
    assert run([*SIM, "--out", str(out)]) == 0
    read_manifest(out)


def test_a_refused_or_failed_command_leaves_no_folder_it_made(tmp_path: Path) -> None:
    out = tmp_path / "new" / "sim"
    assert run([*SIM, "--engine", "no-such-engine", "--out", str(out)]) == 2
    assert not (tmp_path / "new").exists()


def test_a_claim_is_the_process_s_so_no_thread_of_it_waits_on_it(tmp_path: Path) -> None:
    """A merge or commit from another thread of the claiming process goes ahead (a hold per
    thread would wait on the claim's own lock forever)."""
    import threading

    out = tmp_path / "out"
    done: list[str] = []

    def commit_from_a_thread() -> None:
        with hold(out), OutputSet(out, ["a.txt"], kind="test") as outputs:
            outputs.write_text("a.txt", "a\n")
        done.append("a")

    with claim(out):
        worker = threading.Thread(target=commit_from_a_thread, daemon=True)
        worker.start()
        worker.join(timeout=30)
    assert done == ["a"]
    assert read_manifest(out)["files"].keys() == {"a.txt"}
