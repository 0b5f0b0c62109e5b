"""What ``twin plan`` found, as types: a candidate, its trials and outcome, the load, the
Pareto frontier and the whole result (``PlanResult.to_dict`` is ``plan.json``). The
search that fills them is :mod:`twin.reports.plan`; the renderer,
:mod:`twin.reports.plan_render`.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from twin import __version__
from twin.engine.modes import get_mode
from twin.parallel import Layout
from twin.reports.analysis import seed_ci_half_width
from twin.reports.layouts import AGG, ServingLayout, parse_layout
from twin.reports.parallel_axes import layout_flags
from twin.reports.plan_routers import DEFAULT_ROUTER, router_flags
from twin.reports.plan_search import DEFAULT_SEARCH, MAX_SEARCH_REPLICAS
from twin.reports.prices import PriceTable
from twin.reports.sweep import AUTO_GB, SweepSpec
from twin.slo import Slo

PLAN_SCHEMA = "twin.plan"
# 2: screening runs (counts, trials' "screened"); 3: a candidate's serving layout;
# 4: the seeds (the plan's "seeds"; a confirmed trial's "seeds", "values_ms_by_seed",
# "failed_seeds" and "interval_ms"); 5: a candidate's expert parallelism ("ep") and
# attention data parallelism ("dp_attention"); 6: the router as an axis (every candidate,
# the winner and frontier points carry their "router"; the plan's "routers" replaces its
# one "router"); 7: pipeline parallelism (every candidate, the winner and frontier points
# carry "pp"; their GPUs count tp x pp), the load's "rate" (requests/s), and the frontier
# of cost against throughput per GPU ("frontier_throughput"); 8: the prefix-cache policy of
# a dedicated cache as an axis (every candidate, the winner and frontier points carry
# "cache_policy": null where the engine mode's own; the plan's "cache_policies")
PLAN_SCHEMA_VERSION = 8
PLAN_FILE = "plan.json"
# Dollars closer than this are one price (sums of float prices).
_CENTS = 1e-9

# What became of a candidate.
WINNER = "winner"  # the cheapest deployment meeting every SLO
MEETS = "meets"  # meets them, on its fewest replicas; costs more than the winner
COSTLIER = "costlier"  # searched until every count left cost more than the best found
PRUNED = "pruned"  # not simulated: its lower bound costs more than the best found
INFEASIBLE = "infeasible"  # cannot meet them: does not fit, no kernels, or fails at the cap
# Two replica counts in a row met every target, but neither run was long enough to judge its
# steady state (reports.verdicts.binding_resource: run length): run longer.
UNJUDGED = "unjudged"
OUTCOMES = (WINNER, MEETS, COSTLIER, UNJUDGED, PRUNED, INFEASIBLE)


@dataclass(frozen=True)
class Candidate:
    """One configuration to size: GPU type, engine mode, GPUs per replica, cache setting,
    serving layout (its replica count counts copies of it: :mod:`reports.layouts`), and
    how a replica's ``tp`` GPUs are split: ``ep`` expert-parallel ranks and
    ``dp_attention`` attention data-parallel ranks among them
    (:mod:`reports.parallel_axes`; both divide ``tp`` and add no GPU), ``pp`` pipeline
    stages of ``tp`` GPUs each (a replica holds ``tp x pp`` GPUs), and the ``router``
    spreading requests over its replicas (:mod:`reports.plan_routers`; adds no GPU)."""

    gpu: str
    engine: str
    tp: int
    cache: str  # "auto" (the engine's shared KV pool) or GB of a dedicated cache, as text
    layout: str = AGG  # "agg" or "xPyD" (ServingLayout.name)
    ep: int = 1
    dp_attention: int = 1
    router: str = DEFAULT_ROUTER
    pp: int = 1
    # The prefix-cache policy of a dedicated cache (``twin.policies.POLICIES``); empty: the
    # engine mode's own (the shared pool always runs the mode's).
    cache_policy: str = ""

    @property
    def label(self) -> str:
        own = f" {self.cache_policy}" if self.cache_policy else ""
        cache = "shared pool" if self.cache == "auto" else f"{self.cache} GB{own} cache"
        where = "" if self.layout == AGG else f" {self.layout}"
        split = (
            f" ep{self.ep}" * (self.ep > 1)
            + f" attn-dp{self.dp_attention}" * (self.dp_attention > 1)
            + f" pp{self.pp}" * (self.pp > 1)
        )
        via = "" if self.router == DEFAULT_ROUTER else f" {self.router} router"
        return f"{self.gpu} {self.engine} tp{self.tp}{split} {cache}{where}{via}"

    @property
    def splits(self) -> int:
        """How many parallel splits beyond tensor parallelism it configures (expert,
        attention data and pipeline parallelism): a tie on cost, GPUs and headroom goes to
        fewer."""
        return (self.ep > 1) + (self.dp_attention > 1) + (self.pp > 1)

    @property
    def parallel(self) -> Layout:
        """The replica's parallel layout (``twin.parallel.Layout``)."""
        return Layout(self.tp, self.ep, self.dp_attention, self.pp)

    @property
    def serving(self) -> ServingLayout:
        return parse_layout(self.layout)

    @property
    def gpus_per_replica(self) -> int:
        """GPUs of one copy: tp x pp, times the workers of a disaggregated layout."""
        return self.tp * self.pp * self.serving.workers

    @property
    def cache_gb(self) -> float:
        """The sweep point's cache (``AUTO_GB`` for the shared pool)."""
        return AUTO_GB if self.cache == "auto" else float(self.cache)

    @property
    def policy(self) -> str:
        """The sweep point's policy axis: the engine mode itself in its shared pool (as
        ``twin simulate --engine E``), else the candidate's policy in a dedicated cache
        (the mode's own unless ``cache_policy`` names another)."""
        if self.cache == "auto":
            return self.engine
        return self.cache_policy or get_mode(self.engine).policy

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "engine": self.engine,
            "tp": self.tp,
            "cache": self.cache,
            "layout": self.layout,
            "ep": self.ep,
            "dp_attention": self.dp_attention,
            "router": self.router,
            "pp": self.pp,
            "cache_policy": self.cache_policy or None,
        }


@dataclass(frozen=True)
class SeedRun:
    """A confirmation run: one more seed of a replica count that met every SLO with seed 0."""

    seed: int
    values_ms: dict[str, float | None]  # by SLO text
    meets: bool  # every target met at a stable steady state
    verdict: str  # its steady state


@dataclass(frozen=True)
class Trial:
    """One simulated replica count of a candidate."""

    replicas: int
    meets: bool
    verdict: str
    values_ms: dict[str, float | None]  # by SLO text
    ttft_p95_ms: float | None
    key: str  # the row's key in results.parquet
    verdict_reason: str | None = None  # the engine's reason for its steady-state verdict
    run_length: bool = False  # every target met, too short to tell (run longer)
    screened: bool = False  # ruled out by its short screening run (no full run)
    # The confirmation runs of a count that met every SLO with seed 0 (the fields above),
    # one per other seed; empty: seed 0 only. ``meets`` is then whether it met them under
    # every seed.
    by_seed: tuple[SeedRun, ...] = ()
    # Output tokens per second the deployment served (seed 0's run; results.parquet's
    # ``output_tokens_per_s``): the throughput of the frontier against throughput per GPU.
    output_tokens_per_s: float | None = None

    @property
    def seeds(self) -> tuple[int, ...]:
        """The seeds this count ran with (seed 0 first)."""
        return (0, *(run.seed for run in self.by_seed))

    @property
    def failed_seeds(self) -> tuple[int, ...]:
        """The confirmation seeds under which this count missed an SLO."""
        return tuple(run.seed for run in self.by_seed if not run.meets)

    def seed_values(self, slo: str) -> list[float | None]:
        """``slo``'s value under each of :attr:`seeds`, in that order."""
        return [self.values_ms.get(slo), *(run.values_ms.get(slo) for run in self.by_seed)]

    def interval(self, slo: str) -> tuple[float, float] | None:
        """(min, max) of ``slo``'s value across the seeds run (None: nothing measured)."""
        got = [v for v in self.seed_values(slo) if v is not None]
        return (min(got), max(got)) if got else None

    def worst(self, slo: str) -> float | None:
        """``slo``'s value under the worst seed run (seed 0's when it ran alone)."""
        span = self.interval(slo)
        return None if span is None else span[1]

    def to_dict(self) -> dict[str, Any]:
        out = {
            "replicas": self.replicas,
            "meets": self.meets,
            "screened": self.screened,
            "verdict": self.verdict,
            "verdict_reason": self.verdict_reason,
            "values_ms": self.values_ms,
            "ttft_p95_ms": self.ttft_p95_ms,
            "output_tokens_per_s": self.output_tokens_per_s,
            "key": self.key,
        }
        if self.by_seed:  # absent: seed 0 alone (a probe, or a plan of one seed)
            out["seeds"] = list(self.seeds)
            out["failed_seeds"] = list(self.failed_seeds)
            out["verdicts_by_seed"] = [self.verdict, *(run.verdict for run in self.by_seed)]
            out["values_ms_by_seed"] = {s: self.seed_values(s) for s in self.values_ms}
            out["interval_ms"] = {s: seed_interval(self.seed_values(s)) for s in self.values_ms}
        return out


def seed_interval(values: Sequence[float | None]) -> dict[str, float | None]:
    """A value's spread across seeds: ``min`` and ``max`` (the interval the plan shows:
    a count meets only when it meets under every seed, so the max is what decided),
    ``mean`` and, from three seeds, ``t95_half_width``, the 95% t-interval of the mean
    (:func:`reports.analysis.seed_ci_half_width`, as ``report capacity`` gives; with two
    seeds its t factor is 12.7 and it says nothing)."""
    got = [float(v) for v in values if v is not None]
    if not got:
        return {"min": None, "max": None, "mean": None, "t95_half_width": None}
    return {
        "min": min(got),
        "max": max(got),
        "mean": sum(got) / len(got),
        "t95_half_width": seed_ci_half_width(got) if len(got) >= 3 else None,
    }


@dataclass
class CandidateResult:
    """What the plan found for one candidate."""

    candidate: Candidate
    usd_per_gpu_hour: float
    profile: str = ""  # the step prices' provenance
    lower_bound: int | None = None  # fewest replicas the analytic bound allows
    bound: str = ""  # how the bound was reached
    limit: int = MAX_SEARCH_REPLICAS  # most replicas searched (budget or MAX_SEARCH_REPLICAS)
    # The sweep spec its full runs used (None: not simulated); rerun a point with it.
    spec: SweepSpec | None = field(default=None, repr=False, compare=False)
    outcome: str = ""
    reason: str = ""  # why it lost, was pruned or cannot meet the SLOs
    replicas: int | None = None  # fewest replicas found to meet every SLO
    trials: list[Trial] = field(default_factory=list)
    search: str = DEFAULT_SEARCH
    fallback: str | None = None  # why the search fell back to a linear scan
    # Replica counts confirmed to meet every SLO under every seed of the plan.
    confirmed: set[int] = field(default_factory=set)
    # Why the plan skips it rather than list it (a pipelined layout the engine does not
    # model, ``plan_bound.Analysis.skipped``); None: it is listed.
    skipped: str | None = None

    @property
    def simulated(self) -> bool:
        return bool(self.trials)

    def cost(self, replicas: int) -> float:
        """US dollars per hour of ``replicas`` replicas."""
        return replicas * self.candidate.gpus_per_replica * self.usd_per_gpu_hour

    @property
    def gpus(self) -> int | None:
        return None if self.replicas is None else self.replicas * self.candidate.gpus_per_replica

    @property
    def usd_per_hour(self) -> float | None:
        return None if self.replicas is None else self.cost(self.replicas)

    def trial(self, replicas: int | None) -> Trial | None:
        return next((t for t in self.trials if t.replicas == replicas), None)

    def to_dict(self) -> dict[str, Any]:
        best = self.trial(self.replicas)
        return {
            **self.candidate.to_dict(),
            "label": self.candidate.label,
            "outcome": self.outcome,
            "reason": self.reason,
            "replicas": self.replicas,
            "gpus": self.gpus,
            "usd_per_gpu_hour": self.usd_per_gpu_hour,
            "usd_per_hour": self.usd_per_hour,
            "values_ms": best.values_ms if best else None,
            "verdict": best.verdict if best else None,
            "ttft_p95_ms": best.ttft_p95_ms if best else None,
            "profile": self.profile,
            "lower_bound_replicas": self.lower_bound,
            "lower_bound_how": self.bound,
            "replica_limit": self.limit,
            "simulated": self.simulated,
            "search": self.search,
            "fallback": self.fallback,
            "trials": [t.to_dict() for t in sorted(self.trials, key=lambda t: t.replicas)],
        }


@dataclass(frozen=True)
class Load:
    """The traffic every candidate is sized for."""

    session_rate: float | None
    concurrency: int | None
    duration_s: float | None
    warmup_s: float | None = None  # None: the engine's (a fifth of the duration, else 0)
    # Open-loop requests per second: the workload's arrival times scaled to this rate
    # (``twin simulate --request-rate``, ``EngineConfig.request_rate``: one implementation).
    request_rate: float | None = None

    def label(self) -> str:
        if self.concurrency is not None:
            text = f"{self.concurrency} closed-loop clients"
        elif self.session_rate is not None:
            text = f"{self.session_rate:g} sessions/s"
        elif self.request_rate is not None:
            text = f"{self.request_rate:g} requests/s (the workload's arrival times scaled)"
        else:
            text = "the workload's own arrival times"
        text += f" for {self.duration_s:g} s" if self.duration_s is not None else ""
        return text + (f" (first {self.warmup_s:g} s warm-up)" if self.warmup_s is not None else "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_rate": self.session_rate,
            "concurrency": self.concurrency,
            "duration_s": self.duration_s,
            "warmup_s": self.warmup_s,
            "request_rate": self.request_rate,
        }


@dataclass(frozen=True)
class FrontierPoint:
    """A deployment meeting the SLOs that no other beats on both cost and P95 TTFT
    (:meth:`PlanResult.frontier`), or on both cost and throughput per GPU
    (:meth:`PlanResult.frontier_throughput`)."""

    candidate: Candidate
    replicas: int
    usd_per_hour: float
    ttft_p95_ms: float
    output_tokens_per_s: float | None = None

    @property
    def gpus(self) -> int:
        return self.replicas * self.candidate.gpus_per_replica

    @property
    def tokens_per_s_per_gpu(self) -> float | None:
        """Output tokens per second per GPU (None where the run did not say)."""
        tps = self.output_tokens_per_s
        return None if tps is None else tps / self.gpus

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.candidate.to_dict(),
            "label": self.candidate.label,
            "replicas": self.replicas,
            "gpus": self.gpus,
            "usd_per_hour": self.usd_per_hour,
            "ttft_p95_ms": self.ttft_p95_ms,
            "output_tokens_per_s": self.output_tokens_per_s,
            "output_tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
        }


@dataclass
class PlanResult:
    """Everything ``twin plan`` found (``to_dict`` is plan.json and ``--json``)."""

    command: str
    workload: str
    workload_sha256: str
    model: str
    model_set: tuple[str, ...]
    slos: tuple[Slo, ...]
    load: Load
    routers: tuple[str, ...]  # the routers searched (each candidate carries one)
    prices: PriceTable
    budget_gpus: int | None
    search: str
    candidates: list[CandidateResult]
    points_run: int  # points simulated by this call
    points_found: int  # points found in OUT/results.parquet
    workload_stats: dict[str, Any]
    screen_points_run: int = 0  # short screening runs simulated by this call
    screen_points_found: int = 0  # short screening runs found in OUT/results.parquet
    screened_out: int = 0  # replica counts a screening run ruled out (no full run)
    notes: list[str] = field(default_factory=list)
    # The seeds a count must meet the SLOs under (seed 0 runs every probe; the others
    # confirm the counts that decide the answer); confirmation runs simulated / found.
    seeds: tuple[int, ...] = (0,)
    confirm_points_run: int = 0
    confirm_points_found: int = 0
    nodes: dict[str, int] = field(default_factory=dict)  # points each ray node ran
    # The prefix-cache policies searched for the dedicated caches (empty: each mode's own).
    cache_policies: tuple[str, ...] = ()

    @property
    def winner(self) -> CandidateResult | None:
        return next((c for c in self.candidates if c.outcome == WINNER), None)

    @property
    def counts(self) -> dict[str, int]:
        simulated = sum(c.simulated for c in self.candidates)
        by = {o: sum(c.outcome == o for c in self.candidates) for o in OUTCOMES}
        return {
            "candidates": len(self.candidates),
            "simulated": simulated,
            "pruned": len(self.candidates) - simulated,
            "pruned_by_cost": by[PRUNED],
            "pruned_cannot_meet": sum(
                c.outcome == INFEASIBLE and not c.simulated for c in self.candidates
            ),
            **{f"outcome_{o}": n for o, n in by.items()},
            "points_run": self.points_run,
            "points_found": self.points_found,
            "screen_points_run": self.screen_points_run,
            "screen_points_found": self.screen_points_found,
            "screened_out": self.screened_out,
            **(
                {
                    "confirm_points_run": self.confirm_points_run,
                    "confirm_points_found": self.confirm_points_found,
                }
                if len(self.seeds) > 1
                else {}
            ),
        }

    def _met(self) -> list[FrontierPoint]:
        """Every simulated deployment meeting the SLOs, as frontier points."""
        return [
            FrontierPoint(
                c.candidate, t.replicas, c.cost(t.replicas), t.ttft_p95_ms, t.output_tokens_per_s
            )
            for c in self.candidates
            for t in c.trials
            if t.meets and t.ttft_p95_ms is not None
        ]

    def frontier(self) -> list[FrontierPoint]:
        """The Pareto frontier of cost against P95 TTFT over every simulated deployment
        meeting the SLOs (cheapest first; each has a lower P95 TTFT than every cheaper one)."""
        met = self._met()
        met.sort(key=lambda f: (f.usd_per_hour, f.ttft_p95_ms, f.gpus, f.candidate.label))
        out: list[FrontierPoint] = []
        for f in met:
            if not out or f.ttft_p95_ms < out[-1].ttft_p95_ms:
                if out and abs(f.usd_per_hour - out[-1].usd_per_hour) < _CENTS:
                    continue  # the same cost with a higher TTFT came first: dominated
                out.append(f)
        return out

    def frontier_throughput(self) -> list[FrontierPoint]:
        """The Pareto frontier of cost against output tokens per second per GPU over every
        simulated deployment meeting the SLOs (cheapest first; each serves more tokens a
        GPU than every cheaper one). At one load every stable deployment serves about the
        same tokens, so this frontier mostly orders by GPUs; it separates deployments
        whose GPUs differ in price or whose runs served different amounts."""
        met = [f for f in self._met() if f.tokens_per_s_per_gpu is not None]
        met.sort(
            key=lambda f: (f.usd_per_hour, -(f.tokens_per_s_per_gpu or 0.0), f.candidate.label)
        )
        out: list[FrontierPoint] = []
        for f in met:
            per = f.tokens_per_s_per_gpu or 0.0
            if not out or per > (out[-1].tokens_per_s_per_gpu or 0.0):
                if out and abs(f.usd_per_hour - out[-1].usd_per_hour) < _CENTS:
                    continue  # the same cost serving fewer tokens a GPU came first
                out.append(f)
        return out

    def simulate_command(self, c: CandidateResult, out: str = "winner") -> str:
        """The ``twin simulate`` command reproducing ``c`` on its fewest replicas."""
        return self.command_for(c.candidate, c.replicas or 1, out)

    def command_for(self, cand: Candidate, replicas: int, out: str = "winner") -> str:
        """The ``twin simulate`` command running ``cand`` on ``replicas`` copies (seed 0)."""
        args = ["twin", "simulate", self.workload, "-m", self.model]
        for item in self.model_set:
            args += ["--model-set", item]
        args += ["--gpu", cand.gpu, "--engine", cand.engine, "--tp", str(cand.tp)]
        args += layout_flags(cand.parallel)
        pools = cand.serving.pools(replicas)
        if pools:
            args += ["--prefill-workers", str(pools["prefill_workers"])]
            args += ["--decode-workers", str(pools["decode_workers"])]
        else:
            args += ["--replicas", str(replicas)]
        args += ["--cache-gb", cand.cache]
        if cand.cache != "auto":
            args += ["--policy", cand.policy]
        args += router_flags(cand.router)
        if self.load.session_rate is not None:
            args += ["--session-rate", f"{self.load.session_rate:g}"]
        if self.load.concurrency is not None:
            args += ["--concurrency", str(self.load.concurrency)]
        if self.load.request_rate is not None:
            args += ["--request-rate", f"{self.load.request_rate:g}"]
        if self.load.duration_s is not None:
            args += ["--duration", f"{self.load.duration_s:g}"]
        if self.load.warmup_s is not None:
            args += ["--warmup-s", f"{self.load.warmup_s:g}"]
        args += ["--seed", "0"]
        for slo in self.slos:
            args += ["--slo", slo.text]
        args += ["--out", out]
        return shlex.join(args)

    def _point(self, f: FrontierPoint, out: str) -> dict[str, Any]:
        return {**f.to_dict(), "simulate_command": self.command_for(f.candidate, f.replicas, out)}

    def to_dict(self) -> dict[str, Any]:
        win = self.winner
        return {
            "schema": PLAN_SCHEMA,
            "schema_version": PLAN_SCHEMA_VERSION,
            "twin_version": __version__,
            "command": self.command,
            "workload": {
                "path": self.workload,
                "sha256": self.workload_sha256,
                **self.workload_stats,
            },
            "model": self.model,
            "model_set": list(self.model_set),
            "slos": [s.text for s in self.slos],
            "load": self.load.to_dict(),
            "routers": list(self.routers),
            "cache_policies": list(self.cache_policies),
            "prices": self.prices.to_dict(),
            "budget_gpus": self.budget_gpus,
            "search": self.search,
            "seeds": list(self.seeds),
            "counts": self.counts,
            "winner": None
            if win is None
            else {**win.to_dict(), "simulate_command": self.simulate_command(win)},
            "candidates": [c.to_dict() for c in self.candidates],
            "frontier": [self._point(f, "frontier") for f in self.frontier()],
            "frontier_throughput": [self._point(f, "frontier") for f in self.frontier_throughput()],
            "notes": self.notes,
            **({"ray_nodes": dict(sorted(self.nodes.items()))} if self.nodes else {}),
        }
