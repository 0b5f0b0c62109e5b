"""Capacity-planning sweeps and their HTML/Markdown reports.

Data flows one way: :mod:`reports.sweep` runs one engine simulation per grid
point and keeps a resumable ``results.parquet``; :mod:`reports.analysis`
aggregates seeds and picks the smallest cache meeting an SLO;
:mod:`reports.perrequest` digests each point's requests (TTFT quantiles, hit
rate by input length); :mod:`reports.load` finds the P95 knee and the maximum
sustainable rate; :mod:`reports.render_figures` draws the figures and
:mod:`reports.render` writes ``report.html`` and ``report.md``.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

# Names re-exported lazily: importing ``reports.sweep`` (or the CLI) must not
# pull in scipy and matplotlib through this package's ``__init__``.
_EXPORTS = {
    "Point": "twin.reports.sweep",
    "Slo": "twin.reports.analysis",
    "SweepSpec": "twin.reports.sweep",
    "aggregate": "twin.reports.analysis",
    "grid": "twin.reports.sweep",
    "parse_slo": "twin.reports.analysis",
    "recommend": "twin.reports.analysis",
    "render_report": "twin.reports.render",
    "run_sweep": "twin.reports.sweep",
    "winner": "twin.reports.analysis",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(name)


__all__ = sorted(_EXPORTS)
