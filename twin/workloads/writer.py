"""Streaming, atomic writer of workload parquet files."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from twin import __version__
from twin.atomic import atomic_path
from twin.errors import TwinError, where
from twin.workloads.schema import (
    METADATA_KEY,
    MODULE_TYPE,
    SCHEMA,
    SCHEMA_WITH_MODULES,
    WorkloadRow,
    check_modules,
)

# Flush a row group once this many tokens are buffered: bounds memory while
# keeping row groups large enough for fast scans.
_FLUSH_TOKENS = 4_000_000
_FLUSH_ROWS = 65_536


def _list_array(arrays: list[np.ndarray | None]) -> pa.Array:
    """Build a list<int32> array from per-row numpy arrays (None = null) in one copy."""
    lengths = np.fromiter((0 if a is None else len(a) for a in arrays), np.int64, len(arrays))
    offsets = np.zeros(len(arrays) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    present = [a for a in arrays if a is not None]
    values = (
        np.concatenate(present).astype(np.int32, copy=False) if present else np.zeros(0, np.int32)
    )
    mask = None
    if len(present) != len(arrays):
        mask = pa.array([a is None for a in arrays], pa.bool_())
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values), mask=mask)


def _modules_array(rows: list[WorkloadRow]) -> pa.Array:
    """The ``modules`` column of ``rows`` (null where a row imports none)."""
    return pa.array(
        [
            None
            if r.modules is None
            else [{"id": int(m[0]), "start": int(m[1]), "length": int(m[2])} for m in r.modules]
            for r in rows
        ],
        MODULE_TYPE,
    )


class WorkloadWriter:
    """Write workload rows to parquet in row groups, atomically.

    Use as a context manager; the file appears under its final name only when
    the block exits without an exception::

        with WorkloadWriter("chat.parquet", {"generator": "chat", "seed": 1}) as w:
            for row in rows:
                w.write(row)
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        metadata: dict[str, Any],
        modules: bool | None = None,
    ) -> None:
        self.path = Path(path)
        # The optional ``modules`` column: written when asked, or when the
        # producer's metadata says its rows carry modules.
        self.modules = bool(metadata.get("modules")) if modules is None else modules
        self._metadata = {**metadata, "twin_version": __version__}
        self._rows: list[WorkloadRow] = []
        self._buffered_tokens = 0
        self.rows_written = 0
        self.input_tokens_written = 0
        self._atomic = atomic_path(self.path)
        self._writer: pq.ParquetWriter | None = None

    def __enter__(self) -> WorkloadWriter:
        tmp = self._atomic.__enter__()
        base = SCHEMA_WITH_MODULES if self.modules else SCHEMA
        schema = base.with_metadata({METADATA_KEY: json.dumps(self._metadata, sort_keys=True)})
        self._writer = pq.ParquetWriter(
            tmp,
            schema,
            compression="zstd",
            # A CRC per page, verified by the reader: a flipped bit is refused, not read
            # as other token ids (issue 32).
            write_page_checksum=True,
            use_dictionary=["session_id", "turn"],
            # Delta encoding stores runs of ids (imported block hashes, repeated
            # prompts) in a few bits: the Mooncake trace drops from 165 MB to
            # 0.2 MB; random-vocabulary files move by -16% (sharegpt) to +9% (swebench).
            column_encoding={
                "input_tokens.list.element": "DELTA_BINARY_PACKED",
                "output_tokens.list.element": "DELTA_BINARY_PACKED",
            },
        )
        return self

    def write(self, row: WorkloadRow) -> None:
        """Buffer one row; flushes a row group when the buffer is large.

        A row's ``modules`` are checked here (a ``TwinError`` naming the file,
        row and column), and refused when the file has no ``modules`` column.
        """
        if row.modules is not None:
            here = where(self.path, self.rows_written + len(self._rows), "modules")
            if not self.modules:
                raise TwinError(f"{here}: this file was opened without a modules column")
            why = check_modules(np.asarray(row.modules))
            if why:
                raise TwinError(f"{here}: {why}")
        self._rows.append(row)
        n_out = 0 if row.output_tokens is None else len(row.output_tokens)
        self._buffered_tokens += len(row.input_tokens) + n_out
        if self._buffered_tokens >= _FLUSH_TOKENS or len(self._rows) >= _FLUSH_ROWS:
            self._flush()

    def write_all(self, rows: Iterable[WorkloadRow]) -> None:
        for row in rows:
            self.write(row)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._writer is not None
        failure: BaseException | None = exc
        try:
            if exc_type is None:
                self._flush()
                if self.rows_written == 0:
                    # A workload without requests would only fail later (or,
                    # worse, "succeed" with empty results): refuse it here.
                    source = self._metadata.get("source", "the input")
                    failure = TwinError(f"{source}: no requests in it; nothing written")
            self._writer.close()
        except BaseException as err:
            # The last row group or the footer could not be written (a full disk): the
            # file is truncated, so it must not be renamed over the target (issue 32).
            failure = failure or err
            raise
        finally:
            # Renamed into place only when everything, close included, succeeded.
            self._atomic.__exit__(
                None if failure is None else type(failure), failure, None if failure else tb
            )
        if failure is not None and exc_type is None:
            raise failure

    def _flush(self) -> None:
        if not self._rows:
            return
        rows = self._rows
        batch = pa.record_batch(
            [
                pa.array([r.session_id for r in rows], pa.int64()),
                pa.array([r.turn for r in rows], pa.int32()),
                pa.array([r.arrival_s for r in rows], pa.float64()),
                pa.array([r.think_s for r in rows], pa.float64()),
                _list_array([r.input_tokens for r in rows]),
                pa.array([r.extends_history for r in rows], pa.bool_()),
                _list_array([r.output_tokens for r in rows]),
                pa.array([r.output_len for r in rows], pa.int32()),
                *([_modules_array(rows)] if self.modules else []),
            ],
            schema=SCHEMA_WITH_MODULES if self.modules else SCHEMA,
        )
        assert self._writer is not None
        self._writer.write_batch(batch)
        self.rows_written += len(rows)
        self.input_tokens_written += sum(len(r.input_tokens) for r in rows)
        self._rows = []
        self._buffered_tokens = 0
