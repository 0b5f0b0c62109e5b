"""Atomic file output: write to a temporary name beside the target, then rename.

Three guarantees, for one file and for the several files of one run:

- a failed or killed run never leaves a half-written output under its real
  name (``atomic_path``); the ``.NAME.tmp-PID`` files a *killed* run leaves
  behind are removed by the next run, once their process is gone
  (``remove_stale_tmp``);
- the outputs of one run are committed as a set (``OutputSet``): a manifest
  naming each file's SHA-256 is written last, after the old one is removed, so
  a kill between renames leaves no manifest and ``read_manifest`` refuses the
  mixed pair instead of handing out files from two different runs;
- writers of one shared file serialise their read-merge-write on an advisory
  lock (``locked``), so two processes never lose each other's rows.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from twin.errors import TwinError

MANIFEST_FILE = "manifest.json"
_TMP = re.compile(r"^\.(?P<name>.+)\.tmp-(?P<pid>\d+)$")


def _alive(pid: int) -> bool:
    """Whether a process with this id exists (on this machine)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def remove_stale_tmp(target: str | os.PathLike[str]) -> list[Path]:
    """Delete ``.NAME.tmp-PID`` files beside ``target`` whose process has died; return them.

    A killed run cannot clean up after itself, so the next writer of the same
    name does it. Files of live processes (a concurrent writer) are left alone.
    """
    target = Path(target)
    removed: list[Path] = []
    try:
        entries = list(target.parent.iterdir())
    except OSError:
        return removed
    for entry in entries:
        m = _TMP.match(entry.name)
        # ``..NAME.tmp-PID.tmp-PID``: a file written atomically under a temporary name.
        if m is None or (
            m["name"] != target.name and not m["name"].startswith(f".{target.name}.tmp-")
        ):
            continue
        pid = int(m["pid"])
        if pid == os.getpid() or _alive(pid):
            continue
        with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
            entry.unlink()
            removed.append(entry)
    return removed


def tmp_path_for(target: Path) -> Path:
    """The temporary name this process writes ``target`` under."""
    return target.with_name(f".{target.name}.tmp-{os.getpid()}")


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path next to ``target``; rename it onto ``target`` on success.

    On any exception the temporary file is removed and ``target`` is left as it
    was, so a failed run never leaves a half-written output behind.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_tmp(target)
    tmp = tmp_path_for(target)
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def write_text_atomic(target: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``target`` atomically."""
    with atomic_path(target) as tmp:
        tmp.write_text(text)


@contextlib.contextmanager
def locked(lock_file: str | os.PathLike[str]) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``lock_file`` (created if missing).

    ``flock`` locks die with their process, so a killed writer never leaves the
    lock held.
    """
    lock_file = Path(lock_file)
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class OutputSet:
    """The files of one run in one folder, committed together with a manifest.

    ``path(name)`` gives the temporary path to write each output to;
    ``commit()`` removes the old manifest, renames every file onto its real
    name and writes the new manifest last. ``abort()`` drops the temporaries.
    While committing, the folder's lock is held, so two runs never interleave
    their renames.
    """

    def __init__(self, out_dir: str | os.PathLike[str], names: list[str], kind: str) -> None:
        self.out_dir = Path(out_dir)
        self.names = list(names)
        self.kind = kind
        # A failed run removes the folder again if it made it (and it is empty).
        self._made = [p for p in (self.out_dir, *self.out_dir.parents) if not p.exists()]
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._tmp = {}
        for name in self.names:
            target = self.out_dir / name
            remove_stale_tmp(target)
            self._tmp[name] = tmp_path_for(target)
        remove_stale_tmp(self.out_dir / MANIFEST_FILE)

    def path(self, name: str) -> Path:
        return self._tmp[name]

    def commit(self, before: dict[str, Any] | None = None, force: bool = True) -> None:
        """Move the files into place as one set.

        ``before`` is the manifest the folder held when the run started; unless
        ``force``, a different one now (another run committed meanwhile) makes
        this run refuse rather than replace it.
        """
        with locked(self.out_dir / f".{MANIFEST_FILE}.lock"):
            now = peek_manifest(self.out_dir)
            if not force and now is not None and now != before:
                self.abort()
                raise TwinError(
                    f"{self.out_dir}: another run wrote its outputs here while this one ran; "
                    "kept them (pass --force to replace, or use another --out)"
                )
            files = {name: sha256_of(self._tmp[name]) for name in self.names}
            with contextlib.suppress(FileNotFoundError):
                (self.out_dir / MANIFEST_FILE).unlink()
            for name in self.names:
                os.replace(self._tmp[name], self.out_dir / name)
            manifest = {"kind": self.kind, "files": files}
            write_text_atomic(
                self.out_dir / MANIFEST_FILE, json.dumps(manifest, indent=2, sort_keys=True) + "\n"
            )

    def abort(self) -> None:
        for tmp in self._tmp.values():
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        for folder in self._made:  # innermost first
            with contextlib.suppress(OSError):
                folder.rmdir()


def peek_manifest(out_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The manifest in ``out_dir`` as a dict, unchecked; None when there is none."""
    path = Path(out_dir) / MANIFEST_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"unreadable": True}
    return data if isinstance(data, dict) else {"unreadable": True}


def read_manifest(out_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of a committed output set, after checking every file against it.

    Raises ``TwinError`` when the set is incomplete or mixes runs (a run killed
    between its renames), naming the file that does not match.
    """
    out_dir = Path(out_dir)
    data = peek_manifest(out_dir)
    if data is None or "files" not in data or not isinstance(data["files"], dict):
        raise TwinError(
            f"{out_dir}: no complete set of outputs (no valid {MANIFEST_FILE}; "
            "the run that wrote them did not finish)"
        )
    for name, digest in data["files"].items():
        path = out_dir / name
        if not path.is_file() or sha256_of(path) != digest:
            raise TwinError(
                f"{path}: does not belong to the run recorded in {out_dir / MANIFEST_FILE} "
                "(a run was interrupted while replacing it); rerun"
            )
    return data


def has_outputs(out_dir: str | os.PathLike[str], names: list[str]) -> bool:
    """Whether ``out_dir`` already holds any of ``names`` or a manifest."""
    out_dir = Path(out_dir)
    return any((out_dir / n).exists() for n in [*names, MANIFEST_FILE])
