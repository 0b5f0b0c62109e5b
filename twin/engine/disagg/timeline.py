"""The per-request P/D timeline (``pd_timeline.parquet``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the cluster writes its timeline through this module
    from twin.engine.disagg.cluster import DisaggCluster

# The per-request timeline (``pd_timeline.parquet``), in column order.
TIMELINE_COLUMNS = (
    "row",
    "prefill_worker",
    "decode_worker",
    "arrival_s",
    "prefill_end_s",  # the first token, sampled by the prefill worker
    "reserved_s",  # the decode worker's memory reserved
    "transfer_start_s",  # the link free and the memory reserved
    "transfer_end_s",
    "first_decode_s",  # the decode worker's first step done (the second token)
    "completed_s",
    "transfer_bytes",  # all the tp GPUs' shares
    "tail_start_s",  # the last piece's start (transfer_start_s unless chunks went before)
    "early_bytes",  # of transfer_bytes, sent chunk by chunk before the prefill ended
)
INT_TIMELINE_COLUMNS = {"row", "prefill_worker", "decode_worker", "transfer_bytes", "early_bytes"}


TIMELINE_FILE = "pd_timeline.parquet"


def write_timeline(cluster: DisaggCluster, path: Path) -> None:
    """Each transferred request's prefill, reservation, transfer and decode times."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = cluster.timeline_columns()
    order = np.argsort(cols["row"], kind="stable")
    pq.write_table(pa.table({k: v[order] for k, v in cols.items()}), path)
