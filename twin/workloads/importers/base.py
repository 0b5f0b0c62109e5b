"""The importer interface and the JSONL plumbing every trace format shares.

An importer turns one public trace file into :class:`~workloads.schema.WorkloadRow`
objects in valid row order (arrivals never decrease, each session's turns
0, 1, 2, ...). The CLI writes them through ``WorkloadWriter`` inside a ``with``
block, so an importer only has to *raise* on bad input: nothing is written.

Every defect is one ``TwinError`` naming file, 1-based line and field, e.g.
``trace.jsonl, line 12, field 'hash_ids': ...``, because a user fixing a
multi-megabyte trace needs to jump straight to the offending line.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from twin.errors import TwinError
from twin.workloads.schema import TOKEN_ID_MAX, WorkloadRow

ProgressFn = Callable[[int], None]

# Report progress every this many bytes (16 KiB): smooth bars on small traces,
# while per-line callbacks on a trace with millions of short lines would cost
# more than the parsing.
_PROGRESS_EVERY = 1 << 14


def _no_progress(n: int) -> None:
    """Default progress callback: ignore."""


def at(path: Path, line: int, field: str | None = None) -> str:
    """Format a location such as ``trace.jsonl, line 12, field 'hash_ids'``."""
    loc = f"{path}, line {line}"
    return loc if field is None else f"{loc}, field {field!r}"


class Importer:
    """Base class of the trace importers; subclasses set ``name``, ``description``
    and implement :meth:`rows`."""

    name: ClassVar[str]
    description: ClassVar[str]

    def rows(self, path: Path, on_progress: ProgressFn = _no_progress) -> Iterator[WorkloadRow]:
        """Yield the workload rows of ``path`` in valid row order.

        ``on_progress(n)`` is called with the bytes of ``path`` consumed since
        the previous call, so a caller can draw a bar over the file size.
        """
        raise NotImplementedError

    def options(self) -> dict[str, Any]:
        """Constructor options recorded in the file metadata (override to add)."""
        return {}

    def metadata(self, path: Path) -> dict[str, Any]:
        """Provenance for the workload file: importer, source path and its SHA-256."""
        path = Path(path)
        return {
            "importer": self.name,
            "source": str(path),
            "source_sha256": sha256_file(path),
            **self.options(),
        }


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """SHA-256 of a file, streamed so a multi-GB trace never sits in memory."""
    _require_file(path)
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _require_file(path: Path) -> None:
    if not Path(path).is_file():
        raise TwinError(f"{path}: no such trace file")


def json_lines(path: Path, on_progress: ProgressFn = _no_progress) -> Iterator[tuple[int, dict]]:
    """Yield ``(line_number, object)`` for every non-blank line of a JSONL file.

    Line numbers are 1-based and count blank lines, so they match an editor.
    Bytes are reported to ``on_progress`` in batches; the remainder is flushed
    when the file ends (also when the consumer stops early or raises).
    """
    path = Path(path)
    _require_file(path)
    pending = 0
    try:
        with open(path, "rb") as f:
            for lineno, raw in enumerate(f, start=1):
                pending += len(raw)
                if pending >= _PROGRESS_EVERY:
                    on_progress(pending)
                    pending = 0
                if not raw.strip():
                    continue
                try:
                    obj = json.loads(raw)
                except ValueError as err:  # JSONDecodeError and UnicodeDecodeError
                    raise TwinError(f"{at(path, lineno)}: not valid JSON ({err})") from None
                except RecursionError:  # json's C decoder recurses once per nesting level
                    raise TwinError(
                        f"{at(path, lineno)}: JSON nested too deeply to be a trace record"
                    ) from None
                if not isinstance(obj, dict):
                    raise TwinError(
                        f"{at(path, lineno)}: expected a JSON object, got {type(obj).__name__}"
                    )
                yield lineno, obj
    finally:
        if pending:
            on_progress(pending)


def get_field(path: Path, line: int, obj: dict, field: str) -> Any:
    """``obj[field]``, or an error naming the missing field."""
    if field not in obj:
        have = ", ".join(map(str, obj)) or "none"
        raise TwinError(f"{at(path, line, field)}: missing (the line has {have})")
    return obj[field]


def get_int(
    path: Path, line: int, obj: dict, field: str, minimum: int = 0, maximum: int = 2**63 - 1
) -> int:
    """An integer field in ``[minimum, maximum]``; JSON booleans and floats are refused."""
    v = get_field(path, line, obj, field)
    # bool is an int subclass in Python; a `true` here is a broken trace, not 1.
    if type(v) is not int:
        raise TwinError(f"{at(path, line, field)}: expected an integer, got {v!r:.60}")
    if v < minimum:
        raise TwinError(f"{at(path, line, field)}: {v} is below the minimum {minimum}")
    if v > maximum:
        raise TwinError(f"{at(path, line, field)}: {v} is above the maximum {maximum}")
    return v


def get_time(path: Path, line: int, obj: dict, field: str) -> float:
    """A finite, non-negative number (int or float) field."""
    v = get_field(path, line, obj, field)
    try:
        finite = type(v) in (int, float) and math.isfinite(v)
    except OverflowError:  # a JSON integer too large for a float
        finite = False
    if not finite:
        raise TwinError(f"{at(path, line, field)}: expected a finite number, got {v!r:.60}")
    if v < 0:
        raise TwinError(f"{at(path, line, field)}: {v} is negative")
    return float(v)


def get_int_array(
    path: Path, line: int, obj: dict, field: str, maximum: int = TOKEN_ID_MAX
) -> np.ndarray:
    """A JSON list of integers in ``[0, maximum]`` as an int64 array, checked vectorised."""
    v = get_field(path, line, obj, field)
    if not isinstance(v, list):
        raise TwinError(f"{at(path, line, field)}: expected a list of integers, got {v!r:.60}")
    if not v:
        return np.zeros(0, np.int64)
    try:
        arr = np.array(v)
    except (OverflowError, ValueError):  # ragged nesting
        arr = None
    # numpy infers an integer dtype only when every element is an int (bools
    # give 'b', floats 'f', strings 'U', nesting ndim > 1, huge ints 'O').
    # numpy also folds a ``true`` among integers into 1: look for bools too.
    if (
        arr is None
        or arr.dtype.kind not in "iu"
        or arr.ndim != 1
        or any(type(x) is bool for x in v)
    ):
        bad = next((x for x in v if type(x) is not int), v[0])  # bool is not int here
        raise TwinError(f"{at(path, line, field)}: expected integers, found {bad!r:.60}")
    out_of_range = (arr < 0) | (arr > maximum)
    if out_of_range.any():
        pos = int(np.flatnonzero(out_of_range)[0])
        raise TwinError(
            f"{at(path, line, field)}: value {int(arr[pos])} at position {pos} is outside "
            f"[0, {maximum}]"
        )
    return arr.astype(np.int64, copy=False)
