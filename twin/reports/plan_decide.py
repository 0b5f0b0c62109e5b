"""``twin plan``'s answer: what each candidate's search found, the winner among those
meeting the SLOs (cost, GPUs, headroom, splits, router, label), why each other one lost,
and the plan's notes."""

from __future__ import annotations

import math
from collections.abc import Sequence

from twin.reports.layouts import AGG
from twin.reports.plan_result import (
    _CENTS,
    COSTLIER,
    INFEASIBLE,
    MEETS,
    UNJUDGED,
    WINNER,
    Candidate,
    CandidateResult,
    Trial,
)
from twin.reports.plan_routers import router_order
from twin.reports.plan_search import MAX_SEARCH_REPLICAS, ReplicaSearch
from twin.slo import Slo
from twin.steady_state import STABLE


def _rank(c: CandidateResult, slos: Sequence[Slo]) -> tuple[float, int, float, int, int, str]:
    """Winner order: cost, then GPUs, then the worst target's share of its threshold
    (more headroom first), then fewer parallel splits (expert parallelism priced at the
    same tp often ties its plain layout exactly: the simpler deployment wins), then the
    router's place in the registry (on one replica every router ties exactly:
    round-robin, which reads nothing of the replicas, wins), then the label (a fixed
    order)."""
    t = c.trial(c.replicas)
    shares = [
        math.inf if v is None else v / s.threshold_ms
        for s in slos
        for v in [t.worst(s.text) if t else None]
    ]
    cost = c.usd_per_hour if c.usd_per_hour is not None else math.inf
    worst = max(shares, default=0.0)
    cand = c.candidate
    return (round(cost, 9), c.gpus or 0, worst, cand.splits, router_order(cand.router), cand.label)


def decide(results: list[CandidateResult], slos: Sequence[Slo]) -> list[str]:
    """Pick the winner among the candidates meeting the SLOs, say why each other one lost;
    return the plan's notes (searches that fell back to a linear scan)."""
    ranked = sorted((r for r in results if r.outcome == MEETS), key=lambda r: _rank(r, slos))
    if ranked:
        ranked[0].outcome = WINNER
        for r in ranked[1:]:
            r.reason = _lost(r, ranked[0], slos)
    notes = [
        f"{r.candidate.label}: the P95s were not monotone in the replica count "
        f"({r.fallback}); its search fell back to a linear scan"
        for r in results
        if r.fallback
    ]
    for r in results:
        for t in sorted(r.trials, key=lambda t: t.replicas):
            failed = [run for run in t.by_seed if not run.meets]
            if failed:
                why = "; ".join(
                    f"seed {run.seed}: "
                    + ", ".join(
                        [
                            f"{slo} {_ms_text(v)}"
                            for slo in slos
                            if (v := run.values_ms.get(slo.text)) is not None
                            and v > slo.threshold_ms
                        ]
                        + [f"steady state {run.verdict}"] * (run.verdict != STABLE)
                    )
                    for run in failed
                )
                notes.append(
                    f"{r.candidate.label}: {t.replicas} replica(s) met every SLO with seed 0 "
                    f"but not under every seed ({why}); counted as failing, its search went on"
                )
    unjudged = [r for r in results if r.outcome == UNJUDGED]
    if unjudged:
        notes.append(
            f"{len(unjudged)} candidate(s) met every target but their runs were too short to "
            "judge a steady state (a run that is not stable meets no SLO): run longer "
            "(--duration)"
        )
    return notes


def settle(r: CandidateResult, s: ReplicaSearch, best: float) -> None:
    """A candidate whose search is done: what it found."""
    if r.outcome:  # settled already (a point that cannot run)
        return
    fewest = s.fewest
    if fewest is not None and s.pinned:
        r.outcome, r.replicas = MEETS, fewest
        return
    if fewest is not None:
        below = [n for n, ok in s.tried.items() if not ok and n < fewest]
        low = (max(below) if below else s.lo - 1) + 1
        r.outcome = COSTLIER
        r.reason = (
            f"meets every SLO on {fewest} replica(s) (${r.cost(fewest):,.2f}/h); its fewest "
            f"lies in {low}-{fewest}, and {s.hi + 1} or more cost more than the best found "
            f"(${best:,.2f}/h)"
        )
        return
    tried = max(s.tried)
    if s.hi < r.limit and tried >= s.hi:
        r.outcome = COSTLIER
        r.reason = (
            f"fails on {tried} replica(s); {tried + 1} would cost ${r.cost(tried + 1):,.2f}/h, "
            f"more than the best found (${best:,.2f}/h)"
        )
        return
    t = r.trial(tried)
    r.outcome = INFEASIBLE
    cap = (
        "the most --budget-gpus allows"
        if r.limit < MAX_SEARCH_REPLICAS
        else f"the search's cap of {MAX_SEARCH_REPLICAS}"
    )
    r.reason = f"fails the SLOs even on {tried} replica(s), {cap}" + (
        f" ({_values(t)})" if t else ""
    )


def _ms_text(v: float | None) -> str:
    return "-" if v is None else f"{v:,.3g} ms"


def _values(t: Trial) -> str:
    shown = ", ".join(f"{k}: {_ms_text(v)}" for k, v in t.values_ms.items())
    return f"{shown}; steady state {t.verdict}"


def _gpus_each(c: Candidate) -> str:
    """How a replica's GPUs are counted: ``tp 2``, ``tp 2 x pp 2``, or ``1P2D x tp 2``."""
    each = f"tp {c.tp}" + (f" x pp {c.pp}" if c.pp > 1 else "")
    return each if c.layout == AGG else f"{c.layout} x {each}"


def _lost(r: CandidateResult, win: CandidateResult, slos: Sequence[Slo]) -> str:
    """Why a candidate meeting the SLOs is not the winner."""
    mine, theirs = r.usd_per_hour or math.inf, win.usd_per_hour or math.inf
    if mine > theirs + _CENTS:
        return (
            f"needs {r.replicas} replica(s) x {_gpus_each(r.candidate)} = {r.gpus} GPU(s) at "
            f"${mine:,.2f}/h, ${mine - theirs:,.2f}/h more than the winner"
        )
    if (r.gpus or 0) > (win.gpus or 0):
        return f"the same ${mine:,.2f}/h on more GPUs ({r.gpus} against {win.gpus})"
    same_headroom = _rank(r, slos)[2] == _rank(win, slos)[2]
    if same_headroom and r.candidate.splits > win.candidate.splits:
        return (
            f"the same ${mine:,.2f}/h on {r.gpus} GPU(s) with the same headroom, with more "
            "parallel splits (expert or attention data parallelism) to configure"
        )
    if same_headroom and router_order(r.candidate.router) > router_order(win.candidate.router):
        return (
            f"the same ${mine:,.2f}/h on {r.gpus} GPU(s) with the same headroom under the "
            f"{r.candidate.router} router; the tie goes to {win.candidate.router}, earlier "
            "in the router registry (round-robin first: it reads nothing of the replicas)"
        )
    return f"the same ${mine:,.2f}/h on {r.gpus} GPU(s), with less headroom under the SLOs"
