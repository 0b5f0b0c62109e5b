"""The results table's batched merges: few rewrites for many quick points, nothing lost."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from twin.reports.results_table import RESULTS_FILE, ResultsWriter, read_results
from twin.reports.sweep import SweepSpec, grid, resolve, run_sweep
from twin.workloads.examples import example_path


def _row(i: int) -> dict:
    return {"key": f"k{i:03d}", "cache_gb": 1.0, "policy": "vllm+", "seed": i, "replicas": 1}


def test_rows_are_merged_in_batches_and_flush_keeps_the_rest(tmp_path: Path) -> None:
    writer = ResultsWriter(tmp_path, min_interval_s=3600.0)
    for i in range(5):
        writer.add(_row(i))
    # The first row is merged at once; the next ones wait for the interval.
    assert [r["key"] for r in read_results(tmp_path)] == ["k000"]
    assert len(writer.pending) == 4
    writer.flush()
    assert [r["seed"] for r in read_results(tmp_path)] == [0, 1, 2, 3, 4]
    # Nothing kept: no rewrite (a rewrite renames a new file onto the table: a new inode).
    inode = (tmp_path / RESULTS_FILE).stat().st_ino
    writer.flush()
    assert (tmp_path / RESULTS_FILE).stat().st_ino == inode


def test_every_row_is_merged_when_points_are_slower_than_the_interval(tmp_path: Path) -> None:
    writer = ResultsWriter(tmp_path, min_interval_s=0.0, cost_ratio=0.0)
    for i in range(3):
        writer.add(_row(i))
        assert len(read_results(tmp_path)) == i + 1


def test_a_sweep_stopped_by_an_error_keeps_its_finished_points(tmp_path: Path) -> None:
    spec = resolve(
        SweepSpec(workload=str(example_path("system-prompt")), model="tiny-hybrid", gpu="h100")
    )
    points = grid([0.0005, 0.002], ["vllm+", "marconi"], [2.0], 1)
    seen: list[object] = []

    def stop_after_three(point, row) -> None:
        seen.append(point)
        if len(seen) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec, points, tmp_path, on_point=stop_after_three)
    assert pq.read_table(tmp_path / RESULTS_FILE).num_rows == 3
    again = run_sweep(spec, points, tmp_path)
    assert (again.computed, again.skipped) == (1, 3)


def test_progress_is_batched_but_moves_at_once() -> None:
    from twin.workers import Batched

    sent: list[float] = []
    batched = Batched(sent.append, interval_s=3600.0)
    batched(0.0)  # the engine's first sample: nothing to show yet
    for _ in range(1000):
        batched(0.001)
    assert sent == [0.001]  # the first movement, then nothing within the interval
    assert batched.held == pytest.approx(0.999)
