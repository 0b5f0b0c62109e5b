"""The workload reader refuses each kind of malformed file with one clear message."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from twin.errors import TwinError
from twin.workloads import Workload, WorkloadRow, WorkloadWriter


def good_columns() -> dict[str, pa.Array]:
    """Two sessions: session 0 has two turns (the second extends history)."""
    return {
        "session_id": pa.array([0, 1, 0], pa.int64()),
        "turn": pa.array([0, 0, 1], pa.int32()),
        "arrival_s": pa.array([0.0, 0.5, None], pa.float64()),
        "think_s": pa.array([None, None, 2.0], pa.float64()),
        "input_tokens": pa.array([[1, 2, 3], [1, 2, 9], [4]], pa.list_(pa.int32())),
        "extends_history": pa.array([False, False, True]),
        "output_tokens": pa.array([None, [7, 7], None], pa.list_(pa.int32())),
        "output_len": pa.array([2, 2, 1], pa.int32()),
    }


def write(tmp_path, columns) -> str:
    path = tmp_path / "w.parquet"
    pq.write_table(pa.table(columns), path)
    return str(path)


def test_good_file_expands_history_and_draws_fresh_output_ids(tmp_path):
    reqs = list(Workload.open(write(tmp_path, good_columns())).requests())
    assert [r.session_id for r in reqs] == [0, 1, 0]
    assert reqs[0].output.tolist() == [-1, -2]  # fresh ids are negative, never prompt ids
    assert reqs[1].output.tolist() == [7, 7]
    assert reqs[2].prompt.tolist() == [1, 2, 3, -1, -2, 4]  # prompt + output + new turn
    assert reqs[2].new_tokens == 1
    assert reqs[2].output.tolist() == [-3]
    assert reqs[2].arrival_s is None and reqs[2].think_s == 2.0


def test_int64_token_ids_in_range_are_accepted(tmp_path):
    cols = good_columns()
    cols["input_tokens"] = pa.array([[1, 2, 3], [1, 2, 9], [2**31 - 1]], pa.list_(pa.int64()))
    reqs = list(Workload.open(write(tmp_path, cols)).requests())
    assert reqs[2].prompt[-1] == 2**31 - 1


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda c: c.pop("turn"), "missing column 'turn'"),
        (lambda c: c.update(turn=pa.array(["0", "0", "1"])), "column 'turn': type string"),
        (
            lambda c: c.update(output_len=pa.array([2, -2, 1], pa.int32())),
            "row 1, column 'output_len'",
        ),
        (lambda c: c.update(turn=pa.array([0, 0, 2], pa.int32())), "row 2, column 'turn'"),
        (lambda c: c.update(turn=pa.array([1, 0, 2], pa.int32())), "row 0, column 'turn'"),
        (
            lambda c: c.update(arrival_s=pa.array([1.0, 0.5, None], pa.float64())),
            "row 1, column 'arrival_s': arrivals must not decrease",
        ),
        (lambda c: c.update(arrival_s=pa.array([0.0, -1.0, None])), "row 1, column 'arrival_s'"),
        (
            lambda c: c.update(think_s=pa.array([None, None, float("inf")])),
            "row 2, column 'think_s'",
        ),
        (
            lambda c: c.update(session_id=pa.array([0, None, 0], pa.int64())),
            "row 1, column 'session_id'",
        ),
        (
            lambda c: c.update(extends_history=pa.array([True, False, True])),
            "row 0, column 'extends_history'",
        ),
    ],
)
def test_index_defects_name_row_and_column(tmp_path, mutate, expected):
    cols = good_columns()
    mutate(cols)
    with pytest.raises(TwinError, match=expected.replace("(", r"\(")):
        Workload.open(write(tmp_path, cols))


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (
            lambda c: c.update(input_tokens=pa.array([[1], [1, 2**31], [4]], pa.list_(pa.int64()))),
            "row 1, column 'input_tokens': token id 2147483648 out of range",
        ),
        (
            lambda c: c.update(input_tokens=pa.array([[1], [2], [-5]], pa.list_(pa.int32()))),
            "row 2, column 'input_tokens': token id -5",
        ),
        (
            lambda c: c.update(input_tokens=pa.array([[1], [], [4]], pa.list_(pa.int32()))),
            "row 1, column 'input_tokens': empty",
        ),
        (
            lambda c: c.update(input_tokens=pa.array([[1], [2, None], [4]], pa.list_(pa.int32()))),
            "row 1, column 'input_tokens': null token",
        ),
        (
            lambda c: c.update(output_tokens=pa.array([None, [7], None], pa.list_(pa.int32()))),
            "row 1, column 'output_tokens': 1 ids but output_len is 2",
        ),
    ],
)
def test_token_defects_name_row_and_column(tmp_path, mutate, expected):
    cols = good_columns()
    mutate(cols)
    with pytest.raises(TwinError, match=expected):
        list(Workload.open(write(tmp_path, cols)).requests())


def test_not_parquet_and_missing_file(tmp_path):
    bad = tmp_path / "bad.parquet"
    bad.write_text("hello")
    with pytest.raises(TwinError, match="not a readable parquet file"):
        Workload.open(bad)
    with pytest.raises(TwinError, match="no such workload file"):
        Workload.open(tmp_path / "absent.parquet")


def row(sid: int, turn: int, tokens: list[int]) -> WorkloadRow:
    return WorkloadRow(sid, turn, float(sid), None, np.array(tokens, np.int32), False, None, 1)


def test_writer_is_atomic_on_failure(tmp_path):
    out = tmp_path / "out.parquet"
    with pytest.raises(RuntimeError), WorkloadWriter(out, {"generator": "t"}) as w:
        w.write(row(0, 0, [1, 2]))
        raise RuntimeError("boom")
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_writer_round_trip_many_row_groups(tmp_path, monkeypatch):
    import twin.workloads.writer as writer_mod

    monkeypatch.setattr(writer_mod, "_FLUSH_ROWS", 7)
    out = tmp_path / "out.parquet"
    with WorkloadWriter(out, {"generator": "t", "seed": 3}) as w:
        for sid in range(50):
            w.write(row(sid, 0, list(range(sid + 1))))
    wl = Workload.open(out)
    assert pq.ParquetFile(out).num_row_groups == 8
    assert wl.metadata["generator"] == "t" and wl.metadata["seed"] == 3
    assert [len(r.prompt) for r in wl.requests()] == [sid + 1 for sid in range(50)]
