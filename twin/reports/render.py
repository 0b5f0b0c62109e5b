"""The two report files: report.html and report.md (figures: reports.render_figures).

report.html is one self-contained file (inline SVG and CSS, no scripts, no
external URL) so it can be mailed or attached to a ticket; report.md
references the same figures saved beside it as fig-*.svg.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twin.atomic import OutputSet
from twin.reports.analysis import Recommendation, Slo, by_gpu_count, rate_label, slo_text, verdict
from twin.reports.load import LOAD_HEAD, Sustainable, load_rows, load_verdict, sustainable

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
    pp: int = 1  # pipeline stages of tp GPUs a replica
    # Every swept replica count (--replicas 1,2,4); empty: ``replicas`` alone.
    replica_counts: tuple[int, ...] = ()
    # "<cache> GB cache: <why>" for each swept cache size that cannot run.
    infeasible: tuple[str, ...] = ()
    # One-line notes on reading the results (goodput of another SLO list, routing).
    notes: tuple[str, ...] = ()


def _fmt(v: Any, ci: Any = None, digits: int = 1, pct: bool = False) -> str:
    if v is None:
        return "-"
    text = f"{v:.1%}" if pct else f"{v:,.{digits}f}"
    if ci is not None:
        text += f" ± {ci:.1%}" if pct else f" ± {ci:,.{digits}f}"
    return text


def rec_cells(r: Recommendation) -> list[str]:
    """One recommendation as table cells (REC_HEAD), the CLI's table included. Where
    no cache meets the SLOs, the target, value, verdict and limit are the largest
    cache's."""
    value = r.value_ms if r.meets else dict(r.values).get(r.target) if r.target else None
    return [
        r.policy,
        rate_label(r.session_rate),
        "none in the sweep" if r.cache_gb is None else f"{r.cache_gb:g} GB",
        "-" if r.cache_gb_per_gpu is None else f"{r.cache_gb_per_gpu:g} GB",
        "-" if r.target is None else str(r.target),
        _fmt(value),
        r.verdict,
        r.resource or "-",
        str(r.gpus),
    ]


def _rec_rows(recs: list[Recommendation]) -> list[list[str]]:
    return [rec_cells(r) for r in recs]


INFEASIBLE_HEAD = "## Points that cannot run (left out of the results)"
LOAD_NOTE = (
    "Max sustainable rate: the largest swept session rate meeting the SLO, "
    "interpolated linearly to the SLO crossing between the last passing and the first "
    "failing rate ('>=': every swept rate passes). Knee: the first swept rate after "
    "which P95 TTFT grows more than twice as fast as the load in relative terms "
    "(log-log slope > 2 to the next swept rate)."
)
REC_HEAD = [
    "policy",
    "session rate",
    "smallest cache meeting SLOs (per replica)",
    "per GPU",
    "binding target",
    "its value (ms)",
    "verdict",
    "limit",
    "GPUs",
]
REC_NOTE = (
    "A cache meets the SLOs when every target is met and the run's steady state is "
    "stable. Binding target: the one nearest its threshold (furthest past it where "
    "none meets, shown at the largest cache). Limit: the resource that binds a "
    "point that fails."
)
RES_HEAD = [
    "policy",
    "session rate",
    "GPUs",
    "cache per replica (GB)",
    "cache per GPU (GB)",
    "seeds",
    "P5 TTFT (ms)",
    "P50 TTFT (ms)",
    "P95 TTFT (ms)",
    "P99 TTFT (ms)",
    "P95 TPOT (ms)",
    "token hit",
    "request hit",
    "FLOPs saved",
    "req/s",
    "goodput (req/s)",
    "utilisation",
    "verdict",
]


def _res_rows(agg: list[dict[str, Any]]) -> list[list[str]]:
    return [
        [
            a["policy"],
            rate_label(a["session_rate"]),
            str(a.get("gpus", 1)),
            f"{a['cache_gb']:g}",
            f"{a.get('cache_gb_per_gpu', a['cache_gb']):g}",
            str(a["seeds"]),
            _fmt(a.get("ttft_p5_ms")),
            _fmt(a.get("ttft_p50_ms")),
            _fmt(a.get("ttft_p95_ms"), a.get("ttft_p95_ms_ci")),
            _fmt(a.get("ttft_p99_ms")),
            _fmt(a.get("tpot_p95_ms"), digits=2),
            _fmt(a.get("token_hit_rate"), a.get("token_hit_rate_ci"), pct=True),
            _fmt(a.get("request_hit_rate"), pct=True),
            _fmt(a.get("flops_saved_frac"), pct=True),
            _fmt(a["throughput_rps"], digits=2),
            _fmt(a.get("goodput_rps"), digits=2),
            _fmt(a["utilisation"], pct=True),
            a.get("verdict") or "-",
        ]
        for a in agg
    ]


def caveats(h: Header) -> list[str]:
    out = [f"Step prices come from the {h.gpu} profile: {h.provenance}."]
    if "measured (" in h.provenance and "datasheet" in h.provenance:
        out.append(
            "The kernel families marked datasheet are uncalibrated rooflines; the "
            "measured ones are fitted to NVIDIA's public kernel tables (kernel-only "
            "times, as engines replaying CUDA graphs run them)."
        )
    elif "datasheet" in h.provenance:
        out.append(
            "A datasheet roofline is not calibrated: absolute latencies can be off "
            "by a large factor; compare policies and cache sizes relative to each "
            "other, or calibrate with `twin calibrate` on the target GPU."
        )
    elif "transferred" in h.provenance:
        out.append(
            "Transferred profiles scale another GPU's measurements by peak ratios; "
            "expect larger errors than a profile measured on the target GPU."
        )
    out.append(
        "Intervals are 95% t-intervals across seeds of the mean; with one seed none "
        "is shown. The seed drives the Poisson session arrivals of --session-rates; "
        "with the workload's own arrival times, seeds may give identical runs."
    )
    return out


def _md_table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _html_table(head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows
    )
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _html_facts(facts: Iterable[tuple[str, str]]) -> str:
    """A report's facts, a row each with its value as code (capacity, plan, reproduce)."""
    e = html.escape
    rows = "".join(
        f"<tr><th>{e(k)}</th><td style='text-align:left'><code>{e(v)}</code></td></tr>"
        for k, v in facts
    )
    return f"<table>{rows}</table>"


def _facts(h: Header, slos: Sequence[Slo]) -> list[tuple[str, str]]:
    return [
        ("command", h.command),
        ("workload", f"{h.workload} (sha256 {h.workload_sha256})"),
        ("twin version", h.twin_version),
        ("model", h.model),
        ("cluster", _cluster(h)),
        ("GPU profile", f"{h.gpu}: {h.provenance}"),
        ("SLOs", slo_text(slos) if slos else "none given"),
    ]


def _cluster(h: Header) -> str:
    counts = h.replica_counts or (h.replicas,)
    each = h.tp * h.pp  # a replica's GPUs: pp stages of tp
    per = f"tp {h.tp}" + (f" x pp {h.pp}" if h.pp > 1 else "")
    if len(counts) == 1:
        return f"{counts[0]} replica(s) x {per} = {counts[0] * each} GPU(s)"
    return (
        f"{', '.join(map(str, counts))} replicas (swept) x {per} = "
        f"{', '.join(str(n * each) for n in counts)} GPUs; cache sizes are per replica, "
        f"{each} GPU(s) each"
    )


CSS = (
    "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}"
    "table{border-collapse:collapse;margin:1em 0;font-size:13px}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
    "td:first-child,th:first-child{text-align:left}code{background:#f4f4f4}"
    "figure{margin:1.5em 0}.verdict{background:#eef6ee;padding:.6em 1em}"
)


def render_html(
    h: Header,
    slos: Sequence[Slo],
    agg: list[dict[str, Any]],
    recs: list[Recommendation],
    figs: list[tuple[str, str, str]],
    load: list[Sustainable] | None = None,
) -> str:
    e = html.escape
    parts = [
        f"<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>twin capacity report: {e(h.model)}</title><style>{CSS}</style></head>"
        f"<body><h1>Capacity report: {e(h.model)} on {e(h.gpu)}</h1>",
        _html_facts(_facts(h, slos)),
    ]
    if slos:
        parts.append("<h2>Recommendation</h2>")
        parts += [f"<p class='verdict'>{e(line)}</p>" for line in verdict(recs, slos)]
        parts += [_html_table(REC_HEAD, _rec_rows(recs)), f"<p>{e(REC_NOTE)}</p>"]
    if slos and load:
        parts.append("<h2>Load</h2>")
        parts += [f"<p class='verdict'>{e(line)}</p>" for line in load_verdict(load, slos)]
        parts += [_html_table(LOAD_HEAD, load_rows(load)), f"<p>{e(LOAD_NOTE)}</p>"]
    if h.notes:
        parts.append("<h2>Notes</h2><ul>")
        parts += [f"<li>{e(line)}</li>" for line in h.notes]
        parts.append("</ul>")
    if h.infeasible:
        parts.append(f"<h2>{e(INFEASIBLE_HEAD[3:])}</h2><ul>")
        parts += [f"<li>{e(line)}</li>" for line in h.infeasible]
        parts.append("</ul>")
    parts.append("<h2>Figures</h2>")
    parts += [f"<figure>{svg}<figcaption>{e(cap)}</figcaption></figure>" for _, cap, svg in figs]
    parts += [
        "<h2>Results (mean across seeds)</h2>",
        _html_table(RES_HEAD, _res_rows(agg)),
        "<h2>Caveats</h2><ul>",
        *(f"<li>{e(c)}</li>" for c in caveats(h)),
        "</ul></body></html>",
    ]
    return "\n".join(parts) + "\n"


def render_md(
    h: Header,
    slos: Sequence[Slo],
    agg: list[dict[str, Any]],
    recs: list[Recommendation],
    figs: list[tuple[str, str, str]],
    load: list[Sustainable] | None = None,
) -> str:
    parts = [
        f"# Capacity report: {h.model} on {h.gpu}",
        "",
        "\n".join(f"- **{k}**: `{v}`" for k, v in _facts(h, slos)),
        "",
    ]
    if slos:
        parts += [
            "## Recommendation",
            "",
            *(f"> {line}\n" for line in verdict(recs, slos)),
            _md_table(REC_HEAD, _rec_rows(recs)),
            "",
            REC_NOTE,
            "",
        ]
    if slos and load:
        parts += [
            "## Load",
            "",
            *(f"> {line}\n" for line in load_verdict(load, slos)),
            _md_table(LOAD_HEAD, load_rows(load)),
            "",
            LOAD_NOTE,
            "",
        ]
    if h.notes:
        parts += ["## Notes", "", *(f"- {line}" for line in h.notes), ""]
    if h.infeasible:
        parts += [INFEASIBLE_HEAD, "", *(f"- {line}" for line in h.infeasible), ""]
    parts += ["## Figures", ""]
    parts += [f"![{cap}]({stem}.svg)\n" for stem, cap, _ in figs]
    parts += [
        "## Results (mean across seeds)",
        "",
        _md_table(RES_HEAD, _res_rows(agg)),
        "",
        "## Caveats",
        "",
        *(f"- {c}" for c in caveats(h)),
        "",
    ]
    return "\n".join(parts)


def render_report(
    out_dir: str | Path,
    header: Header,
    slos: Sequence[Slo],
    agg: list[dict[str, Any]],
    recs: list[Recommendation],
    rows: list[dict[str, Any]] | None = None,
    cdf_cache_gb: float | None = None,
) -> list[Path]:
    """Write the figures, report.md and report.html as one set; return their paths.

    ``rows`` (per-seed results) enable the TTFT CDF and hit-by-length views at
    ``cdf_cache_gb`` (default: the largest swept cache).
    """
    out = Path(out_dir)
    # Figures and load group by policy; where the GPU count varies, by policy and count.
    grouped = by_gpu_count(agg)
    load = sustainable(grouped, slos) if slos else []
    from twin.reports.render_figures import figures  # late: matplotlib is slow to import

    # The figures plot TTFT: the SLO line drawn is the first TTFT target's.
    line = next((s for s in slos if s.metric == "ttft"), None)
    figs = figures(grouped, line, None if rows is None else by_gpu_count(rows), cdf_cache_gb, load)
    names = [*(f"{stem}.svg" for stem, _, _ in figs), MD_FILE, HTML_FILE]
    # One set: the previous report stays whole until every new file is (twin.atomic).
    with OutputSet(out, names, kind="twin report capacity") as outputs:
        for stem, _, svg in figs:
            outputs.write_text(f"{stem}.svg", svg)
        outputs.write_text(MD_FILE, render_md(header, slos, agg, recs, figs, load))
        outputs.write_text(HTML_FILE, render_html(header, slos, agg, recs, figs, load))
    return [out / name for name in names]
