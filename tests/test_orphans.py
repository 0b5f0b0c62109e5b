"""``kill -9`` of every command that starts worker processes leaves no worker behind
(issue 32): each is started with two workers on a small input, SIGKILLed (the parent
alone, as the OOM killer or ``kill -9 PID`` does) once its workers exist, and every
process it had started must be gone within seconds.

Every pool goes through ``twin.workers`` (the parent-death guard); these tests hold it
for the commands themselves, not only for the helper.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from twin.workloads.examples import example_path

ROOT = Path(__file__).resolve().parents[1]
SP = str(example_path("system-prompt"))
CHAT = str(example_path("chat"))

# Each command runs long enough (seconds) that its workers are seen before it ends.
COMMANDS = {
    "report-capacity": [
        *("report", "capacity", CHAT, "-m", "tiny-hybrid", "--policies", "vllm+,marconi"),
        *("--cache-gb", "0.001,0.002,0.004", "--jobs", "2", "--out", "{d}/out"),
    ],
    "plan": [
        *("plan", SP, "-m", "tiny-hybrid", "--slo", "p95_ttft<=500ms", "--gpus", "h100,h200"),
        *("--tp", "1", "--session-rate", "1", "--duration", "600", "--jobs", "2"),
        *("--out", "{d}/out"),
    ],
    "replay-oracle": [
        *("replay", CHAT, "-m", "tiny-hybrid", "--cache-gb", "0.001", "-p", "oracle"),
        *("--jobs", "2"),
    ],
    "replay-marconi": [
        *("replay", CHAT, "-m", "tiny-hybrid", "--cache-gb", "0.001", "-p", "marconi"),
        *("--jobs", "2"),
    ],
    "simulate-marconi": [
        *("simulate", CHAT, "-m", "tiny-hybrid", "--cache-gb", "0.001", "--policy", "marconi"),
        *("--policy-option", "jobs=2", "--out", "{d}/out"),
    ],
    "reproduce": ["reproduce", "marconi", "--quick", "--jobs", "2", "--out", "{d}/out"],
}
SLOW = {"plan", "reproduce"}


def _children(pid: int) -> list[int]:
    """The live processes whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(entry))
    return found


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"  # exited; its new parent reaps it


def start_with_workers(
    name: str, argv: list[str], env: dict[str, str], stderr: int | None = subprocess.DEVNULL
) -> tuple[subprocess.Popen[str], list[int]]:
    """``twin ARGV`` in a session of its own, once at least two of its workers run (polled
    from /proc, no wall-clock assertion); the process and the workers' pids."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "twin", *argv],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        text=True,
        start_new_session=True,
    )
    workers: list[int] = []
    deadline = time.monotonic() + 600
    while len(workers) < 2 and proc.poll() is None and time.monotonic() < deadline:
        workers = _children(proc.pid)
        time.sleep(0.02)
    if len(workers) < 2:
        proc.kill()
        proc.wait()
        pytest.fail(f"{name}: no workers seen (exit {proc.returncode})")
    return proc, workers


def reap(proc: subprocess.Popen[str], workers: list[int]) -> None:
    """Kill the command and its workers where a test left them running."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for w in workers:
        if not _gone(w):
            os.kill(w, signal.SIGKILL)


def wait_gone(workers: list[int]) -> list[int]:
    """The workers still alive after up to 10 s."""
    deadline = time.monotonic() + 10
    while not all(_gone(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [w for w in workers if not _gone(w)]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in COMMANDS],
)
def test_sigkill_of_a_command_leaves_no_worker(tmp_path: Path, name: str) -> None:
    argv = [a.format(d=tmp_path) for a in COMMANDS[name]]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc, workers = start_with_workers(name, argv, env)
    try:
        proc.kill()  # the parent alone
        proc.wait()
        alive = wait_gone(workers)
        assert alive == [], f"{name}: workers {alive} outlived their SIGKILLed parent"
    finally:
        reap(proc, workers)
