"""The benchmark client's dispatch spread (``Harness.dispatch_spread_s``): each request
leaves the closed-loop client a seeded U(0, S) delay after its slot frees, written as
its session's ``think_s`` and honoured on a closed-loop turn 0 (``twin.engine.source``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from silicon_small import CONFIGS, _rows, predict_records

from twin.engine import run as engine_run
from twin.errors import TwinError
from twin.metrics import RequestRecord
from twin.validate import silicon as sil
from twin.validate.silicon import harness as sil_harness
from twin.validate.silicon.predict import write_workload
from twin.workloads.reader import Workload
from twin.workloads.schema import WorkloadRow
from twin.workloads.writer import WorkloadWriter


def _think(path: Path) -> list[float | None]:
    return pq.read_table(path, columns=["think_s"]).column("think_s").to_pylist()


def test_spread_zero_writes_todays_workload_byte_for_byte(tmp_path: Path) -> None:
    for ratio in (1.0, 0.8):
        default = write_workload(tmp_path / f"a{ratio}.parquet", 64, 8, 12, 7, ratio)
        zero = write_workload(tmp_path / f"b{ratio}.parquet", 64, 8, 12, 7, ratio, 1.0, 0.0)
        assert default.read_bytes() == zero.read_bytes()
        assert _think(zero) == [None] * 12
        assert "dispatch_spread_s" not in Workload.open(zero).metadata


def test_delays_are_seeded_in_range_and_leave_prompts_alone(tmp_path: Path) -> None:
    spread = 0.02
    a = write_workload(tmp_path / "a.parquet", 64, 8, 200, 7, 0.8, 1.0, spread)
    b = write_workload(tmp_path / "b.parquet", 64, 8, 200, 7, 0.8, 1.0, spread)
    c = write_workload(tmp_path / "c.parquet", 64, 8, 200, 8, 0.8, 1.0, spread)
    zero = write_workload(tmp_path / "z.parquet", 64, 8, 200, 7, 0.8)
    delays = np.array(_think(a), dtype=float)
    assert a.read_bytes() == b.read_bytes()  # same seed, same delays
    assert _think(c) != _think(a)  # another row, other delays
    assert ((delays >= 0) & (delays < spread)).all()
    assert len(set(delays.tolist())) == 200 and delays.max() > spread / 2
    assert Workload.open(a).metadata["dispatch_spread_s"] == spread
    # The delays come from a stream of their own: prompts and lengths are today's.
    keep = ["session_id", "turn", "arrival_s", "input_tokens", "output_len"]
    assert pq.read_table(a, columns=keep).equals(pq.read_table(zero, columns=keep))


@pytest.mark.parametrize("bad", [-0.001, float("nan"), float("inf")])
def test_bad_spreads_are_refused_with_one_line(tmp_path: Path, bad: float) -> None:
    with pytest.raises(TwinError) as err:
        sil.Harness("aiperf", 1, 1.0, bad)
    assert "dispatch_spread_s" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(TwinError) as err:
        write_workload(tmp_path / "w.parquet", 64, 8, 4, 7, dispatch_spread_s=bad)
    assert "dispatch_spread_s" in str(err.value) and "\n" not in str(err.value)


def test_a_flag_is_not_a_spread(tmp_path: Path) -> None:
    """``True`` is no number of seconds (it would read as 1 s): refused like a bad number,
    by the harness and by the workload writer alike."""
    with pytest.raises(TwinError, match="dispatch_spread_s"):
        sil.Harness("aiperf", 1, 1.0, True)
    with pytest.raises(TwinError, match="dispatch_spread_s"):
        write_workload(tmp_path / "w.parquet", 64, 8, 4, 7, dispatch_spread_s=True)


def test_a_closed_loop_turn_zero_waits_its_think_time(tmp_path: Path) -> None:
    """One client, two single-turn sessions: the second leaves ``think_s`` after the
    first completed (before, a closed-loop turn 0 ignored its ``think_s``)."""
    path = tmp_path / "w.parquet"
    prompt = np.arange(1, 65, dtype=np.int32)
    with WorkloadWriter(path, {}) as w:
        w.write(WorkloadRow(0, 0, None, 0.25, prompt, False, None, 4))
        w.write(WorkloadRow(1, 0, None, 0.5, prompt + 100, False, None, 4))
    records: list[RequestRecord] = []
    run = engine_run.build_run(path, model="tiny-transformer", gpu="h100", concurrency=1)
    run.simulate(on_record=records.append)
    first, second = sorted(records, key=lambda r: r.session_id)
    assert first.arrival_s == pytest.approx(0.25)
    assert second.arrival_s == pytest.approx(first.arrival_s + first.e2e_s + 0.5)


def _records(plan: sil.RowPlan, monkeypatch: pytest.MonkeyPatch) -> list[RequestRecord]:
    return predict_records(plan, monkeypatch)[1]


def test_the_spread_breaks_the_closed_loops_phase(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tiny row's closed loop at S = 0 repeats a few TTFTs (the phase its first round
    set); at S = 10 ms every request arrives at its own phase, the first round too."""
    monkeypatch.setattr(sil_harness, "AIPERF", sil.Harness("aiperf", 20, 1.0, 0.01))
    row = _rows()["tiny_b200_trtllm_agg_128x16_c4_tp1"]
    plan = sil.plan_row(row, CONFIGS)
    assert isinstance(plan, sil.RowPlan) and plan.dispatch_spread_s == 0.01
    locked = _records(replace(plan, dispatch_spread_s=0.0), monkeypatch)
    spread = _records(plan, monkeypatch)
    again = _records(plan, monkeypatch)
    assert len(locked) == len(spread) == plan.requests
    first_round = sorted(r.arrival_s for r in spread)[: plan.concurrency]
    assert {r.arrival_s for r in locked[: plan.concurrency]} == {0.0}
    assert all(0 < t < 0.01 for t in first_round)
    ttft_locked = {round(r.ttft_s, 9) for r in locked}
    ttft_spread = {round(r.ttft_s, 9) for r in spread}
    assert len(ttft_locked) <= 4 < len(ttft_spread)
    # Seeded by the row: the same run twice.
    assert [r.ttft_s for r in again] == [r.ttft_s for r in spread]


def test_a_closed_loop_client_sends_nothing_due_after_until(tmp_path: Path) -> None:
    """One client, three single-turn sessions and ``--until-s 1``: the second's turn 0 is
    due 10 s after the client frees, past the end, so the client stops there (as it stops
    once free after the end): the third, due at once, is not sent out of file order."""
    path = tmp_path / "w.parquet"
    prompt = np.arange(1, 65, dtype=np.int32)
    with WorkloadWriter(path, {}) as w:
        w.write(WorkloadRow(0, 0, None, None, prompt, False, None, 4))
        w.write(WorkloadRow(1, 0, None, 10.0, prompt + 100, False, None, 4))
        w.write(WorkloadRow(2, 0, None, None, prompt + 200, False, None, 4))
    records: list[RequestRecord] = []
    run = engine_run.build_run(
        path, model="tiny-transformer", gpu="h100", concurrency=1, until_s=1.0
    )
    run.simulate(on_record=records.append)
    assert [r.session_id for r in records] == [0]
