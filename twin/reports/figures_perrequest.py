"""The report's per-request figures: the TTFT CDF and the hit rate by input length,
drawn from the digests each result row carries (:mod:`reports.perrequest`)."""

from __future__ import annotations

import math
from typing import Any

from twin.reports.analysis import Slo, rate_label
from twin.reports.figure_canvas import figure_text, plt
from twin.reports.perrequest import BIN_LABELS, QUANTILES, pooled_bin_hit_rates, pooled_cdf


def fig_ttft_cdf(
    rows: list[dict[str, Any]],
    policies: list[str],
    rate: float | None,
    cache: float,
    slo: Slo | None,
) -> str | None:
    """TTFT CDF per policy at one cache size (None if no row carries the quantiles)."""
    curves = {p: pooled_cdf(rows, p, rate, cache) for p in policies}
    if not any(curves.values()):
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ys = [q / 100 for q in QUANTILES]
    for i, policy in enumerate(policies):
        q = curves[policy]
        if q is not None:
            ax.plot(q, ys, color=f"C{i}", label=policy)
    if slo is not None and slo.metric == "ttft":
        ax.axvline(slo.threshold_ms, color="k", lw=0.8, ls="-.", label=f"SLO ({slo})")
        ax.axhline(slo.percentile / 100, color="0.6", lw=0.6, ls=":")
    # TTFT spans orders of magnitude between a full hit and a queued miss.
    if all(v > 0 for q in curves.values() if q for v in q):
        ax.set_xscale("log")
    ax.set(
        xlabel="TTFT (ms)",
        ylabel="fraction of requests",
        ylim=(0, 1),
        title=f"TTFT CDF at {cache:g} GB cache ({rate_label(rate)})",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return figure_text(fig)


def fig_hit_by_length(
    rows: list[dict[str, Any]], policies: list[str], rate: float | None, cache: float
) -> str | None:
    """Token hit rate per input-length bin and policy (the Marconi paper's Fig. 10a view);
    None if no row carries the bins. Empty bins are left out of the axis."""
    rates = {p: pooled_bin_hit_rates(rows, p, rate, cache) for p in policies}
    present = [r for r in rates.values() if r is not None]
    if not present:
        return None
    used = [b for b in range(len(BIN_LABELS)) if any(not math.isnan(r[b]) for r in present)]
    width = 0.8 / max(len(policies), 1)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, policy in enumerate(policies):
        r = rates[policy]
        if r is None:
            continue
        x = [j + (i - (len(policies) - 1) / 2) * width for j in range(len(used))]
        ax.bar(
            x, [0.0 if math.isnan(r[b]) else r[b] for b in used], width, color=f"C{i}", label=policy
        )
    ax.set_xticks(range(len(used)), [BIN_LABELS[b] for b in used])
    ax.set(
        xlabel="input length (tokens)",
        ylabel="token hit rate",
        ylim=(0, 1),
        title=f"Hit rate by input length at {cache:g} GB cache ({rate_label(rate)})",
    )
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # bars fill the plot
    return figure_text(fig)
