"""The router as an axis of ``twin plan`` (issue 37): parsing, ``auto``, a candidate carrying
its router (label, reproduce command, plan.json), the tie on one replica, a plan whose
answer the router decides, and a brute force over the same two-router space.

The simulated space: tiny-transformer on H200s under vLLM (no fitted host times there, so
the tiny model's steps are its kernels), document QA over a library of 300 documents of
2,000-4,000 tokens (one document and a question a request, each document equally likely),
each replica's prefix cache a dedicated 0.3 GB (about 585,000 tokens: some 195 documents),
at 16,000 sessions/s for 0.15 simulated seconds, P95 TTFT <= 0.6 ms. Round-robin sends
every document to every replica, whose caches each hold two thirds of the library: it
needs three replicas (four before session 38's refit of H200 vLLM's decode attention).
The prefix-aware router sends a document where it is cached, so two replicas hold the
whole library between them and meet the target.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from test_bad_input import assert_clean_error

from twin.cli.main import run
from twin.errors import TwinError
from twin.reports import plan_decide
from twin.reports.plan import plan
from twin.reports.plan_result import (
    COSTLIER,
    MEETS,
    WINNER,
    Candidate,
    CandidateResult,
    Load,
    PlanResult,
    Trial,
)
from twin.reports.plan_routers import (
    DEFAULT_ROUTERS,
    MIN_REUSE_SHARE,
    auto_routers,
    parse_routers,
    resolve_routers,
    router_flags,
    with_router,
)
from twin.reports.plan_runner import Searcher
from twin.reports.sweep import Point, SweepSpec, resolve, run_pairs
from twin.reports.verdicts import meets
from twin.slo import parse_slos

MODEL, GPU, CACHE = "tiny-transformer", "h200", "0.3"
RATE, DURATION = 16000.0, 0.15
SLO = "p95_ttft<=0.6ms"
ROUTERS = ("round-robin", "prefix-aware")
BRUTE_REPLICAS = range(1, 6)


# --- parsing and auto ----------------------------------------------------------------


def test_routers_parse_and_refuse_in_one_line() -> None:
    assert parse_routers(["Prefix-Aware", "round-robin", "prefix-aware"]) == (
        "prefix-aware",
        "round-robin",
    )
    assert parse_routers(["auto"]) is None
    for bad in (["random"], ["auto", "round-robin"], [], [""]):
        with pytest.raises(TwinError, match="--routers"):
            parse_routers(bad)
    assert resolve_routers(None, None) == DEFAULT_ROUTERS == ("round-robin",)
    assert resolve_routers(None, "session-affinity") == ("session-affinity",)
    assert resolve_routers(["auto"], None) is None
    with pytest.raises(TwinError, match="--router and --routers"):
        resolve_routers(["round-robin"], "prefix-aware")
    with pytest.raises(TwinError, match="--router 'nope'"):
        resolve_routers(None, "nope")


def test_auto_adds_the_prefix_placing_routers_only_where_prefixes_are_reused() -> None:
    assert auto_routers(0.0) == ("round-robin",)
    assert auto_routers(MIN_REUSE_SHARE / 2) == ("round-robin",)
    assert auto_routers(0.3) == ("round-robin", "session-affinity", "prefix-aware")


def test_a_candidate_carries_its_router() -> None:
    plain = Candidate("h200", "vllm", 1, "auto")
    routed = Candidate("h200", "vllm", 1, "auto", router="prefix-aware")
    assert plain.router == "round-robin" and plain.label == "h200 vllm tp1 shared pool"
    assert routed.label == "h200 vllm tp1 shared pool prefix-aware router"
    assert routed.to_dict()["router"] == "prefix-aware"
    assert router_flags("round-robin") == [] and router_flags("prefix-aware")[1] == "prefix-aware"
    settings = (("tp", 1), ("router", "round-robin"), ("duration_s", 1.0))
    assert with_router(settings, "prefix-aware") == (
        ("tp", 1),
        ("router", "prefix-aware"),
        ("duration_s", 1.0),
    )


def test_an_exact_tie_goes_to_the_router_first_in_the_registry() -> None:
    """On one replica every router sends every request to it: the runs tie exactly, and
    round-robin (it reads nothing of the replicas) wins over a later router."""
    slos = parse_slos(["p95_ttft<=1ms"])
    results = []
    for router in ("prefix-aware", "round-robin"):
        r = CandidateResult(Candidate("h200", "vllm", 1, "auto", router=router), 3.99)
        r.outcome, r.replicas = MEETS, 1
        r.trials.append(Trial(1, True, "stable", {slos[0].text: 0.5}, 0.5, f"k-{router}"))
        results.append(r)
    plan_decide.decide(results, slos)
    routed, plain = results
    assert plain.outcome == WINNER and routed.outcome == MEETS
    assert "the tie goes to round-robin" in routed.reason


def test_a_count_where_the_router_has_no_choice_shares_one_run() -> None:
    """One aggregated replica, or copies of a layout with one prefill worker in all, send
    every request to the same place: such a count runs under the plan's first router."""
    searcher = Searcher(parse_slos([SLO]), Load(None, None, None), Path("unused"), 1, None)
    searcher.shared_router = "round-robin"
    base = SweepSpec(workload="w", model=MODEL, settings=(("tp", 1), ("router", "prefix-aware")))
    cases = [("agg", 1, True), ("agg", 2, False), ("1P2D", 1, True), ("1P2D", 2, False)]
    cases += [("2P1D", 1, False)]
    for layout, n, shared in cases:
        r = CandidateResult(Candidate(GPU, "vllm", 1, "auto", layout, router="prefix-aware"), 1.0)
        searcher.specs[id(r)] = base
        got = dict(searcher._spec(r, n).settings)["router"]
        assert got == ("round-robin" if shared else "prefix-aware"), (layout, n)
    # A candidate of the first router itself, or a plan of one router: its own spec.
    searcher.shared_router = "prefix-aware"
    r = CandidateResult(Candidate(GPU, "vllm", 1, "auto", router="prefix-aware"), 1.0)
    searcher.specs[id(r)] = base
    assert searcher._spec(r, 1) is base


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--routers", "random"], "--routers 'random': unknown router"),
        (["--routers", "round-robin,"], "--routers"),
        (["--routers", "auto,prefix-aware"], "auto stands alone"),
        (["--router", "fastest"], "--router 'fastest': unknown router"),
        (["--router", "auto"], "use --routers auto"),
        (["--router", "round-robin", "--routers", "prefix-aware"], "give one of them"),
    ],
)
def test_bad_routers_are_one_line_errors(capsys, tmp_path: Path, extra, message) -> None:
    wl = tmp_path / "w.parquet"
    gen = ["workload", "generate", "fixed", "-n", "2", "--session-rate", "1", "-o", str(wl)]
    assert run(gen) == 0
    argv = ["plan", str(wl), "--slo", "p95_ttft<=1s", *extra, "--out", str(tmp_path / "o")]
    assert_clean_error(capsys, argv, tmp_path, message)


# --- a plan the router decides ---------------------------------------------------------


@dataclass
class Space:
    workload: Path
    out: Path
    one: PlanResult  # round-robin alone (--router round-robin)
    both: PlanResult  # --routers auto: round-robin, session affinity and prefix-aware
    brute: dict[tuple[str, int], dict[str, Any]]  # (router, replicas) -> row


def _spec(workload: Path, out: Path, router: str) -> SweepSpec:
    """A candidate's sweep spec, written out by hand (the brute force's own)."""
    return resolve(
        SweepSpec(
            workload=str(workload),
            model=MODEL,
            gpu=GPU,
            engine="vllm",
            settings=(
                ("tp", 1),
                ("router", router),
                ("duration_s", DURATION),
                ("workload_cache", str(out / "workloads")),
            ),
            slos=(SLO,),
        )
    )


@pytest.fixture(scope="module")
def space(tmp_path_factory: pytest.TempPathFactory):
    with pytest.MonkeyPatch.context() as mp:
        root = tmp_path_factory.mktemp("plan-routers")
        mp.setenv("TWIN_PROFILES_DIR", str(root / "profiles"))
        mp.setenv("XDG_CACHE_HOME", str(root / "cache"))
        workload = root / "docqa.parquet"
        knobs = ["n_documents=300", "zipf_s=0", "docs_min=1", "docs_max=1"]
        knobs += ["doc_min_tokens=2000", "doc_max_tokens=4000", "output_mean_tokens=8"]
        knobs += ["output_max_tokens=16"]
        gen = ["workload", "generate", "doc-qa", "-n", "3000", "--session-rate", "1"]
        assert run([*gen, *(a for k in knobs for a in ("--set", k)), "-o", str(workload)]) == 0
        out = root / "plan"
        args: dict[str, Any] = dict(
            model=MODEL,
            slos=[SLO],
            session_rate=RATE,
            duration_s=DURATION,
            gpus=[GPU],
            engines=["vllm"],
            tp=[1],
            cache=[CACHE],
            seeds=1,
            jobs=2,
        )
        one = plan(workload, out, router="round-robin", **args)
        both = plan(workload, out, routers=["auto"], **args)
        pairs = [
            (_spec(workload, out, router), Point(float(CACHE), "vllm+", RATE, 0, n))
            for router in ROUTERS
            for n in BRUTE_REPLICAS
        ]
        done = run_pairs(pairs, out, jobs=2)
        brute = {
            (dict(spec.settings)["router"], p.replicas or 0): row
            for (spec, p), row in zip(pairs, done.rows, strict=True)
        }
        yield Space(workload, out, one, both, brute)


def test_the_router_changes_the_winner(space: Space) -> None:
    one, both = space.one.winner, space.both.winner
    assert one is not None and both is not None
    assert space.both.routers == ("round-robin", "session-affinity", "prefix-aware")
    assert any("--routers auto" in n for n in space.both.notes)
    # Round-robin alone needs three replicas; prefix-aware routing meets on two.
    assert (one.candidate.router, one.replicas) == ("round-robin", 3)
    assert (both.candidate.router, both.replicas) == ("prefix-aware", 2)
    assert both.usd_per_hour is not None and one.usd_per_hour is not None
    assert both.usd_per_hour == pytest.approx(one.usd_per_hour * 2 / 3)
    # The auto plan's round-robin points are the one-router plan's (the same sweep keys,
    # found in results.parquet); once prefix-aware met on two replicas, round-robin's
    # search stopped where every count left costs more (it failed on two).
    assert space.both.points_found >= 1
    rr = next(c for c in space.both.candidates if c.candidate.router == "round-robin")
    assert rr.outcome == COSTLIER and not rr.trial(2).meets  # type: ignore[union-attr]
    assert "more than the best found" in rr.reason
    # Every router shares the analytic bound (it is router-independent).
    assert len({c.lower_bound for c in space.both.candidates}) == 1
    # On one replica the router has no choice: the routers share round-robin's run.
    ones = [t for c in space.both.candidates if (t := c.trial(1)) is not None]
    assert len(ones) == 3 and len({t.key for t in ones}) == 1
    assert ones[0].key == space.one.candidates[0].trial(1).key  # type: ignore[union-attr]


def test_the_winner_carries_its_router_everywhere(space: Space) -> None:
    doc = json.loads((space.out / "plan.json").read_text())
    assert doc["schema_version"] == 8
    assert doc["routers"] == ["round-robin", "session-affinity", "prefix-aware"]
    assert doc["winner"]["router"] == "prefix-aware"
    assert {c["router"] for c in doc["candidates"]} == set(doc["routers"])
    assert all("router" in f for f in doc["frontier"])
    words = shlex.split(doc["winner"]["simulate_command"])
    assert words[words.index("--router") + 1] == "prefix-aware"
    md = (space.out / "report.md").read_text()
    assert "| router |" in md.replace("router | replicas", "router |")
    assert "prefix-aware router" in md
    # The one-router plan's reproduce command needs no --router (round-robin is the default).
    assert "--router" not in space.one.simulate_command(space.one.winner)  # type: ignore[arg-type]


def test_one_replica_runs_the_same_under_every_router(space: Space) -> None:
    a, b = space.brute[("round-robin", 1)], space.brute[("prefix-aware", 1)]
    assert a["key"] != b["key"]
    for column in ("ttft_p95_ms", "tpot_p95_ms", "token_hit_rate", "requests_measured"):
        assert a.get(column) == b.get(column), column


def test_brute_force_over_both_routers_finds_the_same_winner(space: Space) -> None:
    slos = parse_slos([SLO])
    fewest = {
        router: min(n for n in BRUTE_REPLICAS if meets(space.brute[(router, n)], slos))
        for router in ROUTERS
    }
    # Every candidate costs the same per replica: the fewest replicas win, and the
    # search's answer for each router is the brute force's.
    assert fewest == {"round-robin": 3, "prefix-aware": 2}
    best = min(ROUTERS, key=lambda r: fewest[r])
    win = space.both.winner
    assert win is not None and (win.candidate.router, win.replicas) == (best, fewest[best])
    # The one-router plan sized round-robin in full: the brute force's answer too.
    assert space.one.winner is not None and space.one.winner.replicas == fewest["round-robin"]
