"""The report's figures: matplotlib (Agg) drawn to SVG text for inlining.

Every function takes the seed-aggregated table and returns one ``<svg>``
element; :func:`figures` lists them all, with the per-request views of
:mod:`reports.figures_perrequest` (the canvas: :mod:`reports.figure_canvas`).
"""

from __future__ import annotations

import math
from typing import Any

from twin.reports.analysis import Slo, rate_label
from twin.reports.figure_canvas import figure_text, plt
from twin.reports.figures_perrequest import fig_hit_by_length, fig_ttft_cdf
from twin.reports.load import Sustainable
from twin.steady_state import STABLE


def _series(agg: list[dict[str, Any]], policy: str, rate: float | None) -> list[dict[str, Any]]:
    return sorted(
        (a for a in agg if a["policy"] == policy and a["session_rate"] == rate),
        key=lambda a: a["cache_gb"],
    )


def _policies(agg: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(a["policy"] for a in agg))


def _cache_axis(ax: Any, agg: list[dict[str, Any]]) -> None:
    """Cache sizes on the x axis: log scale once they span 4x or more (sweeps are
    usually geometric), ticks exactly at the swept sizes."""
    caches = sorted({a["cache_gb"] for a in agg})
    if caches[0] > 0 and caches[-1] / caches[0] >= 4:
        ax.set_xscale("log")
    ax.set_xticks(caches, [f"{c:g}" for c in caches])
    ax.minorticks_off()


def fig_ttft_vs_cache(agg: list[dict[str, Any]], rate: float | None, slo: Slo | None) -> str:
    """P5/P50/P95 TTFT vs cache per policy; P95 carries the across-seed interval."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, policy in enumerate(_policies(agg)):
        cells = _series(agg, policy, rate)
        x = [c["cache_gb"] for c in cells]
        color = f"C{i}"
        err = [c["ttft_p95_ms_ci"] or 0.0 for c in cells]
        ax.errorbar(
            x,
            [c["ttft_p95_ms"] for c in cells],
            yerr=err,
            color=color,
            marker="o",
            capsize=3,
            label=f"{policy} P95",
        )
        ax.plot(
            x,
            [c["ttft_p50_ms"] for c in cells],
            color=color,
            ls="--",
            marker=".",
            label=f"{policy} P50",
        )
        ax.plot(x, [c["ttft_p5_ms"] for c in cells], color=color, ls=":", label=f"{policy} P5")
    if slo is not None and slo.metric == "ttft":
        ax.axhline(slo.threshold_ms, color="k", lw=0.8, ls="-.", label=f"SLO ({slo})")
    ax.set(
        xlabel="prefix cache per replica (GB)",
        ylabel="TTFT (ms)",
        title=f"TTFT vs cache size ({rate_label(rate)})",
    )
    _cache_axis(ax, agg)
    ax.grid(alpha=0.3)
    # Three lines per policy: the legend goes beside the plot, not over it.
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return figure_text(fig)


def fig_hit_vs_cache(agg: list[dict[str, Any]], rate: float | None) -> str:
    """Token hit rate vs cache size, one line per policy."""
    return _fraction_vs_cache(
        agg, rate, "token_hit_rate", "token hit rate", "Token hit rate vs cache size"
    )


def _fraction_vs_cache(
    agg: list[dict[str, Any]], rate: float | None, column: str, ylabel: str, title: str
) -> str:
    """A fraction (``column``, with its ``_ci`` interval) vs cache size, a line per policy."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, policy in enumerate(_policies(agg)):
        cells = _series(agg, policy, rate)
        err = [c[f"{column}_ci"] or 0.0 for c in cells]
        ax.errorbar(
            [c["cache_gb"] for c in cells],
            [_nan(c[column]) for c in cells],
            yerr=err,
            color=f"C{i}",
            marker="o",
            capsize=3,
            label=policy,
        )
    ax.set(
        xlabel="prefix cache per replica (GB)",
        ylabel=ylabel,
        title=f"{title} ({rate_label(rate)})",
        ylim=(0, 1),
    )
    _cache_axis(ax, agg)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return figure_text(fig)


def fig_ttft_vs_rate(
    agg: list[dict[str, Any]], load: list[Sustainable] | None = None, slo: Slo | None = None
) -> str:
    """P95 TTFT vs session rate at the largest cache (only rates set by the sweep);
    each policy's knee is ringed, its max sustainable rate drawn as a dotted line,
    and its points that are not at steady state crossed out.

    The latency axis is logarithmic: past the knee P95 grows by orders of
    magnitude, which a linear axis turns into a flat line and a wall. The SLO
    is drawn when it is on TTFT."""
    top = max(a["cache_gb"] for a in agg)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    crossed = False
    for i, policy in enumerate(_policies(agg)):
        cells = sorted(
            (
                a
                for a in agg
                if a["policy"] == policy and a["cache_gb"] == top and a["session_rate"] is not None
            ),
            key=lambda a: a["session_rate"],
        )
        ax.errorbar(
            [c["session_rate"] for c in cells],
            [c["ttft_p95_ms"] for c in cells],
            yerr=[c["ttft_p95_ms_ci"] or 0.0 for c in cells],
            color=f"C{i}",
            marker="o",
            capsize=3,
            label=policy,
        )
        # Points not at steady state (overloaded, too short to tell) are crossed out:
        # their P95 measures the run's length, not the load's latency.
        unsteady = [c for c in cells if c.get("verdict", STABLE) != STABLE]
        if unsteady:
            ax.plot(
                [c["session_rate"] for c in unsteady],
                [c["ttft_p95_ms"] for c in unsteady],
                ls="none",
                marker="X",
                ms=11,
                color=f"C{i}",
                label="_nolegend_",
            )
            crossed = True
        for s in load or []:  # knee and max rate of this policy at this cache
            if s.policy != policy or s.cache_gb != top:
                continue
            if s.knee is not None:
                at = next(c["ttft_p95_ms"] for c in cells if c["session_rate"] == s.knee)
                ax.plot(
                    [s.knee],
                    [at],
                    marker="o",
                    ms=14,
                    mfc="none",
                    color=f"C{i}",
                    label=f"{policy} knee",
                )
            if s.rate is not None:
                ax.axvline(s.rate, color=f"C{i}", lw=0.8, ls=":", label=f"{policy} max sustainable")
    ax.set(
        xlabel="session arrivals per second",
        ylabel="P95 TTFT (ms)",
        title=f"P95 TTFT vs load at {top:g} GB cache",
    )
    if slo is not None and slo.metric == "ttft":
        ax.axhline(slo.threshold_ms, color="k", lw=0.8, ls="-.", label=f"SLO ({slo})")
    if crossed:  # one legend entry for every crossed-out point
        ax.plot([], [], ls="none", marker="X", ms=9, color="0.3", label="not at steady state")
    values = [a["ttft_p95_ms"] for a in agg if a["cache_gb"] == top and a["session_rate"]]
    if values and all(v is not None and v > 0 for v in values):
        ax.set_yscale("log")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return figure_text(fig)


def fig_flops_vs_cache(agg: list[dict[str, Any]], rate: float | None) -> str:
    """Fraction of prefill FLOPs saved by cache hits vs cache size, one line per policy."""
    return _fraction_vs_cache(
        agg, rate, "flops_saved_frac", "prefill FLOPs saved (fraction)", "FLOPs saved vs cache size"
    )


def fig_composition(agg: list[dict[str, Any]], rate: float | None) -> str:
    """Mean cache contents per replica: KV (solid) and SSM (hatched) bytes stacked,
    one bar per policy in each cache-size group; shows what each policy keeps."""
    policies = _policies(agg)
    caches = sorted({a["cache_gb"] for a in agg})
    width = 0.8 / max(len(policies), 1)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, policy in enumerate(policies):
        by = {c["cache_gb"]: c for c in _series(agg, policy, rate)}
        x = [j + (i - (len(policies) - 1) / 2) * width for j in range(len(caches))]
        kv = [(by[c]["kv_bytes_mean"] or 0.0) / 1e9 if c in by else 0.0 for c in caches]
        ssm = [(by[c]["ssm_bytes_mean"] or 0.0) / 1e9 if c in by else 0.0 for c in caches]
        ax.bar(x, kv, width, color=f"C{i}", label=f"{policy} KV")
        ax.bar(
            x, ssm, width, bottom=kv, color=f"C{i}", alpha=0.45, hatch="//", label=f"{policy} SSM"
        )
    ax.set_xticks(range(len(caches)), [f"{c:g}" for c in caches])
    ax.set(
        xlabel="prefix cache per replica (GB)",
        ylabel="mean bytes held per replica (GB)",
        title=f"Cache composition ({rate_label(rate)})",
    )
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7, ncol=2)
    return figure_text(fig)


def _nan(v: float | None) -> float:
    return math.nan if v is None else v


def figures(
    agg: list[dict[str, Any]],
    slo: Slo | None,
    rows: list[dict[str, Any]] | None = None,
    cdf_cache_gb: float | None = None,
    load: list[Sustainable] | None = None,
) -> list[tuple[str, str, str]]:
    """(file stem, caption, svg) for every figure of the report.

    ``rows`` (the per-seed results) feed the TTFT CDF and hit-by-length views
    at ``cdf_cache_gb`` (default: the largest swept); rows without the digest
    columns (older results) simply produce no such figure.
    """
    out = []
    rates = sorted({a["session_rate"] for a in agg}, key=lambda x: (x is not None, x or 0.0))
    policies = _policies(agg)
    cdf_cache = cdf_cache_gb if cdf_cache_gb is not None else max(a["cache_gb"] for a in agg)
    for rate in rates:
        tag = "own" if rate is None else f"{rate:g}".replace(".", "p")  # a file name's part
        where = rate_label(rate)
        for stem, caption, svg in (
            ("ttft-vs-cache", "TTFT vs cache size", fig_ttft_vs_cache(agg, rate, slo)),
            ("hit-vs-cache", "Token hit rate vs cache size", fig_hit_vs_cache(agg, rate)),
            ("flops-vs-cache", "Prefill FLOPs saved vs cache size", fig_flops_vs_cache(agg, rate)),
            ("composition", "Mean cache composition (KV vs SSM bytes)", fig_composition(agg, rate)),
        ):
            out.append((f"fig-{stem}-{tag}", f"{caption}, {where}", svg))
        if rows:
            cdf = fig_ttft_cdf(rows, policies, rate, cdf_cache, slo)
            if cdf is not None:
                out.append((f"fig-ttft-cdf-{tag}", f"TTFT CDF at {cdf_cache:g} GB, {where}", cdf))
            bins = fig_hit_by_length(rows, policies, rate, cdf_cache)
            if bins is not None:
                out.append(
                    (
                        f"fig-hit-by-length-{tag}",
                        f"Token hit rate by input length at {cdf_cache:g} GB, {where}",
                        bins,
                    )
                )
    if len([r for r in rates if r is not None]) >= 2:
        out.append(
            (
                "fig-ttft-vs-rate",
                "P95 TTFT vs session rate at the largest cache",
                fig_ttft_vs_rate(agg, load, slo),
            )
        )
    return out
