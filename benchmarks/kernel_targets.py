"""What the kernel-family benchmarks share (``bench_moe_kernels.py``,
``bench_mla_kernels.py``, ``bench_a2a_kernels.py``): issue #12's held-out targets, the
fits of a set of families in the shipped NVIDIA-table profiles, one result row a fit, the
summary over rows, and the results file.

Imported by those scripts as a sibling module (``python benchmarks/bench_*.py`` puts
``benchmarks/`` first on the path), as ``trees`` is by the engine and replay benchmarks.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from statistics import median
from typing import Any

from twin.costmodel.profile import KernelFit, Profile
from twin.costmodel.profile_store import load_profile, shipped_profiles

# Issue #12's kernel targets: held-out median |relative error| <= 5%, P90 <= 15%.
TARGET_MEDIAN, TARGET_P90 = 0.05, 0.15


def fitted(variants: Iterable[str]) -> Iterator[tuple[str, Profile, str, KernelFit]]:
    """(profile name, profile, family, fit) of every family of ``variants`` that a shipped
    ``<gpu>-<engine>`` profile has fitted, in name order (datasheet profiles have none)."""
    wanted = tuple(variants)
    for name, path in sorted(shipped_profiles().items()):
        if name.endswith("-datasheet") or "-" not in name:
            continue
        prof = load_profile(path)
        for kernel in wanted:
            fit = prof.kernels.get(kernel)
            if fit is not None:
                yield name, prof, kernel, fit


def heldout_row(fit: KernelFit) -> dict[str, Any]:
    """A fit's provenance, shape counts and held-out errors against the targets (a fit
    without held-out errors meets neither)."""
    med, p90 = fit.heldout_median_rel_err, fit.heldout_p90_rel_err
    meets_median = med is not None and med <= TARGET_MEDIAN
    meets_p90 = p90 is not None and p90 <= TARGET_P90
    return {
        "kernel_source": fit.provenance.get("kernel_source"),
        "version": fit.provenance.get("version"),
        "tables": fit.provenance.get("tables"),
        "n_shapes": fit.n_shapes,
        "n_heldout": fit.n_heldout,
        "n_flagged": fit.n_flagged,
        "heldout_median": med,
        "heldout_p90": p90,
        "heldout_max": fit.heldout_max_rel_err,
        "meets_median": meets_median,
        "meets_p90": meets_p90,
        "meets_target": meets_median and meets_p90,
    }


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """How many rows meet each target, and the medians of their held-out medians and P90s."""
    meds = [r["heldout_median"] for r in rows if r["heldout_median"] is not None]
    p90s = [r["heldout_p90"] for r in rows if r["heldout_p90"] is not None]
    return {
        "families": len(rows),
        "meeting_target": sum(r["meets_target"] for r in rows),
        "meeting_median": sum(r["meets_median"] for r in rows),
        "meeting_p90": sum(r["meets_p90"] for r in rows),
        "median_of_medians": median(meds) if meds else None,
        "median_of_p90s": median(p90s) if p90s else None,
        "targets": {"median": TARGET_MEDIAN, "p90": TARGET_P90},
    }


def log_interpolated(times: dict[int, float], a: int, b: int, c: int) -> float:
    """The time at ``b`` from its neighbours ``a`` and ``c`` on a series' axis, linear in
    log time over log axis (a table's self-interpolation: its floor, its outlier rows)."""
    w = math.log(b / a) / math.log(c / a)
    return math.exp((1 - w) * math.log(times[a]) + w * math.log(times[c]))


MISS = TARGET_P90  # a held-out row more than this far off is a miss


def print_family(r: dict[str, Any], label: str, notes: Iterable[str] = ()) -> None:
    """One family's line (``label``: its profile and name, padded by the caller), its
    ``notes``, and, if it misses, its held-out misses by reason and its table's floor."""
    mark = "ok  " if r["meets_target"] else "MISS"
    print(
        f"{mark} {label} median {r['heldout_median']:6.1%} "
        f"P90 {r['heldout_p90']:6.1%}  ({r['n_shapes']} shapes, {r['kernel_source']})"
    )
    for note in notes:
        print(f"     {note}")
    if not r["meets_target"] and "heldout_misses" in r:
        misses = ", ".join(f"{k} {n}" for k, n in r["heldout_misses"].items() if n)
        print(
            f"     held-out rows >{MISS:.0%} off: {misses or 'none'} (of {r['n_heldout']});"
            f" table floor {r['floor_median']:.1%} / {r['floor_p90']:.1%}"
        )


def miss_summary(rows: list[dict[str, Any]], reasons: Iterable[str]) -> dict[str, Any]:
    """The rows' held-out misses summed by reason (each row's ``heldout_misses``) and the
    medians of their tables' self-interpolation floors."""
    totals = dict.fromkeys(reasons, 0)
    for r in rows:
        for k, n in r.get("heldout_misses", {}).items():
            totals[k] += n
    floors = [r["floor_median"] for r in rows if r.get("floor_median") is not None]
    floor_p90s = [r["floor_p90"] for r in rows if r.get("floor_p90") is not None]
    return {
        "heldout_misses_by_reason": totals,
        "median_of_floor_medians": median(floors) if floors else None,
        "median_of_floor_p90s": median(floor_p90s) if floor_p90s else None,
    }


def write_results(
    path: Path, bench: str, summary: dict[str, Any], rows: list[dict[str, Any]], t0: float
) -> None:
    """Print ``summary`` and write it with ``rows`` to ``path`` (the benchmark's JSON)."""
    print(json.dumps(summary, indent=1))
    out = {
        "benchmark": bench,
        "command": f"python benchmarks/{bench}.py",
        "seconds": round(time.perf_counter() - t0, 2),
        "summary": summary,
        "rows": rows,
    }
    path.write_text(json.dumps(out, indent=1) + "\n")


__all__ = [
    "TARGET_MEDIAN",
    "TARGET_P90",
    "fitted",
    "heldout_row",
    "log_interpolated",
    "miss_summary",
    "summarise",
    "write_results",
]
