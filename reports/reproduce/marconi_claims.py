"""The nine Marconi claims: the paper's numbers, the twin's, and the checks that judge them.

Each function reads finished points through :class:`~reports.reproduce.base.Results`
and returns one :class:`~reports.reproduce.base.Claim`. The paper's numbers are
quoted from its text (sections 3 and 5, arXiv 2411.19379v3 and the issue that
asked for this report); every twin number is computed here from the results.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import numpy as np

from reports.reproduce import figures
from reports.reproduce.base import (
    MODEL,
    Claim,
    ReplayPoint,
    Results,
    magnitude,
    pct,
    times,
    trend,
)
from reports.reproduce.block_reuse import block_reuse
from twin.hardware import GB
from twin.presets import get_model, resolve_model
from twin.replay import Trace

if TYPE_CHECKING:
    from reports.reproduce.marconi import Marconi

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


def _hit(results: Results, p: ReplayPoint) -> float:
    return float(results.replay(p)["token_hit_rate"])


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def _by_config(marconi: Marconi, results: Results, kind: str, quick: bool) -> list[dict[str, Any]]:
    """Claims 1, 2, 4: one dict per (rate, cache fraction) with the three policies' hit rates."""
    from reports.reproduce.marconi import FRACTIONS, GRID_POLICIES, RATES

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
    from reports.reproduce.marconi import KINDS, LABEL

    paper = {"chat": 4.5, "sharegpt": 7.3, "swebench": 34.4}
    checks, parts, rows, commands, notes = [], [], [], [], []
    means: dict[str, float] = {}
    worst_overrun = 0.0
    overruns: list[tuple[str, float, float]] = []
    all_gains: list[tuple[str, list[float]]] = []
    for kind in KINDS:
        cells = _by_config(marconi, results, kind, quick)
        gains = [g for c in cells if (g := _ratio(c["marconi"], c["vllm+"])) is not None]
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
                    times(_ratio(c["marconi"], c["vllm+"])),
                    times(_ratio(c["marconi"], c["sglang+"])),
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
    from reports.reproduce.marconi import KINDS, LABEL

    paper = {"chat": 0.456, "sharegpt": 0.190, "swebench": 2.197}
    checks, parts, commands = [], [], []
    p95s = {}
    for kind in KINDS:
        cells = _by_config(marconi, results, kind, quick)
        wins = [w - 1 for c in cells if (w := _ratio(c["marconi"], c["sglang+"])) is not None]
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


LENGTH_EDGE = 7000  # tokens: where the paper sees Marconi turn from worse to better


def _pooled(inputs: np.ndarray, hits: np.ndarray, mask: np.ndarray) -> float | None:
    total = inputs[mask].sum()
    return float(hits[mask].sum() / total) if total else None


def _crosses(below: list[float | None], above: list[float | None]) -> bool:
    """SGLang+ / Marconi hit rates below and above the edge: Marconi not better below,
    better above."""
    (sb, mb), (sa, ma) = below, above
    if sb is None or mb is None or sa is None or ma is None:
        return False
    return mb <= sb and ma > sa


def claim_one_trace(marconi: Marconi, results: Results, quick: bool) -> Claim:
    s_point, m_point = marconi.length_bins(quick, _footprints(marconi, results, quick))
    s, m = results.replay(s_point), results.replay(m_point)
    inputs = np.asarray(s["input_tokens"])
    hs, hm = np.asarray(s["hit_tokens_per_request"]), np.asarray(m["hit_tokens_per_request"])
    short = inputs < LENGTH_EDGE
    below = [_pooled(inputs, h, short) for h in (hs, hm)]
    above = [_pooled(inputs, h, ~short) for h in (hs, hm)]
    flops_gain = _ratio(m["flops_saved"], s["flops_saved"])
    sims = {x.workload: x for x in marconi.sims(quick, _footprints(marconi, results, quick))}
    sim = sims[s_point.workload]
    ss, sm = results.sim(sim, "sglang+"), results.sim(sim, "marconi")

    def change(q: str) -> float | None:
        a, b = sm[f"ttft_{q}_ms"], ss[f"ttft_{q}_ms"]
        return None if a is None or not b else a / b - 1

    dp5, dp50, dp95 = change("p5"), change("p50"), change("p95")
    checks = [
        trend(
            "Marconi's token hit rate beats SGLang+'s", m["token_hit_rate"] > s["token_hit_rate"]
        ),
        trend(
            f"Marconi gains more on inputs >= {LENGTH_EDGE} tokens than below (worse or "
            "equal below, better above)",
            _crosses(below, above),
        ),
        trend("Marconi's P50 and P95 TTFT are lower", (dp50 or 0) < 0 and (dp95 or 0) < 0),
        magnitude("SGLang+ hit rate (%)", 16.4, 100 * s["token_hit_rate"]),
        magnitude("Marconi hit rate (%)", 32.7, 100 * m["token_hit_rate"]),
        magnitude(
            "FLOPs saved, Marconi over SGLang+ (%)",
            90.3,
            None if flops_gain is None else 100 * (flops_gain - 1),
        ),
        magnitude("P5 TTFT change (%)", 6.3, None if dp5 is None else 100 * dp5),
        magnitude("P50 TTFT change (%)", -13.4, None if dp50 is None else 100 * dp50),
        magnitude("P95 TTFT change (%)", -22.0, None if dp95 is None else 100 * dp95),
    ]
    twin = (
        f"SGLang+ {pct(s['token_hit_rate'])} vs Marconi {pct(m['token_hit_rate'])} at "
        f"{s_point.cache_gb:g} GB; "
        f"FLOPs saved {pct(None if flops_gain is None else flops_gain - 1)}; "
        f"below {LENGTH_EDGE} tokens {pct(below[0])} vs {pct(below[1])}, above "
        f"{pct(above[0])} vs {pct(above[1])}; "
        f"TTFT (engine, {sim.cache_gb:g} GB) P5 {pct(dp5)}, P50 {pct(dp50)}, P95 {pct(dp95)}"
    )
    edges = [0, 2000, 4000, LENGTH_EDGE, 10000, 15000, 20000, np.inf]
    rows = []
    bins: dict[str, list[float]] = {"SGLang+": [], "Marconi": []}
    for lo, hi in itertools.pairwise(edges):
        mask = (inputs >= lo) & (inputs < hi)
        if mask.any():
            bins["SGLang+"].append(100 * (_pooled(inputs, hs, mask) or 0.0))
            bins["Marconi"].append(100 * (_pooled(inputs, hm, mask) or 0.0))
            rows.append(
                [
                    f"{lo:,.0f}-{hi:,.0f}" if hi < np.inf else f">= {lo:,.0f}",
                    str(int(mask.sum())),
                    pct(_pooled(inputs, hs, mask)),
                    pct(_pooled(inputs, hm, mask)),
                ]
            )
    return Claim(
        3,
        "One SWE-bench trace: hit rate, FLOPs, hit rate by input length, TTFT",
        "sec. 5.2, Fig. 8",
        "SGLang+ 16.4% vs Marconi 32.7%; FLOPs saved +90.3%; Marconi worse below ~7K input "
        "tokens, better above; "
        "TTFT P5 +6.3% (worse), P50 -13.4%, P95 -22.0%",
        twin,
        checks,
        [s["command"], m["command"], ss["command"], sm["command"]],
        [
            f"The trace is `{s_point.workload}`; the engine's cache is capped at "
            f"{sim.cache_gb:g} GB."
        ],
        (["input tokens", "requests", "SGLang+ hit", "Marconi hit"], rows),
        (
            "Token hit rate by input length (pooled over the requests in each bin)",
            lambda: figures.bars([r[0] for r in rows], bins, "token hit rate (%)"),
        ),
    )


def _footprints(marconi: Marconi, results: Results, quick: bool) -> dict[str, float]:
    return {w: results.footprint_gb(w) for w in marconi.footprint_workloads(quick)}


def claim_contention(marconi: Marconi, results: Results, quick: bool) -> Claim:
    from reports.reproduce.marconi import BASE_RATE, KINDS, LABEL

    checks, parts, rows, commands = [], [], [], []
    peaks = []
    curves: dict[str, list[float]] = {}
    fractions: list[float] = []
    for kind in KINDS:
        cells = [c for c in _by_config(marconi, results, kind, quick) if c["rate"] == BASE_RATE]
        wins = [(_ratio(c["marconi"], c["sglang+"]) or 1.0) - 1 for c in cells]
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


def _rises(values: list[float], slack: float = 0.01) -> bool:
    """Up overall and never down step by step (a dip within ``slack`` relative counts as level)."""
    steps = itertools.pairwise(values)
    return values[-1] > values[0] and all(b >= a * (1 - slack) for a, b in steps)


def claim_layers(marconi: Marconi, results: Results, quick: bool) -> Claim:
    from reports.reproduce.marconi import MIXES

    grid = marconi.mixes(quick, _footprints(marconi, results, quick))
    rows, commands, hits = [], [], []
    for (attn, ssm), points in zip(MIXES, grid, strict=True):
        v, s, m = (_hit(results, p) for p in points)
        hits.append((v, s, m))
        commands += [results.replay(p)["command"] for p in points]
        rows.append(
            [f"{attn}:{ssm}", pct(v), pct(s), pct(m), times(_ratio(m, v)), times(_ratio(m, s))]
        )
    hybrid = [h for (a, s_), h in zip(MIXES, hits, strict=True) if s_ > 0]
    win_v = [_ratio(m, v) or 0.0 for v, _, m in hybrid]
    win_s = [_ratio(m, s) or 0.0 for _, s, m in hybrid]
    pure = hits[[s_ for _, s_ in MIXES].index(0)]
    spread = max(pure) - min(pure)
    checks = [
        trend("the win over vLLM+ grows with every step of SSM share", _rises(win_v)),
        trend("the win over SGLang+ grows with every step of SSM share", _rises(win_s)),
        trend("a pure Transformer gives all three the same hit rate (within 1 pp)", spread <= 0.01),
    ]
    return Claim(
        5,
        "Layer composition: the win grows with the SSM share",
        "sec. 5.3, Fig. 12a",
        "the win over vLLM+ and SGLang+ grows with the SSM share; a pure Transformer ties "
        "all three",
        f"win over vLLM+ {' -> '.join(times(w) for w in win_v)}, over SGLang+ "
        f"{' -> '.join(times(w) for w in win_s)} "
        f"(Attn:SSM {', '.join(f'{a}:{s_}' for a, s_ in MIXES if s_)}); pure Transformer "
        f"spread {100 * spread:.1f} pp",
        checks,
        commands,
        [
            "Pure Transformer: the twin's policies differ by eviction granularity and "
            "Marconi's FLOP-aware score (docs/decisions.md, issue #21)."
        ],
        (
            [
                "Attn:SSM layers",
                "vLLM+",
                "SGLang+",
                "Marconi",
                "Marconi / vLLM+",
                "Marconi / SGLang+",
            ],
            rows,
        ),
    )


def claim_state_dim(marconi: Marconi, results: Results, quick: bool) -> Claim:
    from reports.reproduce.marconi import D_STATES

    grid = marconi.d_states(quick, _footprints(marconi, results, quick))
    wins, rows, commands = [], [], []
    for n, (pv, pm) in zip(D_STATES, grid, strict=True):
        v, m = _hit(results, pv), _hit(results, pm)
        w = (_ratio(m, v) or 0.0) - 1
        wins.append(w)
        commands += [results.replay(pv)["command"], results.replay(pm)["command"]]
        rows.append([str(n), pct(v), pct(m), pct(w)])
    checks = [
        trend("the win over vLLM+ is larger at N=128 than at N=16", wins[-1] > wins[0]),
        magnitude("win at N=16 (%)", 5.7, 100 * wins[0]),
        magnitude("win at N=128 (%)", 35.4, 100 * wins[-1]),
    ]
    return Claim(
        6,
        "SSM state dimension 16 -> 128",
        "sec. 5.3, Fig. 12b",
        "win over vLLM+ grows 5.7% -> 35.4%",
        " -> ".join(pct(w) for w in wins) + f" (N = {', '.join(map(str, D_STATES))})",
        checks,
        commands,
        table=(["N (ssm_d_state)", "vLLM+", "Marconi", "win"], rows),
    )


def claim_arrivals(marconi: Marconi, results: Results, quick: bool) -> Claim:
    from reports.reproduce.marconi import FOCUS, RATES, THINK_S

    fp = _footprints(marconi, results, quick)
    cells = [c for c in _by_config(marconi, results, "chat", quick) if c["fraction"] == FOCUS]
    lo, hi = cells[0], cells[-1]
    assert (lo["rate"], hi["rate"]) == (RATES[0], RATES[-1])
    think = [results.replay(p) for p in marconi.think_times(quick, fp)]
    s5, m5, s10, m10 = (r["token_hit_rate"] for r in think)
    win = [_ratio(lo["marconi"], lo["sglang+"]), _ratio(hi["marconi"], hi["sglang+"])]
    win_t = [_ratio(m5, s5), _ratio(m10, s10)]
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


def claim_ttft(marconi: Marconi, results: Results, quick: bool) -> Claim:
    from reports.reproduce.marconi import LABEL

    rows, commands, reductions, saved_ms = [], [], [], []
    for sim in marconi.sims(quick, _footprints(marconi, results, quick)):
        kind = sim.workload.split("-")[0]
        m = results.sim(sim, "marconi")
        commands.append(m["command"])
        for base in ("vanilla", "vllm+", "sglang+"):
            b = results.sim(sim, base)
            commands.append(b["command"])
            red = 1 - m["ttft_p95_ms"] / b["ttft_p95_ms"] if b["ttft_p95_ms"] else None
            reductions.append(red)
            saved_ms.append(b["ttft_p95_ms"] - m["ttft_p95_ms"])
            rows.append(
                [
                    LABEL[kind],
                    f"{sim.cache_gb:g}",
                    base,
                    f"{b['ttft_p95_ms']:,.0f}",
                    f"{m['ttft_p95_ms']:,.0f}",
                    pct(red),
                ]
            )
    valid = [r for r in reductions if r is not None]
    best = max(valid) if valid else None
    checks = [
        trend(
            "Marconi's P95 TTFT is lower than every baseline's on every workload",
            bool(valid) and len(valid) == len(reductions) and min(valid) > 0,
        ),
        magnitude("largest P95 reduction (%)", 71.1, None if best is None else 100 * best),
        magnitude("largest P95 reduction (ms)", 617, max(saved_ms) if saved_ms else None),
    ]
    return Claim(
        8,
        "P95 TTFT vs vanilla, vLLM+ and SGLang+",
        "sec. 5.2, Fig. 9",
        "up to 71.1% (617 ms) lower P95 TTFT (Jamba-1.5-Mini, 4 x A100-40GB)",
        f"largest reduction {pct(best)} ({max(saved_ms):,.0f} ms); smallest "
        f"{pct(min(valid) if valid else None)}",
        checks,
        commands,
        [
            "The twin's engine: one H100 replica (measured-kernel profile), the 7B hybrid, "
            "each trace's own arrival times."
        ],
        (
            [
                "workload",
                "cache GB",
                "baseline",
                "baseline P95 (ms)",
                "Marconi P95 (ms)",
                "reduction",
            ],
            rows,
        ),
    )


def claim_footprint(marconi: Marconi, results: Results, quick: bool) -> Claim:
    from reports.reproduce.marconi import KINDS, LABEL

    hybrid = resolve_model(MODEL)
    transformer = get_model("llama-7b-transformer")
    tokens, every = 10_000, 16
    hybrid_gb = (
        tokens * hybrid.kv_bytes_per_token + tokens // every * hybrid.ssm_checkpoint_bytes
    ) / GB
    trans_gb = tokens * transformer.kv_bytes_per_token / GB
    checks = [
        trend("the hybrid's cache entries outweigh the Transformer's", hybrid_gb > trans_gb),
        magnitude("10K tokens, checkpoint every 16 (GB)", 17.4, hybrid_gb),
        magnitude("vs a 7B Transformer (x)", 3.3, hybrid_gb / trans_gb),
    ]
    rows, parts = [], []
    for kind in KINDS:
        trace = Trace.load(results.workload_path(marconi.workload_name(kind, 1.0, quick)))
        r = block_reuse(trace, 32)
        rows.append([LABEL[kind], f"{r.blocks:,}", pct(r.kv_rate), pct(r.ssm_rate, 2)])
        parts.append(f"{LABEL[kind]} {pct(r.kv_rate)} vs {pct(r.ssm_rate, 2)}")
        checks.append(
            trend(
                f"{LABEL[kind]}: KV blocks are reused far more often than SSM states (10x+)",
                r.kv_rate >= 10 * r.ssm_rate,
            )
        )
        checks.append(magnitude(f"{LABEL[kind]} KV block reuse (%)", 25.0, 100 * r.kv_rate))
        checks.append(magnitude(f"{LABEL[kind]} SSM state reuse (%)", 0.4, 100 * r.ssm_rate))
    return Claim(
        9,
        "Section 3: state footprint and block reuse",
        "sec. 3, Fig. 3a",
        "17.4 GB for one 10K-token sequence checkpointed every 16 tokens, 3.3x a 7B Transformer; "
        "25.0% of KV blocks vs 0.4% of SSM states reused (block 32)",
        f"{hybrid_gb:.1f} GB, {hybrid_gb / trans_gb:.1f}x llama-7b-transformer; reuse (KV vs SSM): "
        + "; ".join(parts),
        checks,
        [f"twin models show {MODEL}", "twin models show llama-7b-transformer"],
        [
            "Block reuse: every 32-token block of every prompt + output cached, nothing "
            "evicted, requests in replay order (reports/reproduce/block_reuse.py)."
        ],
        (["workload", "blocks cached", "KV blocks reused", "SSM states reused"], rows),
    )


def all_claims(marconi: Marconi, results: Results, quick: bool) -> list[Claim]:
    return [
        f(marconi, results, quick)
        for f in (
            claim_vs_vllm,
            claim_vs_sglang,
            claim_one_trace,
            claim_contention,
            claim_layers,
            claim_state_dim,
            claim_arrivals,
            claim_ttft,
            claim_footprint,
        )
    ]
