"""``twin plan``'s runs: the candidates' replica searches (:mod:`reports.plan_search`),
cheapest lower bound first, at most ``jobs`` at once, one batch of points per step
through :func:`reports.sweep.run_pairs`, screened (:mod:`reports.plan_screen`), the
deciding counts confirmed under the other seeds, pruned against the best found."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from twin.reports.plan_decide import settle
from twin.reports.plan_result import (
    _CENTS,
    INFEASIBLE,
    PRUNED,
    UNJUDGED,
    CandidateResult,
    Load,
    SeedRun,
    Trial,
)
from twin.reports.plan_routers import DEFAULT_ROUTERS, with_router
from twin.reports.plan_screen import screen_spec, screened_out
from twin.reports.plan_search import FALLBACK, ReplicaSearch, get_search, non_monotone
from twin.reports.sweep import INFEASIBLE_COLUMN, Point, SweepSpec, run_pairs
from twin.reports.verdicts import RUN_LENGTH, binding_resource, meets
from twin.slo import Slo

# What a search asks for in one step (Searcher._next).
PROBE, CONFIRM, HOLD = "probe", "confirm", "hold"


@dataclass
class PlanProgress:
    """Where a plan stands, for a progress bar."""

    total: int
    evaluated: int = 0  # candidates whose search finished (simulated)
    pruned: int = 0  # candidates settled without simulation
    points: int = 0  # points simulated or found so far

    @property
    def settled(self) -> int:
        return self.evaluated + self.pruned


class Searcher:
    """Runs the candidates' searches: cheapest lower bound first, at most ``jobs`` at once,
    one batch of points per step, pruning against the best deployment found."""

    def __init__(
        self,
        slos: Sequence[Slo],
        load: Load,
        out: Path,
        jobs: int,
        progress: Callable[[PlanProgress], None] | None,
        screen: bool = False,
        seeds: Sequence[int] = (0,),
    ) -> None:
        self.slos, self.load, self.out, self.jobs = slos, load, out, jobs
        # Where the points run (reports.sweep.EXECUTORS): local processes, or ray tasks;
        # the points each ray node ran.
        self.executor: str = "local"
        self.ray_address: str | None = None
        self.nodes: dict[str, int] = {}
        self.progress = progress
        self.screen = screen
        self.screen_points_run = self.screen_points_found = self.screened_out = 0
        # The confirmation seeds (seed 0 runs every probe); none: seed 0 alone decides.
        self.extra = tuple(seeds[1:])
        self.confirm_points_run = self.confirm_points_found = 0
        # The cheapest count of an active candidate that met the SLOs with seed 0 and is
        # not yet confirmed: dearer probes wait for its confirmation (inf: none).
        self.provisional = math.inf
        self.state = PlanProgress(total=0)
        self.results: list[CandidateResult] = []
        self.specs: dict[int, SweepSpec] = {}
        self.searches: dict[int, ReplicaSearch] = {}
        self.best = math.inf  # $/hour of the cheapest deployment found to meet the SLOs
        self.points_run = self.points_found = 0
        # The router whose run a count where the router has no choice shares (_spec).
        self.shared_router = DEFAULT_ROUTERS[0]

    def tell(self) -> None:
        if self.progress is not None:
            self.progress(self.state)

    def add(
        self, res: CandidateResult, spec: SweepSpec | None, strategy: type[ReplicaSearch]
    ) -> None:
        self.results.append(res)
        if spec is None:
            self.state.pruned += 1
            self.tell()
            return
        self.specs[id(res)] = res.spec = spec
        self.searches[id(res)] = strategy(res.lower_bound or 1, res.limit)

    def _point(self, r: CandidateResult, n: int, seed: int = 0) -> Point:
        return Point(r.candidate.cache_gb, r.candidate.policy, self.load.session_rate, seed, n)

    def run(self) -> None:
        queue = sorted(
            (r for r in self.results if id(r) in self.searches),
            key=lambda r: (r.cost(r.lower_bound or 1), r.candidate.label),
        )
        active: list[CandidateResult] = []
        while queue or active:
            while len(active) < self.jobs and queue:
                nxt = queue.pop(0)
                if nxt.cost(nxt.lower_bound or 1) > self.best + _CENTS:
                    # The queue is in lower-bound cost order: every one left is pruned too.
                    for r in [nxt, *queue]:
                        self._prune(r)
                    queue = []
                    break
                active.append(nxt)
            asked: list[tuple[CandidateResult, int]] = []
            confirm: list[tuple[CandidateResult, int]] = []
            self.provisional = min(
                (r.cost(n) for r in active if (n := self._unconfirmed(r)) is not None),
                default=math.inf,
            )
            held: list[tuple[CandidateResult, int]] = []
            for r in list(active):
                ask = self._next(r)
                if ask is None:
                    active.remove(r)
                    continue
                n, kind = ask
                {PROBE: asked, CONFIRM: confirm, HOLD: held}[kind].append((r, n))
            if held and not (asked or confirm):
                # Cannot happen (the candidate holding the cheapest unconfirmed count asks
                # below it or confirms it), but never stall: run what waited.
                asked = held
            if asked or confirm:
                self._step(asked, confirm)

    def _prune(self, r: CandidateResult) -> None:
        r.outcome = PRUNED
        r.reason = (
            f"not simulated: its lower bound of {r.lower_bound} replica(s) costs "
            f"${r.cost(r.lower_bound or 1):,.2f}/h, more than the best found (${self.best:,.2f}/h)"
        )
        self.state.pruned += 1
        self.tell()

    def _unconfirmed(self, r: CandidateResult) -> int | None:
        """``r``'s fewest count meeting the SLOs with seed 0 that the other seeds have yet
        to confirm (None: none, or the plan has one seed)."""
        fewest = self.searches[id(r)].fewest
        return fewest if self.extra and fewest is not None and fewest not in r.confirmed else None

    def _next(self, r: CandidateResult) -> tuple[int, str] | None:
        """The candidate's next replica count, under the cost of the best found, and what
        to do with it: ``PROBE`` (seed 0), ``CONFIRM`` (the other seeds of a count that
        met the SLOs with seed 0) or ``HOLD`` (not this step); None (and the candidate
        settled) when its search is done."""
        s = self.searches[id(r)]
        if r.outcome:  # settled by a point that cannot run
            self.state.evaluated += 1
            self.tell()
            return None
        if math.isfinite(self.best):
            per_replica = r.candidate.gpus_per_replica * r.usd_per_gpu_hour
            s.cap(math.floor(self.best / per_replica + 1e-9))
        n = s.next()
        if n is not None:
            if r.cost(n) > self.provisional + _CENTS:
                # Dearer than a count another candidate has yet to confirm: wait for it
                # (a best, which caps and prunes, is only ever a confirmed count).
                return n, HOLD
            return n, PROBE
        if not s.tried:  # the best found fell below its lower bound's cost before it ran
            self._prune(r)
            return None
        fewest = self._unconfirmed(r)
        if fewest is not None and s.pinned and r.cost(fewest) <= self.best + _CENTS:
            # Its fewest could win (or tie): it must meet the SLOs under every seed.
            return fewest, CONFIRM
        settle(r, s, self.best)
        self.state.evaluated += 1
        self.tell()
        return None

    def _spec(self, r: CandidateResult, n: int) -> SweepSpec:
        """The sweep spec of ``n`` replicas of ``r``: its own, but where the router has no
        choice (one replica, or a disaggregated copy with one prefill worker: every
        request goes to the same place), the plan's first router's, so the candidates
        differing only in their router share that run (identical under every router:
        tests/test_plan_routers.py). With one router it is always the candidate's own."""
        spec = self.specs[id(r)]
        cand = r.candidate
        pools = cand.serving.pools(n)
        alone = pools["prefill_workers"] == 1 if pools else n == 1
        if not alone or cand.router == self.shared_router:
            return spec
        return replace(spec, settings=with_router(spec.settings, self.shared_router))

    def _run(self, batch: list[tuple[SweepSpec, Point]]) -> tuple[list[dict[str, Any]], int]:
        """Each pair's row (one run per distinct key: pairs sharing a run ask once) and how
        many were simulated (the others were found in results.parquet or shared)."""
        keys = [spec.key(point) for spec, point in batch]
        first: dict[str, int] = {}
        unique: list[tuple[SweepSpec, Point]] = []
        for key, pair in zip(keys, batch, strict=True):
            if key not in first:
                first[key] = len(unique)
                unique.append(pair)
        outcome = run_pairs(
            unique,
            self.out,
            jobs=self.jobs,
            executor=self.executor,
            ray_address=self.ray_address,
        )
        for node, n in outcome.nodes.items():
            self.nodes[node] = self.nodes.get(node, 0) + n
        return [outcome.rows[first[key]] for key in keys], outcome.computed

    def _step(
        self,
        asked: list[tuple[CandidateResult, int]],
        confirm: Sequence[tuple[CandidateResult, int]] = (),
    ) -> None:
        """Simulate one replica count per candidate in ``asked`` (in parallel; short
        screening runs first when screening) and the other seeds of each count in
        ``confirm`` (full runs, a batch of their own); record them."""
        if self.screen:
            batch = [(screen_spec(self._spec(r, n)), self._point(r, n)) for r, n in asked]
            rows, computed = self._run(batch)
            self.screen_points_run += computed
            self.screen_points_found += len(batch) - computed
            full = []
            for (r, n), row in zip(asked, rows, strict=True):
                if row.get(INFEASIBLE_COLUMN):  # cannot run short: cannot run in full either
                    self._record(r, n, row, screened=False)
                elif screened_out(row, self.slos):
                    self.screened_out += 1
                    self._record(r, n, row, screened=True)
                else:
                    full.append((r, n))
            asked = full
        if asked:
            batch = [(self._spec(r, n), self._point(r, n)) for r, n in asked]
            rows, computed = self._run(batch)
            self.points_run += computed
            self.points_found += len(batch) - computed
            self.state.points += len(batch)
            for (r, n), row in zip(asked, rows, strict=True):
                self._record(r, n, row, screened=False)
        if confirm:
            batch = [
                (self._spec(r, n), self._point(r, n, seed))
                for r, n in confirm
                for seed in self.extra
            ]
            rows, computed = self._run(batch)
            self.confirm_points_run += computed
            self.confirm_points_found += len(batch) - computed
            self.state.points += len(batch)
            k = len(self.extra)
            for i, (r, n) in enumerate(confirm):
                self._confirm(r, n, rows[i * k : (i + 1) * k])
        self.tell()

    def _confirm(self, r: CandidateResult, n: int, rows: list[dict[str, Any]]) -> None:
        """The other seeds' runs of ``n`` replicas of ``r``, which met every SLO with seed
        0: confirmed when it meets them under every seed; else it counts as failing and
        the search goes on."""
        t = r.trial(n)
        assert t is not None  # a confirmation follows the count's seed-0 run
        by_seed = tuple(
            SeedRun(
                seed,
                {slo.text: row.get(slo.column) for slo in self.slos},
                not row.get(INFEASIBLE_COLUMN) and meets(row, self.slos),
                str(row.get(INFEASIBLE_COLUMN) or row.get("verdict")),
            )
            for seed, row in zip(self.extra, rows, strict=True)
        )
        ok = all(run.meets for run in by_seed)
        r.trials[r.trials.index(t)] = replace(t, meets=ok, by_seed=by_seed)
        if ok:
            r.confirmed.add(n)
            self.best = min(self.best, r.cost(n))
        else:
            self.searches[id(r)].record(n, False)

    def _record(self, r: CandidateResult, n: int, row: dict[str, Any], screened: bool) -> None:
        """One run of ``n`` replicas of ``r`` (a full one, or a screening run that ruled
        the count out): its trial, the search's answer, the best found, the fallback."""
        s = self.searches[id(r)]
        if row.get(INFEASIBLE_COLUMN):
            r.outcome = INFEASIBLE
            r.reason = f"cannot run on {n} replica(s): {row[INFEASIBLE_COLUMN]}"
            s.cap(0)  # its search is over
            return
        ok = not screened and meets(row, self.slos)
        values = {slo.text: row.get(slo.column) for slo in self.slos}
        r.trials.append(
            Trial(
                n,
                ok,
                str(row.get("verdict")),
                values,
                row.get("ttft_p95_ms"),
                row["key"],
                row.get("verdict_reason"),
                not screened and binding_resource(row, self.slos) == RUN_LENGTH,
                screened,
                output_tokens_per_s=row.get("output_tokens_per_s"),
            )
        )
        s.record(n, ok)
        if row.get("requests_rejected") and not row.get("requests_measured"):
            # Every request was too big for a replica's memory (the engine rejects one that
            # can never fit): each replica has the same memory, so no count serves any.
            r.outcome = INFEASIBLE
            r.reason = (
                f"does not fit: on {n} replica(s) all {row['requests_rejected']:,} requests "
                "were rejected, each too big for a replica's memory (a rank's, under "
                "attention DP); more replicas add none to one"
            )
            s.cap(0)  # its search is over
            return
        if ok and not self.extra:  # with more seeds, only a confirmed count sets the best
            self.best = min(self.best, r.cost(n))
        if len(r.trials) >= 2 and all(t.run_length for t in r.trials[-2:]):
            a, b = sorted(t.replicas for t in r.trials[-2:])
            r.outcome = UNJUDGED
            r.reason = (
                f"meets every target on {a} and on {b} replica(s), but neither run is long "
                f"enough to judge its steady state ({r.trials[-1].verdict_reason}); more "
                "replicas do not change that"
            )
            s.cap(0)  # its search is over
            return
        if r.fallback is None and s.name != FALLBACK:
            # A screening run's values are the short window's: only its verdict compares.
            why = non_monotone(
                [(t.replicas, t.meets, {} if t.screened else t.values_ms) for t in r.trials],
                self.slos,
            )
            if why is not None:
                r.fallback = why
                r.search = f"{s.name}, then {FALLBACK}"
                self.searches[id(r)] = get_search(FALLBACK)(s.lo, s.hi, s.tried)
