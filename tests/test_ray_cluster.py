"""Sweeps on a multi-node Ray cluster: the project and the workload are shipped, rows equal.

The slow test starts a head and a second node on this machine (separate
resources, and no PYTHONPATH: the nodes can import the project only from the
``py_modules`` the driver ships) and checks a small sweep against the same
sweep run locally, point for point.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from reports.ray_executor import PACKAGES, project_runtime_env, run_staged_point, stage_file
from reports.sweep import SweepSpec, grid, resolve, run_point, run_sweep
from workloads.examples import example_path


def test_a_staged_file_is_written_once_under_its_hash(tmp_path: Path) -> None:
    data = b"rows" * 1000
    sha = hashlib.sha256(data).hexdigest()
    path = stage_file(data, sha, ".parquet", str(tmp_path))
    assert path == tmp_path / f"twin-{sha}.parquet" and path.read_bytes() == data
    path.write_bytes(b"kept")  # an existing copy is trusted (named by its content)
    assert stage_file(data, sha, ".parquet", str(tmp_path)).read_bytes() == b"kept"


def test_the_runtime_env_ships_every_package_of_the_project() -> None:
    folders = [Path(f) for f in project_runtime_env()["py_modules"]]
    assert [f.name for f in folders] == list(PACKAGES)
    assert all((f / "__init__.py").is_file() for f in folders)


def test_a_task_runs_its_point_on_the_shipped_bytes(tmp_path: Path, monkeypatch) -> None:
    """What a ray task does, without ray: the driver's file is gone, the bytes suffice."""
    workload = tmp_path / "w.parquet"
    data = Path(example_path("system-prompt")).read_bytes()
    workload.write_bytes(data)
    spec = resolve(SweepSpec(workload=str(workload), model="tiny-hybrid", gpu="h100"))
    point = grid([0.002], ["marconi"], [2.0], 1)[0]
    expected = run_point(spec, point)
    workload.unlink()
    node_tmp = tmp_path / "node"
    node_tmp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(node_tmp))
    shipped = (hashlib.sha256(data).hexdigest(), ".parquet", data)
    assert run_staged_point(spec, point, shipped, None) == expected
    assert [p.name for p in node_tmp.iterdir()] == [f"twin-{shipped[0]}.parquet"]


@pytest.mark.slow
def test_a_two_node_cluster_sweep_equals_the_local_one(tmp_path, monkeypatch) -> None:
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    workload = tmp_path / "chat.parquet"
    workload.write_bytes(Path(example_path("system-prompt")).read_bytes())
    spec = resolve(SweepSpec(workload=str(workload), model="tiny-hybrid", gpu="h100"))
    points = grid([0.0005, 0.002], ["vllm+", "marconi"], [2.0], 2)
    local = run_sweep(spec, points, tmp_path / "local")

    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.chdir(tmp_path)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        cluster.add_node(num_cpus=1, resources={"second_node": 1})
        cluster.wait_for_nodes()
        remote = run_sweep(
            spec, points, tmp_path / "ray", executor="ray", ray_address=cluster.address
        )
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert remote.computed == len(points)
    assert remote.rows == local.rows
