"""Latencies spilled to temporary files give the same summary as latencies kept in memory."""

from __future__ import annotations

import twin.metrics
from twin.engine import build_run
from twin.metrics import RecordWriter, RequestRecord, to_json
from twin.workloads.examples import example_path


def _summary() -> str:
    run = build_run(example_path("chat"), model="tiny-hybrid", cache_gb=0.001, seed=2)
    return to_json(run.simulate().to_dict())


def test_spilling_latencies_changes_no_byte_of_the_summary(monkeypatch) -> None:
    kept = _summary()
    monkeypatch.setattr(twin.metrics, "SPILL_AT", 7)  # many spills, and a tail in memory
    spilled = _summary()
    assert spilled == kept
    assert '"ttft_s"' in kept


def test_records_written_in_many_row_groups_read_back_as_written(tmp_path) -> None:
    """The writer's buffers are renewed at every flush; no row is lost or repeated."""
    import pyarrow.parquet as pq

    rows = [
        RequestRecord(
            i,
            i % 7,
            i % 3,
            i % 2,
            0.5 * i,
            0.5 * i + 0.1,
            0.5 * i + 0.2,
            0.5 * i + (1.0 if i % 5 else float("nan")),
            100 + i,
            i,
            1 + i % 4,
            i % 2,
            rejected=i % 11 == 0,
            preemptions=i % 3,
            recomputed_tokens=i,
        )
        for i in range(50)
    ]
    for preemptive in (False, True):
        path = tmp_path / f"r{preemptive}.parquet"
        writer = RecordWriter(path, warmup_s=3.0, chunk_rows=7, preemptive=preemptive)
        for rec in rows:
            writer.add(rec)
        writer.close()
        table = pq.read_table(path)
        assert pq.ParquetFile(path).num_row_groups == 8
        assert table.column("row").to_pylist() == list(range(50))
        assert table.column("warmup").to_pylist() == [r.arrival_s < 3.0 for r in rows]
        assert table.column("ttft_s").to_pylist() == [r.ttft_s for r in rows]
        e2e = table.column("e2e_s").to_pylist()
        assert [v is None for v in e2e] == [r.e2e_s != r.e2e_s for r in rows]  # NaN: null
        if preemptive:
            assert table.column("recomputed_tokens").to_pylist() == list(range(50))
