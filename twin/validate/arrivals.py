"""Fix every request's arrival time, so the executor and the twin see identical arrivals.

A workload may leave arrivals to the server: closed-loop turns arrive
``think_s`` after the previous turn *completes*, and sessions without a start
time get Poisson starts drawn by the engine. Validation compares a measured
run against a predicted one, so both must serve exactly the same requests at
exactly the same times. :func:`fix_arrivals` writes an open-loop copy:

- **Session starts.** With ``session_rate`` the k-th session in file order
  starts at the k-th arrival of a seeded Poisson process (the first at
  t = 0), as ``twin simulate --session-rate`` does; its later open-loop turns
  keep their offsets from its turn 0. Without it, the file's turn-0 times; a
  file missing one uses the session rate its metadata records (generators
  record theirs), else it is refused naming ``--session-rate``.
- **Later turns.** Their own ``arrival_s`` when given (never before the turn
  they follow, the engine's rule), else the previous turn's arrival +
  ``think_s`` (null: 0): the nominal schedule with service taken as instant.
- **Order.** Rows are sorted by arrival, stable in file order, so each
  session's turns stay in order. Tied arrivals are then spread by one ulp
  each: the engine submits requests due at the same instant in process
  order, not row order, and the executor serves in row order; strictly
  increasing arrivals make both orders the same.
- **Truncation.** ``max_requests`` keeps the first rows in arrival order,
  which keeps every session prefix-closed (a turn never precedes the one it
  follows).

Rows are copied as stored (``extends_history`` rows keep their appended
tokens), since only times change; the file's metadata records what was done.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from twin.errors import TwinError, where
from twin.workloads.reader import Workload
from twin.workloads.schema import WorkloadRow
from twin.workloads.writer import WorkloadWriter

_BATCH_ROWS = 256  # rows per read batch while copying token lists


def fix_arrivals(
    workload: Workload,
    out_path: str | os.PathLike[str],
    *,
    session_rate: float | None,
    seed: int,
    max_requests: int | None,
) -> Workload:
    """Write an open-loop copy of ``workload`` to ``out_path`` and open it (module docstring)."""
    if workload.num_rows == 0:
        raise TwinError(f"{workload.path}: the workload has no requests")
    if max_requests is not None and max_requests < 1:
        raise TwinError(f"--requests must be at least 1 (got {max_requests})")
    starts, how, rate = _session_starts(workload, session_rate, seed)
    arrivals = _turn_arrivals(workload, starts, poisson=how == "poisson")
    order = np.argsort(arrivals, kind="stable")[:max_requests]
    times, ties = _strictly_increasing(arrivals[order])
    metadata = _metadata(workload, how, rate, seed, max_requests, len(order), ties)
    with WorkloadWriter(out_path, metadata) as writer:
        writer.write_all(_rows(workload, order, times))
    return Workload.open(out_path)


def _session_starts(
    workload: Workload, session_rate: float | None, seed: int
) -> tuple[np.ndarray, str, float | None]:
    """Start time of each session, indexed by its turn-0 row; how they were set; the rate."""
    index = workload.index
    first = np.flatnonzero(index["turn"] == 0)
    file_starts = index["arrival_s"][first]
    rate = session_rate
    if rate is None:
        missing = np.flatnonzero(np.isnan(file_starts))
        if not missing.size:
            return _by_row(workload, first, file_starts), "file", None
        rate = _metadata_rate(workload.metadata)
        if rate is None:
            r = int(first[missing[0]])
            raise TwinError(
                f"{where(workload.path, r, 'arrival_s')}: session {index['session_id'][r]} has "
                "no start time and the file records no session rate; give --session-rate"
            )
    if not (math.isfinite(rate) and rate > 0):
        raise TwinError(f"--session-rate must be a positive number of sessions/s (got {rate!r})")
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, len(first))
    starts = np.concatenate(([0.0], np.cumsum(gaps[:-1])))
    return _by_row(workload, first, starts), "poisson", float(rate)


def _by_row(workload: Workload, rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    out = np.full(workload.num_rows, np.nan)
    out[rows] = values
    return out


def _metadata_rate(metadata: dict[str, Any]) -> float | None:
    rate = metadata.get("session_rate")
    if isinstance(rate, int | float) and not isinstance(rate, bool) and rate > 0:
        return float(rate) if math.isfinite(rate) else None
    return None


def _turn_arrivals(workload: Workload, starts: np.ndarray, poisson: bool) -> np.ndarray:
    """Every row's arrival: its session start, own time, or previous arrival + think."""
    index = workload.index
    sid, turn = index["session_id"], index["turn"]
    own, think = index["arrival_s"], index["think_s"]
    out = np.empty(workload.num_rows)
    previous: dict[int, float] = {}  # session -> arrival of its latest turn
    shift: dict[int, float] = {}  # session -> what its open-loop turns move by
    for r in range(workload.num_rows):
        s = int(sid[r])
        if turn[r] == 0:
            t = float(starts[r])
            # Under Poisson starts, later open-loop turns keep their offset
            # from turn 0 (the engine's rule); without a turn-0 time, their own.
            moved = poisson and not np.isnan(own[r])
            shift[s] = t - float(own[r]) if moved else 0.0
        elif not np.isnan(own[r]):
            t = max(previous[s], float(own[r]) + shift[s])
        else:
            t = previous[s] + (0.0 if np.isnan(think[r]) else float(think[r]))
        previous[s] = out[r] = t
    return out


def _strictly_increasing(times: np.ndarray) -> tuple[np.ndarray, int]:
    """``times`` (sorted) with each tie moved one ulp past its predecessor; the ties moved."""
    out = times.copy()
    ties = 0
    for i in range(1, len(out)):
        if out[i] <= out[i - 1]:
            out[i] = np.nextafter(out[i - 1], np.inf)
            ties += 1
    return out, ties


def _rows(workload: Workload, order: np.ndarray, times: np.ndarray) -> list[WorkloadRow]:
    """The kept rows as stored, in ``order``, with their new arrival times.

    Streams the token columns batch by batch and keeps only the rows wanted,
    so a long trace cut to a few requests is never held whole.
    """
    index = workload.index
    slot = np.full(workload.num_rows, -1, np.int64)
    slot[order] = np.arange(len(order))
    rows: list[WorkloadRow | None] = [None] * len(order)
    parquet = pq.ParquetFile(workload.path, page_checksum_verification=True)
    r0 = 0
    for batch in parquet.iter_batches(
        batch_size=_BATCH_ROWS, columns=["input_tokens", "output_tokens"]
    ):
        inputs, outputs = batch.column(0), batch.column(1)
        for i in np.flatnonzero(slot[r0 : r0 + batch.num_rows] >= 0):
            r, k = r0 + int(i), int(slot[r0 + i])
            prompt, out = _ids(inputs[int(i)]), _ids(outputs[int(i)])
            if prompt is None or not len(prompt):
                raise TwinError(f"{where(workload.path, r, 'input_tokens')}: empty or null prompt")
            think = index["think_s"][r]
            rows[k] = WorkloadRow(
                session_id=int(index["session_id"][r]),
                turn=int(index["turn"][r]),
                arrival_s=float(times[k]),
                think_s=None if np.isnan(think) else float(think),
                input_tokens=prompt,
                extends_history=bool(index["extends_history"][r]),
                output_tokens=out,
                output_len=int(index["output_len"][r]),
            )
        r0 += batch.num_rows
    assert all(row is not None for row in rows)
    return rows  # type: ignore[return-value]


def _ids(cell: Any) -> np.ndarray | None:
    """One list cell's token ids as int32 (None when null); the reader checks their range."""
    if not cell.is_valid:
        return None
    return np.asarray(cell.values.to_numpy(zero_copy_only=False), np.int32)


def _metadata(
    workload: Workload,
    how: str,
    rate: float | None,
    seed: int,
    max_requests: int | None,
    kept: int,
    ties: int,
) -> dict[str, Any]:
    """The copy's metadata: the producer (for ``twin workload info``) and what was fixed."""
    source = workload.metadata
    producer: dict[str, Any] = {k: source[k] for k in ("generator", "importer") if k in source}
    return {
        **producer,
        "source_metadata": source,
        "fixed_arrivals": {
            "by": "twin validate",
            "source": str(workload.path),
            "source_rows": workload.num_rows,
            "rows": kept,
            "max_requests": max_requests,
            "session_starts": "file arrival_s" if how == "file" else "poisson",
            "session_rate": rate,
            "seed": seed,
            "later_turns": "own arrival_s (not before the previous turn), else previous "
            "arrival + think_s",
            "tied_arrivals_spread": ties,
        },
    }
