"""A fused-MoE series timed slow on one GPU, read from its same-silicon sibling (issue 31).

B200 and GB200 are one die with the same HBM3e (B300 and GB300 likewise); GB200 runs
at a higher power limit. NVIDIA's ``moe_perf`` tables of the two agree: over every
series (one kernel source, expert format, routing, shape and layout, timed over token
counts) of TensorRT-LLM 1.3.0rc20's tables the B200 / GB200 time is a median 1.04, the
quartiles 1.03-1.05. Yet single series sit 1.3-1.9x off in either direction: DeepSeek's
nvfp4 EP 4 series is 1.73x GB200's (and B300's, a faster die) at every token count,
3.2 TB/s where GB200 reads 5.6. One die cannot be 1.7x slower on one series and 1.04x
on the rest: such a series is a disturbed collection (the GPU throttled or shared while
it ran), not the kernel, and the per-shape term (``twin.costmodel.series_term``) would
carry it into every price of that shape.

The rule: per series both tables timed on at least ``MIN_SHARED_TOKENS`` shared token
counts, its ratio is the median over those token counts of own / sibling time; the
tables' ratio is the median of the series' ratios. A series whose ratio lies above
``BAND[1]`` times the tables' ratio (this GPU the slow one) takes the sibling's rows of
that series, each time times the tables' ratio. One below ``BAND[0]`` times it (this GPU
the fast one) keeps its rows: its sibling is the one replaced, when the sibling's
tables are read. A cross-GPU fallback for whole series, chosen by the physics above;
never a per-row factor. The rows this GPU timed at token counts its sibling did not are
dropped with the series (they are the same slow collection).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Same die and HBM, by the database's system directory (aiconfigurator_core systems/data).
SIBLINGS = {"b200_sxm": "gb200", "gb200": "b200_sxm", "b300_sxm": "gb300", "gb300": "b300_sxm"}
# A series' ratio outside this band around the tables' ratio is a disturbed collection:
# the quartiles of B200 / GB200 lie within 1.5% of the median, the disturbed series
# 1.3-1.9x away (docs/decisions.md, issue 34 / 31, case 2).
BAND = (0.8, 1.25)
# Fewer shared token counts: no ratio for the series. It guards the median: over one or
# two token counts it is one timing (or two's mean), so a single disturbed point would
# decide whether the whole series is replaced; from three the median outvotes one such
# point, and 4 keeps one more. Measured (aiconfigurator_core 0.12.0, the 16 B200 / GB200 /
# B300 / GB300 ``moe_perf`` tables with a sibling; the script in docs/decisions.md,
# "Issue 33, step: review mends"): 62,516 series share 26-27 token counts, 533 share 0-8
# (369 none, 146 one); any value 2-8 replaces the same series (the tables' ratios move by
# 0.0001 at most), 1 replaces one more B300 vLLM 0.24.0 series on one token count.
MIN_SHARED_TOKENS = 4
# A ``moe_perf`` row's shape: its columns but the token count (``aic_tables.MOE_COLUMNS``
# is the token count and these).
MOE_SHAPE_COLUMNS = (
    "hidden_size",
    "inter_size",
    "topk",
    "num_experts",
    "moe_tp_size",
    "moe_ep_size",
)
SERIES_COLUMNS = ("kernel_source", "moe_dtype", "distribution", *MOE_SHAPE_COLUMNS)

SeriesKey = tuple[Any, ...]


@dataclass(frozen=True)
class SiblingFill:
    """A table's rows after the rule, and what it replaced."""

    rows: tuple[dict[str, Any], ...]
    sibling_table: str = ""  # the sibling's table read ("" when it has none)
    median_ratio: float = 1.0  # own / sibling, the median over the series
    replaced: tuple[tuple[SeriesKey, float], ...] = ()  # (series, its own / sibling ratio)

    def replaced_labels(self, kernel_source: str, dtype: str) -> list[str]:
        """The replaced balanced series of one kernel source and expert format, as
        "d7168 i2048 k8 e256 tp1 ep4 x1.73" (its own / sibling ratio)."""
        return [
            f"d{k[3]} i{k[4]} k{k[5]} e{k[6]} tp{k[7]} ep{k[8]} x{ratio:.2f}"
            for k, ratio in self.replaced
            if k[0] == kernel_source and k[1] == dtype and k[2] == "balanced"
        ]


def series_key(row: dict[str, Any]) -> SeriesKey:
    return tuple(row.get(c) for c in SERIES_COLUMNS)


def _by_series(rows: Sequence[dict[str, Any]]) -> dict[SeriesKey, dict[int, dict[str, Any]]]:
    out: dict[SeriesKey, dict[int, dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(series_key(r), {})[int(r["num_tokens"])] = r
    return out


def series_ratios(
    own: Sequence[dict[str, Any]], sibling: Sequence[dict[str, Any]]
) -> dict[SeriesKey, float]:
    """Per series both timed on ``MIN_SHARED_TOKENS`` or more token counts, the median
    over those of own / sibling latency."""
    mine, theirs = _by_series(own), _by_series(sibling)
    out: dict[SeriesKey, float] = {}
    for key, rows in mine.items():
        other = theirs.get(key, {})
        shared = [t for t in rows if t in other and float(other[t]["latency"]) > 0]
        if len(shared) >= MIN_SHARED_TOKENS:
            out[key] = statistics.median(
                float(rows[t]["latency"]) / float(other[t]["latency"]) for t in shared
            )
    return out


def fill_slow_series(
    own: Sequence[dict[str, Any]],
    sibling: Sequence[dict[str, Any]],
    band: tuple[float, float] = BAND,
    sibling_table: str = "",
) -> SiblingFill:
    """``own``'s rows with each slow series (module doc) replaced by ``sibling``'s rows of
    it times the tables' median ratio; rows of ``own`` are never modified (copies)."""
    ratios = series_ratios(own, sibling)
    if not ratios:
        return SiblingFill(tuple(own))
    median = statistics.median(ratios.values())
    slow = {k: r for k, r in ratios.items() if r > band[1] * median}
    if not slow:
        return SiblingFill(tuple(own), sibling_table, median)
    device = next((r.get("device") for r in own if r.get("device")), None)
    theirs: dict[SeriesKey, list[dict[str, Any]]] = {}
    for r in sibling:
        if series_key(r) in slow:
            theirs.setdefault(series_key(r), []).append(r)
    # In place of the series' first row, all of the sibling's: the order of the other
    # rows is kept (the fit's held-out split is by position).
    rows: list[dict[str, Any]] = []
    for r in own:
        key = series_key(r)
        if key not in slow:
            rows.append(r)
        elif key in theirs:
            rows.extend(
                {**s, "latency": float(s["latency"]) * median, "device": device}
                for s in theirs.pop(key)
            )
    replaced = tuple(sorted(slow.items(), key=lambda kv: tuple(map(str, kv[0]))))
    return SiblingFill(tuple(rows), sibling_table, median, replaced)


def sibling_of(table: Path) -> Path | None:
    """The sibling GPU's table of the same op, engine and version as ``table``
    (``<root>/<system>/<op>/<engine>/<version>/<name>``); None when the GPU has no
    sibling or the sibling no such table."""
    parts = table.parts
    if len(parts) < 5 or parts[-5] not in SIBLINGS:
        return None
    other = table.parents[4] / SIBLINGS[parts[-5]] / Path(*parts[-4:])
    return other if other.is_file() else None


__all__ = [
    "BAND",
    "MIN_SHARED_TOKENS",
    "SIBLINGS",
    "SiblingFill",
    "fill_slow_series",
    "series_ratios",
    "sibling_of",
]
