"""The disaggregated rows of ``silicon_sample.csv`` (issue 36): ``twin.validate.silicon_disagg``.

Uses the hand-made ``tests/data/silicon_sample_small.csv`` (its one disaggregated row:
tiny/Tiny-Llama on H100s under vLLM, 1 prefill and 1 decode worker, 2 clients) and
variants of it written here; no ``aiconfigurator_core`` needed.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from twin.errors import TwinError
from twin.validate import silicon as sil
from twin.validate import silicon_disagg as sd

DATA = Path(__file__).parent / "data"
SMALL = DATA / "silicon_sample_small.csv"
CONFIGS = DATA / "silicon_configs"
ROW = "tiny_h100_vllm_disagg_64x8_c2"


def _variants(tmp_path: Path, changes: dict[str, dict[str, str]]) -> Path:
    """The small CSV's disaggregated row once per entry of ``changes`` (id -> cells)."""
    with SMALL.open(newline="") as f:
        reader = csv.DictReader(f)
        fields = list(reader.fieldnames or [])
        base = next(r for r in reader if r["id"] == ROW)
    path = tmp_path / "variants.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for row_id, cells in changes.items():
            writer.writerow({**base, "id": row_id, **cells})
    return path


def test_reads_only_the_disaggregated_rows_with_their_pools() -> None:
    (d,) = sd.read_disagg_rows(SMALL)
    assert d.row.id == ROW and d.row.concurrency == 2
    assert (d.prefill.num_workers, d.prefill.tp, d.decode.num_workers, d.decode.tp) == (1, 1, 1, 1)
    assert d.decode.batch_size == 2


def test_a_row_runs_on_its_pools_and_is_scored(tmp_path: Path) -> None:
    path = _variants(
        tmp_path,
        {"mixed": {"prefill_num_workers": "2", "decode_num_workers": "1", "decode_tp_size": "2"}},
    )
    (d,) = sd.read_disagg_rows(path)
    plan = sd.plan_disagg_row(d, CONFIGS)
    assert isinstance(plan, sil.RowPlan)
    # Each pool's batch size (prefill 1, decode 2) is its own --max-num-seqs.
    assert plan.deployment == {
        "prefill_workers": 2,
        "decode_workers": 1,
        "decode_tp": 2,
        "prefill_engine_flags": {"max_num_seqs": "1"},
        "decode_engine_flags": {"max_num_seqs": "2"},
    }
    assert (plan.gpu, plan.engine, plan.tp, plan.concurrency) == ("h100", "vllm", 1, 2)
    assert plan.row.id == "mixed" and plan.row.mode == "disagg"
    result = sd.score_disagg_row(plan, d)
    assert result["layout"] == "2P1D" and "decode_tp=2" in result["deployment"]
    assert "decode_engine_flags.max_num_seqs=2" in result["deployment"]
    assert result.get("twin_error") is None
    assert result["twin_ttft_ms"] > 0 and result["twin_tpot_ms"] > 0
    assert result["twin_ttft_ape"] == pytest.approx(
        sil.ape(result["twin_ttft_ms"], result["silicon_ttft_ms"])
    )


def test_a_pool_with_attention_dp_runs_on_its_own_layout(tmp_path: Path) -> None:
    """A decode pool of tp_size 2 x attention_dp_size 2 (4 GPUs, two attention ranks of 2
    GPUs) beside a prefill pool of one GPU: the decode pool's layout goes to the run as
    its own (decode_tp, decode_dp_attention), and the row runs."""
    path = _variants(tmp_path, {"dp": {"decode_attention_dp_size": "2", "decode_tp_size": "2"}})
    (d,) = sd.read_disagg_rows(path)
    plan = sd.plan_disagg_row(d, CONFIGS)
    assert isinstance(plan, sil.RowPlan)
    assert plan.deployment == {
        "prefill_workers": 1,
        "decode_workers": 1,
        "decode_tp": 4,
        "decode_dp_attention": 2,
        "prefill_engine_flags": {"max_num_seqs": "1"},
        "decode_engine_flags": {"max_num_seqs": "2"},
    }
    assert (plan.tp, plan.dp) == (1, 1)  # the prefill pool's: the run's
    result = sd.score_disagg_row(plan, d)
    assert result.get("twin_error") is None
    assert result["twin_ttft_ms"] > 0 and result["twin_tpot_ms"] > 0


def test_rows_not_expressed_are_counted_by_reason(tmp_path: Path) -> None:
    path = _variants(
        tmp_path,
        {
            "noworkers": {"prefill_num_workers": "", "decode_num_workers": ""},
            "odd": {"prefill_tp_size": "2", "decode_tp_size": "3"},
            "agg": {"mode": "agg"},
        },
    )
    rows = sd.read_disagg_rows(path)
    assert {d.row.id for d in rows} == {"noworkers", "odd"}  # agg: not here
    plans, reasons = sd.plan_disagg_rows(rows, CONFIGS)
    assert not plans
    assert reasons[sd.REASON_NO_POOLS] == 1
    # Each pool is checked as an aggregated row of its layout, named after the pool.
    assert reasons["decode pool: tp_size 3: no measured all-reduce at 3 GPUs in the h100 profile"]


def test_a_malformed_pool_cell_is_one_line(tmp_path: Path) -> None:
    path = _variants(tmp_path, {"bad": {"decode_num_workers": "two"}})
    with pytest.raises(TwinError, match=r"decode_num_workers.*expected an integer"):
        sd.read_disagg_rows(path)


def test_each_pool_runs_under_its_own_batch_size(tmp_path: Path) -> None:
    """The row's per-pool batch sizes are each pool's running cap: with 8 clients and 128
    output tokens, a decode batch of 1 makes each request wait for the others' decodes
    before its KV is pulled (vLLM reserves after the prefill), so TTFT grows and every
    decode runs alone (a lower TPOT); a decode batch of 8 holds them all."""
    eight = {"silicon_data_source": "source_file=hand-made.csv; silicon_concurrency=8"}
    lengths = {**eight, "osl": "128", "prefill_batch_size": "8"}
    path = _variants(
        tmp_path,
        {"b8": {**lengths, "decode_batch_size": "8"}, "d1": {**lengths, "decode_batch_size": "1"}},
    )
    found = {}
    for d in sd.read_disagg_rows(path):
        plan = sd.plan_disagg_row(d, CONFIGS)
        assert isinstance(plan, sil.RowPlan)
        found[d.row.id] = sd.score_disagg_row(plan, d)
    base, d1 = found["b8"], found["d1"]
    assert "decode_engine_flags.max_num_seqs=1" in d1["deployment"]
    assert d1["twin_ttft_ms"] > 10 * base["twin_ttft_ms"]
    assert d1["twin_tpot_ms"] < base["twin_tpot_ms"]  # each decode alone
