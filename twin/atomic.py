"""Atomic file output: write to a temporary name beside the target, fsync, then rename.

Four guarantees, for one file, for the several files of one run, and for the
folder a command writes into:

- a failed or killed run never leaves a half-written output under its real
  name (``atomic_path``): the data is written to ``.NAME.tmp-PID``, flushed to
  the disk (``fsync``) and only then renamed onto ``NAME``; the temporaries a
  *killed* run leaves behind are removed by the next run, once their process is
  gone (``remove_stale_tmp``);
- the outputs of one run are committed as a set (``OutputSet``): every file and
  the new manifest are written whole under temporary names first (a full disk
  fails there, with the previous set untouched); then a *commit journal* names
  them, and only then are they renamed into place, the files the previous set
  had and this one lacks removed, and the manifest renamed last. A run killed
  between those renames leaves its journal: the next command that looks at the
  folder (``recover``: a claim, a commit, ``read_manifest``) finishes the renames
  from it, so the folder holds the previous complete set or the new one, never
  a mix that lasts;
- a command that writes an output folder holds it from its existing-output
  check to its commit (``claim``, an ``flock`` on the folder): a second command
  into the same folder meanwhile is refused at once in one line, instead of
  both running and the later replacing the earlier;
- writers of one shared file serialise their read-merge-write on an advisory
  lock (``locked``), so two processes never lose each other's rows.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from twin.errors import TwinError

MANIFEST_FILE = "manifest.json"
_TMP = re.compile(r"^\.(?P<name>.+)\.tmp-(?P<pid>\d+)$")
# ``.LABEL.commit-PID``: the journal of a set being committed (LABEL: the set's manifest,
# or its first file when it has none).
_JOURNAL = re.compile(r"^\.(?P<label>.+)\.commit-(?P<pid>\d+)$")


def _alive(pid: int) -> bool:
    """Whether a process with this id exists (on this machine)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def fsync_file(path: str | os.PathLike[str]) -> None:
    """Flush ``path``'s data to the disk (so a rename never publishes unwritten blocks)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as err:  # name the file (a bare fsync error names none)
        raise OSError(err.errno, err.strerror, str(path)) from None
    finally:
        os.close(fd)


def fsync_dir(folder: str | os.PathLike[str]) -> None:
    """Flush ``folder``'s entries (the renames into it) to the disk.

    A file system that cannot sync a folder (``EINVAL``) has nothing to flush.
    """
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as err:
        if err.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise OSError(err.errno, err.strerror, str(folder)) from None
    finally:
        os.close(fd)


def _journal_pids(folder: Path) -> set[int]:
    """Processes with an unfinished commit journal in ``folder`` (their temporaries are
    the new set's files: not stale)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return set()
    return {int(m["pid"]) for n in names if (m := _JOURNAL.match(n)) is not None}


def remove_stale_tmp(target: str | os.PathLike[str]) -> list[Path]:
    """Delete ``.NAME.tmp-PID`` files beside ``target`` whose process has died; return them.

    A killed run cannot clean up after itself, so the next writer of the same
    name does it. Files of live processes (a concurrent writer) are left alone,
    and so are those an unfinished commit journal still needs (``recover``).
    """
    target = Path(target)
    removed: list[Path] = []
    try:
        entries = list(target.parent.iterdir())
    except OSError:
        return removed
    pending = _journal_pids(target.parent)
    for entry in entries:
        m = _TMP.match(entry.name)
        # ``..NAME.tmp-PID.tmp-PID``: a file written atomically under a temporary name.
        if m is None or (
            m["name"] != target.name and not m["name"].startswith(f".{target.name}.tmp-")
        ):
            continue
        pid = int(m["pid"])
        if pid == os.getpid() or pid in pending or _alive(pid):
            continue
        with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
            entry.unlink()
            removed.append(entry)
    return removed


def not_an_input(flag: str, out: Path, *inputs: Path) -> None:
    """Refuse an output that is one of the command's inputs: writing it would destroy
    what the command reads (``workload import T -o T``, ``replay W --requests W``)."""
    target = out.resolve()
    for src in inputs:
        same = target == src.resolve()
        if not same and out.exists() and src.exists():
            same = os.path.samefile(out, src)  # a hard or symbolic link to it
        if same:
            raise TwinError(f"{flag} {out}: is also the input {src}; choose another output")


def tmp_path_for(target: Path) -> Path:
    """The temporary name this process writes ``target`` under."""
    return target.with_name(f".{target.name}.tmp-{os.getpid()}")


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path next to ``target``; fsync it and rename it onto ``target`` on
    success.

    On any exception the temporary file is removed and ``target`` is left as it
    was, so a failed run never leaves a half-written output behind.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_tmp(target)
    tmp = tmp_path_for(target)
    try:
        yield tmp
        fsync_file(tmp)
        os.replace(tmp, target)
        fsync_dir(target.parent)
    except OSError as err:
        # pyarrow's "No space left on device" names no file: name the output it was for.
        if err.filename is None or err.filename == str(tmp):
            raise OSError(err.errno, err.strerror or str(err), str(target)) from err
        raise
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


# --- a signal during a commit ---------------------------------------------------------------

# Commits moving their set into place now (depth), and a signal's exception held meanwhile.
_critical = 0
_pending: BaseException | None = None


def interrupt(exc: BaseException) -> None:
    """Raise ``exc`` (from a signal handler: ``twin.errors.Terminated``) now, or, while a
    commit is renaming its set into place, as soon as those renames are done: a stopped
    command leaves the previous complete set or the new one, never its journal half-done."""
    global _pending
    if _critical:
        _pending = exc
        return
    raise exc


@contextlib.contextmanager
def _uninterrupted() -> Iterator[None]:
    """Hold back :func:`interrupt` until the block ends."""
    global _critical, _pending
    _critical += 1
    try:
        yield
    finally:
        _critical -= 1
        if _critical == 0 and _pending is not None:
            exc, _pending = _pending, None
            raise exc


# --- holding a folder -----------------------------------------------------------------------

# Folders this process holds: (device, inode) -> [fd, depth]. A commit inside a command's
# claim (or a merge, from whichever thread) takes the same folder again without blocking on
# itself: an flock is per open file, so a second open of the folder would wait for the
# first forever. The hold is the process's, not a thread's.
_HELD: dict[tuple[int, int], list[int]] = {}
_HELD_LOCK = threading.Lock()
# Where a folder cannot be flock-ed (some network file systems), this file in it is.
_LOCK_FALLBACK = ".twin.lock"


def _forget_held() -> None:
    """In a forked child (a pool's worker): drop the copies of the parent's holds. The
    parent's lock stays (an flock belongs to the open file, shared until every copy is
    closed), and no worker keeps a folder held once its command has let go."""
    global _HELD_LOCK
    _HELD_LOCK = threading.Lock()  # another thread may have held it at the fork
    for fd, _ in _HELD.values():
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()
    _COMMITTING.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_held)


def _flock_folder(folder: Path, wait: bool) -> int | None:
    """An fd of ``folder`` (or of its fallback lock file) holding an exclusive flock; None
    when another process holds it and ``wait`` is false."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    flags = fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB)
    try:
        fcntl.flock(fd, flags)
        return fd
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError as err:
        os.close(fd)
        if err.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF, errno.ENOLCK):
            raise
    fd = os.open(folder / _LOCK_FALLBACK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, flags)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _acquire(folder: Path, wait: bool) -> tuple[int, int] | None:
    """Hold ``folder`` (re-entrant within this process); its key, or None when busy."""
    while True:
        st = os.stat(folder)
        key = (st.st_dev, st.st_ino)
        with _HELD_LOCK:
            if key in _HELD:
                _HELD[key][1] += 1
                return key
        fd = _flock_folder(folder, wait)
        if fd is None:
            return None
        # The folder may have been removed (and made again) between the stat and the lock:
        # a lock on a folder no longer at this path protects nothing; take the new one.
        try:
            now = os.stat(folder)
        except FileNotFoundError:
            now = None
        if now is not None and (now.st_dev, now.st_ino) == key:
            with _HELD_LOCK:
                _HELD[key] = [fd, 1]
            return key
        os.close(fd)
        folder.mkdir(parents=True, exist_ok=True)


def _release(key: tuple[int, int]) -> None:
    with _HELD_LOCK:
        held = _HELD[key]
        held[1] -= 1
        if held[1] == 0:
            del _HELD[key]
            os.close(held[0])  # closing releases the lock


def _missing_folders(folder: Path) -> list[Path]:
    """``folder`` and its ancestors that do not exist yet, innermost first."""
    return [p for p in (folder, *folder.parents) if not p.exists()]


def _remove_if_empty(folders: list[Path]) -> None:
    for folder in folders:  # innermost first
        with contextlib.suppress(OSError):
            (folder / _LOCK_FALLBACK).unlink(missing_ok=True)
            folder.rmdir()


@contextlib.contextmanager
def claim(folder: str | os.PathLike[str], flag: str = "--out") -> Iterator[Path]:
    """Hold the output folder ``folder`` for this command, from its existing-output check to
    its commit (made if missing; removed again on the way out if it was made and is still
    empty).

    Another command holding it makes this one refuse at once (``TwinError``, one line,
    naming ``flag``): two runs into one folder never both run and replace each other. A
    commit of a killed run found here is finished first (``recover``). The hold dies with
    the process (an ``flock``), so a killed command never leaves the folder held.
    """
    folder = Path(folder)
    made = _missing_folders(folder)
    folder.mkdir(parents=True, exist_ok=True)
    key = _acquire(folder, wait=False)
    if key is None:
        raise TwinError(
            f"{flag} {folder}: another twin command is writing into this folder now; "
            "wait for it to finish, or choose another folder"
        )
    try:
        _recover_held(folder)
        yield folder
    finally:
        try:
            _drop_own_temporaries(folder)  # whatever ended the command (SIGTERM, a bug)
            _remove_if_empty(made)  # while held: no other command has started in it
        finally:
            _release(key)


def _drop_own_temporaries(folder: Path) -> None:
    """Remove the temporaries this process left in ``folder`` (``.NAME.tmp-PID``), unless a
    commit journal of this process is still there: then they are its new set, which the
    next command's recovery finishes."""
    pid = os.getpid()
    try:
        names = os.listdir(folder)
    except OSError:
        return
    if pid in _journal_pids(folder):
        return
    for name in names:
        m = _TMP.match(name)
        if m is not None and int(m["pid"]) == pid:
            with contextlib.suppress(OSError):
                (folder / name).unlink()


@contextlib.contextmanager
def hold(folder: str | os.PathLike[str]) -> Iterator[None]:
    """Hold ``folder`` (made if missing) for a read-merge-write or a commit, waiting for another
    process that holds it; re-entrant within this process, so it nests inside ``claim``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    key = _acquire(folder, wait=True)
    assert key is not None
    try:
        yield
    finally:
        _release(key)


# --- output sets ----------------------------------------------------------------------------


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _plain(name: object) -> bool:
    """A file name of a set: one path component, not hidden."""
    return isinstance(name, str) and bool(name) and Path(name).name == name and name[0] != "."


# Journals this process is carrying out right now (recovery leaves them to it).
_COMMITTING: set[Path] = set()


def _finish(folder: Path, journal: Path, data: dict[str, Any]) -> None:
    """Carry out a commit journal: rename each file of the new set (and its manifest) into
    place, remove the previous set's files the new one lacks, flush, drop the journal.

    Every step can be repeated: a file already renamed has no temporary left.
    """
    pid = int(data["pid"])
    for name in data["files"]:
        tmp = folder / f".{name}.tmp-{pid}"
        if tmp.exists():
            os.replace(tmp, folder / name)
    for name in data["remove"]:
        with contextlib.suppress(FileNotFoundError):
            (folder / name).unlink()
    manifest = data.get("manifest")
    if manifest:
        tmp = folder / f".{manifest}.tmp-{pid}"
        if tmp.exists():
            os.replace(tmp, folder / manifest)
    fsync_dir(folder)
    journal.unlink(missing_ok=True)


def _read_journal(journal: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(journal.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ok = (
        isinstance(data, dict)
        and isinstance(data.get("pid"), int)
        and isinstance(data.get("files"), dict)
        and isinstance(data.get("remove"), list)
        and all(_plain(n) for n in (*data["files"], *data["remove"]))
        and (data.get("manifest") is None or _plain(data["manifest"]))
    )
    return data if ok else None


def _recover_held(folder: Path) -> list[str]:
    """Finish every commit journal in ``folder`` (held by this process, so no other process
    commits there; one this process is carrying out now is left to it); return the
    journals' names."""
    done: list[str] = []
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return done
    for name in names:
        m = _TMP.match(name)
        if m is not None and _JOURNAL.match(m["name"]) is not None:
            # A journal half-written when its run died: that commit never started.
            (folder / name).unlink(missing_ok=True)
            continue
        if _JOURNAL.match(name) is None:
            continue
        journal = folder / name
        if journal in _COMMITTING:
            continue
        data = _read_journal(journal)
        if data is None:  # not one of ours (journals are renamed into place whole)
            continue
        _finish(folder, journal, data)
        done.append(name)
    return done


def recover(folder: str | os.PathLike[str]) -> list[str]:
    """Finish the commits a killed run left half-done in ``folder``; return their journals.

    Nothing is done while another command holds the folder (it recovers on its own).
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    key = _acquire(folder, wait=False)
    if key is None:
        return []
    try:
        return _recover_held(folder)
    finally:
        _release(key)


class OutputSet:
    """The files of one run in one folder, committed together (with a manifest, unless
    ``manifest`` is None).

    ``path(name)`` gives the temporary path to write each output to (or
    ``write_text``); ``commit()`` flushes them, writes the new manifest and a
    commit journal, then renames every file onto its real name, removes the
    files of the previous set this one lacks, and renames the manifest last.
    ``abort()`` drops the temporaries. While committing, the folder is held, so
    two runs never interleave their renames. As a context manager: commit on a
    clean exit, abort on an exception.
    """

    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        names: list[str],
        kind: str,
        manifest: str | None = MANIFEST_FILE,
    ) -> None:
        self.out_dir = Path(out_dir)
        self.names = list(dict.fromkeys(names))
        self.kind = kind
        self.manifest = manifest
        if not self.names or not all(_plain(n) for n in self.names) or manifest in self.names:
            raise ValueError(f"bad output names {names!r} (manifest {manifest!r})")
        # A failed run removes the folder again if it made it (and it is empty).
        self._made = _missing_folders(self.out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        recover(self.out_dir)  # before the stale temporaries go: a journal may need them
        self._tmp = {}
        for name in self.names:
            target = self.out_dir / name
            remove_stale_tmp(target)
            self._tmp[name] = tmp_path_for(target)
        self._extra: list[Path] = []  # the manifest's and the journal's temporaries
        if manifest is not None:
            remove_stale_tmp(self.out_dir / manifest)
        self._label = manifest if manifest is not None else self.names[0]
        self._committed = False

    def path(self, name: str) -> Path:
        return self._tmp[name]

    def write_text(self, name: str, text: str) -> Path:
        """Write ``text`` as output ``name`` (under its temporary name); return that path."""
        tmp = self._tmp[name]
        tmp.write_text(text)
        return tmp

    def __enter__(self) -> OutputSet:
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()

    def commit(self, before: dict[str, Any] | None = None, force: bool = True) -> None:
        """Move the files into place as one set.

        ``before`` is the manifest the folder held when the run started; unless
        ``force``, a different one now (another run committed meanwhile) makes
        this run refuse rather than replace it. Any failure before the journal is
        written (a full disk) leaves the previous set as it was; a failure after it
        is retried once, and otherwise finished by the next command here.
        """
        with hold(self.out_dir):
            _recover_held(self.out_dir)
            now = peek_manifest(self.out_dir, self.manifest) if self.manifest else None
            if not force and now is not None and now != before:
                self.abort()
                raise TwinError(
                    f"{self.out_dir}: another run wrote its outputs here while this one ran; "
                    "kept them (pass --force to replace, or use another --out)"
                )
            journal = self.out_dir / f".{self._label}.commit-{os.getpid()}"
            try:
                files = {}
                for name in self.names:
                    fsync_file(self._tmp[name])
                    files[name] = sha256_of(self._tmp[name])
                old = (now or {}).get("files") if self.manifest else None
                remove = sorted(
                    n
                    for n in (old if isinstance(old, dict) else {})
                    if _plain(n) and n not in files and n != self.manifest
                )
                if self.manifest is not None:
                    tmp = tmp_path_for(self.out_dir / self.manifest)
                    self._extra.append(tmp)
                    body = {"kind": self.kind, "files": files}
                    tmp.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
                    fsync_file(tmp)
                data = {
                    "pid": os.getpid(),
                    "kind": self.kind,
                    "files": files,
                    "remove": remove,
                    "manifest": self.manifest,
                }
                # Dropped first on an abort (the journal renamed into place, then its folder's
                # fsync failed): without it no later look finishes a set that was abandoned.
                self._extra[:0] = [journal, tmp_path_for(journal)]
                write_text_atomic(journal, json.dumps(data, sort_keys=True) + "\n")
            except BaseException:
                self.abort()
                raise
            # Committed: from here the journal finishes the set, now or in the next command
            # (``abort`` must no longer drop the temporaries it names); a SIGTERM waits for
            # the renames (``interrupt``).
            with _uninterrupted():
                self._committed = True
                _COMMITTING.add(journal)
                try:
                    try:
                        _finish(self.out_dir, journal, data)
                    except OSError:  # a transient fault; else left to the next look
                        _finish(self.out_dir, journal, data)
                finally:
                    _COMMITTING.discard(journal)

    def abort(self) -> None:
        if self._committed:
            return
        for tmp in [*self._extra, *self._tmp.values()]:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        _remove_if_empty(self._made)


def peek_manifest(
    out_dir: str | os.PathLike[str], name: str = MANIFEST_FILE
) -> dict[str, Any] | None:
    """The manifest in ``out_dir`` as a dict, unchecked; None when there is none."""
    path = Path(out_dir) / name
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"unreadable": True}
    return data if isinstance(data, dict) else {"unreadable": True}


def read_manifest(out_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of a committed output set, after checking every file against it (and
    finishing a commit a killed run left half-done).

    Raises ``TwinError`` when the set is incomplete or mixes runs, naming the
    file that does not match.
    """
    out_dir = Path(out_dir)
    recover(out_dir)
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
                "(changed since, or a run is replacing it now); rerun"
            )
    return data


def has_outputs(out_dir: str | os.PathLike[str], names: list[str]) -> bool:
    """Whether ``out_dir`` already holds any of ``names`` or a manifest."""
    out_dir = Path(out_dir)
    return any((out_dir / n).exists() for n in [*names, MANIFEST_FILE])
