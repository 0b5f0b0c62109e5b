"""The before/after miss table of the L2-split refit (helper moe-fit, session 27).

Reads ``refit.py``'s JSONs (``fit-0.json``, ``fit-1.json``: each shipped fused-MoE family
refitted with this branch's features, the same seeded held-out quarter of the rows the
fit keeps) and ``benchmarks/results/moe-kernels.json`` (the shipped fits). Writes
``miss-table.md`` and ``summary.json`` here. Run from the repository root:
``python benchmarks/results/moe-fit-s27/table.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from statistics import median

HERE = Path(__file__).parent
ROWS = json.loads((HERE.parent / "moe-kernels.json").read_text())["rows"]


def meets(med: float, p90: float) -> bool:
    return med <= 0.05 and p90 <= 0.15


def main() -> None:
    after: dict[str, dict] = {}
    for f in sorted(HERE.glob("fit-*.json")):
        after.update(json.loads(f.read_text()))
    lines = [
        "| profile | family | rows before / after (L2-resident) | before median / P90 | "
        "after median / P90 | before | after |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    both = []
    for r in sorted(ROWS, key=lambda r: (r["profile"], r["family"])):
        key = f"{r['profile']}:{r['family']}"
        a = after.get(key)
        # before: the shipped fit's own held-out errors (as refit.py read them)
        old = tuple(a["old"]) if a else (r["heldout_median"], r["heldout_p90"])
        if a is None:
            new_txt, verdict = "not refitted", "-"
        else:
            new = tuple(a["new"])
            both.append((old, new))
            new_txt = f"{new[0]:.1%} / {new[1]:.1%}"
            verdict = "meets" if meets(*new) else "misses"
        lines.append(
            f"| {r['profile']} | {r['family']} | {r['n_shapes']} / "
            f"{a['n'] if a else '-'} ({a['n_res'] if a else '-'}) | {old[0]:.1%} / {old[1]:.1%} | "
            f"{new_txt} | {'meets' if meets(*old) else 'misses'} | {verdict} |"
        )
    summary = {
        "families_refitted": len(both),
        "families_shipped": len(ROWS),
        "missing_before_of_shipped": sum(
            not meets(*(after[k]["old"] if k in after else (r["heldout_median"], r["heldout_p90"])))
            for r in ROWS
            for k in [f"{r['profile']}:{r['family']}"]
        ),
        "missing_after_of_shipped": sum(
            not meets(*(after[k]["new"] if k in after else (r["heldout_median"], r["heldout_p90"])))
            for r in ROWS
            for k in [f"{r['profile']}:{r['family']}"]
        ),
        "meeting_before": sum(meets(*o) for o, _ in both),
        "meeting_after": sum(meets(*n) for _, n in both),
        "newly_meeting": sum(meets(*n) and not meets(*o) for o, n in both),
        "newly_missing": sum(meets(*o) and not meets(*n) for o, n in both),
        "median_of_medians": [median(o[0] for o, _ in both), median(n[0] for _, n in both)],
        "median_of_p90s": [median(o[1] for o, _ in both), median(n[1] for _, n in both)],
        "p90_lower_by_half_a_point": sum(n[1] < o[1] - 0.005 for o, n in both),
        "p90_higher_by_half_a_point": sum(n[1] > o[1] + 0.005 for o, n in both),
    }
    (HERE / "miss-table.md").write_text("\n".join(lines) + "\n")
    (HERE / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
