"""A row's result (the measurement, the twin's and aiconfigurator's predictions) and the
errors summarised per group, backend, precision and split."""

from __future__ import annotations

import csv
import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from twin.atomic import atomic_path
from twin.metrics import to_json
from twin.validate.silicon.aiconfigurator import aiconfigurator_estimate
from twin.validate.silicon.harness import harness_of
from twin.validate.silicon.plan import RowPlan
from twin.validate.silicon.predict import predict
from twin.validate.silicon.rows import SPLITS


def _deployment_text(settings: Mapping[str, Any]) -> str:
    """``max_num_batched_tokens=2548 max_num_seqs=8``: the limits a row ran with."""
    flat = {**settings.get("sets", {}), **{k: v for k, v in settings.items() if k != "sets"}}
    spec = flat.pop("speculative", None)
    if spec:  # method, drafts a step and the expected tokens a step
        flat["speculative"] = (
            f"{spec['method']}:{spec['num_speculative_tokens']}@{spec['acceptance_length']:.2f}"
        )
    pairs = [  # a disaggregated pool's own flags as decode_engine_flags.max_num_seqs=64
        (f"{k}.{name}", value)
        for k, v in flat.items()
        if isinstance(v, dict)
        for name, value in v.items()
    ]
    return " ".join(
        [f"{k}={v}" for k, v in flat.items() if not isinstance(v, dict)]
        + [f"{k}={v}" for k, v in pairs]
    )


def score_row(plan: RowPlan, aiconfigurator: bool = False) -> dict[str, Any]:
    """One result row: the measurement, the twin's prediction and (optionally)
    aiconfigurator's, with the absolute percentage errors. A process pool's task."""
    row = plan.row
    out: dict[str, Any] = {
        "id": row.id,
        "split": row.split,
        "group": row.group,
        "model_path": row.model_path,
        "model_config": plan.model_id,
        "system": row.system,
        "backend": row.backend,
        "backend_version": row.backend_version,
        "precision": row.precision_label,
        "priced": plan.priced,
        "priced_as": plan.precision,
        "isl": row.isl,
        "osl": row.osl,
        "concurrency": plan.concurrency,
        "workers": plan.workers,
        "harness": harness_of(row).name,
        "tp": plan.tp,
        "gpu": plan.gpu,
        "engine": plan.engine,
        "requests": plan.requests,
        "warmup": plan.warmup,
        "deployment": _deployment_text(plan.deployment),
        "silicon_ttft_ms": row.ttft_ms,
        "silicon_tpot_ms": row.tpot_ms,
    }
    out.update(predict(plan))
    if aiconfigurator:
        out.update(aiconfigurator_estimate(plan))
    for who in ("twin", "aic"):
        for metric in ("ttft", "tpot"):
            pred = out.get(f"{who}_{metric}_ms")
            actual = out[f"silicon_{metric}_ms"]
            out[f"{who}_{metric}_ape"] = ape(pred, actual) if pred is not None else None
    return out


def ape(predicted: float, actual: float) -> float:
    """Absolute percentage error, % (aiconfigurator's ``_ape``: |pred - actual| / actual)."""
    return abs(predicted - actual) / actual * 100.0


def mape(errors: Sequence[float]) -> float:
    """Mean of absolute percentage errors (%)."""
    return statistics.fmean(errors) if errors else math.nan


def mdape(errors: Sequence[float]) -> float:
    """Median of absolute percentage errors (%)."""
    return statistics.median(errors) if errors else math.nan


def metrics(results: Sequence[dict[str, Any]], who: str = "twin") -> dict[str, Any] | None:
    """MAPE and MdAPE of TTFT and TPOT of ``who``'s predictions (rows that have both)."""
    scored = [
        r
        for r in results
        if r.get(f"{who}_ttft_ape") is not None and r.get(f"{who}_tpot_ape") is not None
    ]
    if not scored:
        return None
    out: dict[str, Any] = {"n": len(scored)}
    for metric in ("ttft", "tpot"):
        errors = [float(r[f"{who}_{metric}_ape"]) for r in scored]
        out[f"{metric}_mape"] = mape(errors)
        out[f"{metric}_mdape"] = mdape(errors)
        # Which way the predictions are off: the median of predicted / measured.
        ratios = [r[f"{who}_{metric}_ms"] / r[f"silicon_{metric}_ms"] for r in scored]
        out[f"{metric}_median_ratio"] = float(np.median(ratios))
    return out


def side_by_side(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The twin's metrics; with aiconfigurator's predictions, its metrics and the twin's
    on the same rows (like for like)."""
    out: dict[str, Any] = {"rows": len(results), "twin": metrics(results, "twin")}
    with_aic = [r for r in results if r.get("aic_ttft_ape") is not None]
    if with_aic:
        out["aiconfigurator"] = metrics(with_aic, "aic")
        out["twin_on_aiconfigurator_rows"] = metrics(with_aic, "twin")
    return out


def _grouped(results: Sequence[dict[str, Any]], key: str) -> dict[str, Any]:
    keys = sorted({str(r[key]) for r in results})
    return {k: side_by_side([r for r in results if str(r[key]) == k]) for k in keys}


def precision_key(result: dict[str, Any]) -> str:
    """The per-precision group of a result: ``vllm | fp8, fp8 KV``."""
    return f"{result['backend']} | {result.get('priced') or 'bf16, bf16 KV'}"


def summarize(
    results: Sequence[dict[str, Any]],
    reasons: Counter[str] | dict[str, int],
    rows_read: int,
) -> dict[str, Any]:
    """The summary: row counts, rows not expressed by reason, runs the twin refused, and
    per split (fit, held out, all) the overall, per-backend and per-group metrics."""
    predicted = [r for r in results if r.get("twin_ttft_ms") is not None]
    failed = Counter(str(r["twin_error"]) for r in results if r.get("twin_error"))
    aic_failed = Counter(str(r["aic_error"]) for r in results if r.get("aic_error"))
    splits: dict[str, Any] = {}
    for split in (*SPLITS, "all"):
        part = [r for r in predicted if split == "all" or r["split"] == split]
        by_precision = [{**r, "precision_key": precision_key(r)} for r in part]
        splits[split] = {
            "overall": side_by_side(part),
            "by_backend": _grouped(part, "backend"),
            "by_precision": _grouped(by_precision, "precision_key"),
            "by_group": _grouped(part, "group"),
        }
    return {
        "rows": {
            "read": rows_read,
            "not_expressed": sum(reasons.values()),
            "expressed": len(results),
            "predicted": len(predicted),
            "twin_refused": sum(failed.values()),
        },
        "not_expressed": dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
        "twin_refused": dict(failed.most_common()),
        "aiconfigurator_failed": dict(aic_failed.most_common()),
        "splits": splits,
    }


RESULT_COLUMNS = (
    "id",
    "split",
    "group",
    "model_path",
    "model_config",
    "system",
    "backend",
    "backend_version",
    "precision",
    "priced",
    "priced_as",
    "isl",
    "osl",
    "concurrency",
    "workers",
    "harness",
    "tp",
    "gpu",
    "engine",
    "requests",
    "warmup",
    "deployment",
    "silicon_ttft_ms",
    "silicon_tpot_ms",
    "twin_ttft_ms",
    "twin_tpot_ms",
    "twin_ttft_ape",
    "twin_tpot_ape",
    "twin_ttft_p50_ms",
    "twin_tpot_p50_ms",
    "twin_queue_ms",
    "twin_preemptions",
    "twin_peak_running",
    "twin_pool_gb",
    "twin_steady_state",
    "twin_sim_s",
    "twin_wall_s",
    "twin_error",
    "aic_ttft_ms",
    "aic_tpot_ms",
    "aic_ttft_ape",
    "aic_tpot_ape",
    "aic_error",
)


def write_outputs(
    out_dir: str | Path, results: Sequence[dict[str, Any]], summary: dict[str, Any]
) -> tuple[Path, Path]:
    """``predictions.csv`` (one row per expressed CSV row) and ``summary.json`` under
    ``out_dir``, each written atomically."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table, summary_path = out / "predictions.csv", out / "summary.json"
    with atomic_path(table) as tmp, tmp.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=RESULT_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for r in results:
            writer.writerow({k: _cell(r.get(k)) for k in RESULT_COLUMNS})
    with atomic_path(summary_path) as tmp:
        tmp.write_text(to_json(summary))
    return table, summary_path


def _cell(value: Any) -> Any:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.6g}"
    return "" if value is None else value
