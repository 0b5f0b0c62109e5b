"""aiconfigurator's own estimate of a row (``cli_estimate``, as its nightly accuracy job
calls it), where the ``aic`` extra is installed."""

from __future__ import annotations

import contextlib
import io
import logging
from typing import Any

from twin.validate.silicon.plan import RowPlan

AIC_NOT_INSTALLED = "aiconfigurator not installed"


def aiconfigurator_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("aiconfigurator") is not None


def aiconfigurator_estimate(plan: RowPlan) -> dict[str, Any]:
    """aiconfigurator's own estimate for the row, called as its accuracy job calls it
    (``ai-dynamo/aiconfigurator``, tools/accuracy_regression_testing/
    predict_silicon_sample.py: ``cli_estimate`` with the row's model, system, mode,
    backend, ISL/OSL, quantisation modes, batch size and parallel sizes). Two
    differences, both forced offline: the database is the package's current one for
    the backend (the rows' older versions are not in the package; the job's own
    fallback when a version is missing), and the model is the cached config the twin
    uses (``model_id``), since a path the package does not cache is downloaded.
    ``{"aic_error": ...}`` when it fails or is not installed."""
    if not aiconfigurator_available():
        return {"aic_error": AIC_NOT_INSTALLED}
    row = plan.row
    args = cli_estimate_args(plan, "agg")
    args["batch_size"] = row.batch_size or plan.concurrency
    args.update(layout_args(row))
    return run_cli_estimate(args)


# ``cli_estimate``'s parallelism arguments and the row's (or a pool's) field for each.
_LAYOUT_ARGS = (
    ("tp_size", "tp"),
    ("pp_size", "pp"),
    ("attention_dp_size", "attention_dp"),
    ("moe_tp_size", "moe_tp"),
    ("moe_ep_size", "moe_ep"),
)


def layout_args(layout: Any, prefix: str = "") -> dict[str, int]:
    """The parallelism arguments of ``cli_estimate`` that ``layout`` (a row, or a
    disaggregated row's pool with ``prefix`` ``prefill_`` / ``decode_``) gives."""
    given = ((arg, getattr(layout, field)) for arg, field in _LAYOUT_ARGS)
    return {f"{prefix}{arg}": value for arg, value in given if value}


def cli_estimate_args(plan: RowPlan, mode: str) -> dict[str, Any]:
    """The arguments of ``cli_estimate`` every row shares: model, system, ``mode``,
    backend (its current database), lengths and quantisation modes: the row's columns,
    or none where the twin read the checkpoint's (``RowPlan.native_quant``), so that
    aiconfigurator infers them from the checkpoint as well (called with the columns, its
    0.12.0 release runs those rows' nvfp4 / int4_wo as weight-only GEMMs it has no table
    for on Hopper and fails with PerfDataNotAvailableError)."""
    row = plan.row
    columns = not getattr(plan, "native_quant", False)
    return {
        "model_path": plan.model_id,
        "system_name": row.system,
        "mode": mode,
        "backend_name": row.backend,
        "backend_version": None,
        "isl": row.isl,
        "osl": row.osl,
        "gemm_quant_mode": (row.gemm_quant_mode or None) if columns else None,
        "moe_quant_mode": (row.moe_quant_mode or None) if columns else None,
    }


def run_cli_estimate(args: dict[str, Any]) -> dict[str, Any]:
    """aiconfigurator's ``cli_estimate(**args)`` (its nightly accuracy job's call), quiet:
    ``{"aic_ttft_ms", "aic_tpot_ms"}``, or ``{"aic_error": ...}`` when it fails."""
    logging.getLogger("aiconfigurator").setLevel(logging.ERROR)
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    try:
        from aiconfigurator.cli.api import cli_estimate

        with contextlib.redirect_stdout(io.StringIO()):
            result = cli_estimate(**args)
        ttft, tpot = float(result.ttft), float(result.tpot)
    except Exception as err:  # its failures are data here, not our errors
        text = (str(err).splitlines() or [""])[0][:200]
        return {"aic_error": f"{type(err).__name__}: {text}"}
    return {"aic_ttft_ms": ttft, "aic_tpot_ms": tpot}
