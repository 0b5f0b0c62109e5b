"""Marconi claims 1, 2, 4 and 7 (read across the configuration grid), and the shared notes.

Each claim function reads finished points through :class:`~reports.reproduce.base.Results`
and returns one :class:`~reports.reproduce.base.Claim`. The paper's numbers are
quoted from its text (sections 3 and 5, arXiv 2411.19379v3 and the issue that
asked for this report); every twin number is computed from the results. Claims
3, 5, 6, 8 and 9 are in :mod:`reports.reproduce.marconi_claims_single`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from twin.hardware import GB
from twin.reports.reproduce import figures
from twin.reports.reproduce.base import (
    BASE_RATE,
    FOCUS,
    FRACTIONS,
    GRID_POLICIES,
    KINDS,
    LABEL,
    RATES,
    THINK_S,
    Claim,
    ReplayPoint,
    Results,
    magnitude,
    pct,
    times,
    trend,
)

if TYPE_CHECKING:
    from twin.reports.reproduce.marconi import Marconi

NOTES = [
    "Workloads are the twin's generators standing in for the paper's traces "
    "(`chat` for LMSys, `sharegpt` for ShareGPT, `swebench` for SWE-bench agent traces): "
    "the datasets cannot be downloaded here. Absolute hit rates depend on the traces; "
    "the verdicts judge trends first and magnitudes second.",
    "Cache sizes are fractions of each workload's footprint (the bytes an unbounded "
    "SGLang+ cache holds after the trace, `twin replay W --cache-gb 1e+06 -p sglang+`), "
    "because the paper's absolute sizes belong to its traces.",
    "Why the twin's vLLM+ is lower than the artifact's at small caches: the authors' "
    "artifact (radix_cache_hybrid.py) estimates the bytes of a sequence and evicts "
    "*before* inserting it, then inserts the whole sequence; when one sequence is larger "
    "than the cache, the tree overruns its capacity (measured on the artifact: a 5 GB "
    "cache whose tree peaked at 29.6 GB, 849 of 852 inserts leaving it over capacity). "
    "vLLM+ checkpoints every 32-token block, so its sequences are the largest and it "
    "benefits most: the extra bytes hold blocks a later request hits. The twin never "
    "exceeds its capacity (it evicts until the insert fits, and admits the longest "
    "prefix that fits), so its vLLM+ hit rate at small caches is lower and its gain "
    "ratios larger than the artifact's would be on the same trace.",
    "Latency claims use the twin's engine and calibrated cost model (one H100 replica, "
    "the 7B hybrid); the paper measured Jamba-1.5-Mini on 4 x A100-40GB. Only the "
    "direction and rough size of TTFT changes are comparable.",
]


def hit_rate(results: Results, p: ReplayPoint) -> float:
    return float(results.replay(p)["token_hit_rate"])


def ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def _by_config(marconi: Marconi, results: Results, kind: str, quick: bool) -> list[dict[str, Any]]:
    """Claims 1, 2, 4: one dict per (rate, cache fraction) with the three policies' hit rates."""
    footprint = {w: results.footprint_gb(w) for w in marconi.footprint_workloads(quick)}
    points = marconi.grid(kind, quick, footprint)
    rows = []
    i = 0
    for rate in RATES:
        for frac in FRACTIONS[quick]:
            cell: dict[str, Any] = {
                "rate": rate,
                "fraction": frac,
                "workload": marconi.workload_name(kind, rate, quick),
            }
            for p in GRID_POLICIES:
                assert points[i].policy == p
                r = results.replay(points[i])
                cell[p] = r["token_hit_rate"]
                cell[p + " peak/cap"] = r["peak_bytes"] / r["capacity_bytes"]
                cell["cache_gb"] = points[i].cache_gb
                cell.setdefault("commands", []).append(r["command"])
                cell["artifact " + p] = results.artifact(points[i])
                i += 1
            rows.append(cell)
    return rows


def _artifact_cell(result: dict[str, Any] | None) -> str:
    return "-" if result is None else pct(result["token_hit_rate"])


def claim_vs_vllm(marconi: Marconi, results: Results, quick: bool) -> Claim:
    paper = {"chat": 4.5, "sharegpt": 7.3, "swebench": 34.4}
    checks, parts, rows, commands, notes = [], [], [], [], []
    means: dict[str, float] = {}
    worst_overrun = 0.0
    overruns: list[tuple[str, float, float]] = []
    all_gains: list[tuple[str, list[float]]] = []
    for kind in KINDS:
        cells = _by_config(marconi, results, kind, quick)
        gains = [g for c in cells if (g := ratio(c["marconi"], c["vllm+"])) is not None]
        all_gains.append((kind, gains or [1.0]))
        skipped = len(cells) - len(gains)
        mean = float(np.mean(gains)) if gains else 0.0
        means[kind] = mean
        p5, p95 = np.percentile(gains, [5, 95]) if gains else (0.0, 0.0)
        parts.append(f"{LABEL[kind]} {mean:.1f}x (P5 {p5:.1f}x, P95 {p95:.1f}x)")
        if skipped:
            notes.append(
                f"{LABEL[kind]}: {skipped} configuration(s) where vLLM+ hit nothing left "
                "out of the mean"
            )
        checks.append(magnitude(f"{LABEL[kind]} mean gain", paper[kind], mean if gains else None))
        worst_overrun = max(worst_overrun, *(c["vllm+ peak/cap"] for c in cells))
        for c in cells:
            rows.append(
                [
                    LABEL[kind],
                    f"{c['rate']:g}",
                    f"1/{round(1 / c['fraction'])}",
                    f"{c['cache_gb']:g}",
                    pct(c["vllm+"]),
                    pct(c["sglang+"]),
                    pct(c["marconi"]),
                    times(ratio(c["marconi"], c["vllm+"])),
                    times(ratio(c["marconi"], c["sglang+"])),
                    *(_artifact_cell(c[f"artifact {p}"]) for p in ("vllm+", "sglang+", "marconi")),
                ]
            )
            commands += c["commands"]
            art = c["artifact vllm+"]
            if art is not None:
                overruns.append((LABEL[kind], c["cache_gb"], art["peak_bytes"] / GB))
    checks.insert(
        0,
        trend(
            "Marconi's mean gain over vLLM+ exceeds 1x on every workload",
            all(m > 1 for m in means.values()),
        ),
    )
    checks.insert(
        1,
        trend(
            "the gain grows LMSys-like < ShareGPT-like < SWE-bench-like, as in the paper",
            means["chat"] < means["sharegpt"] < means["swebench"],
        ),
    )
    notes.append(
        "The twin's vLLM+ never exceeded its capacity: largest peak bytes / capacity "
        f"{worst_overrun:.3f}."
    )
    boxes = dict(all_gains)
    figure = (
        "Marconi / vLLM+ token hit rate per configuration (box: quartiles, whiskers P5/P95, "
        "triangle: mean); x: the paper's average gain",
        lambda: figures.gain_boxes(
            [LABEL[k] for k in KINDS],
            [boxes[k] for k in KINDS],
            [paper[k] for k in KINDS],
            "Marconi / vLLM+ token hit rate",
        ),
    )
    head = [
        "workload",
        "session rate",
        "cache / footprint",
        "cache GB",
        "vLLM+",
        "SGLang+",
        "Marconi",
        "Marconi / vLLM+",
        "Marconi / SGLang+",
        "artifact vLLM+",
        "artifact SGLang+",
        "artifact Marconi",
    ]
    if overruns:
        notes.append(
            "The artifact's vLLM+ tree peaked at "
            + "; ".join(f"{gb:.1f} GB in a {cap:g} GB cache ({w})" for w, cap, gb in overruns)
            + "."
        )
    else:
        # No checkout configured: the artifact columns stay empty.
        head, rows = head[:-3], [r[:-3] for r in rows]
        notes.append(
            "Artifact columns: set $TWIN_MARCONI_ARTIFACT to a checkout of "
            "github.com/ruipeterpan/marconi to add the authors' own hit rates "
            "(run at the 1/8-footprint cache, base session rate)."
        )
    return Claim(
        1,
        "Token hit rate vs vLLM+ (block 32), across cache sizes and arrival patterns",
        "sec. 5.2, Fig. 7",
        "average gains 4.5x (LMSys), 7.3x (ShareGPT), 34.4x (SWE-bench)",
        "; ".join(parts),
        checks,
        commands,
        notes,
        (head, rows),
        figure,
    )


def claim_vs_sglang(marconi: Marconi, results: Results, quick: bool) -> Claim:
    paper = {"chat": 0.456, "sharegpt": 0.190, "swebench": 2.197}
    checks, parts, commands = [], [], []
    p95s = {}
    for kind in KINDS:
        cells = _by_config(marconi, results, kind, quick)
        wins = [w - 1 for c in cells if (w := ratio(c["marconi"], c["sglang+"])) is not None]
        p95s[kind] = float(np.percentile(wins, 95)) if wins else None
        parts.append(f"{LABEL[kind]} {pct(p95s[kind])}")
        checks.append(magnitude(f"{LABEL[kind]} P95 win", paper[kind], p95s[kind]))
        commands += [cmd for c in cells for cmd in c["commands"][1:]]
    checks.insert(
        0,
        trend(
            "Marconi's P95 win over SGLang+ is positive on every workload",
            all((v or 0) > 0 for v in p95s.values()),
        ),
    )
    return Claim(
        2,
        "Token hit rate vs SGLang+: P95 win over configurations",
        "sec. 5.2, Fig. 7",
        "P95 wins 45.6% (LMSys), 19.0% (ShareGPT), 219.7% (SWE-bench)",
        "; ".join(parts) + " (configurations as in claim 1's table)",
        checks,
        commands,
    )


def footprints_of(marconi: Marconi, results: Results, quick: bool) -> dict[str, float]:
    return {w: results.footprint_gb(w) for w in marconi.footprint_workloads(quick)}


def claim_contention(marconi: Marconi, results: Results, quick: bool) -> Claim:
    checks, parts, rows, commands = [], [], [], []
    peaks = []
    curves: dict[str, list[float]] = {}
    fractions: list[float] = []
    for kind in KINDS:
        cells = [c for c in _by_config(marconi, results, kind, quick) if c["rate"] == BASE_RATE]
        wins = [(ratio(c["marconi"], c["sglang+"]) or 1.0) - 1 for c in cells]
        curves[LABEL[kind]] = [100 * w for w in wins]
        fractions = [c["fraction"] for c in cells]
        best = int(np.argmax(wins))
        peaks.append(wins[best])
        interior = 0 < best < len(wins) - 1
        checks.append(
            trend(f"{LABEL[kind]}: the improvement peaks at an interior cache size", interior)
        )
        parts.append(f"{LABEL[kind]} " + "/".join(f"{100 * w:.1f}" for w in wins) + "%")
        for c, w in zip(cells, wins, strict=True):
            rows.append(
                [
                    LABEL[kind],
                    f"1/{round(1 / c['fraction'])}",
                    f"{c['cache_gb']:g}",
                    pct(c["sglang+"]),
                    pct(c["marconi"]),
                    pct(w),
                ]
            )
            commands += c["commands"][1:]
    checks.append(magnitude("largest peak improvement (%)", 68.3, 100 * max(peaks)))
    return Claim(
        4,
        "Contention: the improvement over SGLang+ peaks at middling cache sizes",
        "sec. 5.3, Fig. 10",
        "24.3/51.5/68.3/30.0/10.0% at 60/80/100/120/140 GB",
        "at cache = footprint x fractions (smallest first): " + "; ".join(parts),
        checks,
        commands,
        [
            "The paper's 60-140 GB are replaced by fractions of each trace's footprint "
            "(see the notes)."
        ],
        (["workload", "cache / footprint", "cache GB", "SGLang+", "Marconi", "improvement"], rows),
        (
            "Marconi's token hit rate over SGLang+'s (%) vs cache size as a fraction of the "
            "trace's footprint (base session rate)",
            lambda: figures.curves(
                fractions,
                curves,
                "cache / footprint",
                "improvement over SGLang+ (%)",
                x_labels=[f"1/{round(1 / f)}" for f in fractions],
            ),
        ),
    )


def claim_arrivals(marconi: Marconi, results: Results, quick: bool) -> Claim:
    fp = footprints_of(marconi, results, quick)
    cells = [c for c in _by_config(marconi, results, "chat", quick) if c["fraction"] == FOCUS]
    lo, hi = cells[0], cells[-1]
    assert (lo["rate"], hi["rate"]) == (RATES[0], RATES[-1])
    think = [results.replay(p) for p in marconi.think_times(quick, fp)]
    s5, m5, s10, m10 = (r["token_hit_rate"] for r in think)
    win = [ratio(lo["marconi"], lo["sglang+"]), ratio(hi["marconi"], hi["sglang+"])]
    win_t = [ratio(m5, s5), ratio(m10, s10)]
    checks = [
        trend("a higher session rate lowers Marconi's hit rate", hi["marconi"] < lo["marconi"]),
        trend("a longer inter-request time lowers Marconi's hit rate", m10 < m5),
        trend("the win over SGLang+ grows with the session rate", (win[1] or 0) > (win[0] or 0)),
        trend(
            "the win over SGLang+ grows with the inter-request time",
            (win_t[1] or 0) > (win_t[0] or 0),
        ),
        magnitude("Marconi hit rate at 0.5/s (%)", 48.7, 100 * lo["marconi"]),
        magnitude("Marconi hit rate at 2/s (%)", 43.0, 100 * hi["marconi"]),
        magnitude(f"Marconi hit rate at {THINK_S[0]:g} s (%)", 25.9, 100 * m5),
        magnitude(f"Marconi hit rate at {THINK_S[1]:g} s (%)", 24.1, 100 * m10),
        magnitude("win over SGLang+ at 0.5/s (x)", 1.4, win[0]),
        magnitude("win over SGLang+ at 2/s (x)", 1.6, win[1]),
    ]
    twin = (
        f"session rate 0.5 -> 2/s (LMSys-like, {lo['cache_gb']:g} GB): Marconi "
        f"{pct(lo['marconi'])} -> {pct(hi['marconi'])}, "
        f"win {times(win[0])} -> {times(win[1])}; tool time {THINK_S[0]:g} -> "
        f"{THINK_S[1]:g} s (SWE-bench-like): "
        f"{pct(m5)} -> {pct(m10)}, win {times(win_t[0])} -> {times(win_t[1])}"
    )
    return Claim(
        7,
        "Arrival patterns: session rate and inter-request time",
        "sec. 5.3, Fig. 11",
        "session rate 0.5 -> 2/s: Marconi 48.7% -> 43.0%; inter-request time 5 -> 10 s: "
        "25.9% -> 24.1%; "
        "win over SGLang+ 1.4x -> 1.6x",
        twin,
        checks,
        [*lo["commands"][1:], *hi["commands"][1:], *(r["command"] for r in think)],
    )
