"""Figures (matplotlib, Agg, SVG) and the two report files: report.html and report.md.

report.html is one self-contained file (inline SVG and CSS, no scripts, no
external URL) so it can be mailed or attached to a ticket; report.md
references the same figures saved beside it as fig-*.svg.
"""

from __future__ import annotations

import html
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on servers; must precede pyplot
import matplotlib.pyplot as plt

from reports.analysis import Recommendation, Slo, rate_label, verdict
from twin.atomic import write_text_atomic

# Text stays text (smaller files, selectable labels) and the hash salt makes
# element ids, hence the files, identical from run to run.
matplotlib.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "twin-report"})

HTML_FILE = "report.html"
MD_FILE = "report.md"


@dataclass(frozen=True)
class Header:
    """Where the numbers come from: printed at the top of both reports."""

    command: str
    workload: str
    workload_sha256: str
    twin_version: str
    model: str
    gpu: str
    provenance: str
    replicas: int
    tp: int


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    # Inline SVG in HTML needs no XML prolog or DOCTYPE.
    return text[text.index("<svg"):]


def _series(agg: list[dict[str, Any]], policy: str, rate: float | None) -> list[dict[str, Any]]:
    return sorted((a for a in agg if a["policy"] == policy and a["session_rate"] == rate),
                  key=lambda a: a["cache_gb"])


def _rates(agg: list[dict[str, Any]]) -> list[float | None]:
    return sorted({a["session_rate"] for a in agg}, key=lambda x: (x is not None, x or 0.0))


def _policies(agg: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(a["policy"] for a in agg))


def fig_ttft_vs_cache(agg: list[dict[str, Any]], rate: float | None, slo: Slo | None) -> str:
    """P5/P50/P95 TTFT vs cache per policy; P95 carries the across-seed interval."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, policy in enumerate(_policies(agg)):
        cells = _series(agg, policy, rate)
        x = [c["cache_gb"] for c in cells]
        color = f"C{i}"
        err = [c["ttft_p95_ms_ci"] or 0.0 for c in cells]
        ax.errorbar(x, [c["ttft_p95_ms"] for c in cells], yerr=err, color=color, marker="o",
                    capsize=3, label=f"{policy} P95")
        ax.plot(x, [c["ttft_p50_ms"] for c in cells], color=color, ls="--", marker=".",
                label=f"{policy} P50")
        ax.plot(x, [c["ttft_p5_ms"] for c in cells], color=color, ls=":", label=f"{policy} P5")
    if slo is not None and slo.metric == "ttft":
        ax.axhline(slo.threshold_ms, color="k", lw=0.8, ls="-.", label=f"SLO ({slo})")
    ax.set(xlabel="prefix cache per replica (GB)", ylabel="TTFT (ms)",
           title=f"TTFT vs cache size ({rate_label(rate)})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    return _svg(fig)


def fig_hit_vs_cache(agg: list[dict[str, Any]], rate: float | None) -> str:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, policy in enumerate(_policies(agg)):
        cells = _series(agg, policy, rate)
        err = [c["token_hit_rate_ci"] or 0.0 for c in cells]
        ax.errorbar([c["cache_gb"] for c in cells], [c["token_hit_rate"] for c in cells],
                    yerr=err, color=f"C{i}", marker="o", capsize=3, label=policy)
    ax.set(xlabel="prefix cache per replica (GB)", ylabel="token hit rate",
           title=f"Token hit rate vs cache size ({rate_label(rate)})", ylim=(0, 1))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _svg(fig)


def fig_ttft_vs_rate(agg: list[dict[str, Any]]) -> str:
    """P95 TTFT vs session rate at the largest cache (only rates set by the sweep)."""
    top = max(a["cache_gb"] for a in agg)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, policy in enumerate(_policies(agg)):
        cells = sorted((a for a in agg if a["policy"] == policy and a["cache_gb"] == top
                        and a["session_rate"] is not None), key=lambda a: a["session_rate"])
        ax.errorbar([c["session_rate"] for c in cells], [c["ttft_p95_ms"] for c in cells],
                    yerr=[c["ttft_p95_ms_ci"] or 0.0 for c in cells], color=f"C{i}",
                    marker="o", capsize=3, label=policy)
    ax.set(xlabel="session arrivals per second", ylabel="P95 TTFT (ms)",
           title=f"P95 TTFT vs load at {top:g} GB cache")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _svg(fig)


def figures(agg: list[dict[str, Any]], slo: Slo | None) -> list[tuple[str, str, str]]:
    """(file stem, caption, svg) for every figure of the report."""
    out = []
    rates = _rates(agg)
    for rate in rates:
        tag = "own" if rate is None else f"{rate:g}".replace(".", "p")
        out.append((f"fig-ttft-vs-cache-{tag}", f"TTFT vs cache size, {rate_label(rate)}",
                    fig_ttft_vs_cache(agg, rate, slo)))
        out.append((f"fig-hit-vs-cache-{tag}", f"Token hit rate vs cache size, "
                    f"{rate_label(rate)}", fig_hit_vs_cache(agg, rate)))
    if len([r for r in rates if r is not None]) >= 2:
        out.append(("fig-ttft-vs-rate", "P95 TTFT vs session rate at the largest cache",
                    fig_ttft_vs_rate(agg)))
    return out


def _fmt(v: Any, ci: Any = None, digits: int = 1, pct: bool = False) -> str:
    if v is None:
        return "-"
    text = f"{v:.1%}" if pct else f"{v:,.{digits}f}"
    if ci is not None:
        text += f" ± {ci:.1%}" if pct else f" ± {ci:,.{digits}f}"
    return text


def _rec_rows(recs: list[Recommendation]) -> list[list[str]]:
    return [[r.policy, rate_label(r.session_rate),
             "none in the sweep" if r.cache_gb is None else f"{r.cache_gb:g} GB",
             _fmt(r.value_ms), str(r.gpus)] for r in recs]


REC_HEAD = ["policy", "session rate", "smallest cache meeting SLO", "SLO metric (ms)", "GPUs"]
RES_HEAD = ["policy", "session rate", "cache (GB)", "seeds", "P5 TTFT (ms)", "P50 TTFT (ms)",
            "P95 TTFT (ms)", "P99 TTFT (ms)", "P95 TPOT (ms)", "token hit", "request hit",
            "FLOPs saved", "req/s", "utilisation"]


def _res_rows(agg: list[dict[str, Any]]) -> list[list[str]]:
    return [[a["policy"], rate_label(a["session_rate"]), f"{a['cache_gb']:g}", str(a["seeds"]),
             _fmt(a["ttft_p5_ms"]), _fmt(a["ttft_p50_ms"]),
             _fmt(a["ttft_p95_ms"], a["ttft_p95_ms_ci"]), _fmt(a["ttft_p99_ms"]),
             _fmt(a["tpot_p95_ms"], digits=2),
             _fmt(a["token_hit_rate"], a["token_hit_rate_ci"], pct=True),
             _fmt(a["request_hit_rate"], pct=True), _fmt(a["flops_saved_frac"], pct=True),
             _fmt(a["throughput_rps"], digits=2), _fmt(a["utilisation"], pct=True)]
            for a in agg]


def caveats(h: Header) -> list[str]:
    out = [f"Step prices come from the {h.gpu} profile: {h.provenance}."]
    if "datasheet" in h.provenance:
        out.append("A datasheet roofline is not calibrated: absolute latencies can be off "
                   "by a large factor; compare policies and cache sizes relative to each "
                   "other, or calibrate with `twin calibrate` on the target GPU.")
    elif "transferred" in h.provenance:
        out.append("Transferred profiles scale another GPU's measurements by peak ratios; "
                   "expect larger errors than a profile measured on the target GPU.")
    out.append("Intervals are 95% t-intervals across seeds of the mean; with one seed none "
               "is shown. The seed drives the Poisson session arrivals of --session-rates; "
               "with the workload's own arrival times, seeds may give identical runs.")
    return out


def _md_table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _html_table(head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
                   for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _facts(h: Header, slo: Slo | None) -> list[tuple[str, str]]:
    return [("command", h.command), ("workload", f"{h.workload} (sha256 {h.workload_sha256})"),
            ("twin version", h.twin_version), ("model", h.model),
            ("cluster", f"{h.replicas} replica(s) x tp {h.tp} = {h.replicas * h.tp} GPU(s)"),
            ("GPU profile", f"{h.gpu}: {h.provenance}"),
            ("SLO", str(slo) if slo else "none given")]


CSS = ("body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}"
       "table{border-collapse:collapse;margin:1em 0;font-size:13px}"
       "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
       "td:first-child,th:first-child{text-align:left}code{background:#f4f4f4}"
       "figure{margin:1.5em 0}.verdict{background:#eef6ee;padding:.6em 1em}")


def render_html(h: Header, slo: Slo | None, agg: list[dict[str, Any]],
                recs: list[Recommendation], figs: list[tuple[str, str, str]]) -> str:
    e = html.escape
    facts = "".join(f"<tr><th>{e(k)}</th><td style='text-align:left'><code>{e(v)}</code></td>"
                    "</tr>" for k, v in _facts(h, slo))
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'>"
             f"<title>twin capacity report: {e(h.model)}</title><style>{CSS}</style></head>"
             f"<body><h1>Capacity report: {e(h.model)} on {e(h.gpu)}</h1>",
             f"<table>{facts}</table>"]
    if slo is not None:
        parts.append("<h2>Recommendation</h2>")
        parts += [f"<p class='verdict'>{e(line)}</p>" for line in verdict(recs, slo)]
        parts.append(_html_table(REC_HEAD, _rec_rows(recs)))
    parts.append("<h2>Figures</h2>")
    parts += [f"<figure>{svg}<figcaption>{e(cap)}</figcaption></figure>"
              for _, cap, svg in figs]
    parts += ["<h2>Results (mean across seeds)</h2>", _html_table(RES_HEAD, _res_rows(agg)),
              "<h2>Caveats</h2><ul>", *(f"<li>{e(c)}</li>" for c in caveats(h)),
              "</ul></body></html>"]
    return "\n".join(parts) + "\n"


def render_md(h: Header, slo: Slo | None, agg: list[dict[str, Any]],
              recs: list[Recommendation], figs: list[tuple[str, str, str]]) -> str:
    parts = [f"# Capacity report: {h.model} on {h.gpu}", "",
             "\n".join(f"- **{k}**: `{v}`" for k, v in _facts(h, slo)), ""]
    if slo is not None:
        parts += ["## Recommendation", "", *(f"> {line}\n" for line in verdict(recs, slo)),
                  _md_table(REC_HEAD, _rec_rows(recs)), ""]
    parts += ["## Figures", ""]
    parts += [f"![{cap}]({stem}.svg)\n" for stem, cap, _ in figs]
    parts += ["## Results (mean across seeds)", "", _md_table(RES_HEAD, _res_rows(agg)), "",
              "## Caveats", "", *(f"- {c}" for c in caveats(h)), ""]
    return "\n".join(parts)


def render_report(out_dir: str | Path, header: Header, slo: Slo | None,
                  agg: list[dict[str, Any]], recs: list[Recommendation]) -> list[Path]:
    """Write the figures, report.md and report.html (each atomically); return their paths."""
    out = Path(out_dir)
    figs = figures(agg, slo)
    written = []
    for stem, _, svg in figs:
        write_text_atomic(out / f"{stem}.svg", svg)
        written.append(out / f"{stem}.svg")
    # The Markdown last-but-one and the HTML last: a reader who finds the HTML
    # finds every file it summarises already in place.
    write_text_atomic(out / MD_FILE, render_md(header, slo, agg, recs, figs))
    write_text_atomic(out / HTML_FILE, render_html(header, slo, agg, recs, figs))
    return [*written, out / MD_FILE, out / HTML_FILE]
