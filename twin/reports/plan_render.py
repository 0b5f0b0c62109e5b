"""``twin plan``'s files: plan.json, report.md and report.html (one self-contained file).

The Markdown and the HTML say the same: the winner as a table with the
``twin simulate`` command that reproduces it, why each other candidate lost
(or was pruned, or cannot meet the SLOs), the Pareto frontier of cost against
P95 TTFT as a table and a figure (inline SVG in the HTML, ``fig-frontier.svg``
beside the Markdown), the frontier of cost against output tokens per second per GPU,
each frontier point's ``twin simulate`` command, every simulated point, and the price
table used.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING

from twin.atomic import OutputSet
from twin.metrics import to_json
from twin.reports.analysis import slo_text
from twin.reports.render import CSS, HTML_FILE, MD_FILE, _html_facts, _html_table, _md_table
from twin.slo import Slo

if TYPE_CHECKING:
    from twin.reports.plan_result import Candidate, CandidateResult, PlanResult, Trial

FIGURE = "fig-frontier"
FIGURE_CAPTION = (
    "Cost against P95 TTFT of every simulated deployment: filled where it meets every SLO "
    "at a stable steady state, hollow where it does not; the line joins the Pareto frontier; "
    "the star is the winner."
)
BOUND_NOTE = (
    "Before any simulation a candidate must fit (weights next to its cache), a lone decode "
    "step must fit every TPOT/ITL target, and its replicas start at an analytic lower bound "
    "(the workload's uncached prompt and decode tokens per second at the cheapest price per "
    "token of any step the engine runs). Candidates are searched cheapest lower bound first; "
    "one whose bound already costs more than the best deployment found is pruned, and no "
    "search asks for a replica count costing more than it. Replicas: exponential probe from "
    "the bound, then bisection; a linear scan where the P95s were not monotone."
)


SEEDS_NOTE = (
    "Values are seed 0's (the reproduce command's); in brackets, a count's min-max across "
    "the seeds it ran with. Only a count that decides the answer (a candidate's fewest "
    "meeting the SLOs at no more than the best cost found) runs the other seeds."
)


def _money(x: float | None) -> str:
    return "-" if x is None else f"${x:,.2f}"


def _ms(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.1f}" if abs(x) >= 10 else f"{x:,.3g}"


def seed_span(t: Trial | None, slo: Slo) -> str | None:
    """``slo``'s min-max across the seeds ``t`` ran (None: it ran seed 0 alone)."""
    if t is None or not t.by_seed:
        return None
    span = t.interval(slo.text)
    return "-" if span is None else f"{_ms(span[0])}-{_ms(span[1])}"


def seeds_text(seeds: tuple[int, ...]) -> str:
    """``seeds 0-2`` (the plan's seeds are always 0 .. N-1)."""
    return f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {seeds[0]}-{seeds[-1]}"


def winner_sentence(p: PlanResult) -> str:
    """One sentence: the winner and its numbers, or why there is none."""
    targets = slo_text(p.slos)
    w = p.winner
    if w is None:
        if any(c.outcome == "unjudged" for c in p.candidates):
            return (
                f"No candidate is known to meet {targets} at {p.load.label()}: some meet every "
                "target, but their runs are too short to judge a steady state; run longer "
                "(--duration)."
            )
        return (
            f"No candidate meets {targets} at {p.load.label()}: see why each does not below "
            "(more --gpus, --tp or --engines, a larger --budget-gpus, or a lower load)."
        )
    t = w.trial(w.replicas)
    values = (
        ", ".join(
            f"{s.label} {_ms(t.values_ms.get(s.text))} ms"
            + (f" ({span} over {seeds_text(t.seeds)})" if (span := seed_span(t, s)) else "")
            for s in p.slos
        )
        if t
        else ""
    )
    return (
        f"The cheapest deployment meeting {targets} at {p.load.label()}: "
        f"{w.replicas} replica(s) of {w.candidate.label} = {w.gpus} GPU(s) at "
        f"{_money(w.usd_per_hour)}/h ({values}; steady state {t.verdict if t else '-'})."
    )


def _metric_head(s: Slo) -> str:
    return f"{s.label} (ms)"


def _ttft_column(p: PlanResult) -> bool:
    """Whether the tables add a P95 TTFT column (the frontier's axis) to the SLOs' own."""
    return not any(s.metric == "ttft" and s.percentile == 95 for s in p.slos)


def _winner_rows(p: PlanResult) -> tuple[list[str], list[list[str]]]:
    head = ["GPU", "engine", "tp", "ep", "attention DP", "pp", "cache", "layout", "router"]
    head += ["replicas", "GPUs"]
    head += ["$/GPU-hour", "$/hour"]
    head += [_metric_head(s) for s in p.slos]
    several = len(p.seeds) > 1
    head += [f"{_metric_head(s)} over {seeds_text(p.seeds)}" for s in p.slos] * several
    head += ["P95 TTFT (ms)"] * _ttft_column(p) + ["steady state"]
    w = p.winner
    if w is None:
        return head, []
    t = w.trial(w.replicas)
    c = w.candidate
    row = [c.gpu, c.engine, str(c.tp), str(c.ep), str(c.dp_attention), str(c.pp)]
    row += [f"{c.cache} {c.cache_policy}" if c.cache_policy else c.cache, c.layout]
    row += [c.router]
    row += [str(w.replicas), str(w.gpus)]
    row += [_money(w.usd_per_gpu_hour), _money(w.usd_per_hour)]
    row += [_ms(t.values_ms.get(s.text)) if t else "-" for s in p.slos]
    row += [seed_span(t, s) or "-" for s in p.slos] * several
    row += [_ms(t.ttft_p95_ms) if t else "-"] * _ttft_column(p) + [t.verdict if t else "-"]
    return head, [row]


_ORDER = {"meets": 0, "costlier": 1, "unjudged": 2, "pruned": 3, "infeasible": 4}


def _others(p: PlanResult) -> list[CandidateResult]:
    rest = [c for c in p.candidates if c.outcome != "winner"]
    return sorted(
        rest,
        key=lambda c: (
            _ORDER.get(c.outcome, 9),
            c.usd_per_hour if c.usd_per_hour is not None else float("inf"),
            c.candidate.label,
        ),
    )


def _routed(p: PlanResult) -> bool:
    """Whether the tables add a router column (the plan searched several routers; a
    label names a router other than round-robin either way)."""
    return len(p.routers) > 1


def _head(p: PlanResult, *rest: str) -> list[str]:
    """A candidates table's columns: the candidate, its router (``_routed``), ``rest``."""
    return ["candidate", *["router"] * _routed(p), *rest]


def _cells(p: PlanResult, c: Candidate, *rest: str) -> list[str]:
    """A row of a table headed by :func:`_head`: ``c``'s label (and router), ``rest``."""
    return [c.label, *[c.router] * _routed(p), *rest]


def _runner_rows(p: PlanResult) -> tuple[list[str], list[list[str]]]:
    head = _head(p, "outcome", "replicas", "GPUs", "$/hour", "P95 TTFT (ms)", "why")
    rows = []
    for c in _others(p):
        t = c.trial(c.replicas)
        rows.append(
            _cells(
                p,
                c.candidate,
                c.outcome,
                "-" if c.replicas is None else str(c.replicas),
                "-" if c.gpus is None else str(c.gpus),
                _money(c.usd_per_hour),
                _ms(t.ttft_p95_ms) if t else "-",
                c.reason or "-",
            )
        )
    return head, rows


def _frontier_rows(p: PlanResult) -> tuple[list[str], list[list[str]]]:
    head = _head(p, "replicas", "GPUs", "$/hour", "P95 TTFT (ms)")
    rows = [
        _cells(
            p, f.candidate, str(f.replicas), str(f.gpus), _money(f.usd_per_hour), _ms(f.ttft_p95_ms)
        )
        for f in p.frontier()
    ]
    return head, rows


def _throughput_rows(p: PlanResult) -> tuple[list[str], list[list[str]]]:
    head = _head(p, "replicas", "GPUs", "$/hour", "output tokens/s", "per GPU")
    rows = [
        _cells(
            p,
            f.candidate,
            str(f.replicas),
            str(f.gpus),
            _money(f.usd_per_hour),
            f"{f.output_tokens_per_s:,.1f}",
            f"{f.tokens_per_s_per_gpu:,.1f}",
        )
        for f in p.frontier_throughput()
        if f.output_tokens_per_s is not None and f.tokens_per_s_per_gpu is not None
    ]
    return head, rows


def _commands(p: PlanResult) -> list[str]:
    """The ``twin simulate`` command of every frontier point (either frontier), once each."""
    points = [*p.frontier(), *p.frontier_throughput()]
    seen = dict.fromkeys((f.candidate, f.replicas) for f in points)
    return [p.command_for(c, n, "frontier") for c, n in seen]


def _point_rows(p: PlanResult) -> tuple[list[str], list[list[str]]]:
    head = _head(p, "replicas", "GPUs", "$/hour", "meets", "steady state")
    head += [_metric_head(s) for s in p.slos]
    rows = []
    for c in p.candidates:
        for t in sorted(c.trials, key=lambda t: t.replicas):
            rows.append(
                _cells(
                    p,
                    c.candidate,
                    str(t.replicas),
                    str(t.replicas * c.candidate.gpus_per_replica),
                    _money(c.cost(t.replicas)),
                    _met(t),
                    t.verdict,
                    *(
                        _ms(t.values_ms.get(s.text))
                        + (f" ({span})" if (span := seed_span(t, s)) else "")
                        for s in p.slos
                    ),
                )
            )
    return head, rows


def _met(t: Trial) -> str:
    """A point's verdict: met, missed, ruled out short, or missed under another seed."""
    if t.screened:
        return "no (screened)"
    if t.failed_seeds:
        return f"no (seed {', '.join(map(str, t.failed_seeds))})"
    return "yes" if t.meets else "no"


def _price_rows(p: PlanResult) -> tuple[list[str], list[list[str]]]:
    head = ["GPU", "$/GPU-hour", "source", "date"]
    rows = [
        [g, _money(x.usd_per_gpu_hour), x.source or "-", x.date or "-"]
        for g, x in sorted(p.prices.prices.items())
    ]
    return head, rows


def _facts(p: PlanResult) -> list[tuple[str, str]]:
    n = p.counts
    return [
        ("command", p.command),
        ("workload", f"{p.workload} (sha256 {p.workload_sha256})"),
        ("twin version", p.to_dict()["twin_version"]),
        ("model", p.model + (f" ({', '.join(p.model_set)})" if p.model_set else "")),
        ("load", p.load.label()),
        ("routers", ", ".join(p.routers)),
        ("SLOs", slo_text(p.slos) + ", at a stable steady state"),
        ("prices", p.prices.label),
        ("budget", "none" if p.budget_gpus is None else f"{p.budget_gpus} GPUs per deployment"),
        (
            "candidates",
            f"{n['candidates']}: {n['simulated']} simulated, {n['pruned']} pruned before "
            f"simulation ({n['pruned_by_cost']} by the cost bound, {n['pruned_cannot_meet']} "
            f"cannot fit or meet the SLOs); {n['points_run']} point(s) simulated, "
            f"{n['points_found']} found in results.parquet",
        ),
        (
            "screening",
            f"{n['screen_points_run'] + n['screen_points_found']} short run(s) ruled out "
            f"{n['screened_out']} replica count(s) without a full run",
        ),
        ("search", p.search),
    ] + (
        [
            (
                "seeds",
                f"every probe runs seed 0; a count that decides the answer meets only if it "
                f"meets under each of {seeds_text(p.seeds)} ({n['confirm_points_run']} "
                f"confirmation run(s) simulated, {n['confirm_points_found']} found); "
                "intervals are min-max across them",
            )
        ]
        if len(p.seeds) > 1
        else []
    )


def figure(p: PlanResult) -> str:
    """The frontier figure as inline SVG text."""
    from twin.reports.figure_canvas import figure_text, plt  # late: matplotlib is slow to import

    fig, ax = plt.subplots(figsize=(7, 4.2))
    met_x: list[float] = []
    met_y: list[float] = []
    miss_x: list[float] = []
    miss_y: list[float] = []
    for c in p.candidates:
        for t in c.trials:
            if t.ttft_p95_ms is None or t.screened:  # a short run's P95: not comparable
                continue
            (met_x if t.meets else miss_x).append(c.cost(t.replicas))
            (met_y if t.meets else miss_y).append(t.ttft_p95_ms)
    if miss_x:
        ax.scatter(miss_x, miss_y, facecolors="none", edgecolors="0.55", label="misses the SLOs")
    if met_x:
        ax.scatter(met_x, met_y, color="C0", label="meets every SLO")
    front = p.frontier()
    if front:
        ax.step(
            [f.usd_per_hour for f in front],
            [f.ttft_p95_ms for f in front],
            where="post",
            color="C0",
            lw=1,
            label="Pareto frontier",
        )
    w = p.winner
    best = w.trial(w.replicas) if w else None
    if w is not None and w.usd_per_hour is not None and best and best.ttft_p95_ms is not None:
        ax.scatter(
            [w.usd_per_hour],
            [best.ttft_p95_ms],
            marker="*",
            s=220,
            color="C3",
            zorder=5,
            label=f"winner: {w.replicas} x {w.candidate.label}",
        )
    line = next((s for s in p.slos if s.metric == "ttft" and s.percentile == 95), None)
    if line is not None:
        ax.axhline(line.threshold_ms, color="k", lw=0.8, ls="-.", label=f"SLO ({line})")
    ys = met_y + miss_y
    if ys and min(ys) > 0 and max(ys) / min(ys) >= 10:
        ax.set_yscale("log")
    ax.set(xlabel="deployment cost ($/hour)", ylabel="P95 TTFT (ms)", title="Cost vs P95 TTFT")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return figure_text(fig)


def render_md(p: PlanResult, svg_name: str) -> str:
    wh, wr = _winner_rows(p)
    parts = [
        f"# Plan: {p.model} at {p.load.label()}",
        "",
        "\n".join(f"- **{k}**: `{v}`" for k, v in _facts(p)),
        "",
        "## Winner",
        "",
        f"> {winner_sentence(p)}",
        "",
    ]
    if wr:
        parts += [_md_table(wh, wr), "", "Reproduce it:", "", "```bash"]
        parts += [p.simulate_command(p.winner) if p.winner else "", "```", ""]
    rh, rr = _runner_rows(p)
    parts += ["## Why each other candidate lost", "", _md_table(rh, rr), "", BOUND_NOTE, ""]
    fh, fr = _frontier_rows(p)
    parts += ["## Pareto frontier: cost vs P95 TTFT", "", _md_table(fh, fr), ""]
    parts += [f"![{FIGURE_CAPTION}]({svg_name})", ""]
    th, tr = _throughput_rows(p)
    parts += ["## Pareto frontier: cost vs throughput per GPU", "", _md_table(th, tr), ""]
    commands = _commands(p)
    if commands:
        parts += ["Reproduce a frontier point:", "", "```bash", *commands, "```", ""]
    if p.notes:
        parts += ["## Notes", "", *(f"- {n}" for n in p.notes), ""]
    ph, pr = _point_rows(p)
    parts += ["## Every simulated point", "", _md_table(ph, pr), ""]
    if len(p.seeds) > 1:
        parts += [SEEDS_NOTE, ""]
    gh, gr = _price_rows(p)
    parts += [f"## Prices ({p.prices.label})", "", _md_table(gh, gr), ""]
    return "\n".join(parts)


def render_html(p: PlanResult, svg: str) -> str:
    e = html.escape
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>twin plan: {e(p.model)}</title><style>{CSS}</style></head>"
        f"<body><h1>Plan: {e(p.model)} at {e(p.load.label())}</h1>",
        _html_facts(_facts(p)),
        "<h2>Winner</h2>",
        f"<p class='verdict'>{e(winner_sentence(p))}</p>",
    ]
    wh, wr = _winner_rows(p)
    if wr and p.winner is not None:
        parts += [
            _html_table(wh, wr),
            f"<p>Reproduce it: <code>{e(p.simulate_command(p.winner))}</code></p>",
        ]
    parts += ["<h2>Why each other candidate lost</h2>", _html_table(*_runner_rows(p))]
    parts += [f"<p>{e(BOUND_NOTE)}</p>", "<h2>Pareto frontier: cost vs P95 TTFT</h2>"]
    parts += [_html_table(*_frontier_rows(p))]
    parts += [f"<figure>{svg}<figcaption>{e(FIGURE_CAPTION)}</figcaption></figure>"]
    parts += ["<h2>Pareto frontier: cost vs throughput per GPU</h2>"]
    parts += [_html_table(*_throughput_rows(p))]
    commands = _commands(p)
    if commands:
        parts += ["<p>Reproduce a frontier point:</p><ul>"]
        parts += [f"<li><code>{e(c)}</code></li>" for c in commands] + ["</ul>"]
    if p.notes:
        parts += ["<h2>Notes</h2><ul>", *(f"<li>{e(n)}</li>" for n in p.notes), "</ul>"]
    parts += ["<h2>Every simulated point</h2>", _html_table(*_point_rows(p))]
    if len(p.seeds) > 1:
        parts += [f"<p>{e(SEEDS_NOTE)}</p>"]
    parts += [f"<h2>Prices ({e(p.prices.label)})</h2>", _html_table(*_price_rows(p))]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_plan(out: Path, p: PlanResult) -> list[Path]:
    """Write plan.json, the figure, report.md and report.html as one set (twin.atomic)."""
    from twin.reports.plan_result import PLAN_FILE

    out.mkdir(parents=True, exist_ok=True)
    svg = figure(p)
    files = [out / PLAN_FILE, out / f"{FIGURE}.svg", out / MD_FILE, out / HTML_FILE]
    texts = [to_json(p.to_dict()), svg, render_md(p, f"{FIGURE}.svg"), render_html(p, svg)]
    with OutputSet(out, [f.name for f in files], kind="twin plan") as outputs:  # one set
        for f, text in zip(files, texts, strict=True):
            outputs.write_text(f.name, text)
    return files
