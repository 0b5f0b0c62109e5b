"""The sweep's results table, ``DIR/results.parquet``: its columns, reads and merged writes.

Finished points are merged into the file, rewritten atomically, while the folder
is held (``twin.atomic.hold``, an flock on DIR itself, so no lock file is left):
each merge re-reads the file, so two sweeps sharing a DIR keep each other's rows.
A rewrite costs time in proportion to the rows already there, so a sweep of many
quick points merges its rows in batches (:class:`ResultsWriter`) rather than one
rewrite a point, which made a 1,000-point sweep spend as long rewriting as
simulating.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from twin.atomic import atomic_path, hold
from twin.errors import TwinError
from twin.reports.perrequest import (
    BIN_HIT_COLUMN,
    BIN_INPUT_COLUMN,
    CDF_COLUMN,
    GOODPUT_COLUMN,
    GOODPUT_SLO_COLUMN,
)

RESULTS_FILE = "results.parquet"
INFEASIBLE_COLUMN = "infeasible"

# Latency percentiles of every row, ms (reports.sweep.summary_row): any of them can be
# an SLO's target (``ttft_p95_ms`` is ``p95_ttft``'s column).
LATENCY_PERCENTILES: dict[str, tuple[str, ...]] = {
    "ttft": ("p5", "p50", "p90", "p95", "p99"),
    "tpot": ("p50", "p90", "p95", "p99"),
    "itl": ("p50", "p90", "p95", "p99"),
    "e2e": ("p50", "p90", "p95", "p99"),
    "prefill": ("p50", "p90", "p95", "p99"),
}
LATENCY_COLUMNS = tuple(f"{name}_{p}_ms" for name, ps in LATENCY_PERCENTILES.items() for p in ps)

# Column order of the results table (and the schema every row is cast to, so
# an all-null column such as session_rate keeps its type across rewrites).
SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("cache_gb", pa.float64()),
        ("policy", pa.string()),
        ("session_rate", pa.float64()),  # null: the workload's own arrival times
        ("seed", pa.int64()),
        ("model", pa.string()),
        ("profile_label", pa.string()),
        ("profile_gpu", pa.string()),
        ("workload_sha256", pa.string()),
        ("replicas", pa.int64()),
        ("tp", pa.int64()),
        # The serving layout (reports.layouts): null aggregated, else "1P2D" (replicas
        # then counts the workers of both pools).
        ("layout", pa.string()),
        ("requests_measured", pa.int64()),
        ("requests_rejected", pa.int64()),
        *[(c, pa.float64()) for c in LATENCY_COLUMNS],
        ("queue_mean_ms", pa.float64()),
        ("queue_p95_ms", pa.float64()),
        ("prefill_mean_ms", pa.float64()),
        ("token_hit_rate", pa.float64()),
        ("request_hit_rate", pa.float64()),
        ("flops_saved_frac", pa.float64()),
        ("kv_bytes_mean", pa.float64()),
        ("ssm_bytes_mean", pa.float64()),
        ("throughput_rps", pa.float64()),
        ("output_tokens_per_s", pa.float64()),
        ("utilisation", pa.float64()),
        # The shared pool's pressure (null without a pool) and the running cap.
        ("preempted_requests", pa.int64()),
        ("peak_running", pa.int64()),
        ("running_pool_peak", pa.float64()),
        ("max_running", pa.int64()),
        # The engine's steady-state judgement (summary["steady_state"]).
        ("verdict", pa.string()),
        ("verdict_reason", pa.string()),
        ("arrival_rate_rps", pa.float64()),
        ("completion_rate_rps", pa.float64()),
        # What limits the point under the SLOs of goodput_slo (reports.verdicts).
        ("binding", pa.string()),
        # Good requests per second under the SLO list of goodput_slo (null without SLOs).
        (GOODPUT_COLUMN, pa.float64()),
        (GOODPUT_SLO_COLUMN, pa.string()),
        # Per-request digests (reports.perrequest); null in rows written before they existed.
        (CDF_COLUMN, pa.list_(pa.float64())),
        (BIN_INPUT_COLUMN, pa.list_(pa.float64())),
        (BIN_HIT_COLUMN, pa.list_(pa.float64())),
        # Why the point cannot run (its cache and the weights leave no memory for
        # requests); null for points that ran. Infeasible rows have null metrics.
        (INFEASIBLE_COLUMN, pa.string()),
    ]
)


def read_results(out_dir: Path) -> list[dict[str, Any]]:
    """Rows already in ``out_dir/results.parquet`` (none if there is no such file)."""
    path = Path(out_dir) / RESULTS_FILE
    if not path.is_file():
        return []
    try:
        return pq.read_table(path).to_pylist()
    except (OSError, pa.ArrowException) as err:
        raise TwinError(
            f"{path}: cannot read the previous results ({err}); delete it or use another --out"
        ) from None


def write_results(out_dir: Path, rows: list[dict[str, Any]]) -> None:
    """Rewrite the whole table atomically, sorted so the file does not depend on finish order."""
    ordered = sorted(
        rows,
        key=lambda r: (
            r["replicas"] or 0,
            r["cache_gb"],
            r["policy"],
            r["session_rate"] is not None,
            r["session_rate"] or 0,
            r["seed"],
            r["key"],
        ),
    )
    table = pa.Table.from_pylist(
        [{c: r.get(c) for c in SCHEMA.names} for r in ordered], schema=SCHEMA
    )
    with atomic_path(Path(out_dir) / RESULTS_FILE) as tmp:
        pq.write_table(table, tmp)


def merge_results(out_dir: Path, new: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Add ``new`` rows to the file's, with the folder held; return every row by key.

    Re-reading under the lock (not trusting a copy read at start) is what keeps
    the rows another sweep wrote into the same DIR meanwhile.
    """
    with hold(out_dir):
        rows = {r["key"]: r for r in read_results(out_dir)}
        rows.update({r["key"]: stored_row(r) for r in new})
        if new:
            write_results(out_dir, list(rows.values()))
    return rows


def stored_row(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` in its stored shape (every column, in order), so rows computed now equal rows
    read back from the file."""
    return {c: row.get(c) for c in SCHEMA.names}


class ResultsWriter:
    """Rows handed over one by one, merged into ``DIR/results.parquet`` in batches.

    A batch is merged when the last merge is at least ``min_interval_s`` old
    and at least ``cost_ratio`` times as old as that merge took, so rewriting
    the table stays under ``1 / (1 + cost_ratio)`` of the sweep's time however
    many rows it holds (each rewrite costs time in proportion to them). Points
    that take longer than ``min_interval_s`` are merged one by one, as before.
    :meth:`flush` merges what is left; a sweep calls it when it ends, also on
    an error or Ctrl-C, so a finished point is lost only when the process is
    killed outright, and then only those of the last batch.
    """

    def __init__(self, out_dir: Path, min_interval_s: float = 1.0, cost_ratio: float = 4.0):
        self.out_dir = Path(out_dir)
        self.min_interval_s, self.cost_ratio = min_interval_s, cost_ratio
        self.pending: list[dict[str, Any]] = []
        self._last_end = float("-inf")  # the first row is merged at once
        self._last_cost = 0.0

    def add(self, row: dict[str, Any]) -> None:
        """Keep ``row``; merge the batch if it is due."""
        self.pending.append(row)
        since = time.monotonic() - self._last_end
        if since >= max(self.min_interval_s, self.cost_ratio * self._last_cost):
            self.flush()

    def flush(self) -> None:
        """Merge every kept row into the file now (nothing to do if none is kept)."""
        if not self.pending:
            return
        start = time.monotonic()
        merge_results(self.out_dir, self.pending)
        self.pending = []
        self._last_end = time.monotonic()
        self._last_cost = self._last_end - start
