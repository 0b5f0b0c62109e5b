"""Seed aggregation, the SLO parser and the capacity recommendation under a list of SLOs.

Works on plain lists of row dicts (no pandas: it is not a dependency), so the
same functions serve results read from parquet and tables written by hand in
tests.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from twin.errors import TwinError
from twin.reports.perrequest import GOODPUT_COLUMN, GOODPUT_SLO_COLUMN, slo_key
from twin.reports.results_table import LATENCY_COLUMNS, LATENCY_PERCENTILES
from twin.reports.verdicts import (
    STABLE,
    advice,
    binding_resource,
    binding_target,
    failing,
    meets,
    verdict_of,
    worst_verdict,
)
from twin.slo import Slo
from twin.slo import parse_slo as parse_any_slo
from twin.slo import parse_slos as parse_any_slos

# Metrics averaged across seeds; each gets a 95% interval when seeds >= 2.
METRICS = (
    *LATENCY_COLUMNS,
    "queue_mean_ms",
    "queue_p95_ms",
    "prefill_mean_ms",
    "token_hit_rate",
    "request_hit_rate",
    "flops_saved_frac",
    "kv_bytes_mean",
    "ssm_bytes_mean",
    "throughput_rps",
    "output_tokens_per_s",
    "utilisation",
    GOODPUT_COLUMN,
    "preempted_requests",
    "peak_running",
    "running_pool_peak",
    "max_running",
    "arrival_rate_rps",
    "completion_rate_rps",
)


def _recorded(metric: str) -> list[str]:
    """The percentiles of ``metric`` the sweep records (``p5``, ``p50``, ...)."""
    return [p for p in LATENCY_PERCENTILES.get(metric, ()) if f"{metric}_{p}_ms" in METRICS]


def parse_slo(text: str) -> Slo:
    """:func:`twin.slo.parse_slo`, refused unless the sweep records that percentile
    (the error lists the percentiles it records for that metric)."""
    return _recorded_by_sweep(parse_any_slo(text), text)


def _recorded_by_sweep(slo: Slo, text: str) -> Slo:
    if slo.column not in METRICS:
        have = _recorded(slo.metric)
        raise TwinError(
            f"--slo {text!r}: the sweep records {slo.metric} at "
            + (", ".join(have) if have else "no percentile")
            + f" only, e.g. '{have[-1] if have else 'p95'}_{slo.metric}<="
            + f"{slo.threshold_ms:g}ms'"
        )
    return slo


def parse_slos(texts: Sequence[str | Slo]) -> tuple[Slo, ...]:
    """Every ``--slo`` (:func:`twin.slo.parse_slos`: a percentile given twice is refused),
    each one a percentile the sweep records (:func:`parse_slo`); errors quote the flag's
    value as given."""
    given = [t.text if isinstance(t, Slo) else t for t in texts]
    slos = parse_any_slos(given)
    return tuple(_recorded_by_sweep(s, t) for s, t in zip(slos, given, strict=True))


def slo_text(slos: Sequence[Slo]) -> str:
    """``P95 TTFT <= 500 ms and P95 TPOT <= 50 ms``."""
    return " and ".join(str(s) for s in slos)


def with_goodput_of(
    rows: list[dict[str, Any]], slos: Sequence[Slo]
) -> tuple[list[dict[str, Any]], int]:
    """``rows`` with the goodput of rows counted under another SLO list (an earlier run
    into the same folder) set to None, and how many such rows there were. Goodput is
    never recomputed: it needs the per-request records, which rows do not keep."""
    if not slos:  # no targets, no good requests to count
        return [{**r, GOODPUT_COLUMN: None} for r in rows], 0
    want = slo_key(slos)
    out, stale = [], 0
    for r in rows:
        if r.get(GOODPUT_SLO_COLUMN) != want:
            r = {**r, GOODPUT_COLUMN: None}
            stale += 1
        out.append(r)
    return out, stale


def with_binding(rows: list[dict[str, Any]], slos: Sequence[Slo]) -> list[dict[str, Any]]:
    """``rows`` with ``binding`` judged against ``slos`` (rows from an earlier run may
    have been judged against other targets; the rule needs only the row's columns)."""
    return [{**r, "binding": binding_resource(r, slos)} for r in rows]


def seed_ci_half_width(values: list[float]) -> float | None:
    """Half-width of the 95% t-interval of the mean (None below two seeds)."""
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    from scipy import stats  # late: scipy.stats costs every command ~0.4 s to import

    return float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)


def aggregate(rows: list[dict[str, Any]], slos: Sequence[Slo] = ()) -> list[dict[str, Any]]:
    """One row per (policy, session_rate, cache_gb, replicas, tp): ``M`` (mean) and
    ``M_ci`` per metric, with ``gpus`` (replicas x tp, x ``pp`` where the rows carry
    pipeline stages). Rows without ``replicas`` or ``tp`` (tables written by hand) keep
    them None and count as one each in ``gpus``.

    A cell's ``verdict`` is its seeds' worst (:func:`reports.verdicts.worst_verdict`),
    with that seed's ``verdict_reason``; its ``binding`` is judged on the means
    against ``slos``."""
    Key = tuple[str, float | None, float, int | None, int | None, int | None]
    groups: dict[Key, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        n, per, pp = r.get("replicas"), r.get("tp"), r.get("pp")
        groups[(r["policy"], r["session_rate"], r["cache_gb"], n, per, pp)].append(r)
    out = []
    for (policy, rate, cache, replicas, tp, pp), members in groups.items():
        agg: dict[str, Any] = {
            "policy": policy,
            "session_rate": rate,
            "cache_gb": cache,
            "replicas": replicas,
            "tp": tp,
            # Pipeline stages: only on rows of a --pp run (twin report capacity --pp).
            **({} if pp is None else {"pp": pp}),
            "gpus": gpus({"replicas": replicas, "tp": tp, "pp": pp}),
            "cache_gb_per_gpu": cache / ((tp or 1) * (pp or 1)),
            "seeds": len(members),
        }
        for m in METRICS:
            # A point with no measured requests has null latencies: leave it
            # out of the mean rather than pretend it was zero.
            vals = [float(r[m]) for r in members if r.get(m) is not None]
            agg[m] = sum(vals) / len(vals) if vals else None
            agg[f"{m}_ci"] = seed_ci_half_width(vals)
        agg["verdict"] = worst_verdict([r.get("verdict") for r in members])
        agg["verdict_reason"] = next(
            (r.get("verdict_reason") for r in members if verdict_of(r) == agg["verdict"]), None
        )
        agg["binding"] = binding_resource(agg, slos)
        out.append(agg)
    out.sort(
        key=lambda a: (
            a["policy"],
            a["session_rate"] is not None,
            a["session_rate"] or 0.0,
            a["gpus"],
            a["cache_gb"],
        )
    )
    return out


def gpus(row: dict[str, Any]) -> int:
    """A result row's GPU count: replicas x tp x pp (one each where the row does not say;
    results.parquet has no ``pp`` column: ``twin report capacity --pp`` adds it to its
    rows, ``reports.capacity``)."""
    return int(row.get("replicas") or 1) * int(row.get("tp") or 1) * int(row.get("pp") or 1)


def by_gpu_count(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` (per-seed or aggregated) with each policy named with its GPU count when
    the count varies.

    The figures and the load analysis group by policy; naming ``marconi, 2 GPUs``
    apart from ``marconi, 4 GPUs`` groups them by GPU count as well, with no
    second code path. A sweep on one GPU count is returned unchanged.
    """
    if len({gpus(r) for r in rows}) < 2:
        return rows
    return [{**r, "policy": f"{r['policy']}, {gpus(r)} GPU(s)"} for r in rows]


@dataclass(frozen=True)
class Recommendation:
    """The smallest cache meeting the SLOs for one policy at one session rate.

    Where one meets them, ``target`` is the binding target there (the one
    nearest its threshold) and ``value_ms`` its value. Where none does, the
    largest swept cache (``largest_gb``) says why: ``target`` is the target
    furthest past its threshold (None when every target is met but the run is not
    stable), ``verdict`` and ``resource`` (the binding resource) are that cell's.
    """

    policy: str
    session_rate: float | None
    cache_gb: float | None  # None: no cache size in the sweep meets the SLOs
    value_ms: float | None  # the binding target's mean at that cache size
    gpus: int  # replicas x tp x pp
    tp: int = 1  # GPUs a pipeline stage
    target: Slo | None = None
    verdict: str = STABLE
    resource: str | None = None  # reports.verdicts.binding_resource; None where it meets
    # Each target's value (ms) at cache_gb, or at largest_gb where none meets.
    values: tuple[tuple[Slo, float | None], ...] = ()
    largest_gb: float | None = None
    reason: str | None = None  # the engine's sentence on that cell's steady state
    pp: int = 1  # pipeline stages: a replica's tp x pp GPUs share its cache

    @property
    def cache_gb_per_gpu(self) -> float | None:
        return None if self.cache_gb is None else self.cache_gb / (self.tp * self.pp)

    @property
    def meets(self) -> bool:
        return self.cache_gb is not None

    @property
    def headroom(self) -> float | None:
        """How far under its threshold the binding target is (0.35: 35% under)."""
        if self.target is None or self.value_ms is None:
            return None
        return 1 - self.value_ms / self.target.threshold_ms


def recommend(
    agg: list[dict[str, Any]],
    slos: Slo | Sequence[Slo],
    replicas: int,
    tp: int,
    pp: int = 1,
) -> list[Recommendation]:
    """For each (policy, rate, GPU count): the smallest cache whose means meet every
    target of ``slos`` with a stable steady state (:func:`reports.verdicts.meets`).
    ``replicas``, ``tp`` and ``pp`` stand in for rows that do not carry their own."""
    targets = (slos,) if isinstance(slos, Slo) else tuple(slos)
    by: dict[tuple[str, float | None, int, int, int], list[dict[str, Any]]] = defaultdict(list)
    for a in agg:
        n, per = int(a.get("replicas") or replicas), int(a.get("tp") or tp)
        stages = int(a.get("pp") or pp)
        by[(a["policy"], a["session_rate"], n, per, stages)].append(a)
    recs = []
    for (policy, rate, n, per, stages), cells in by.items():
        ok = [c for c in cells if meets(c, targets)]
        # The smallest cache meeting the SLOs; where none does, the largest swept says why.
        cell = (min if ok else max)(ok or cells, key=lambda c: c["cache_gb"])
        target = binding_target(cell, targets) if ok or failing(cell, targets) else None
        recs.append(
            Recommendation(
                policy,
                rate,
                cell["cache_gb"] if ok else None,
                cell.get(target.column) if ok and target is not None else None,
                n * per * stages,
                per,
                target,
                verdict_of(cell),
                binding_resource(cell, targets),  # None where it meets
                tuple((s, cell.get(s.column)) for s in targets),
                None if ok else cell["cache_gb"],
                None if ok else cell.get("verdict_reason"),
                stages,
            )
        )
    return recs


def winner(recs: list[Recommendation]) -> Recommendation | None:
    """The smallest cache meeting the SLOs; ties go to the larger headroom of the
    binding target."""
    ok = [r for r in recs if r.meets]
    return min(ok, key=lambda r: (r.cache_gb, -(r.headroom or 0.0))) if ok else None


def rate_label(rate: float | None) -> str:
    return "workload arrivals" if rate is None else f"{rate:g} sessions/s"


def _values(rec: Recommendation) -> str:
    """``P95 TTFT 13.0 ms, P95 TPOT 2.1 ms`` (``-`` for a missing value)."""
    return ", ".join(f"{s.label} {'-' if v is None else f'{v:,.1f}'} ms" for s, v in rec.values)


def _why_not(rec: Recommendation) -> str:
    """Why no cache meets the SLOs, from the largest one swept."""
    where = f"at {rec.largest_gb:g} GB" if rec.largest_gb is not None else "at the largest cache"
    if rec.target is not None:
        value = dict(rec.values).get(rec.target)
        shown = "no value" if value is None else f"{value:,.1f} ms"
        text = f"{rec.target.label} {shown} {where}"
        if rec.verdict != STABLE:
            text += f", {rec.verdict}"
        return text
    return f"{rec.verdict} {where}"


def _steady_reason(recs: list[Recommendation]) -> str:
    """The engine's reason for the first cell that is not stable (the others' read alike)."""
    r = next((r for r in recs if r.verdict != STABLE and r.reason), None)
    if r is None or r.reason is None:
        return ""
    return f" Steady state of {r.policy} at {r.largest_gb:g} GB: {r.reason.rstrip('.')}."


def _limits(recs: list[Recommendation]) -> str:
    """The binding resource of each failing policy, grouped, with its advice."""
    by: dict[str | None, list[str]] = {}
    for r in recs:
        by.setdefault(r.resource, []).append(r.policy)
    known = [(res, ps) for res, ps in by.items() if res is not None]
    parts = [f"{res} for {', '.join(ps)} ({advice(res)})" for res, ps in known]
    if None in by:
        parts.append(f"not clear from the summary for {', '.join(by[None])}")
    if len(known) == 1 and None not in by:
        res = known[0][0]
        return f"The binding resource is {res}: {advice(res)}."
    return "The binding resource is " + "; ".join(parts) + "."


def verdict(recs: list[Recommendation], slos: Slo | Sequence[Slo]) -> list[str]:
    """Plain sentences: per session rate, the winner, the target that binds it and its
    margin over the next policy; where nothing meets the SLOs, what fails and which
    resource binds (with the advice); then, when different policies win at different
    rates, where each one wins."""
    targets = (slos,) if isinstance(slos, Slo) else tuple(slos)
    goal = slo_text(targets)
    them = "them" if len(targets) > 1 else "it"
    lines = []
    wins: dict[str, list[str]] = {}
    rates = sorted({r.session_rate for r in recs}, key=lambda x: (x is not None, x or 0.0))
    counts = sorted({r.gpus for r in recs})
    for rate, gpus in itertools.product(rates, counts):
        at = [r for r in recs if r.session_rate == rate and r.gpus == gpus]
        if not at:
            continue
        best = winner(at)
        where = rate_label(rate) + (f" on {gpus} GPU(s)" if len(counts) > 1 else "")
        if best is None:
            lines.append(
                f"At {where}, no policy meets {goal} with a stable steady state at any "
                "cache size in the sweep: "
                + "; ".join(f"{r.policy} {_why_not(r)}" for r in at)
                + ". "
                + _limits(at)
                + _steady_reason(at)
            )
            continue
        assert best.cache_gb is not None
        wins.setdefault(best.policy, []).append(where)
        text = (
            f"At {where}, {best.policy} meets {goal} with {best.cache_gb:g} GB of cache per "
            f"replica ({best.cache_gb_per_gpu:g} GB per GPU) on {best.gpus} GPU(s): "
            f"{_values(best)}"
        )
        if best.target is not None and best.headroom is not None:
            if len(targets) > 1:
                text += f"; {best.target.label} binds, {best.headroom:.0%} under its target."
            else:
                text += f", {best.headroom:.0%} under the target."
        else:
            text += "."
        rest = [r for r in at if r is not best]
        met = [r for r in rest if r.meets]
        if met:
            nxt = min(met, key=lambda r: (r.cache_gb, -(r.headroom or 0.0)))
            assert nxt.cache_gb is not None
            if nxt.cache_gb == best.cache_gb:
                text += (
                    f" {nxt.policy} also meets {them} at {nxt.cache_gb:g} GB but with "
                    f"{_values(nxt)}."
                )
            else:
                text += (
                    f" At this rate {nxt.policy} comes next: it needs {nxt.cache_gb:g} GB "
                    f"({nxt.cache_gb - best.cache_gb:g} GB more per replica)."
                )
        missing = [r for r in rest if not r.meets]
        if missing:
            text += (
                " "
                + "; ".join(
                    f"{r.policy}: none in the sweep meets {them} ({_why_not(r)}; "
                    f"limit: {r.resource or 'unclear'})"
                    for r in missing
                )
                + "."
            )
        lines.append(text)
    if len(wins) > 1:
        lines.append(
            "Where each policy wins: "
            + "; ".join(f"{p} at {', '.join(at)}" for p, at in wins.items())
            + "."
        )
    return lines
