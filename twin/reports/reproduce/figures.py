"""Figures of the reproduction report, drawn like the capacity report's (inline SVG text).

Each function takes plain numbers (what a claim computed) and returns ``<svg>``
text; matplotlib is imported here only, when a report is written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _pyplot() -> Any:
    """matplotlib's pyplot, configured as the capacity report's figures are (imported late:
    ``twin --version`` and the CLI's start-up must not pay for matplotlib)."""
    from twin.reports.figure_canvas import plt

    return plt


def _svg(fig: Any) -> str:
    from twin.reports.figure_canvas import figure_text

    return figure_text(fig)


def gain_boxes(
    labels: Sequence[str],
    gains: Sequence[Sequence[float]],
    paper: Sequence[float],
    ylabel: str,
) -> str:
    """One box per workload over its configurations (whiskers P5/P95), the paper's mean as x."""
    fig, ax = _pyplot().subplots(figsize=(6.5, 3.8))
    ax.boxplot(list(gains), whis=(5, 95), showmeans=True, tick_labels=list(labels))
    ax.plot(range(1, len(paper) + 1), paper, "x", color="C3", markersize=10, label="paper (mean)")
    ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.legend(loc="upper left")
    ax.grid(True, axis="y", alpha=0.3)
    return _svg(fig)


def curves(
    x: Sequence[float],
    series: Mapping[str, Sequence[float]],
    xlabel: str,
    ylabel: str,
    x_labels: Sequence[str] | None = None,
) -> str:
    """One line per series over ``x`` on a log scale (e.g. the improvement over SGLang+ vs
    cache size)."""
    fig, ax = _pyplot().subplots(figsize=(6.5, 3.8))
    for i, (name, ys) in enumerate(series.items()):
        ax.plot(x, ys, marker="o", color=f"C{i}", label=name)
    ax.set_xscale("log")
    ax.set_xticks(list(x), list(x_labels) if x_labels else [f"{v:.3g}" for v in x])
    ax.minorticks_off()
    ax.axhline(0, color="#888", linewidth=0.8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend()
    ax.grid(True, alpha=0.3)
    return _svg(fig)


def bars(groups: Sequence[str], series: Mapping[str, Sequence[float]], ylabel: str) -> str:
    """Grouped bars (e.g. hit rate by input-length bin, one bar per policy)."""
    fig, ax = _pyplot().subplots(figsize=(6.5, 3.8))
    width = 0.8 / max(1, len(series))
    for i, (name, ys) in enumerate(series.items()):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, ys, width, label=name, color=f"C{i}")
    ax.set_xticks(range(len(groups)), list(groups))
    ax.set_ylabel(ylabel)
    ax.legend()
    ax.grid(True, axis="y", alpha=0.3)
    return _svg(fig)
