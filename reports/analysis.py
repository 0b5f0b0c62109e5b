"""Seed aggregation, the SLO parser and the capacity recommendation.

Works on plain lists of row dicts (no pandas: it is not a dependency), so the
same functions serve results read from parquet and tables written by hand in
tests.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from twin.errors import TwinError
from twin.slo import Slo
from twin.slo import parse_slo as parse_any_slo

# Metrics averaged across seeds; each gets a 95% interval when seeds >= 2.
METRICS = (
    "ttft_p5_ms",
    "ttft_p50_ms",
    "ttft_p95_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "tpot_p95_ms",
    "token_hit_rate",
    "request_hit_rate",
    "flops_saved_frac",
    "kv_bytes_mean",
    "ssm_bytes_mean",
    "throughput_rps",
    "output_tokens_per_s",
    "utilisation",
)


def parse_slo(text: str) -> Slo:
    """:func:`twin.slo.parse_slo`, refused unless the sweep records that percentile."""
    slo = parse_any_slo(text)
    if slo.column not in METRICS:
        have = sorted(c.removesuffix("_ms") for c in METRICS if c.startswith(slo.metric))
        raise TwinError(
            f"--slo {text!r}: the sweep records "
            + (", ".join(have) if have else f"no {slo.metric} percentile")
            + " only"
        )
    return slo


def _interval(values: list[float]) -> float | None:
    """Half-width of the 95% t-interval of the mean (None below two seeds)."""
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    from scipy import stats  # late: scipy.stats costs every command ~0.4 s to import

    return float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)


def aggregate(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (policy, session_rate, cache_gb, replicas, tp): ``M`` (mean) and
    ``M_ci`` per metric, with ``gpus`` (replicas x tp). Rows without ``replicas`` or
    ``tp`` (tables written by hand) keep them None and count as one each in ``gpus``."""
    Key = tuple[str, float | None, float, int | None, int | None]
    groups: dict[Key, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        n, per = r.get("replicas"), r.get("tp")
        groups[(r["policy"], r["session_rate"], r["cache_gb"], n, per)].append(r)
    out = []
    for (policy, rate, cache, replicas, tp), members in groups.items():
        agg: dict[str, Any] = {
            "policy": policy,
            "session_rate": rate,
            "cache_gb": cache,
            "replicas": replicas,
            "tp": tp,
            "gpus": gpus({"replicas": replicas, "tp": tp}),
            "cache_gb_per_gpu": cache / (tp or 1),
            "seeds": len(members),
        }
        for m in METRICS:
            # A point with no measured requests has null latencies: leave it
            # out of the mean rather than pretend it was zero.
            vals = [float(r[m]) for r in members if r.get(m) is not None]
            agg[m] = sum(vals) / len(vals) if vals else None
            agg[f"{m}_ci"] = _interval(vals)
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
    """A result row's GPU count: replicas x tp (one each where the row does not say)."""
    return int(row.get("replicas") or 1) * int(row.get("tp") or 1)


def gpu_counts(rows: list[dict[str, Any]]) -> list[int]:
    """The GPU counts in the sweep's rows (or aggregate), smallest first."""
    return sorted({gpus(r) for r in rows})


def by_gpu_count(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` (per-seed or aggregated) with each policy named with its GPU count when
    the count varies.

    The figures and the load analysis group by policy; naming ``marconi, 2 GPUs``
    apart from ``marconi, 4 GPUs`` groups them by GPU count as well, with no
    second code path. A sweep on one GPU count is returned unchanged.
    """
    if len(gpu_counts(rows)) < 2:
        return rows
    return [{**r, "policy": f"{r['policy']}, {gpus(r)} GPU(s)"} for r in rows]


@dataclass(frozen=True)
class Recommendation:
    """The smallest cache meeting the SLO for one policy at one session rate."""

    policy: str
    session_rate: float | None
    cache_gb: float | None  # None: no cache size in the sweep meets the SLO
    value_ms: float | None  # the SLO metric's mean at that cache size
    gpus: int  # replicas x tp
    tp: int = 1  # GPUs per replica: the cache per GPU is cache_gb / tp

    @property
    def cache_gb_per_gpu(self) -> float | None:
        return None if self.cache_gb is None else self.cache_gb / self.tp

    @property
    def meets(self) -> bool:
        return self.cache_gb is not None


def recommend(agg: list[dict[str, Any]], slo: Slo, replicas: int, tp: int) -> list[Recommendation]:
    """For each (policy, rate, GPU count): the smallest cache whose mean SLO metric meets
    the target. ``replicas`` and ``tp`` stand in for rows that do not carry their own."""
    by: dict[tuple[str, float | None, int, int], list[dict[str, Any]]] = defaultdict(list)
    for a in agg:
        n, per = int(a.get("replicas") or replicas), int(a.get("tp") or tp)
        by[(a["policy"], a["session_rate"], n, per)].append(a)
    recs = []
    for (policy, rate, n, per), cells in by.items():
        ok = [c for c in cells if c[slo.column] is not None and c[slo.column] <= slo.threshold_ms]
        best = min(ok, key=lambda c: c["cache_gb"]) if ok else None
        recs.append(
            Recommendation(
                policy,
                rate,
                best["cache_gb"] if best else None,
                best[slo.column] if best else None,
                n * per,
                per,
            )
        )
    return recs


def winner(recs: list[Recommendation]) -> Recommendation | None:
    """The smallest cache meeting the SLO; ties go to the lower SLO metric."""
    ok = [r for r in recs if r.meets]
    return min(ok, key=lambda r: (r.cache_gb, r.value_ms)) if ok else None


def rate_label(rate: float | None) -> str:
    return "workload arrivals" if rate is None else f"{rate:g} sessions/s"


def verdict(recs: list[Recommendation], slo: Slo) -> list[str]:
    """Plain sentences: per session rate, the winner and its margin over the next policy;
    then, when different policies win at different rates, where each one wins."""
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
                f"At {where}, no policy meets {slo} at any cache size in the sweep: "
                "try larger caches, more replicas or a lower rate."
            )
            continue
        assert best.cache_gb is not None and best.value_ms is not None
        wins.setdefault(best.policy, []).append(where)
        headroom = 1 - best.value_ms / slo.threshold_ms
        text = (
            f"At {where}, {best.policy} meets {slo} with {best.cache_gb:g} GB of cache per "
            f"replica ({best.cache_gb_per_gpu:g} GB per GPU) on {best.gpus} GPU(s): "
            f"{best.value_ms:,.1f} ms, "
            f"{headroom:.0%} under the target."
        )
        rest = [r for r in at if r is not best]
        met = [r for r in rest if r.meets]
        if met:
            nxt = min(met, key=lambda r: (r.cache_gb, r.value_ms))
            assert nxt.cache_gb is not None
            if nxt.cache_gb == best.cache_gb:
                text += (
                    f" {nxt.policy} also meets it at {nxt.cache_gb:g} GB but at "
                    f"{nxt.value_ms:,.1f} ms."
                )
            else:
                text += (
                    f" At this rate {nxt.policy} comes next: it needs {nxt.cache_gb:g} GB "
                    f"({nxt.cache_gb - best.cache_gb:g} GB more per replica)."
                )
        missing = [r.policy for r in rest if not r.meets]
        if missing:
            text += f" {', '.join(missing)}: none in the sweep meets it."
        lines.append(text)
    if len(wins) > 1:
        lines.append(
            "Where each policy wins: "
            + "; ".join(f"{p} at {', '.join(at)}" for p, at in wins.items())
            + "."
        )
    return lines
