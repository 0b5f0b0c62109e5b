"""Per-request records and the run summary: data first, text later.

- :class:`RequestRecord`: one request's ids, replica and timestamps, with the
  derived latencies (queue wait, prefill time, TTFT, TPOT, end-to-end).
- :class:`RecordWriter`: streams records to ``requests.parquet`` in row groups
  through a temporary file renamed at the end, so memory stays flat and a
  failed run leaves no half-written file.
- :class:`SummaryBuilder`: keeps only what the summary needs (latencies as
  float32 arrays for the percentiles, spilled to temporary files past a
  million, running sums for the rest).
- :class:`Occupancy`: cache bytes by kind per replica at fixed simulated-time
  intervals, thinned (every other sample dropped, interval doubled) when a run
  outlasts its expected horizon, so the series stays a few hundred points.
- :func:`to_json`: sorted keys, floats rounded, NaN as null: the same run
  always gives the same bytes.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from twin.atomic import atomic_path
from twin.cache import PrefillFlops
from twin.slo import Slo, good_requests
from twin.steady_state import STABLE, judge
from twin.summary import (
    ClusterState,
    Flops,
    Hits,
    Latencies,
    LatencyStats,
    Preemption,
    Provenance,
    Requests,
    RunSummary,
    SloResult,
    SloTarget,
    Throughput,
)
from twin.token_gaps import TokenGaps
from twin.workloads.arrow_numpy import arrow_of

NAN = float("nan")


@dataclass(slots=True)
class RequestRecord:
    """One request's life; times in simulated seconds, NaN where they do not apply."""

    row: int  # workload row
    session_id: int
    turn: int
    replica: int
    arrival_s: float
    admitted_s: float  # joined the running batch (cache looked up)
    first_token_s: float
    completed_s: float
    input_tokens: int
    hit_tokens: int
    output_tokens: int
    checkpoints: int  # SSM checkpoints the cache admitted for this request
    rejected: bool = False  # larger than the replica's memory for running requests
    # Hit tokens the recurrent layers still computed (prompt modules out of prefix position).
    hit_recompute_tokens: int = 0
    preemptions: int = 0  # times the shared KV pool ran out and the engine preempted it
    recomputed_tokens: int = 0  # tokens prefilled again because of its preemptions (priced)

    def latencies(self) -> tuple[float, float, float, float, float]:
        """The :data:`LATENCIES` in order (the one derivation of each; the properties
        below read it): TTFT, TPOT (mean time per output token after the first, NaN
        with a single output token), end to end, queue wait, prefill."""
        arrival, admitted = self.arrival_s, self.admitted_s
        first, done, n = self.first_token_s, self.completed_s, self.output_tokens
        return (
            first - arrival,
            (done - first) / (n - 1) if n >= 2 else NAN,
            done - arrival,
            admitted - arrival,
            first - admitted,
        )

    @property
    def ttft_s(self) -> float:
        return self.latencies()[0]

    @property
    def tpot_s(self) -> float:
        return self.latencies()[1]

    @property
    def e2e_s(self) -> float:
        return self.latencies()[2]

    @property
    def queue_s(self) -> float:
        return self.latencies()[3]

    @property
    def prefill_s(self) -> float:
        return self.latencies()[4]


# A record's latencies (``RequestRecord.latencies``), derived once for the writer and the summary.
LATENCIES = ("ttft_s", "tpot_s", "e2e_s", "queue_s", "prefill_s")

_INT_COLUMNS = (
    "row",
    "session_id",
    "turn",
    "replica",
    "input_tokens",
    "hit_tokens",
    "output_tokens",
    "checkpoints",
)
_TIME_COLUMNS = ("arrival_s", "queue_s", "prefill_s", "ttft_s", "tpot_s", "e2e_s")
RECORD_SCHEMA = pa.schema(
    [(c, pa.int32() if c in ("turn", "replica") else pa.int64()) for c in _INT_COLUMNS[:4]]
    + [(c, pa.float64()) for c in _TIME_COLUMNS]
    + [(c, pa.int64()) for c in _INT_COLUMNS[4:]]
    + [("rejected", pa.bool_()), ("warmup", pa.bool_())]
)
# Shared-pool runs (preemption possible) add these; the dedicated cache's files keep the
# schema above byte for byte.
PREEMPTION_COLUMNS = ("preemptions", "recomputed_tokens")
PREEMPTIVE_SCHEMA = RECORD_SCHEMA.append(pa.field("preemptions", pa.int64())).append(
    pa.field("recomputed_tokens", pa.int64())
)


_NUMPY = {
    pa.int64(): np.int64,
    pa.int32(): np.int32,
    pa.float64(): np.float64,
    pa.bool_(): np.bool_,
}


class ColumnBuffer:
    """Rows of values kept as numpy columns.

    :meth:`add` extends one flat list with a row's values (no object kept per
    row, so no work for the garbage collector); every :attr:`settle_rows` rows
    (``len(values) >= limit``) :meth:`settle` converts them, one numpy
    conversion per column instead of a typed append per value. Past that, 8
    bytes a value at most.
    """

    settle_rows = 1024

    def __init__(self, dtypes: list[Any]) -> None:
        self.dtypes = dtypes
        self.width = len(dtypes)
        self.limit = self.settle_rows * self.width
        self.values: list[Any] = []  # rows not yet converted, row after row
        self.add = self.values.extend
        self.chunks: list[list[np.ndarray]] = [[] for _ in dtypes]

    def settle(self) -> None:
        """Convert the pending rows into column chunks."""
        values, width = self.values, self.width
        if values:
            for k, (chunks, dtype) in enumerate(zip(self.chunks, self.dtypes, strict=True)):
                chunks.append(np.array(values[k::width], dtype))
            values.clear()

    def columns(self) -> list[np.ndarray]:
        """Every column so far, one array each in row order."""
        self.settle()
        for chunks, dtype in zip(self.chunks, self.dtypes, strict=True):
            if len(chunks) != 1:
                chunks[:] = [np.concatenate(chunks) if chunks else np.zeros(0, dtype)]
        return [chunks[0] for chunks in self.chunks]

    def take(self) -> list[np.ndarray]:
        """:meth:`columns`, and the buffer is emptied."""
        out = self.columns()
        self.chunks = [[] for _ in self.dtypes]
        return out


class RecordWriter:
    """Stream :class:`RequestRecord` rows to a parquet file, atomically (module docstring)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        warmup_s: float = 0.0,
        chunk_rows: int = 65536,
        preemptive: bool = False,
    ) -> None:
        self.path = Path(path)
        self.warmup_s = warmup_s
        self.chunk_rows = chunk_rows
        self.rows = 0
        self.preemptive = preemptive
        self.schema = PREEMPTIVE_SCHEMA if preemptive else RECORD_SCHEMA
        # Columns in :meth:`add`'s order (8 bytes a value: a 64K-row chunk is 8 MB).
        order = ["row", "session_id", "turn", "replica", "arrival_s", *LATENCIES]
        order += ["input_tokens", "hit_tokens", "output_tokens", "checkpoints", "rejected"]
        self._order = [*order, "warmup", *(PREEMPTION_COLUMNS if preemptive else ())]
        self._buffer = ColumnBuffer([_NUMPY[self.schema.field(c).type] for c in self._order])
        self._atomic = atomic_path(self.path)
        self._tmp = self._atomic.__enter__()
        self._writer = pq.ParquetWriter(self._tmp, self.schema)

    def add(self, rec: RequestRecord, latencies: tuple[float, ...] | None = None) -> None:
        """Buffer ``rec``; ``latencies``: its :data:`LATENCIES`, if already derived."""
        arrival = rec.arrival_s
        if latencies is None:
            latencies = rec.latencies()
        buffer = self._buffer
        buffer.add(
            (
                rec.row,
                rec.session_id,
                rec.turn,
                rec.replica,
                arrival,
                *latencies,
                rec.input_tokens,
                rec.hit_tokens,
                rec.output_tokens,
                rec.checkpoints,
                rec.rejected,
                arrival < self.warmup_s,
            )
        )
        if self.preemptive:
            buffer.add((rec.preemptions, rec.recomputed_tokens))  # the same row's last values
        self.rows += 1
        if self.rows % self.chunk_rows == 0:
            self._flush()
        elif len(buffer.values) >= buffer.limit:
            buffer.settle()

    def close(self) -> None:
        """Write the last rows and move the file to its final name (on a failure, a full
        disk, drop the temporary file and raise)."""
        try:
            self._flush()
            self._writer.close()
        except BaseException as err:
            self._drop(err)
            raise
        self._atomic.__exit__(None, None, None)

    def abort(self) -> None:
        """Drop the temporary file (the target is left as it was)."""
        self._drop(RuntimeError("aborted"))

    def _drop(self, err: BaseException) -> None:
        with contextlib.suppress(Exception):  # a writer that failed may fail to close too
            self._writer.close()
        self._atomic.__exit__(type(err), err, None)  # raises an OSError named after the file

    def _flush(self) -> None:
        columns = dict(zip(self._order, self._buffer.take(), strict=True))
        if not len(columns["row"]):
            return
        # NaN times (rejected requests, TPOT of one token) become nulls.
        arrays = [arrow_of(columns[f.name], f.type) for f in self.schema]
        self._writer.write_table(pa.Table.from_arrays(arrays, schema=self.schema))


# What SummaryBuilder keeps per measured request: the latencies and the arrival time.
_KEPT = (*LATENCIES, "arrival_s")
SPILL_AT = 1 << 20  # latencies per kind kept in memory before spilling (4 MiB each)


class SummaryBuilder:
    """Accumulates the summary of the requests arriving at or after ``warmup_s``."""

    def __init__(
        self, flops: PrefillFlops, warmup_s: float = 0.0, preemptive: bool = False
    ) -> None:
        self.flops = flops
        self.warmup_s = warmup_s
        self.preemptive = preemptive
        self.preemptions = self.preempted = self.recomputed = 0
        # The latencies of the measured requests, float32 columns in LATENCIES' order, and
        # their arrival times (float64: the steady-state test regresses on them).
        self.lat = ColumnBuffer([np.float32] * len(LATENCIES) + [np.float64])
        self._spilled_rows = 0  # latencies per kind already spilled
        # Prompt lengths repeat (a few thousand distinct in 55,000 chat turns): their
        # FLOPs are remembered, boundedly (the same floats, computed once each).
        self._total_flops = functools.lru_cache(maxsize=1 << 13)(flops.total)
        # Latencies past SPILL_AT per kind go to anonymous temporary files, so a
        # ten-million-request run keeps flat memory (issue 16); read back at the end.
        self._spilled: dict[str, Any] = {}
        self.total = self.excluded = self.rejected = self.measured = 0
        self.input_tokens = self.hit_tokens = self.output_tokens = self.hits = 0
        self.checkpoints = 0
        self.flops_total = self.flops_saved = self.flops_recomputed = 0.0
        self.first_arrival = math.inf
        self.last_completion = 0.0

    def add(self, rec: RequestRecord, latencies: tuple[float, ...] | None = None) -> None:
        """Count ``rec``; ``latencies``: its :data:`LATENCIES`, if already derived."""
        self.total += 1
        arrival = rec.arrival_s
        if arrival < self.warmup_s:
            self.excluded += 1
            return
        if rec.rejected:
            self.rejected += 1
            return
        self.measured += 1
        lat = self.lat
        lat.add(latencies or rec.latencies())
        lat.add((arrival,))  # the same row's last value
        if self.measured - self._spilled_rows >= SPILL_AT:
            self._spill()
        elif len(lat.values) >= lat.limit:
            lat.settle()
        n = rec.input_tokens
        self.input_tokens += n
        self.output_tokens += rec.output_tokens
        self.checkpoints += rec.checkpoints
        if rec.preemptions:
            self.preempted += 1
            self.preemptions += rec.preemptions
            self.recomputed += rec.recomputed_tokens
        total = self._total_flops
        self.flops_total += total(n, 0)
        hit = rec.hit_tokens
        if hit:
            self.hits += 1
            self.hit_tokens += hit
            self.flops_saved += total(hit, 0)
            if rec.hit_recompute_tokens:
                self.flops_recomputed += self.flops.recurrent(rec.hit_recompute_tokens)
        if arrival < self.first_arrival:
            self.first_arrival = arrival
        if rec.completed_s > self.last_completion:
            self.last_completion = rec.completed_s

    def summary(
        self,
        cluster: ClusterState,
        config: Mapping[str, Any],
        provenance: Provenance,
        gaps: TokenGaps,
        arrivals_end_s: float | None = None,
        slos: Sequence[Slo] = (),
    ) -> RunSummary:
        """The run's summary, the one builder of :class:`~twin.summary.RunSummary`: the
        measured requests' part from what :meth:`add` kept, the engine's state from
        ``cluster``, ``config`` and ``provenance``; ``gaps``: the run's inter-token gaps.
        ``arrivals_end_s`` (the last expected arrival) closes the steady-state window
        (:mod:`twin.steady_state`); ``slos`` add the ``slo`` section (:mod:`twin.slo`)."""
        start = self.warmup_s if self.warmup_s > 0 else self.first_arrival
        window = self.last_completion - start if self.measured else 0.0
        rate = (lambda x: x / window) if window > 0 else (lambda x: None)
        columns = self._columns()
        stats = {k: LatencyStats.of(columns[k]) for k in LATENCIES}
        saved = self.flops_saved - self.flops_recomputed
        recomputed = self.flops_recomputed
        steady = None
        if arrivals_end_s is not None:
            first = start if math.isfinite(start) else 0.0
            steady = judge(
                columns["arrival_s"],
                columns["ttft_s"],
                columns["arrival_s"] + columns["e2e_s"],
                (first, max(first, arrivals_end_s)),
                columns["queue_s"],
            )
        slo = None
        if slos:
            good = good_requests(slos, columns["ttft_s"], columns["tpot_s"], columns["e2e_s"])
            targets = tuple(self._slo_target(slo, gaps) for slo in slos)
            met = all(t.met for t in targets)
            slo = SloResult(
                attainment=float(good.mean()) if good.size else None,
                goodput_rps=rate(int(good.sum())),
                targets=targets,
                targets_met=met,
                # A run not at steady state meets no SLO: its latencies measure its length.
                met=met and steady is not None and steady.verdict == STABLE,
            )
        return RunSummary(
            requests=Requests(self.total, self.measured, self.excluded, self.rejected),
            latency=Latencies(**stats, itl_s=LatencyStats.from_dict(gaps.stats())),
            hit=Hits(
                token_hit_rate=self.hit_tokens / self.input_tokens if self.input_tokens else 0.0,
                request_hit_rate=self.hits / self.measured if self.measured else 0.0,
                input_tokens=self.input_tokens,
                hit_tokens=self.hit_tokens,
                checkpoints_admitted=self.checkpoints,
            ),
            flops=Flops(
                self.flops_total,
                saved,
                saved / self.flops_total if self.flops_total else 0.0,
                # Prompt modules reused out of prefix position on a model with recurrent
                # layers: what reusing them in every layer would save, and what survives.
                *(
                    (
                        self.flops_saved,
                        recomputed,
                        saved / self.flops_saved if self.flops_saved else 0.0,
                    )
                    if recomputed
                    else ()
                ),
            ),
            throughput=Throughput(
                window, rate(self.measured), rate(self.output_tokens), rate(self.input_tokens)
            ),
            cluster=cluster,
            config=config,
            provenance=provenance,
            preemption=(
                Preemption(self.preempted, self.preemptions, self.recomputed)
                if self.preemptive
                else None
            ),
            steady_state=steady,
            slo=slo,
        )

    def _slo_target(self, slo: Slo, gaps: TokenGaps) -> SloTarget:
        """``slo``'s value (any percentile: exact from the requests, or from the gaps'
        histogram for ITL) and verdict."""
        value: float | None
        if slo.metric == "itl":
            value = gaps.percentile(slo.percentile) if gaps.n else None
        else:
            value = self.percentile(slo.summary_key, slo.percentile)
        value_ms = None if value is None else value * 1e3
        return SloTarget(slo.text, str(slo), value_ms, slo.met_by(value_ms))

    def percentile(self, name: str, q: float) -> float | None:
        """The ``q``-th percentile of latency ``name`` (one of LATENCIES) over the
        measured requests; None when none has a value."""
        x = self._columns()[name].astype(np.float64)
        x = x[~np.isnan(x)]
        return float(np.percentile(x, q)) if x.size else None

    def _spill(self) -> None:
        for name, values in zip(_KEPT, self.lat.take(), strict=True):
            f = self._spilled.get(name)
            if f is None:
                # Closed with the builder (a TemporaryFile deletes itself).
                f = self._spilled[name] = tempfile.TemporaryFile()  # noqa: SIM115
            values.tofile(f)
        self._spilled_rows = self.measured

    def _columns(self) -> dict[str, np.ndarray]:
        """Every latency and arrival recorded, one array each (spilled rows first)."""
        out = {}
        for name, tail in zip(_KEPT, self.lat.columns(), strict=True):
            f = self._spilled.get(name)
            if f is not None:
                f.seek(0)
                tail = np.concatenate((np.fromfile(f, tail.dtype), tail))
            out[name] = tail
        return out


class Occupancy:
    """Cache bytes by kind per replica over simulated time (module docstring)."""

    def __init__(self, replicas: int, interval_s: float, max_samples: int = 400) -> None:
        self.interval_s = interval_s
        self.max_samples = max_samples
        self.t: list[float] = []
        self.kv: list[list[int]] = [[] for _ in range(replicas)]
        self.ssm: list[list[int]] = [[] for _ in range(replicas)]

    def add(self, t: float, kv: list[int], ssm: list[int]) -> None:
        self.t.append(t)
        for i, (k, s) in enumerate(zip(kv, ssm, strict=True)):
            self.kv[i].append(k)
            self.ssm[i].append(s)
        if len(self.t) > self.max_samples:
            self.t = self.t[::2]
            self.kv = [x[::2] for x in self.kv]
            self.ssm = [x[::2] for x in self.ssm]
            self.interval_s *= 2

    def to_dict(self) -> dict[str, Any]:
        return {
            "interval_s": self.interval_s,
            "t_s": self.t,
            "kv_bytes": self.kv,
            "ssm_bytes": self.ssm,
        }


def _clean(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        x = float(x)
        return float(f"{x:.9g}") if math.isfinite(x) else None
    return x


# A list of numbers that ``json.dumps(indent=...)`` spread one per line.
_NUMBER_LIST = re.compile(r"\[\s*((?:-?[\d.eE+-]+|null)(?:,\s*(?:-?[\d.eE+-]+|null))*)\s*\]")


def to_json(data: Any) -> str:
    """Deterministic JSON text: sorted keys, 9 significant digits, NaN and inf as null.

    Lists of numbers (the occupancy series) stay on one line each.
    """
    text = json.dumps(_clean(data), indent=2, sort_keys=True)
    return (
        _NUMBER_LIST.sub(
            lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text
        )
        + "\n"
    )
