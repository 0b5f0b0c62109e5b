"""Expert parallelism and attention data parallelism as axes of ``twin plan`` (issue 37):
the layouts a model can take, a candidate carrying them, its cost (they add no GPU), the
analytic bound of attention-DP ranks, the reproduce command, and a plan whose answer is
decided by attention DP."""

from __future__ import annotations

import shlex
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from test_bad_input import assert_clean_error

from twin.costmodel.profile_store import resolve_profile
from twin.engine.dp_pricing import dp_pricer
from twin.errors import TwinError
from twin.parallel import Layout
from twin.presets import resolve_model
from twin.reports import plan_decide, plan_runner
from twin.reports.parallel_axes import (
    bound_pricer,
    layout_flags,
    layout_settings,
    parallel_layouts,
    parse_degrees,
)
from twin.reports.plan import plan
from twin.reports.plan_bound import cheapest_token_s
from twin.reports.plan_result import COSTLIER, WINNER, Candidate, CandidateResult
from twin.reports.sweep import RESULTS_FILE
from twin.workloads.generators import get_generator


def _fixed(path: Path, isl: int, osl: int, sessions: int) -> Path:
    cls = get_generator("fixed")
    gen = cls(cls.parse_params({"isl": str(isl), "osl": str(osl)}))
    return gen.write(path, sessions, 1.0, 0, 32768)


def test_degrees_parse_and_refuse_in_one_line() -> None:
    assert parse_degrees(["1", "8", "8"], "--ep") == (1, 8)
    assert parse_degrees([1, 4], "--ep") == (1, 4)
    assert parse_degrees(["AUTO"], "--ep") is None
    for bad in (["0"], ["x"], ["1", "auto"], ["1.5"], [], ["9999"], [True]):
        with pytest.raises(TwinError, match="--dp-attention"):
            parse_degrees(bad, "--dp-attention")


def test_layouts_are_those_the_model_can_take() -> None:
    ds, llama = resolve_model("deepseek-v3"), resolve_model("llama-3-8b")
    # auto: 1 and tp for each of ep and attention DP, for a MoE model; a dense one keeps 1.
    got, dropped = parallel_layouts(ds, [1, 8], None, None)
    assert got == [Layout(1), Layout(8), Layout(8, 1, 8), Layout(8, 8), Layout(8, 8, 8)]
    assert dropped == []
    assert parallel_layouts(llama, [1, 2], None, None) == ([Layout(1), Layout(2)], [])
    # Explicit degrees: a combination no layout of tp is left out, with a note ...
    got, dropped = parallel_layouts(ds, [4, 8], [1, 8], [1])
    assert got == [Layout(4), Layout(8), Layout(8, 8)]
    assert len(dropped) == 1 and "tp 4 ep 8" in dropped[0] and "must divide --tp 4" in dropped[0]
    # ... a degree no tp can take is refused before any work, naming the flag and why.
    with pytest.raises(TwinError, match=r"--ep 2: .*has no MoE layers"):
        parallel_layouts(llama, [2], [1, 2], [1])
    with pytest.raises(TwinError, match=r"--ep 3: .*does not divide the 256 routed experts"):
        parallel_layouts(ds, [6], [3], [1])
    # A plain tp the heads do not divide stays a candidate that cannot run (as before).
    assert parallel_layouts(llama, [3], [1], [1])[0] == [Layout(3)]


def test_a_candidate_splits_its_gpus_and_adds_none() -> None:
    plain = Candidate("h200", "sglang", 8, "auto")
    split = Candidate("h200", "sglang", 8, "auto", "agg", 8, 8)
    assert (split.ep, split.dp_attention, split.parallel) == (8, 8, Layout(8, 8, 8))
    assert split.gpus_per_replica == plain.gpus_per_replica == 8
    assert CandidateResult(split, 4.0).cost(2) == CandidateResult(plain, 4.0).cost(2) == 64.0
    assert split.label == "h200 sglang tp8 ep8 attn-dp8 shared pool"
    assert plain.label == "h200 sglang tp8 shared pool"  # labels of plain layouts unchanged
    assert split.to_dict()["ep"] == 8 and split.to_dict()["dp_attention"] == 8
    # The engine settings of a plain layout are what they were (its sweep keys too).
    assert layout_settings(Layout(2)) == (("tp", 2),) and layout_flags(Layout(2)) == []
    assert layout_settings(Layout(8, 8, 8)) == (("tp", 8), ("ep", 8), ("dp_attention", 8))
    assert layout_flags(Layout(8, 1, 4)) == ["--dp-attention", "4"]


def test_the_bound_prices_attention_ranks_stepping_together() -> None:
    """A replica of D attention ranks runs D steps' tokens in one synchronised step: its
    cheapest price per token is below one rank's alone, and the plain layout's pricer is
    the cost model the bound always read."""
    model = resolve_model("gpt-oss-20b")
    profile = resolve_profile("h200", None, "sglang")
    pricer = bound_pricer(model, profile, Layout(2, 1, 2))
    together = cheapest_token_s(pricer, 8192, 256, ranks=2)
    alone = cheapest_token_s(pricer, 8192, 256)
    assert together < alone
    same = dp_pricer(model, profile, 2, 1, 2, 0.0, 0.0)
    step = ([(8192, 0)], 0, 0)
    assert together <= same.sync_time([step, step]) / (2 * 8192)
    plain = bound_pricer(model, profile, Layout(2))
    assert plain.step_time([], 8, 8) > 0 and not hasattr(plain, "sync_time")


# DeepSeek-V3 on 8 H200s under SGLang, 8,192-token prompts and 1,024 output tokens at 1.2
# requests/s: with attention over all 8 GPUs (tp 8, dp 1) every GPU holds each token's
# whole MLA latent, so the replica's KV pool holds an eighth of the tokens its bytes
# would (twin.engine.budget.kv_replication_scale); with 8 attention ranks each token
# lives on one GPU. The plain replica's pool fills at about 82 running sequences (H200's
# driver total, 141 GiB) and its queue grows; the attention-DP replica runs over 1.6 times
# as many with its pool under 0.8 full and meets P95 TTFT <= 7 s on the same 8 GPUs.
# (The experts are priced from SGLang 0.5.10's table, not 0.5.14's group tie: 2 requests/s
# and 5 s held before; moe_layout.group_tied_table. Session 31's H200 fp8-block refit on the
# collector's rank-0 rows put the attention-DP replica's P95 at 6.02 s at 1.3 requests/s, so
# the load is 1.2, where it met at 5.5 s and the plain replica's was 24 s. Session 44's
# skewed expert popularity, twin.costmodel.routing zipf_0.5, prices the attention-DP
# replica's busiest EP rank above the uniform mean rank: 6.25 s against 31 s, so the target
# is 7 s. Session 45's zipf_max_0.6, the step's realised busiest EP rank: 6.94 s against
# 31.9 s; the target holds, by 0.06 s.)
DS_SLO = "p95_ttft<=7s"


def test_attention_dp_decides_the_answer_for_deepseek(tmp_path: Path) -> None:
    path = _fixed(tmp_path / "w.parquet", 8192, 1024, 220)
    found = plan(
        path,
        tmp_path / "plan",
        model="deepseek-v3",
        slos=[DS_SLO],
        session_rate=1.2,
        duration_s=120,
        gpus=["h200"],
        engines=["sglang"],
        tp=[8],
        ep=[8],
        dp_attention=[1, 8],
        seeds=1,
        jobs=1,
    )
    by = {c.candidate.dp_attention: c for c in found.candidates}
    win, plain = by[8], by[1]
    assert win.outcome == WINNER and win.replicas == 1 and win.gpus == 8
    assert win.candidate.ep == 8 and win.usd_per_hour == pytest.approx(8 * win.usd_per_gpu_hour)
    # The same GPUs without attention DP miss the target; a second replica costs more.
    assert plain.outcome == COSTLIER and [t.replicas for t in plain.trials] == [1]
    miss = plain.trial(1)
    assert miss is not None and not miss.meets and miss.values_ms["p95_ttft<=7000ms"] > 7000
    # Why: the plain replica's KV pool is full and its queue grows; DP's is not.
    rows = {r["key"]: r for r in pq.read_table(tmp_path / "plan" / RESULTS_FILE).to_pylist()}
    hit = win.trial(1)
    assert hit is not None
    full, roomy = rows[miss.key], rows[hit.key]
    assert full["verdict"] == "overloaded" and full["running_pool_peak"] > 0.99
    # (SGLang's own mem_fraction_static holds more back with attention DP: 0.759 of an
    # H200 at tp 8 against 0.887 without, twin.engine.memory_rules; the DP pool has room.)
    assert roomy["verdict"] == "stable" and roomy["running_pool_peak"] < 0.8
    assert roomy["peak_running"] > 1.5 * full["peak_running"]  # 130 against 82 (session 35)
    args = shlex.split(found.simulate_command(win))
    assert args[args.index("--ep") + 1] == "8" and args[args.index("--dp-attention") + 1] == "8"
    doc = found.to_dict()
    assert doc["schema_version"] == 8
    assert (doc["winner"]["ep"], doc["winner"]["dp_attention"], doc["winner"]["gpus"]) == (8, 8, 8)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--ep", "1,x"], "--ep 'x'"),
        (["--dp-attention", "0"], "--dp-attention '0'"),
        (["-m", "llama-3-8b", "--tp", "2", "--ep", "2"], "--ep 2: no layout of --tp 2"),
    ],
)
def test_bad_degrees_are_one_line_errors(capsys, tmp_path: Path, extra, message) -> None:
    wl = str(_fixed(tmp_path / "w.parquet", 128, 8, 2))
    argv = ["plan", wl, "--slo", "p95_ttft<=1s", *extra, "--out", str(tmp_path / "o")]
    assert_clean_error(capsys, argv, tmp_path, message)


def test_an_exact_tie_goes_to_fewer_parallel_splits() -> None:
    """Expert parallelism at the same tp is priced like its plain layout, so the two often
    tie exactly (cost, GPUs, every value): the plain layout wins and the other says why."""
    from twin.reports.plan_result import MEETS, Trial
    from twin.slo import parse_slos

    slos = parse_slos(["p95_tpot<=10ms"])
    results = []
    for ep in (2, 1):  # the split one first, and its label sorts first too
        r = CandidateResult(Candidate("h200", "vllm", 2, "auto", "agg", ep), 3.99)
        r.outcome, r.replicas = MEETS, 1
        r.trials.append(Trial(1, True, "stable", {slos[0].text: 6.07}, 27.3, f"k{ep}"))
        results.append(r)
    plan_decide.decide(results, slos)
    split, plain = results
    assert split.candidate.label < plain.candidate.label
    assert plain.outcome == WINNER and split.outcome == MEETS
    assert "more parallel splits" in split.reason


def test_a_candidate_whose_every_request_is_rejected_stops_at_once(monkeypatch, tmp_path) -> None:
    """A replica (or an attention rank: DP gives each a share of the memory) too small for
    any request rejects every one; no replica count helps, so its search stops at the first
    count instead of probing up to the cap."""
    from twin.reports.plan_result import INFEASIBLE
    from twin.reports.sweep import SweepOutcome

    asked = []

    def fake(pairs, out, jobs=1, **_):
        rows = []
        for _spec, p in pairs:
            asked.append(p.replicas)
            rows.append(
                {
                    "key": f"k{p.replicas}",
                    "verdict": "too short to tell",
                    "verdict_reason": "0 measured request(s)",
                    "ttft_p95_ms": None,
                    "requests_measured": 0,
                    "requests_rejected": 950,
                }
            )
        return SweepOutcome(rows, len(rows), 0)

    monkeypatch.setattr(plan_runner, "run_pairs", fake)
    found = plan(
        _fixed(tmp_path / "w.parquet", 128, 8, 5),
        tmp_path / "out",
        model="tiny-transformer",
        slos=["p95_ttft<=100ms"],
        session_rate=1.0,
        gpus=["h100"],
        engines=["vllm"],
        tp=[1],
        seeds=1,
    )
    (c,) = found.candidates
    assert asked == [1] and c.outcome == INFEASIBLE and c.simulated
    assert "all 950 requests were rejected" in c.reason
