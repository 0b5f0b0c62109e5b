"""Reading the optional ``modules`` column (Prompt Cache's declared prompt modules).

The column's schema and per-row rule are in :mod:`workloads.schema`; this
module turns its arrow values into per-row ``(k, 3)`` arrays and checks them
against the expanded prompt, and that one module id always names the same
tokens across the file (a 16-byte digest per id).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pyarrow as pa

from twin.errors import TwinError, where
from twin.workloads.schema import MODULES_COLUMN, check_modules


def is_module_list(t: pa.DataType) -> bool:
    """list<struct<id, start, length>> with integer fields (any integer widths)."""
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        return False
    v = t.value_type
    if not pa.types.is_struct(v):
        return False
    names = {v.field(i).name: v.field(i).type for i in range(v.num_fields)}
    return all(k in names and pa.types.is_integer(names[k]) for k in ("id", "start", "length"))


def module_lists(path: Path, first_row: int, arr: pa.Array) -> list[np.ndarray | None]:
    """Per-row (k, 3) int64 arrays of (id, start, length); ``None`` for a null row."""
    if pa.types.is_null(arr.type):
        return [None] * len(arr)
    out: list[np.ndarray | None] = []
    for i, item in enumerate(arr.to_pylist()):
        if item is None:
            out.append(None)
            continue
        rows = [None if m is None else (m["id"], m["start"], m["length"]) for m in item]
        if any(t is None or None in t for t in rows):
            raise TwinError(f"{where(path, first_row + i, MODULES_COLUMN)}: null module field")
        out.append(np.array(rows, np.int64).reshape(-1, 3))
    return out


def check_row_modules(
    path: Path,
    row: int,
    modules: np.ndarray,
    prompt: np.ndarray,
    seen: dict[int, tuple[int, bytes]],
) -> None:
    """One row's modules: well formed, inside the prompt, and each id always the same tokens."""
    why = check_modules(modules, len(prompt))
    if why:
        raise TwinError(f"{where(path, row, MODULES_COLUMN)}: {why}")
    for mid, start, length in modules.tolist():
        digest = hashlib.blake2b(prompt[start : start + length].tobytes(), digest_size=16).digest()
        known = seen.setdefault(mid, (length, digest))
        if known != (length, digest):
            raise TwinError(
                f"{where(path, row, MODULES_COLUMN)}: module id {mid} names different tokens "
                f"here ({length} tokens at {start}) than where it first appeared "
                f"({known[0]} tokens); one id must always name the same segment"
            )
