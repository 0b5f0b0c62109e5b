"""A counting fault injector for the writers (issue 32): the Nth write, rename or fsync of a
command fails (ENOSPC or EIO), or the process dies there (``kill``: ``os._exit`` in a
forked child, so no ``finally`` runs, as under SIGKILL), or is sent SIGTERM there
(``term``: in a forked child, which must clean up and exit with 143).

Every write path of the twin's outputs goes through one of the patched calls:
``os.replace`` (every rename into place), ``os.fsync`` (files and folders),
``Path.write_text``/``write_bytes`` (JSON, SVG, Markdown, HTML; half the data lands
before the fault, as when a disk fills mid-write), pyarrow's ``write_table`` and
``ParquetWriter.write_batch``/``write_table``/``close`` (workloads, requests, results,
raw calibration tables), and the JSONL exporter's file writes. Looping N from 1 until a
run finishes without reaching N hits every one of them in turn.

``CASES`` and ``sweep`` are that loop over the commands; ``tests/test_fault_injection.py``
holds them to it, and ``benchmarks/bench_reliability.py`` runs it on this tree and on a
baseline revision.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import shutil
import signal
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

KILLED = 137  # the status a forked child reports when it "died" at the Nth call
TERMINATED = 143  # 128 + SIGTERM: what a command stopped by SIGTERM exits with
MODES = ("ENOSPC", "EIO", "kill", "term")
CHILD_MODES = ("kill", "term")  # run in a forked child


class Injector:
    """Counts the patched calls; the ``nth`` fails (or kills the process)."""

    def __init__(self, nth: int, mode: str) -> None:
        assert mode in MODES
        self.nth, self.mode, self.calls = nth, mode, 0
        self.hit: str | None = None

    def tick(self, what: str, target: Any, partial: Callable[[], Any] | None = None) -> None:
        self.calls += 1
        if self.calls != self.nth:
            return
        self.hit = f"{what} {target}"
        if partial is not None:
            partial()  # part of the data reaches the file first
        if self.mode == "kill":
            os._exit(KILLED)
        if self.mode == "term":  # the handler raises at the next bytecode, in this call
            os.kill(os.getpid(), signal.SIGTERM)
            return
        code = errno.ENOSPC if self.mode == "ENOSPC" else errno.EIO
        if what == "fsync" or "parquet" in str(target):  # as the real ones: no file name
            raise OSError(code, os.strerror(code))
        raise OSError(code, os.strerror(code), str(target))


class _File:
    """A text file whose every ``write`` is one call of the injector."""

    def __init__(self, f: Any, inj: Injector, name: str) -> None:
        self._f, self._inj, self._name = f, inj, name

    def write(self, data: str) -> int:
        self._inj.tick("write", self._name, lambda: self._f.write(data[: len(data) // 2]))
        return int(self._f.write(data))

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._f, attr)

    def __enter__(self) -> _File:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._f.close()


@contextlib.contextmanager
def injected(nth: int, mode: str) -> Iterator[Injector]:
    """Patch every write, rename and fsync; the ``nth`` call faults (``mode``)."""
    from twin.workloads import exporters

    inj = Injector(nth, mode)
    undo: list[tuple[Any, str, Any]] = []

    def patch(obj: Any, name: str, make: Callable[[Any], Any]) -> None:
        real = obj.__dict__[name] if isinstance(obj, type) else getattr(obj, name)
        undo.append((obj, name, real))
        setattr(obj, name, make(real))

    def rename(real: Any) -> Any:
        def replace(src: Any, dst: Any, **kw: Any) -> None:
            inj.tick("rename", dst)
            real(src, dst, **kw)

        return replace

    def fsync(real: Any) -> Any:
        def sync(fd: int) -> None:
            inj.tick("fsync", fd)
            real(fd)

        return sync

    def write_half(real: Any) -> Any:
        def write(self: pathlib.Path, data: Any, *a: Any, **kw: Any) -> Any:
            inj.tick("write", self, lambda: real(self, data[: len(data) // 2], *a, **kw))
            return real(self, data, *a, **kw)

        return write

    def call(what: str) -> Callable[[Any], Any]:
        def make(real: Any) -> Any:
            def wrapped(*a: Any, **kw: Any) -> Any:
                inj.tick(what, a[1] if len(a) > 1 and what == "write_table" else "parquet")
                return real(*a, **kw)

            return wrapped

        return make

    def text_open(path: Any, mode: str = "r", *a: Any, **kw: Any) -> Any:
        f = open(path, mode, *a, **kw)  # noqa: SIM115 - handed back to the caller
        return _File(f, inj, str(path)) if "w" in mode or "a" in mode else f

    patch(os, "replace", rename)
    patch(os, "fsync", fsync)
    patch(pathlib.Path, "write_text", write_half)
    patch(pathlib.Path, "write_bytes", write_half)
    patch(pq, "write_table", call("write_table"))
    for method in ("write_batch", "write_table", "close"):
        patch(pq.ParquetWriter, method, call(f"ParquetWriter.{method}"))
    exporters.open = text_open  # type: ignore[attr-defined]
    try:
        yield inj
    finally:
        del exporters.open  # type: ignore[attr-defined]
        for obj, name, real in reversed(undo):
            setattr(obj, name, real)


def run_in_child(fn: Callable[[], int], nth: int, mode: str) -> tuple[int, int]:
    """Fork; in the child, run ``fn`` under ``injected(nth, mode)``; return (status, calls).

    ``status`` is ``KILLED`` when the child died at the Nth call, else ``fn``'s return
    value; ``calls`` is how many patched calls the child made (all of them when N was
    never reached).
    """
    read, write = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: quiet, and never back into pytest
        os.close(read)
        status = 1
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(null, 2)
            with injected(nth, mode) as inj:
                try:
                    status = fn()
                finally:
                    os.write(write, str(inj.calls).encode())
        except BaseException:
            status = 3
        os._exit(status)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 64):
        chunks.append(chunk)
    os.close(read)
    _, wait_status = os.waitpid(pid, 0)
    status = os.waitstatus_to_exitcode(wait_status)
    calls = int(b"".join(chunks) or b"0")
    return status, (calls if status != KILLED else nth)


# --- the commands under test, and the sweep over their calls ------------------------------

DATA = Path(__file__).parent / "data"
SIM = ["simulate", "-m", "tiny-hybrid", "--cache-gb", "0.001"]
REPORT = ["report", "capacity", "{sp}", "-m", "tiny-hybrid", "--policies", "vllm+"]
CALIBRATE = ["calibrate", "--gpu", "cpu", "--level", "tiny", "--kernels", "gemm"]
CALIBRATE += ["-o", "{d}/out/p.json"]


@dataclass
class Case:
    """A command whose previous outputs exist in ``out`` (made by ``before``), run again
    with ``argv`` to replace them; ``groups`` split the outputs into parts each of which
    must be whole old or whole new on its own (a sweep's results table is merged point by
    point, apart from the report rendered from it)."""

    name: str
    before: list[list[str]]  # commands making the inputs and the previous outputs
    argv: list[str]
    out: str  # the output file or folder, relative to the case's folder
    groups: tuple[tuple[str, ...], ...] = ()  # names outside every group form one more
    deterministic: bool = True  # False: a new run's bytes differ (timings)
    check: Callable[[dict[str, bytes]], list[str]] | None = None
    inputs: dict[str, Path | str] = field(default_factory=dict)  # str: a bundled example


def _calibration_pair(files: dict[str, bytes]) -> list[str]:
    """A profile and its raw table: both there, the profile naming the table."""
    import json

    if set(files) != {"p.json", "p.parquet"}:
        return [f"the profile and its raw table are not both there: {sorted(files)}"]
    if json.loads(files["p.json"])["provenance"]["raw"] != "p.parquet":
        return ["the profile names another raw table"]
    return []


CASES = {
    "simulate": Case(
        "simulate",
        [[*SIM, "--out", "{d}/out"]],
        [*SIM, "--seed", "1", "--force", "--out", "{d}/out"],
        "out",
    ),
    "generate": Case(
        "generate",
        [["workload", "generate", "chat", "-n", "3", "-o", "{d}/out/w.parquet"]],
        ["workload", "generate", "chat", "-n", "5", "--seed", "2", "-o", "{d}/out/w.parquet"],
        "out",
    ),
    "import": Case(
        "import",
        [["workload", "generate", "chat", "-n", "3", "-o", "{d}/out/w.parquet"]],
        ["workload", "import", "mooncake", "{mooncake}", "-o", "{d}/out/w.parquet"],
        "out",
        inputs={"mooncake": DATA / "mooncake_small.jsonl"},
    ),
    "export": Case(
        "export",
        [
            ["workload", "generate", "chat", "-n", "2", "-o", "{d}/a.parquet"],
            ["workload", "generate", "chat", "-n", "2", "--seed", "1", "-o", "{d}/b.parquet"],
            ["workload", "export", "marconi", "{d}/a.parquet", "-o", "{d}/out/t.jsonl"],
        ],
        ["workload", "export", "marconi", "{d}/b.parquet", "-o", "{d}/out/t.jsonl"],
        "out",
    ),
    "report": Case(
        "report",
        [[*REPORT, "--cache-gb", "0.001", "--out", "{d}/out"]],
        [*REPORT, "--cache-gb", "0.001,0.002", "--slo", "p95_ttft<=500ms", "--out", "{d}/out"],
        "out",
        groups=(("results.parquet",),),
        inputs={"sp": "system-prompt"},
    ),
    "calibrate": Case(
        "calibrate",
        [CALIBRATE],
        CALIBRATE,
        "out",
        deterministic=False,
        check=_calibration_pair,
    ),
}


def _args(argv: list[str], folder: Path, case: Case) -> list[str]:
    from twin.workloads.examples import example_path

    def where(v: Path | str) -> str:  # a bundled example by name, else a file
        return str(example_path(v)) if isinstance(v, str) else str(v)

    names = {"d": str(folder), **{k: where(v) for k, v in case.inputs.items()}}
    return [a.format(**names) for a in argv]


def _files(folder: Path) -> tuple[dict[str, bytes], list[str]]:
    """The visible files of an output folder (name -> bytes) and its hidden entries (lock
    files aside: neither outputs nor temporaries; older trees left them)."""
    visible, hidden = {}, []
    for p in sorted(folder.iterdir()):
        if p.name.startswith("."):
            if not p.name.endswith(".lock"):
                hidden.append(p.name)
        else:
            visible[p.name] = p.read_bytes()
    return visible, hidden


def _split(case: Case, files: dict[str, bytes]) -> list[dict[str, bytes]]:
    grouped = {n for g in case.groups for n in g}
    parts = [{n: files[n] for n in g if n in files} for g in case.groups]
    return [*parts, {n: b for n, b in files.items() if n not in grouped}]


@dataclass
class Setup:
    folder: Path
    old: dict[str, bytes]
    new: dict[str, bytes] | None  # None: not deterministic


def _prepare(case: Case, tmp: Path) -> Setup:
    """The previous outputs in tmp/base, and the new ones a clean run makes (tmp/ref)."""
    from twin.cli.main import run

    base, ref = tmp / "base", tmp / "ref"
    base.mkdir()
    for argv in case.before:
        assert run(_args(argv, base, case)) == 0
    shutil.copytree(base, ref)
    assert run(_args(case.argv, ref, case)) == 0
    old, _ = _files(base / case.out)
    new, _ = _files(ref / case.out)
    assert old != new
    return Setup(base, old, new if case.deterministic else None)


def _violations(case: Case, setup: Setup, folder: Path, killed: bool) -> list[str]:
    """What is wrong with the outputs after a fault: temporaries left by a failed run, a
    group mixing old and new files, a truncated or foreign file (neither old nor new)."""
    out = folder / case.out
    if killed:
        _recover(out)  # what the next command here does first
    files, hidden = _files(out)
    found = [] if killed or not hidden else [f"temporaries left behind: {hidden}"]
    for part, old, new in zip(
        _split(case, files), _split(case, setup.old), _split(case, setup.new or {}), strict=True
    ):
        if part == old or (setup.new is not None and part == new):
            continue
        if setup.new is None and not set(part.items()) & set(old.items()):
            continue  # a fresh measurement: every file new
        found.append(f"neither the old outputs nor the new: {sorted(part)}")
    if case.check is not None:
        found += case.check(files)
    return found


def _recover(out: Path) -> None:
    try:
        from twin.atomic import recover
    except ImportError:  # a tree from before recovery (a benchmark's baseline)
        return
    recover(out)


def sweep(
    case: Case, tmp: Path, mode: str, pick: Callable[[int], Iterable[int]] | None = None
) -> tuple[int, list[str]]:
    """Fail (or kill at) each call N in turn (those ``pick(total)`` names, else every one)
    and check the folder after each (after a kill, also after the next clean run); return
    how many faults were injected and what went wrong (``N: what``)."""
    from twin.cli.main import run

    setup = _prepare(case, tmp)
    # How many calls a clean run makes (a fault beyond them is never reached).
    probe = tmp / "probe"
    shutil.copytree(setup.folder, probe)
    with injected(10**9, mode) as inj:
        assert run(_args(case.argv, probe, case)) == 0
    total = inj.calls
    assert total > 0
    chosen = list(pick(total) if pick is not None else range(1, total + 1))
    found: list[str] = []
    for n in chosen:
        folder = tmp / f"n{n}"
        shutil.copytree(setup.folder, folder)
        argv = _args(case.argv, folder, case)
        if mode in CHILD_MODES:
            status, _ = run_in_child(lambda argv=argv: run(argv), n, mode)
            ok = status in ((KILLED, 0) if mode == "kill" else (TERMINATED,))
        else:
            with injected(n, mode) as inj:
                status = run(argv)
            ok = status in (0, 2)
        if not ok:
            found.append(f"{n}: exit status {status}")
        found += [f"{n}: {v}" for v in _violations(case, setup, folder, mode == "kill")]
        if mode in CHILD_MODES:  # the next run cleans up after the stopped one and completes
            status = run(argv)
            files, hidden = _files(folder / case.out)
            if status != 0 or hidden:
                found.append(f"{n}: the next run (exit {status}) left {hidden}")
            elif setup.new is not None and files != setup.new:
                found.append(f"{n}: the next run did not give the new outputs")
        shutil.rmtree(folder)
    shutil.rmtree(tmp / "probe")
    return len(chosen), found


def tail(k: int) -> Callable[[int], list[int]]:
    """The first call and the last ``k`` (a command's commit is at its end)."""
    return lambda total: sorted({1, *range(max(1, total - k + 1), total + 1)})
