"""The reproduction report: ``report.html`` (self-contained), ``report.md``, ``claims.json``.

Same conventions as ``twin report capacity`` (:mod:`reports.render`): facts
first, then the verdicts, then the evidence; the HTML has no script and no
external URL; every file is written atomically, the HTML last.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path

from twin.atomic import OutputSet
from twin.reports.render import CSS, HTML_FILE, MD_FILE, _html_facts, _html_table, _md_table
from twin.reports.reproduce.base import MAGNITUDE_FACTOR, VERDICTS, Claim

JSON_FILE = "claims.json"
CLAIMS_HEAD = ["#", "claim", "where", "paper", "twin", "reproduces?"]
VERDICT_RULE = (
    "Verdicts: each claim is split into trend checks (the direction the paper reports) and "
    "magnitude checks (the twin's number within a factor of "
    f"{MAGNITUDE_FACTOR:g} of the paper's, same sign). yes: every check passes; "
    "qualitatively: every trend check passes, some magnitude does not; "
    "no: some trend check fails. Checks are computed from the results, never set by hand."
)


@dataclass(frozen=True)
class Facts:
    """Where the numbers come from (printed first in both files)."""

    paper: str
    citation: str
    command: str
    form: str  # "full" or "quick"
    twin_version: str
    workloads: tuple[tuple[str, str, str, float], ...]  # name, command, sha256, footprint GB
    artifact: str = "not run (set $TWIN_MARCONI_ARTIFACT to a checkout of the authors' code)"


def _counts(claims: list[Claim]) -> str:
    return ", ".join(f"{sum(c.verdict == v for c in claims)} {v}" for v in VERDICTS)


def _claim_rows(claims: list[Claim]) -> list[list[str]]:
    return [[str(c.number), c.title, c.section, c.paper, c.twin, c.verdict] for c in claims]


def _workload_rows(f: Facts) -> list[list[str]]:
    return [
        [name, cmd, sha[:16], "-" if fp != fp else f"{fp:.3g}"]
        for name, cmd, sha, fp in f.workloads
    ]


WORKLOAD_HEAD = ["workload", "command", "sha256 (first 16)", "footprint GB"]
RERUN = (
    "To rerun one point: generate its workload with the command below (same seed, same "
    "bytes: compare the sha256), then run the point's command listed under its claim."
)


def claims_json(facts: Facts, claims: list[Claim], notes: list[str]) -> str:
    data = {
        "paper": facts.paper,
        "form": facts.form,
        "command": facts.command,
        "twin_version": facts.twin_version,
        "artifact": facts.artifact,
        "claims": [
            {
                "number": c.number,
                "title": c.title,
                "section": c.section,
                "paper": c.paper,
                "twin": c.twin,
                "verdict": c.verdict,
                "checks": [{"kind": k.kind, "what": k.what, "passed": k.passed} for k in c.checks],
                "commands": c.commands,
            }
            for c in claims
        ],
        "notes": notes,
    }
    return json.dumps(data, indent=1) + "\n"


def draw(claims: list[Claim]) -> dict[int, tuple[str, str, str]]:
    """Claim number -> (file stem, caption, svg) of each claim's figure."""
    return {
        c.number: (f"fig-claim{c.number}", c.figure[0], c.figure[1]())
        for c in claims
        if c.figure is not None
    }


def render_md(
    facts: Facts,
    claims: list[Claim],
    notes: list[str],
    figs: dict[int, tuple[str, str, str]] | None = None,
) -> str:
    figs = figs or {}
    parts = [
        f"# Reproducing {facts.paper}: the paper's numbers beside the twin's",
        "",
        f"- **paper**: {facts.citation}",
        f"- **command**: `{facts.command}` ({facts.form} form)",
        f"- **twin version**: `{facts.twin_version}`",
        f"- **authors' artifact**: {facts.artifact}",
        f"- **verdicts**: {_counts(claims)}",
        "",
        "## Claims",
        "",
        _md_table(CLAIMS_HEAD, _claim_rows(claims)),
        "",
        VERDICT_RULE,
        "",
        "## Notes",
        "",
        *(f"- {n}" for n in notes),
        "",
        "## Workloads",
        "",
        RERUN,
        "",
        _md_table(WORKLOAD_HEAD, _workload_rows(facts)),
        "",
    ]
    for c in claims:
        parts += [f"## Claim {c.number}: {c.title} ({c.verdict})", ""]
        parts += [f"- **paper** ({c.section}): {c.paper}", f"- **twin**: {c.twin}", ""]
        parts += [f"- [{'x' if k.passed else ' '}] {k.kind}: {k.what}" for k in c.checks]
        parts += ["", *(f"> {n}\n" for n in c.notes)]
        if c.number in figs:
            stem, cap, _ = figs[c.number]
            parts += [f"![{cap}]({stem}.svg)", ""]
        if c.table is not None:
            parts += [_md_table(*c.table), ""]
        parts += ["<details><summary>commands (rerun one point)</summary>", "", "```"]
        parts += [*dict.fromkeys(c.commands), "```", "", "</details>", ""]
    return "\n".join(parts)


def render_html(
    facts: Facts,
    claims: list[Claim],
    notes: list[str],
    figs: dict[int, tuple[str, str, str]] | None = None,
) -> str:
    figs = figs or {}
    e = html.escape
    facts_rows = [
        ("paper", facts.citation),
        ("command", f"{facts.command} ({facts.form} form)"),
        ("twin version", facts.twin_version),
        ("authors' artifact", facts.artifact),
        ("verdicts", _counts(claims)),
    ]
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>twin reproduce {e(facts.paper)}</title><style>{CSS}</style></head><body>",
        f"<h1>Reproducing {e(facts.paper)}: the paper's numbers beside the twin's</h1>",
        _html_facts(facts_rows),
        "<h2>Claims</h2>",
        _html_table(CLAIMS_HEAD, _claim_rows(claims)),
        f"<p class='verdict'>{e(VERDICT_RULE)}</p>",
        "<h2>Notes</h2><ul>",
        *(f"<li>{e(n)}</li>" for n in notes),
        f"</ul><h2>Workloads</h2><p>{e(RERUN)}</p>",
        _html_table(WORKLOAD_HEAD, _workload_rows(facts)),
    ]
    for c in claims:
        parts += [
            f"<h2>Claim {c.number}: {e(c.title)} ({e(c.verdict)})</h2>",
            f"<p><b>paper</b> ({e(c.section)}): {e(c.paper)}<br><b>twin</b>: {e(c.twin)}</p><ul>",
            *(
                f"<li>{'&#10003;' if k.passed else '&#10007;'} {e(k.kind)}: {e(k.what)}</li>"
                for k in c.checks
            ),
            "</ul>",
            *(f"<p class='verdict'>{e(n)}</p>" for n in c.notes),
        ]
        if c.number in figs:
            _, cap, svg = figs[c.number]
            parts.append(f"<figure>{svg}<figcaption>{e(cap)}</figcaption></figure>")
        if c.table is not None:
            parts.append(_html_table(*c.table))
        cmds = "\n".join(dict.fromkeys(c.commands))
        parts.append(
            f"<details><summary>commands (rerun one point)</summary><pre>{e(cmds)}</pre></details>"
        )
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def render_report(out: Path, facts: Facts, claims: list[Claim], notes: list[str]) -> list[Path]:
    """Write the figures, claims.json, report.md and report.html as one set."""
    figs = draw(claims)
    names = [*(f"{stem}.svg" for stem, _, _ in figs.values()), JSON_FILE, MD_FILE, HTML_FILE]
    with OutputSet(out, names, kind="twin reproduce") as outputs:  # one set (twin.atomic)
        for stem, _, svg in figs.values():
            outputs.write_text(f"{stem}.svg", svg)
        outputs.write_text(JSON_FILE, claims_json(facts, claims, notes))
        outputs.write_text(MD_FILE, render_md(facts, claims, notes, figs))
        outputs.write_text(HTML_FILE, render_html(facts, claims, notes, figs))
    return [out / name for name in names]
