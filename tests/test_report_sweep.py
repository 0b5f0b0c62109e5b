"""The capacity sweep: its rows, resume, processes, engine configs and --model-set."""

from __future__ import annotations

import itertools
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from twin.errors import TwinError
from twin.reports.perrequest import BIN_HIT_COLUMN, BIN_INPUT_COLUMN, CDF_COLUMN
from twin.reports.sweep import RESULTS_FILE, SCHEMA, Point, SweepSpec, grid, resolve, run_sweep
from twin.workloads.examples import example_path

WORKLOAD = example_path("system-prompt")


def _spec() -> SweepSpec:
    return resolve(SweepSpec(workload=str(WORKLOAD), model="tiny-hybrid", gpu="h100"))


# --- a real sweep --------------------------------------------------------------------------


def test_sweep_rows_columns_and_resume(tmp_path: Path) -> None:
    spec = _spec()
    points = grid([0.0005, 0.002], ["vllm+", "marconi"], [None], 2)
    assert len(points) == 8
    seen: list[object] = []
    first = run_sweep(spec, points, tmp_path, on_point=lambda p, r: seen.append(p))
    assert (first.computed, first.skipped, len(seen)) == (8, 0, 8)
    table = pq.read_table(tmp_path / RESULTS_FILE)
    assert table.num_rows == 8 and table.schema.names == SCHEMA.names
    rows = table.to_pylist()
    assert {(r["cache_gb"], r["policy"], r["seed"]) for r in rows} == {
        (p.cache_gb, p.policy, p.seed) for p in points
    }
    assert all(r["ttft_p95_ms"] > 0 and 0 <= r["token_hit_rate"] <= 1 for r in rows)
    for r in rows:  # the per-request digest agrees with the engine's own summary
        q = r[CDF_COLUMN]
        assert len(q) == 101 and all(a <= b for a, b in itertools.pairwise(q))
        assert q[95] == pytest.approx(r["ttft_p95_ms"], rel=1e-3)
        assert sum(r[BIN_INPUT_COLUMN]) > 0
        assert all(0 <= h <= i for h, i in zip(r[BIN_HIT_COLUMN], r[BIN_INPUT_COLUMN], strict=True))
    assert {r["workload_sha256"] for r in rows} == {spec.workload_sha256}

    seen.clear()
    again = run_sweep(spec, points, tmp_path, on_point=lambda p, r: seen.append(p))
    assert (again.computed, again.skipped, seen) == (0, 8, [])
    assert again.rows == first.rows
    # One more cache size: only its points run; the old rows stay in the file.
    more = grid([0.0005, 0.002, 0.01], ["vllm+", "marconi"], [None], 2)
    third = run_sweep(spec, more, tmp_path)
    assert (third.computed, third.skipped) == (4, 8)
    assert pq.read_table(tmp_path / RESULTS_FILE).num_rows == 12


def test_sweep_in_processes_matches_in_process(tmp_path: Path) -> None:
    spec = _spec()
    points = grid([0.001], ["vllm+", "marconi"], [2.0], 1)
    one = run_sweep(spec, points, tmp_path / "a", jobs=1)
    two = run_sweep(spec, points, tmp_path / "b", jobs=2)
    assert one.rows == two.rows


# --- one engine-config builder (issue 17 regression) ---------------------------------


def test_sweep_points_build_the_config_simulate_builds_keeping_every_field():
    from twin.costmodel.profile_store import resolve_profile
    from twin.engine import build_config

    prof = resolve_profile("h100", None)
    settings = (
        ("replicas", 2),
        ("memory_utilization", 0.5),
        ("policy_options", {"alpha": 1.0, "block_size": 16}),
    )
    spec = SweepSpec(workload=str(WORKLOAD), model="tiny-hybrid", gpu="h100", settings=settings)
    marconi = spec.config(Point(1.5, "marconi", 2.0, 3), prof)
    # What `twin simulate -r 2 --gpu-mem-util 0.5 --cache-gb 1.5 -p marconi
    # --policy-option alpha=1.0 --session-rate 2 --seed 3` builds:
    assert marconi == build_config(
        prof,
        cache_gb=1.5,
        replicas=2,
        memory_utilization=0.5,
        policy="marconi",
        policy_options={"alpha": 1.0},
        session_rate=2.0,
        seed=3,
    )
    assert (
        marconi.memory.memory_utilization == 0.5 and marconi.memory.gpu_memory_bytes == 80 * 2**30
    )
    # Shared options: each swept policy takes its own.
    assert spec.config(Point(1.5, "vllm+", None, 0), prof).cache.policy_options == {
        "block_size": 16
    }
    # A fixed engine setting is part of the resume key.
    plain = SweepSpec(workload=str(WORKLOAD), model="tiny-hybrid", gpu="h100")
    point = Point(1.5, "marconi", None, 0)
    assert spec.key(point) != plain.key(point)
    with pytest.raises(TwinError, match="memory-utilization"):
        resolve(SweepSpec(str(WORKLOAD), "tiny-hybrid", settings=(("memory_utilization", 2.0),)))


def test_model_set_reaches_every_point_and_its_resume_key(tmp_path: Path) -> None:
    """--model-set: the sweep simulates the changed shape and keys its rows apart."""
    base = _spec()
    changed = resolve(
        SweepSpec(
            workload=str(WORKLOAD), model="tiny-hybrid", gpu="h100", model_set=("ssm_d_state=4",)
        )
    )
    points = grid([0.0005], ["marconi"], [None], 1)
    assert base.key(points[0]) != changed.key(points[0])
    rows = [run_sweep(s, points, tmp_path / str(i)).rows[0] for i, s in enumerate((base, changed))]
    assert rows[0]["model"] == "tiny-hybrid"
    assert rows[1]["model"] == "tiny-hybrid[ssm_d_state=4]"
    # The points really ran the changed shape: its SSM states occupy the cache differently.
    assert rows[1]["ssm_bytes_mean"] != rows[0]["ssm_bytes_mean"]
