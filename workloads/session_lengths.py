"""A bound on a workload's longest sequence, read before a run (without its tokens' ids)."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from workloads.schema import MAX_SEQUENCE_TOKENS


def longest_sequence(path: str | os.PathLike[str], index: dict[str, np.ndarray]) -> int:
    """A bound on the longest input + output of a workload: each session's every token.

    ``index``: the workload's index columns (``workloads.reader.Workload.index``);
    the input tokens' counts are read from ``path``'s ``input_tokens`` column (a file
    that cannot be read gives more than any valid sequence).
    """
    try:
        # ParquetFile: read_table would import pyarrow.dataset and pandas (a third of a second)
        column = pq.ParquetFile(path).read(columns=["input_tokens"]).column(0)
    except (OSError, pa.ArrowException):
        # Unreadable pages: no bound here; the reader names the bad row when it gets there.
        return MAX_SEQUENCE_TOKENS + 1
    lengths = pc.fill_null(pc.list_value_length(column), 0)  # a null row: the reader says so
    tokens = lengths.to_numpy(zero_copy_only=False).astype(np.int64)
    tokens += index["output_len"].astype(np.int64)
    _, session = np.unique(index["session_id"], return_inverse=True)
    return int(np.bincount(session, weights=tokens).max()) if len(tokens) else 0
