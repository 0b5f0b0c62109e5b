"""Measured vs predicted: join by row, compute the errors, judge them, write the outputs.

Three outputs, written under temporary names and renamed only once all three
are complete (a failed run leaves none of them half-written):

- ``validation.json``: the errors, hit rates, targets and verdicts, plus what
  was run (model, device, profile, policy, cache, workload, seed);
- ``requests.parquet``: one row per request, measured and predicted columns;
- ``predicted_vs_measured.png``: service times and TTFT CDFs (``plot.py``).

Errors are relative to the measurement, ``(predicted - measured) / measured``:
per request for service time (median and P90 of its magnitude, and its
signed median, the bias), and per percentile for TTFT. Hits are the same
policy code run in the same order on both sides, so anything but the same
hit tokens on every row is a bug, not an error to average.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from twin.atomic import atomic_path
from twin.errors import TwinError
from twin.metrics import RequestRecord, to_json

VALIDATION_FILE = "validation.json"
REQUESTS_FILE = "requests.parquet"
PLOT_FILE = "predicted_vs_measured.png"
# Largest relative error accepted per device kind: CPU timings are noisier
# (shared cores, frequency scaling) than a dedicated GPU's.
TARGETS = {"cpu": 0.15, "cuda": 0.05}
TTFT_PERCENTILES = (5, 50, 95)


class Measured(Protocol):
    """What :func:`join` reads from a measured request (``twin.reference.executor``)."""

    row: int
    session_id: int
    turn: int
    arrival_s: float
    start_s: float
    input_tokens: int
    hit_tokens: int
    service_s: float


def join(measured: Sequence[Measured], predicted: Sequence[RequestRecord]) -> dict[str, np.ndarray]:
    """Measured and predicted columns of each request, in row order.

    Both sides must hold the same rows with the same prompt lengths; if not,
    they did not run the same workload, and nothing can be compared.
    """
    m = sorted(measured, key=lambda r: r.row)
    p = sorted(predicted, key=lambda r: r.row)
    rows = np.array([r.row for r in m], np.int64)
    if not np.array_equal(rows, np.array([r.row for r in p], np.int64)):
        raise TwinError(
            f"the executor measured {len(m)} requests and the twin predicted "
            f"{len(p)}, not the same rows: they did not run the same workload"
        )
    bad = [a.row for a, b in zip(m, p, strict=True) if a.input_tokens != b.input_tokens]
    if bad:
        raise TwinError(
            f"row {bad[0]}: the executor and the twin disagree on the prompt length; "
            "they did not run the same workload"
        )
    arrival = np.array([r.arrival_s for r in m])
    m_start = np.array([r.start_s for r in m])
    m_service = np.array([r.service_s for r in m])
    p_start = np.array([r.admitted_s for r in p])
    p_service = np.array([r.first_token_s - r.admitted_s for r in p])
    p_arrival = np.array([r.arrival_s for r in p])
    return {
        "row": rows,
        "session_id": np.array([r.session_id for r in m], np.int64),
        "turn": np.array([r.turn for r in m], np.int64),
        "arrival_s": arrival,
        "input_tokens": np.array([r.input_tokens for r in m], np.int64),
        "measured_hit_tokens": np.array([r.hit_tokens for r in m], np.int64),
        # False: a whole-prompt hit, timed as a one-token prefill (the executor's flag).
        "measured_exact": np.array([getattr(r, "exact", True) for r in m], bool),
        "predicted_hit_tokens": np.array([r.hit_tokens for r in p], np.int64),
        "measured_queue_s": m_start - arrival,
        "measured_service_s": m_service,
        "measured_ttft_s": m_start + m_service - arrival,
        "predicted_queue_s": p_start - p_arrival,
        "predicted_service_s": p_service,
        "predicted_ttft_s": p_start + p_service - p_arrival,
        "service_rel_err": rel_err(p_service, m_service),
    }


def rel_err(predicted: Any, measured: Any) -> np.ndarray:
    """Signed ``(predicted - measured) / measured``; NaN where nothing was measured."""
    pred = np.asarray(predicted, np.float64)
    meas = np.asarray(measured, np.float64)
    out = np.full(np.broadcast(pred, meas).shape, np.nan)
    np.divide(pred - meas, meas, out=out, where=meas > 0)
    return out


def _hits(hit: np.ndarray, inputs: np.ndarray) -> dict[str, Any]:
    total = int(inputs.sum())
    return {
        "hit_tokens": int(hit.sum()),
        "token_hit_rate": float(hit.sum() / total) if total else 0.0,
        "request_hit_rate": float((hit > 0).mean()) if hit.size else 0.0,
    }


def _nan_stat(fn: Any, x: np.ndarray, *args: Any) -> float:
    x = x[~np.isnan(x)]
    return float(fn(x, *args)) if x.size else float("nan")


def metrics(cols: dict[str, np.ndarray]) -> dict[str, Any]:
    """Service-time and TTFT errors, hit rates of both sides, counts (module docstring)."""
    err = cols["service_rel_err"]
    ttft = {}
    for q in TTFT_PERCENTILES:
        meas = float(np.percentile(cols["measured_ttft_s"], q))
        pred = float(np.percentile(cols["predicted_ttft_s"], q))
        ttft[f"p{q}"] = {
            "measured_s": meas,
            "predicted_s": pred,
            "rel_err": float(abs(rel_err(pred, meas))),
        }
    differ = np.flatnonzero(cols["measured_hit_tokens"] != cols["predicted_hit_tokens"])
    return {
        "requests": int(cols["row"].size),
        "sessions": int(np.unique(cols["session_id"]).size),
        "whole_prompt_hits": int((~cols["measured_exact"]).sum()),
        "service": {
            "median_abs_rel_err": _nan_stat(np.median, np.abs(err)),
            "p90_abs_rel_err": _nan_stat(np.percentile, np.abs(err), 90),
            "median_signed_rel_err": _nan_stat(np.median, err),
            "measured_median_s": float(np.median(cols["measured_service_s"])),
            "predicted_median_s": float(np.median(cols["predicted_service_s"])),
        },
        "ttft": ttft,
        "hit": {
            "measured": _hits(cols["measured_hit_tokens"], cols["input_tokens"]),
            "predicted": _hits(cols["predicted_hit_tokens"], cols["input_tokens"]),
            "identical": not differ.size,
            "rows_differing": int(differ.size),
            "first_differing_row": int(cols["row"][differ[0]]) if differ.size else None,
        },
    }


def judge(m: dict[str, Any], device: str) -> dict[str, Any]:
    """Each target with its value and verdict, and whether all pass."""
    limit = TARGETS.get(device)
    if limit is None:
        raise TwinError(f"--device {device!r}: expected {' or '.join(TARGETS)}")
    checks = {
        "service_median_rel_err": m["service"]["median_abs_rel_err"],
        "ttft_p50_rel_err": m["ttft"]["p50"]["rel_err"],
        "ttft_p95_rel_err": m["ttft"]["p95"]["rel_err"],
    }
    # NaN (nothing measured) never passes: ``x < limit`` is False.
    targets: dict[str, Any] = {
        k: {"max": limit, "value": v, "pass": bool(v < limit)} for k, v in checks.items()
    }
    same = m["hit"]["identical"]
    targets["hit_tokens_identical"] = {"required": True, "value": same, "pass": same}
    return {"targets": targets, "pass": all(t["pass"] for t in targets.values())}


def to_table(cols: dict[str, np.ndarray]) -> pa.Table:
    """The joined columns as the ``requests.parquet`` table."""
    return pa.table({name: pa.array(values) for name, values in cols.items()})


def output_paths(out_dir: str | Path) -> dict[str, Path]:
    """Where :func:`write_outputs` puts each output."""
    out_dir = Path(out_dir)
    return {
        "validation": out_dir / VALIDATION_FILE,
        "requests": out_dir / REQUESTS_FILE,
        "plot": out_dir / PLOT_FILE,
    }


def write_outputs(out_dir: str | Path, cols: dict[str, np.ndarray], report: dict[str, Any]) -> None:
    """Write the three outputs under ``out_dir``, all or nothing (module docstring)."""
    from twin.validate.plot import plot_validation  # late: matplotlib is slow to import

    paths = output_paths(out_dir)
    band = report.get("targets", {}).get("service_median_rel_err", {}).get("max", TARGETS["cpu"])
    with contextlib.ExitStack() as stack:
        tmp = {k: stack.enter_context(atomic_path(p)) for k, p in paths.items()}
        tmp["validation"].write_text(to_json(report))
        pq.write_table(to_table(cols), tmp["requests"])
        plot_validation(cols, tmp["plot"], band)
