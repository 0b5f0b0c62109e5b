"""Sweeps on a multi-node Ray cluster: the project and the workload are shipped, rows equal.

The slow test starts a head and a second node on this machine (separate
resources, and no PYTHONPATH: the nodes can import the project only from the
``py_modules`` the driver ships) and checks a small sweep against the same
sweep run locally, point for point.
"""

from __future__ import annotations

import hashlib
import socket
import warnings
from pathlib import Path

import pytest
from test_bad_input import assert_clean_error

from twin.errors import TwinError
from twin.reports.ray_executor import (
    PACKAGES,
    _connect,
    address_host_port,
    check_address,
    project_runtime_env,
    run_staged_point,
    stage_file,
)
from twin.reports.sweep import SweepSpec, grid, resolve, run_point, run_sweep
from twin.workloads.examples import example_path


def _closed_port() -> int:
    """A local port nothing listens on (bound once, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    ("address", "target"),
    [
        ("ray://head.example:10001", ("head.example", 10001)),
        ("ray://head.example", ("head.example", 10001)),  # Ray Client's default port
        ("10.0.0.5:6379", ("10.0.0.5", 6379)),  # the head node itself
        ("[::1]:6379", ("::1", 6379)),
        ("auto", None),  # Ray's own lookups, left to Ray
        ("local", None),
        ("anyscale://cluster", None),
    ],
)
def test_ray_addresses_name_the_host_and_port_they_connect_to(address, target) -> None:
    assert address_host_port(address, "--ray-address") == target


@pytest.mark.parametrize("address", ["head.example", "ray://h:port", "ray://:10001", "h:1/x"])
def test_a_malformed_ray_address_is_refused(address) -> None:
    with pytest.raises(TwinError, match=r"^--ray-address .*expected ray://HOST:PORT"):
        address_host_port(address, "--ray-address")


def test_a_silent_ray_address_fails_in_seconds_naming_the_flag(capsys, tmp_path) -> None:
    address = f"ray://127.0.0.1:{_closed_port()}"
    with pytest.raises(TwinError, match=rf"^--ray-address {address}: no Ray cluster answers"):
        check_address(address, "--ray-address")
    pytest.importorskip("ray")  # the CLI says "not installed" first without the extra
    out = tmp_path / "o"
    argv = ["report", "capacity", str(example_path("system-prompt")), "-m", "tiny-hybrid"]
    argv += ["--cache-gb", "0.001", "--policies", "vllm+", "--executor", "ray"]
    for address in (f"127.0.0.1:{_closed_port()}", f"ray://127.0.0.1:{_closed_port()}"):
        line = assert_clean_error(
            capsys, [*argv, "--ray-address", address, "--out", str(out)], tmp_path, address
        )
        # Ray's own connect would wait 30 s (client) or minutes (head), then raise its own error.
        assert line.startswith(f"error: --ray-address {address}: no Ray cluster answers")


def test_a_silent_ray_address_env_is_named_as_such(capsys, tmp_path, monkeypatch) -> None:
    pytest.importorskip("ray")  # the CLI says "not installed" first without the extra
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{_closed_port()}")
    argv = ["reproduce", "marconi", "--quick", "--executor", "ray", "--out", str(tmp_path / "o")]
    assert_clean_error(capsys, argv, tmp_path, "$RAY_ADDRESS 127.0.0.1:")


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
@pytest.mark.parametrize("via", ["head", "ray-client"])
def test_a_two_node_cluster_sweep_equals_the_local_one(tmp_path, monkeypatch, via) -> None:
    """``HOST:PORT`` joins the head itself; ``ray://HOST:PORT`` goes through Ray Client,
    as a laptop does with a remote cluster (the packages are uploaded through it)."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    workload = tmp_path / "chat.parquet"
    workload.write_bytes(Path(example_path("system-prompt")).read_bytes())
    spec = resolve(SweepSpec(workload=str(workload), model="tiny-hybrid", gpu="h100"))
    points = grid([0.0005, 0.002], ["vllm+", "marconi"], [2.0], 2)
    local = run_sweep(spec, points, tmp_path / "local")

    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.chdir(tmp_path)
    client_port = _closed_port()
    head = {"num_cpus": 1, "ray_client_server_port": client_port}
    cluster = Cluster(initialize_head=True, head_node_args=head)
    try:
        cluster.add_node(num_cpus=1, resources={"second_node": 1})
        cluster.wait_for_nodes()
        address = cluster.address if via == "head" else f"ray://127.0.0.1:{client_port}"
        remote = run_sweep(spec, points, tmp_path / "ray", executor="ray", ray_address=address)
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert remote.computed == len(points)
    assert remote.rows == local.rows
    # Both nodes computed points (8 one-CPU tasks cannot all wait for the head).
    assert len(remote.nodes) == 2 and sum(remote.nodes.values()) == len(points)


@pytest.mark.slow
def test_an_address_that_answers_but_is_no_ray_cluster_is_one_line(tmp_path) -> None:
    """TCP accepts, Ray Client gets no answer: Ray's own 30 s timeout, then one line."""
    ray = pytest.importorskip("ray")
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        address = f"ray://127.0.0.1:{silent.getsockname()[1]}"
        check_address(address, "--ray-address")  # something answers
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            with pytest.raises(TwinError, match=rf"^--ray-address {address}: cannot join"):
                _connect(ray, address)
    assert not ray.is_initialized()
    assert [str(w.message) for w in said] == []  # Ray's own timeout warning is not repeated
