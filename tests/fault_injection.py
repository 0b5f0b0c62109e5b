"""A counting fault injector for the writers (issue 32): the Nth write, rename or fsync of a
command fails (ENOSPC or EIO), or the process dies there (``kill``: ``os._exit`` in a
forked child, so no ``finally`` runs, as under SIGKILL).

Every write path of the twin's outputs goes through one of the patched calls:
``os.replace`` (every rename into place), ``os.fsync`` (files and folders),
``Path.write_text``/``write_bytes`` (JSON, SVG, Markdown, HTML; half the data lands
before the fault, as when a disk fills mid-write), pyarrow's ``write_table`` and
``ParquetWriter.write_batch``/``write_table``/``close`` (workloads, requests, results,
raw calibration tables), and the JSONL exporter's file writes. Looping N from 1 until a
run finishes without reaching N hits every one of them in turn.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow.parquet as pq

KILLED = 137  # the status a forked child reports when it "died" at the Nth call
MODES = ("ENOSPC", "EIO", "kill")


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
