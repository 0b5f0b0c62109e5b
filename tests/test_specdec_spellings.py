"""Speculative decoding, issue 35's later parts: TensorRT-LLM's spelling, the workload's
per-request acceptance column, SGLang's EAGLE tree overheads."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_bad_input import assert_clean_error
from test_specdec import Linear

from twin.cli.main import run
from twin.engine import build_run
from twin.engine.modes import get_mode
from twin.engine.speculative import Speculation
from twin.engine.speculative_acceptance import iid_length
from twin.engine.speculative_pricing import SpeculativePricer
from twin.errors import TwinError
from twin.presets import get_model
from twin.workloads.reader import Workload

LLAMA = get_model("llama-3.1-8b")
EAGLE3 = json.dumps({"method": "eagle3", "num_speculative_tokens": 3})


def trt(cfg: dict[str, object], model: str = "llama-3.1-8b", **sets: str) -> dict[str, object]:
    settings = get_mode("trtllm").settings(
        get_model(model), {"speculative_config": json.dumps(cfg), **sets}
    )
    return settings["speculative"]  # type: ignore[no-any-return]


# ----- TensorRT-LLM 1.0's speculative_config ---------------------------------------------


def test_trtllm_spelling_maps_onto_the_methods():
    eagle = trt({"decoding_type": "Eagle", "max_draft_len": 3, "speculative_model_dir": "h"})
    assert (eagle["method"], eagle["num_speculative_tokens"], eagle["draft_host"]) == (
        "eagle3",
        3,
        False,  # eagle3_one_model (default true): the draft loop is one CUDA graph
    )
    two = trt(
        {
            "decoding_type": "Eagle",
            "max_draft_len": 3,
            "speculative_model_dir": "h",
            "eagle3_one_model": False,
        }
    )
    assert two["draft_host"] is True
    mtp = trt({"decoding_type": "MTP", "num_nextn_predict_layers": 2}, model="deepseek-v3")
    assert (mtp["method"], mtp["num_speculative_tokens"]) == ("mtp", 2)
    assert trt({"decoding_type": "MTP"}, model="deepseek-v3")["num_speculative_tokens"] == 1
    ngram = trt(
        {"decoding_type": "NGram", "max_draft_len": 4, "max_matching_ngram_size": 3},
        speculative_acceptance="0.5",
    )
    assert (ngram["method"], ngram["acceptance_length"]) == ("ngram", iid_length(0.5, 4))
    draft = trt(
        {"decoding_type": "DraftTarget", "max_draft_len": 2, "speculative_model_dir": "llama-3-8b"},
        speculative_acceptance="0.6",
    )
    assert (draft["method"], draft["draft_model"], draft["draft_host"]) == (
        "draft_model",
        "llama-3-8b",
        True,
    )


def test_trtllm_and_vllm_give_the_same_speculation_for_the_same_eagle3():
    vllm = get_mode("vllm").settings(
        LLAMA, {"speculative_config": EAGLE3, "speculative_acceptance": "0.7"}
    )["speculative"]
    mine = trt(
        {"decoding_type": "Eagle", "max_draft_len": 3, "speculative_model_dir": "h"},
        speculative_acceptance="0.7",
    )
    same = ("method", "num_speculative_tokens", "verify_tokens", "acceptance_length", "topk")
    assert {k: mine[k] for k in same} == {k: vllm[k] for k in same}


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        ({"decoding_type": "Eagle3", "max_draft_len": 3}, "has no Eagle3 decoding_type"),
        ({"decoding_type": "Draft_Target", "max_draft_len": 3}, "spells it DraftTarget"),
        ({"decoding_type": "Medusa"}, "TensorRT backend only"),
        ({"decoding_type": "Beam"}, 'decoding_type "Beam" is not modelled'),
        ({"max_draft_len": 3}, "give decoding_type"),
        ({"decoding_type": "Eagle", "max_draft_len": 3}, "needs speculative_model_dir"),
        ({"decoding_type": "Eagle", "speculative_model_dir": "h"}, "needs max_draft_len"),
        (
            {"decoding_type": "Eagle", "max_draft_len": 3, "speculative_model": "h"},
            "key 'speculative_model' is not TensorRT-LLM 1.0.0's (TensorRT-LLM 1.0 names it "
            "speculative_model_dir)",
        ),
        ({"decoding_type": "Eagle", "max_draft_len": 3, "foo": 1}, "key 'foo' is not modelled"),
        ({"decoding_type": "NGram", "max_draft_len": 3}, "needs max_matching_ngram_size"),
        ({"decoding_type": "Eagle", "max_draft_len": 0}, "max_draft_len must be a positive"),
        (
            {"decoding_type": "Eagle", "max_draft_len": 2, "num_nextn_predict_layers": 1},
            "num_nextn_predict_layers is a field of another decoding_type",
        ),
        ({"decoding_type": "MTP"}, "carries no MTP layers"),
    ],
)
def test_trtllm_refusals_are_one_line_naming_the_key(cfg, message):
    with pytest.raises(TwinError) as err:
        trt(cfg)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_trtllm_mtp_max_draft_len_must_be_its_layers():
    with pytest.raises(TwinError, match="sets max_draft_len to num_nextn_predict_layers"):
        trt({"decoding_type": "MTP", "max_draft_len": 3}, model="deepseek-v3")


def test_trtllm_acceptance_needs_a_config_and_the_default_run_has_no_flags():
    with pytest.raises(TwinError, match="give a speculative_config too"):
        get_mode("trtllm").settings(LLAMA, {"speculative_acceptance": "0.5"})
    plain = get_mode("trtllm").settings(LLAMA, {})
    assert "speculative" not in plain and "engine_flags" not in plain


def test_trtllm_speculation_runs_and_speeds_decode(batch1):
    def run(sets: dict[str, str]) -> float:
        r = build_run(
            batch1,
            model="llama-3.1-8b",
            gpu="h100",
            engine="trtllm",
            cache_gb="auto",
            sets=sets,
            concurrency=1,
        )
        return float(r.simulate().to_dict()["tpot_s"]["mean"])

    cfg = {"decoding_type": "Eagle", "max_draft_len": 3, "speculative_model_dir": "h"}
    base = run({})
    fast = run({"speculative_config": json.dumps(cfg)})
    assert 1.3 < base / fast < 3.5


# ----- the workload's spec_acceptance column ---------------------------------------------


def with_column(src: Path, dst: Path, values: list[float | None], kind=pa.float64()) -> Path:
    table = pq.read_table(src)
    meta = table.schema.metadata
    table = table.append_column("spec_acceptance", pa.array(values, kind))
    pq.write_table(table.replace_schema_metadata(meta), dst)
    return dst


def simulate(path: Path, out: Path, sets: dict[str, str], engine: str = "vllm") -> Path:
    """``twin simulate`` at concurrency 1 on an H100, its outputs in ``out``."""
    argv = ["simulate", str(path), "-m", "llama-3.1-8b", "--gpu", "h100", "--engine", engine]
    argv += ["--cache-gb", "auto", "--concurrency", "1", "--out", str(out)]
    for name, value in sets.items():
        argv += ["--set", f"{name}={value}"]
    assert run(argv) == 0
    return out


def test_a_column_equal_to_the_flag_is_byte_identical_to_the_flag_run(tmp_path, batch1):
    sets = {"speculative_config": EAGLE3, "speculative_acceptance": "0.7"}
    # The same file name in two folders: the summary names the workload's path.
    plain_dir, col_dir = tmp_path / "plain", tmp_path / "col"
    plain_dir.mkdir()
    col_dir.mkdir()
    plain = pq.read_table(batch1)
    pq.write_table(plain, plain_dir / "w.parquet")
    with_column(batch1, col_dir / "w.parquet", [0.7, None] * 4)
    a = simulate(plain_dir / "w.parquet", tmp_path / "a", sets)
    b = simulate(col_dir / "w.parquet", tmp_path / "b", sets)
    assert (a / "requests.parquet").read_bytes() == (b / "requests.parquet").read_bytes()
    sa = (a / "summary.json").read_text().replace(str(plain_dir), "W")
    sb = (b / "summary.json").read_text().replace(str(col_dir), "W")
    assert sa == sb


def test_per_request_acceptance_sets_each_requests_tpot(tmp_path, batch1):
    rates = [0.9, 0.3, 0.7, 0.5, 0.9, 0.3, 0.7, 0.5]
    path = with_column(batch1, tmp_path / "w.parquet", rates)
    sets = {"speculative_config": EAGLE3, "speculative_acceptance": "0.7"}
    out = simulate(path, tmp_path / "o", sets)
    rows = pq.read_table(out / "requests.parquet").to_pylist()
    tpot = {r["row"]: r["tpot_s"] for r in rows}
    # Each request's TPOT is the iteration over its own acceptance length (batch 1: the
    # same iteration for all), to the rounding of its step count (1 in 255).
    iteration = {row: tpot[row] * iid_length(rates[row], 3) for row in tpot}
    ref = iteration[2]  # rate 0.7: the flag's own
    for row, it in iteration.items():
        assert it == pytest.approx(ref, rel=0.01), (row, it, ref)
    assert tpot[1] > tpot[3] > tpot[2] > tpot[0]
    assert all(r["output_tokens"] == 256 for r in rows)
    # Without speculation the column is read and changes nothing.
    plain = simulate(path, tmp_path / "p", {})
    base = simulate(batch1, tmp_path / "q", {})
    assert (plain / "requests.parquet").read_bytes() == (base / "requests.parquet").read_bytes()


def test_decode_scale_is_one_at_the_runs_rate_and_follows_the_length():
    spec = Speculation(
        method="eagle3",
        num_speculative_tokens=3,
        verify_tokens=4,
        acceptance_length=iid_length(0.7, 3),
        acceptance="flag",
    )
    assert spec.decode_scale(0.7) == 1.0
    assert spec.decode_scale(0.0) == pytest.approx(iid_length(0.7, 3))
    assert spec.decode_scale(1.0) == pytest.approx(iid_length(0.7, 3) / 4)


@pytest.mark.parametrize(
    ("values", "kind", "message"),
    [
        ([0.5, 1.5] + [0.5] * 6, pa.float64(), "row 1, column 'spec_acceptance'"),
        ([0.5, 0.5, -0.1] + [0.5] * 5, pa.float64(), "row 2, column 'spec_acceptance'"),
        ([0.5, 0.5, 0.5, float("nan")] + [0.5] * 4, pa.float64(), "must be in [0, 1]"),
        (["a"] * 8, pa.string(), "column 'spec_acceptance': type string, expected float64"),
    ],
)
def test_bad_acceptance_values_name_the_column_and_row(tmp_path, batch1, values, kind, message):
    path = with_column(batch1, tmp_path / "w.parquet", values, kind)
    with pytest.raises(TwinError) as err:
        Workload.open(path)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_bad_column_exits_2_from_the_cli(capsys, tmp_path, batch1):
    path = with_column(batch1, tmp_path / "w.parquet", [2.0] * 8)
    argv = ["simulate", str(path), "-m", "llama-3.1-8b", "--out", str(tmp_path / "o")]
    assert_clean_error(capsys, argv, tmp_path, "spec_acceptance")


# ----- SGLang's EAGLE tree ---------------------------------------------------------------


def tree_sets(steps: int = 8, topk: int = 8, tokens: int = 64) -> dict[str, str]:
    return {
        "speculative_algorithm": "EAGLE3",
        "speculative_num_steps": str(steps),
        "speculative_eagle_topk": str(topk),
        "speculative_num_draft_tokens": str(tokens),
    }


def test_sglang_releases_price_the_tree_as_their_workers_run_it():
    new = get_mode("sglang==0.5.23").settings(LLAMA, tree_sets())["speculative"]
    old = get_mode("sglang==0.5.10.post1").settings(LLAMA, tree_sets())["speculative"]
    # 0.5.23's v2 worker: the draft extend fills the tree's width; overlap on.
    assert (new["extend_tokens"], new.get("forward_host", 0)) == (64, 0)
    # 0.5.10.post1's v1 worker: steps + 1 (left at 0), overlap off: two more forwards' host.
    assert (old.get("extend_tokens", 0), old["forward_host"]) == (0, 2)
    # A chain's draft extend is steps + 1 in both: the summary keeps its keys.
    chain = get_mode("sglang").settings(LLAMA, tree_sets(3, 1, 4))["speculative"]
    assert "extend_tokens" not in chain and "forward_host" not in chain
    ngram = get_mode("sglang==0.5.10.post1").settings(
        LLAMA, {"speculative_algorithm": "NGRAM", "speculative_acceptance": "0.5"}
    )["speculative"]
    assert "forward_host" not in ngram  # drafted on the CPU, no forward

    def decode_run(self, batch, context, steps):
        return [self.step_time((), batch, context + i * batch) for i in range(steps)]


def test_sglang_spec_v1_exposes_its_loop_host_time_where_engine_times_give_none():
    """SGLang's spec v1 (0.5.10.post1) runs without the overlap scheduler: each iteration
    pays its loop's host time, fixed and per request; v2 (0.5.23) overlaps it."""
    from twin.engine.sglang_speculation import SGLANG_SPEC_V1_LOOP_HOST

    chain = tree_sets(2, 1, 3)
    old = get_mode("sglang==0.5.10.post1").settings(LLAMA, chain)["speculative"]
    assert (old["loop_host_s"], old["loop_seq_host_s"]) == SGLANG_SPEC_V1_LOOP_HOST
    new = get_mode("sglang==0.5.23").settings(LLAMA, chain)["speculative"]
    assert "loop_host_s" not in new and "loop_seq_host_s" not in new
    spec = Speculation("mtp", 2, 3, 2.0, "test", loop_host_s=2e-3, loop_seq_host_s=1e-5)
    target, draft = Linear(1e-3, 1e-6, 1e-9), Linear(1e-4, 1e-6, 1e-9)
    exposed = SpeculativePricer(target, draft, spec, loop_host=True)
    hidden = SpeculativePricer(target, draft, spec, loop_host=False)
    decode = exposed.step_time((), 8, 8000) - hidden.step_time((), 8, 8000)
    assert decode == pytest.approx((2e-3 + 8 * 1e-5) / 2.0)  # a token step: 1 / tau of it
    prefill = exposed.step_time([(512, 0), (256, 0)], 0, 0) - hidden.step_time(
        [(512, 0), (256, 0)], 0, 0
    )
    assert prefill == pytest.approx(2e-3 + 2 * 1e-5)
    durations = [float(x) for x in exposed.decode_run(8, 8000, 3)]
    assert durations == pytest.approx([exposed.step_time((), 8, 8000 + 8 * i) for i in range(3)])


def test_a_tree_iteration_prices_its_wide_extend_cascade_drafts_and_host():
    spec = Speculation("eagle3", 8, 64, 5.0, "test", topk=8, extend_tokens=64, forward_host=2)
    target, draft = Linear(1e-3, 1e-6, 1e-9), Linear(1e-4, 1e-6, 1e-9)
    p = SpeculativePricer(target, draft, spec, draft_host_s=3e-4)
    batch, context = 2, 1000
    verify = target.step_time([(64, 500)] * 2, 0, 0)
    extend = draft.step_time([(64, 500)] * 2, 0, 0)  # the tree's width, not 9
    # Seven later passes over 16 rows reading each request's prefix once (cascade).
    later = 7 * draft.step_time((), 16, 1000)
    host = 2 * 3e-4
    assert p.step_time((), batch, context) == pytest.approx((verify + extend + later + host) / 5)
    run = [float(x) for x in p.decode_run(batch, context, 4)]
    one = [p.step_time((), batch, context + i * batch) for i in range(4)]
    assert run == pytest.approx(one, rel=1e-9)
    # A prefill alone runs one forward beside the target's: one host time.
    chunk = [(512, 0)]
    assert p.step_time(chunk, 0, 0) == pytest.approx(
        target.step_time(chunk, 0, 0) + draft.step_time(chunk, 0, 0) + 3e-4
    )
