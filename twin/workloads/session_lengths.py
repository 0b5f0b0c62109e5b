"""A bound on a workload's longest sequence, read before a run (without its tokens' ids)."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from twin.workloads.schema import MAX_SEQUENCE_TOKENS

_BATCH_ROWS = 4096  # rows of token lists read at a time (a few MB at chat lengths)


def longest_sequence(path: str | os.PathLike[str], index: dict[str, np.ndarray]) -> int:
    """A bound on the longest input + output of a workload: each session's every token.

    ``index``: the workload's index columns (``workloads.reader.Workload.index``);
    the input tokens' counts are read from ``path``'s ``input_tokens`` column (a file
    that cannot be read gives more than any valid sequence).
    """
    parts = []
    try:
        # ParquetFile (read_table would import pyarrow.dataset and pandas, a third of a
        # second), a batch at a time: only the counts are kept, not the tokens.
        for batch in pq.ParquetFile(path, page_checksum_verification=True).iter_batches(
            _BATCH_ROWS, columns=["input_tokens"]
        ):
            # A null row counts 0 here: the reader reports it.
            lengths = pc.fill_null(pc.list_value_length(batch.column(0)), 0)
            parts.append(lengths.to_numpy(zero_copy_only=False).astype(np.int64))
    except (OSError, pa.ArrowException):
        # Unreadable pages: no bound here; the reader names the bad row when it gets there.
        return MAX_SEQUENCE_TOKENS + 1
    tokens = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    tokens += index["output_len"].astype(np.int64)
    _, session = np.unique(index["session_id"], return_inverse=True)
    return int(np.bincount(session, weights=tokens).max()) if len(tokens) else 0
