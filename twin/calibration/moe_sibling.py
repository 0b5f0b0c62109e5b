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

A series both dies of a pair timed slow, the pair rule cannot see: B200's and GB200's
TensorRT-LLM 1.3.0rc20 nvfp4 series of DeepSeek's shape at MoE TP 1 EP 8 read 283 / 277
us at 64 tokens, where their EP 4 reads 275 (GB200; twice the local experts) and EP 16
104, and B300 / GB300 (the Blackwell Ultra die, the same 8 TB/s HBM3e) read 165 / 161: 32
local experts' 0.7 GB of weights at 2.5 TB/s, below both neighbours of the same die. The
cross-die rule (:func:`fill_pair_slow_series`): per series, own / cross-die ratio and
sibling / sibling's cross-die ratio, each against its tables' median; a series above
``BAND[1]`` times it on both dies of the pair (the pair agrees it is slow; each die's own
collection) takes the cross die's rows of it (after that die's own pair rule), times the
tables' own / cross-die median. Only the B200 die's pair reads from the B300 die's
(``CROSS_DIE``): the rule is written for the series found slow against the measured rows
(docs/decisions.md, "B200's tp 8 EP series: the cross-die rule").
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Same die and HBM, by the database's system directory (aiconfigurator_core systems/data).
SIBLINGS = {"b200_sxm": "gb200", "gb200": "b200_sxm", "b300_sxm": "gb300", "gb300": "b300_sxm"}
# The other die with the same HBM, by system directory: B200's die (B200, GB200) reads a
# series both of its GPUs timed slow from B300's (B300, GB300), the same 8 TB/s HBM3e and
# no less compute (module doc).
CROSS_DIE = {"b200_sxm": "b300_sxm", "gb200": "gb300"}
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
# A ``moe_perf`` row's shape: its columns but the token count (``aic_moe.MOE_COLUMNS``
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
    return _take(own, sibling, slow, median, sibling_table)


def fill_pair_slow_series(
    own: Sequence[dict[str, Any]],
    sibling: Sequence[dict[str, Any]],
    cross: Sequence[dict[str, Any]],
    sibling_cross: Sequence[dict[str, Any]],
    band: tuple[float, float] = BAND,
    cross_table: str = "",
) -> SiblingFill:
    """``own``'s rows with each series both dies of the pair timed slow against the
    cross die (``own`` / ``cross`` and ``sibling`` / ``sibling_cross`` each above
    ``band[1]`` times its tables' median ratio) replaced by ``cross``'s rows of it times
    the own / cross median (module doc)."""
    mine, theirs = series_ratios(own, cross), series_ratios(sibling, sibling_cross)
    if not mine or not theirs:
        return SiblingFill(tuple(own))
    median = statistics.median(mine.values())
    pair_median = statistics.median(theirs.values())
    slow = {
        k: r
        for k, r in mine.items()
        if r > band[1] * median and theirs.get(k, 0.0) > band[1] * pair_median
    }
    return _take(own, cross, slow, median, cross_table)


def _take(
    own: Sequence[dict[str, Any]],
    donor: Sequence[dict[str, Any]],
    slow: dict[SeriesKey, float],
    median: float,
    donor_table: str,
) -> SiblingFill:
    """``own``'s rows with each series of ``slow`` replaced by ``donor``'s rows of it
    times ``median``."""
    if not slow:
        return SiblingFill(tuple(own), donor_table, median)
    device = next((r.get("device") for r in own if r.get("device")), None)
    theirs: dict[SeriesKey, list[dict[str, Any]]] = {}
    for r in donor:
        if series_key(r) in slow:
            theirs.setdefault(series_key(r), []).append(r)
    # In place of the series' first row, all of the donor's: the order of the other
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
    return SiblingFill(tuple(rows), donor_table, median, replaced)


def sibling_of(table: Path) -> Path | None:
    """The sibling GPU's table of the same op, engine and version as ``table``
    (``<root>/<system>/<op>/<engine>/<version>/<name>``); None when the GPU has no
    sibling or the sibling no such table."""
    return _counterpart(table, SIBLINGS)


def cross_die_of(table: Path) -> Path | None:
    """The cross die's table (``CROSS_DIE``) of the same op, engine and version as
    ``table``; None when the GPU has none or it no such table."""
    return _counterpart(table, CROSS_DIE)


def _counterpart(table: Path, systems: dict[str, str]) -> Path | None:
    parts = table.parts
    if len(parts) < 5 or parts[-5] not in systems:
        return None
    other = table.parents[4] / systems[parts[-5]] / Path(*parts[-4:])
    return other if other.is_file() else None


__all__ = [
    "BAND",
    "CROSS_DIE",
    "MIN_SHARED_TOKENS",
    "SIBLINGS",
    "SiblingFill",
    "cross_die_of",
    "fill_pair_slow_series",
    "fill_slow_series",
    "series_ratios",
    "sibling_of",
]
