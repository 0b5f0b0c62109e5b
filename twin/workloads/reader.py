"""Reading workload files: schema checks, row validation, history expansion.

``Workload.open`` checks the schema and validates every light column at once
(one clear ``TwinError`` naming file, row and column). ``Workload.requests``
then streams the token lists batch by batch, validates them, and expands each
turn to its full prompt, holding one copy of each open session's history and
dropping it after the session's last turn.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from twin.errors import TwinError, where
from twin.limits import MAX_SEQUENCE_TOKENS
from twin.workloads.arrow_numpy import numpy_of
from twin.workloads.modules import check_row_modules, is_module_list, module_lists
from twin.workloads.schema import (
    ACCEPTANCE_COLUMN,
    COLUMNS,
    INDEX_COLUMNS,
    METADATA_KEY,
    MODULES_COLUMN,
    TOKEN_ID_MAX,
)

# Rows per read batch: long-prompt traces (Mooncake: 15K tokens a row) peak at
# half the memory with 128-row batches than with 1024, at no cost in speed.
_BATCH_ROWS = 128


@dataclass(slots=True)
class Request:
    """One request with its full prompt expanded from the session history."""

    row: int
    session_id: int
    turn: int
    arrival_s: float | None
    think_s: float | None
    prompt: np.ndarray  # int32: every prompt token, history included
    output: np.ndarray  # int32: output ids (from the file, or fresh negative ids)
    # int32: prompt + output in one array; ``prompt`` and ``output`` are views of
    # its two parts (``_SessionTokens``), so the cache takes it without a copy.
    full: np.ndarray
    new_tokens: int  # prompt tokens this turn added (len of its input_tokens)
    extends_history: bool
    # Prompt modules imported: (k, 3) int64 rows of (id, start, length); None: none.
    modules: np.ndarray | None = None
    # Its speculative acceptance rate (the optional spec_acceptance column); None: the run's.
    spec_acceptance: float | None = None
    # Decode steps a drafted-token step stands for, relative to the run's acceptance
    # (twin.engine.speculative.decode_scale, set by the engine; 1.0: the run's own).
    decode_scale: float = 1.0

    @property
    def output_len(self) -> int:
        return len(self.output)


def _is_int_list(t: pa.DataType) -> bool:
    return (pa.types.is_list(t) or pa.types.is_large_list(t)) and pa.types.is_integer(t.value_type)


def _is_float(t: pa.DataType) -> bool:
    """A float64 column as read: floats, integers, or nulls (a column of no value)."""
    return pa.types.is_floating(t) or pa.types.is_integer(t) or pa.types.is_null(t)


# Accepted physical types per column, and the type named in errors.
_TYPE_RULES: dict[str, tuple[Any, str]] = {
    "session_id": (pa.types.is_integer, "int64"),
    "turn": (pa.types.is_integer, "int32"),
    "arrival_s": (_is_float, "float64"),
    "think_s": (_is_float, "float64"),
    "input_tokens": (_is_int_list, "list<int32>"),
    "extends_history": (pa.types.is_boolean, "bool"),
    "output_tokens": (lambda t: _is_int_list(t) or pa.types.is_null(t), "list<int32>"),
    "output_len": (pa.types.is_integer, "int32"),
}


class Workload:
    """A validated workload file. Open with :meth:`open`."""

    def __init__(self, path: Path, parquet: pq.ParquetFile, index: dict[str, np.ndarray]) -> None:
        self.path = path
        self._parquet = parquet
        self.index = index  # light columns as numpy arrays (NaN for null floats)
        self.num_rows = len(index["session_id"])
        self.metadata: dict[str, Any] = _file_metadata(path, parquet.schema_arrow)
        self._last_turn = _last_turn_mask(index["session_id"])
        self.has_modules = MODULES_COLUMN in parquet.schema_arrow.names
        # The optional per-request acceptance (NaN: not given); None without the column.
        self.acceptance: np.ndarray | None = None

    @property
    def num_sessions(self) -> int:
        return int(self._last_turn.sum())

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> Workload:
        """Open and validate ``path``; raise ``TwinError`` on any defect."""
        path = Path(path)
        if not path.is_file():
            raise TwinError(f"{path}: no such workload file")
        try:
            # pre_buffer=False: with it, iter_batches keeps every chunk it has
            # read (~215 B per request), so a 1M-request simulation grew by
            # 160 MB; without it, reading memory stays flat.
            # page_checksum_verification: a page written with a CRC (WorkloadWriter writes
            # them) that no longer matches is an error, not changed token ids; pages
            # without one (older files) are read as before.
            parquet = pq.ParquetFile(path, pre_buffer=False, page_checksum_verification=True)
        except (pa.ArrowInvalid, OSError) as err:
            raise TwinError(f"{path}: not a readable parquet file ({err})") from None
        _check_schema(path, parquet.schema_arrow)
        _file_metadata(path, parquet.schema_arrow)
        try:
            table = parquet.read(columns=list(INDEX_COLUMNS))
        except (OSError, pa.ArrowException) as err:
            raise TwinError(f"{path}: corrupt data ({_short(err)})") from None
        if table.num_rows == 0:
            raise TwinError(f"{path}: the workload has no rows (no requests to run)")
        index = _validate_index(path, table)
        workload = cls(path, parquet, index)
        if ACCEPTANCE_COLUMN in parquet.schema_arrow.names:
            workload.acceptance = _read_acceptance(path, parquet)
        return workload

    def requests(self) -> Iterator[Request]:
        """Yield every request in row order with its full prompt and output ids.

        A session's tokens live in one growable int32 buffer (module note at
        :func:`_grown`): each turn appends its input and output, and its
        ``prompt``, ``output`` and ``full`` are views of the buffer, so a turn
        costs its own tokens, not a copy of the conversation so far.
        """
        # session -> (its token buffer, tokens used), joined by the next turn's input
        history: dict[int, tuple[np.ndarray, int]] = {}
        fresh = 0  # fresh output ids counted down from -1, in row order
        row = 0
        sid_all, turn_all = self.index["session_id"], self.index["turn"]
        arr_all, think_all = self.index["arrival_s"], self.index["think_s"]
        ext_all, olen_all = self.index["extends_history"], self.index["output_len"]
        last_all = self._last_turn
        acc_all = self.acceptance
        seen: dict[int, tuple[int, bytes]] = {}  # module id -> (length, digest of its tokens)
        pop = history.pop
        for batch in self.token_batches():
            inputs = _token_lists(self.path, row, "input_tokens", batch.column(0))
            outputs = _token_lists(self.path, row, "output_tokens", batch.column(1))
            mods = (
                module_lists(self.path, row, batch.column(2))
                if self.has_modules
                else [None] * batch.num_rows
            )
            n = batch.num_rows
            # This batch's index values as Python scalars (one conversion per column).
            sids = sid_all[row : row + n].tolist()
            turns = turn_all[row : row + n].tolist()
            arrivals = arr_all[row : row + n].tolist()
            thinks = think_all[row : row + n].tolist()
            extends = ext_all[row : row + n].tolist()
            olens = olen_all[row : row + n].tolist()
            lasts = last_all[row : row + n].tolist()
            accs = [None] * n if acc_all is None else acc_all[row : row + n].tolist()
            # The fresh output ids of this batch's rows without output ids, in one go.
            n_fresh = sum(k for k, out in zip(olens, outputs, strict=True) if out is None)
            fresh_ids = np.arange(-1 - fresh, -1 - fresh - n_fresh, -1, dtype=np.int32)
            fresh += n_fresh
            taken = 0  # fresh ids handed out in this batch
            for i in range(n):
                r = row + i
                sid = sids[i]
                new = inputs[i]
                if new is None or len(new) == 0:
                    raise TwinError(f"{where(self.path, r, 'input_tokens')}: empty or null prompt")
                extends_history = extends[i]
                if extends_history:
                    buf, used = pop(sid)
                else:
                    pop(sid, None)
                    buf, used = None, 0
                out = outputs[i]
                n_out = olens[i]
                if out is not None and len(out) != n_out:
                    raise TwinError(
                        f"{where(self.path, r, 'output_tokens')}: {len(out)} ids but "
                        f"output_len is {n_out}"
                    )
                n_new = len(new)
                end = used + n_new  # the prompt's end
                total = end + n_out
                if total > MAX_SEQUENCE_TOKENS:
                    raise TwinError(
                        f"{where(self.path, r, 'input_tokens')}: session {sid} reaches "
                        f"{total} tokens, over the {MAX_SEQUENCE_TOKENS} limit"
                    )
                last = lasts[i]
                if buf is None or total > len(buf):
                    buf = _grown(buf, used, total, last)
                buf[used:end] = new
                if out is None:
                    buf[end:total] = fresh_ids[taken : taken + n_out]
                    taken += n_out
                else:
                    buf[end:total] = out
                prompt = buf[:end]
                row_modules = mods[i]
                if row_modules is not None:
                    check_row_modules(self.path, r, row_modules, prompt, seen)
                if not last:
                    history[sid] = (buf, total)
                arrival, think = arrivals[i], thinks[i]
                yield Request(
                    r,
                    sid,
                    turns[i],
                    None if arrival != arrival else arrival,  # NaN: not given
                    None if think != think else think,
                    prompt,
                    buf[end:total],
                    buf[:total],
                    n_new,
                    extends_history,
                    row_modules,
                    None if accs[i] is None or accs[i] != accs[i] else accs[i],  # NaN: not given
                )
            row += n

    def token_batches(self) -> Iterator[pa.RecordBatch]:
        """The token columns batch by batch; a page that fails to decode is a ``TwinError``.

        Opening a file reads only its footer, so a corrupted data page (a bit
        flip in a compressed token page) surfaces here, mid-run.
        """
        columns = ["input_tokens", "output_tokens"]
        if MODULES_COLUMN in self._parquet.schema_arrow.names:
            columns.append(MODULES_COLUMN)
        batches = self._parquet.iter_batches(batch_size=_BATCH_ROWS, columns=columns)
        row = 0
        while True:
            try:
                batch = next(batches)
            except StopIteration:
                return
            except (OSError, pa.ArrowException) as err:
                raise TwinError(
                    f"{where(self.path, row, 'input_tokens')}: corrupt data "
                    f"in the batch starting here ({_short(err)})"
                ) from None
            row += batch.num_rows
            yield batch


def _grown(buf: np.ndarray | None, used: int, need: int, last: bool) -> np.ndarray:
    """A session's token buffer with room for ``need`` tokens, its first ``used`` kept.

    Earlier turns' views keep the old buffer alive and unchanged (positions are
    only ever appended, never rewritten). A session's last turn gets exactly its
    size (single-turn traces hold no spare room); otherwise the capacity doubles,
    so appending a conversation costs amortised linear copies, not quadratic.
    """
    grown = np.empty(need if last else 2 * need, np.int32)
    if used:
        assert buf is not None
        grown[:used] = buf[:used]
    return grown


def _short(err: BaseException) -> str:
    """An arrow error on one line (some span several, with a C++ source location)."""
    return str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__


def _file_metadata(path: Path, schema: pa.Schema) -> dict[str, Any]:
    """The ``twin.workload`` JSON object in the file's metadata ({} when absent)."""
    raw = (schema.metadata or {}).get(METADATA_KEY)
    if raw is None:
        return {}
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise TwinError(
            f"{path}: file metadata {METADATA_KEY.decode()!r} is not valid UTF-8 JSON ({err})"
        ) from None
    if not isinstance(data, dict):
        raise TwinError(
            f"{path}: file metadata {METADATA_KEY.decode()!r} must be a JSON object, "
            f"got {type(data).__name__}"
        )
    return data


def _check_schema(path: Path, schema: pa.Schema) -> None:
    twice = sorted({n for n in schema.names if schema.names.count(n) > 1})
    if twice:  # pyarrow cannot pick one by name (a KeyError escaped before, issue 32)
        raise TwinError(f"{where(path, column=twice[0])}: the column appears more than once")
    missing = [c for c in COLUMNS if c not in schema.names]
    if missing:
        raise TwinError(
            f"{path}: missing column {missing[0]!r} (a workload needs {', '.join(COLUMNS)})"
        )
    for name, (accepts, expected) in _TYPE_RULES.items():
        actual = schema.field(name).type
        if not accepts(actual):
            raise TwinError(f"{where(path, column=name)}: type {actual}, expected {expected}")
    if ACCEPTANCE_COLUMN in schema.names:
        actual = schema.field(ACCEPTANCE_COLUMN).type
        if not _is_float(actual):
            raise TwinError(
                f"{where(path, column=ACCEPTANCE_COLUMN)}: type {actual}, expected float64"
            )
    if MODULES_COLUMN in schema.names:
        actual = schema.field(MODULES_COLUMN).type
        if not (is_module_list(actual) or pa.types.is_null(actual)):
            raise TwinError(
                f"{where(path, column=MODULES_COLUMN)}: type {actual}, expected "
                "list<struct<id: int64, start: int32, length: int32>>"
            )


def _first_bad(path: Path, column: str, bad: np.ndarray, what: str) -> None:
    """Raise naming the first row where ``bad`` holds."""
    rows = np.flatnonzero(bad)
    if rows.size:
        raise TwinError(f"{where(path, int(rows[0]), column)}: {what}")


def _validate_index(path: Path, table: pa.Table) -> dict[str, np.ndarray]:
    for name in ("session_id", "turn", "extends_history", "output_len"):
        nulls = numpy_of(table.column(name).is_null())
        _first_bad(path, name, nulls, "null value in a required column")

    def ints(name: str) -> np.ndarray:
        return numpy_of(table.column(name)).astype(np.int64)

    def floats(name: str) -> np.ndarray:
        col = pc.cast(table.column(name), pa.float64())
        valid = numpy_of(col.is_valid())
        # Null means "not given" (NaN below); a NaN stored in the file is not
        # null and would silently turn an open-loop turn into a closed-loop one.
        _first_bad(
            path,
            name,
            numpy_of(pc.is_nan(col)) & valid,
            "NaN is not a time (leave the value null to mean 'not given')",
        )
        return np.where(valid, numpy_of(col), np.nan)

    index = {
        "session_id": ints("session_id"),
        "turn": ints("turn"),
        "arrival_s": floats("arrival_s"),
        "think_s": floats("think_s"),
        "extends_history": numpy_of(table.column("extends_history")).astype(bool),
        "output_len": ints("output_len"),
    }
    turn, olen = index["turn"], index["output_len"]
    _first_bad(path, "turn", turn < 0, "negative turn")
    _first_bad(
        path, "output_len", olen < 1, "output_len must be at least 1 (TTFT is the first token)"
    )
    _first_bad(
        path, "output_len", olen > MAX_SEQUENCE_TOKENS, f"output_len over {MAX_SEQUENCE_TOKENS}"
    )
    for name in ("arrival_s", "think_s"):
        v = index[name]
        _first_bad(path, name, np.isinf(v) | (v < 0), "must be a finite number >= 0")
    arrivals = index["arrival_s"]
    known = np.flatnonzero(~np.isnan(arrivals))
    drops = np.flatnonzero(np.diff(arrivals[known]) < 0)
    if drops.size:
        r = int(known[drops[0] + 1])
        raise TwinError(
            f"{where(path, r, 'arrival_s')}: arrivals must not decrease down the file "
            f"({arrivals[r]} after {arrivals[known[drops[0]]]}); sort rows by arrival"
        )
    _check_turn_order(path, index["session_id"], turn, index["extends_history"])
    return index


def _read_acceptance(path: Path, parquet: pq.ParquetFile) -> np.ndarray:
    """The ``spec_acceptance`` column as float64 (NaN where null), each value in [0, 1]."""
    try:
        col = pc.cast(parquet.read(columns=[ACCEPTANCE_COLUMN]).column(0), pa.float64())
    except (OSError, pa.ArrowException) as err:
        raise TwinError(
            f"{where(path, column=ACCEPTANCE_COLUMN)}: corrupt data ({_short(err)})"
        ) from None
    valid = numpy_of(col.is_valid())
    values = np.where(valid, numpy_of(col.fill_null(0.0)), np.nan)
    _first_bad(
        path,
        ACCEPTANCE_COLUMN,
        valid & ~((values >= 0.0) & (values <= 1.0)),
        "the acceptance rate must be in [0, 1] (leave it null for the run's own)",
    )
    return values


def _check_turn_order(path: Path, sid: np.ndarray, turn: np.ndarray, extends: np.ndarray) -> None:
    """Each session's turns must be 0, 1, 2, ... in row order."""
    order = np.argsort(sid, kind="stable")
    s = sid[order]
    starts = np.r_[True, s[1:] != s[:-1]] if len(s) else np.zeros(0, bool)
    group_start = np.maximum.accumulate(np.where(starts, np.arange(len(s)), 0)) if len(s) else s
    expected = np.arange(len(s)) - group_start
    bad = turn[order] != expected
    if bad.any():
        rows = order[bad]
        r = int(rows.min())
        k = int(np.flatnonzero(order == r)[0])
        raise TwinError(
            f"{where(path, r, 'turn')}: session {sid[r]} has turn {turn[r]} here, "
            f"but its turn {expected[k]} must come first (turns are 0, 1, 2, ... in row order)"
        )
    _first_bad(
        path,
        "extends_history",
        (turn == 0) & extends,
        "turn 0 cannot extend a history (there is no earlier turn)",
    )


def _last_turn_mask(sid: np.ndarray) -> np.ndarray:
    """True on each session's last row."""
    _, last_from_end = np.unique(sid[::-1], return_index=True)
    mask = np.zeros(len(sid), bool)
    mask[len(sid) - 1 - last_from_end] = True
    return mask


def _token_lists(path: Path, first_row: int, column: str, arr: pa.Array) -> list[np.ndarray | None]:
    """Split a list column into per-row numpy views, checking token ids."""
    if pa.types.is_null(arr.type):
        return [None] * len(arr)
    offsets = numpy_of(arr.offsets)
    values = arr.values
    lo, hi = int(offsets[0]), int(offsets[-1])
    values = values.slice(lo, hi - lo)
    if values.null_count:
        pos = int(np.flatnonzero(numpy_of(values.is_null()))[0])
        r = first_row + int(np.searchsorted(offsets, lo + pos, side="right") - 1)
        raise TwinError(f"{where(path, r, column)}: null token id")
    ids = numpy_of(values)
    if ids.size:
        bad = (ids < 0) | (ids > TOKEN_ID_MAX)
        if bad.any():
            pos = int(np.flatnonzero(bad)[0])
            r = first_row + int(np.searchsorted(offsets, lo + pos, side="right") - 1)
            raise TwinError(
                f"{where(path, r, column)}: token id {int(ids[pos])} out of range "
                f"[0, {TOKEN_ID_MAX}]"
            )
    ids = ids.astype(np.int32, copy=False)
    rel = (offsets - lo).tolist()  # Python ints: slicing with numpy scalars costs more
    if not arr.null_count:
        return [ids[a:b] for a, b in pairwise(rel)]
    valid = numpy_of(arr.is_valid()).tolist()
    return [ids[rel[i] : rel[i + 1]] if valid[i] else None for i in range(len(arr))]
