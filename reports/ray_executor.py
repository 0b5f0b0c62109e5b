"""Sweep points as Ray tasks, on this machine or on a remote multi-node cluster.

A remote cluster's workers have neither the project nor the user's files, so
the driver ships both (Ray's runtime environments and object store,
docs.ray.io "Environment dependencies"):

- the code: the project's top-level packages go as ``runtime_env["py_modules"]``
  (Ray zips each folder once, stores it in the cluster's object store, and
  unpacks it on every node that runs a task); the third-party dependencies
  (numpy, simpy, pyarrow, ...) must be in the cluster's image, as for any
  Ray job;
- the files: the workload (and a ``--profile`` file, if one was given) are
  read once here and ``ray.put`` into the object store; a task writes them
  to its node's temporary folder under their SHA-256 (once per node) and
  runs the point on that copy. The results key holds the workload's SHA-256,
  not its path, so rows equal the local run's.

Rows come back to the driver, which alone writes the results file.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from twin.atomic import atomic_path
from twin.errors import TwinError

T = TypeVar("T")
R = TypeVar("R")

# The project's top-level packages (pyproject's packages.find), shipped to the workers.
PACKAGES = ("twin", "calibration", "policies", "workloads", "reports")


def import_ray() -> Any:
    """The ray module, or a TwinError saying how to get it (ray is an optional extra)."""
    try:
        import ray
    except ImportError:
        raise TwinError("--executor ray: ray is not installed; pip install 'twin[ray]'") from None
    return ray


def project_runtime_env() -> dict[str, Any]:
    """A ``runtime_env`` whose ``py_modules`` are this checkout's packages (module docstring)."""
    import importlib

    folders = [str(Path(importlib.import_module(p).__file__ or "").parent) for p in PACKAGES]
    return {"py_modules": folders, "excludes": ["__pycache__", "*.pyc"]}


def stage_file(data: bytes, sha256: str, suffix: str, folder: str | None = None) -> Path:
    """``data`` as a file of this node named by its hash (written once, atomically)."""
    path = Path(folder or tempfile.gettempdir()) / f"twin-{sha256}{suffix}"
    if not path.is_file():
        with atomic_path(path) as tmp:
            Path(tmp).write_bytes(data)
    return path


def _shipped(path: str | None) -> tuple[str, str, bytes] | None:
    if not path:
        return None
    data = Path(path).read_bytes()
    return hashlib.sha256(data).hexdigest(), Path(path).suffix, data


def run_staged_point(spec: Any, point: Any, workload: Any, profile: Any) -> dict[str, Any]:
    """``run_point`` on this node's copies of the shipped workload and profile."""
    from reports.sweep import run_point

    local = {"workload": str(stage_file(workload[2], workload[0], workload[1]))}
    if profile is not None:
        local["profile"] = str(stage_file(profile[2], profile[0], profile[1]))
    return run_point(replace(spec, **local), point)


def _connect(ray: Any, address: str | None) -> bool:
    """Connect to ``address``, else $RAY_ADDRESS, else start a local ray; ``True`` if we did.

    A ray already initialised here is used as it is. The project's code rides
    along as the job's runtime environment (module docstring).
    """
    if ray.is_initialized():
        return False
    ray.init(
        address=address or os.environ.get("RAY_ADDRESS") or None,
        runtime_env=project_runtime_env(),
        log_to_driver=False,
    )
    return True


def run_on_ray(
    ray: Any,
    address: str | None,
    fn: Callable[..., R],
    items: Iterable[T],
    args: Callable[[T], tuple[Any, ...]],
    on_result: Callable[[T, R], None],
) -> None:
    """Run ``fn(*args(item))`` as one ray task per item; ``on_result`` in the driver as each lands.

    Results are handed over here, in the driver, so whatever stores them has
    one writer. A ray this call started is shut down at the end (the next run
    may name another cluster).
    """
    started = _connect(ray, address)
    try:
        task = ray.remote(num_cpus=1)(fn)
        pending = {task.remote(*args(item)): item for item in items}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                on_result(pending.pop(ref), ray.get(ref))
    finally:
        if started:
            ray.shutdown()


def run_points_on_ray(
    ray: Any,
    address: str | None,
    spec: Any,
    todo: list[Any],
    done: Callable[[Any, dict[str, Any]], None],
) -> None:
    """Run sweep points ``todo`` as ray tasks, handing each row to ``done`` as it lands.

    The workload (and a ``--profile`` file) travel through the object store,
    so the cluster's nodes need none of the driver's files.
    """
    started = _connect(ray, address)
    try:
        profile = spec.profile if spec.profile and Path(spec.profile).is_file() else None
        workload = ray.put(_shipped(spec.workload))
        shipped_profile = ray.put(_shipped(profile))

        def args(point: Any) -> tuple[Any, ...]:
            return spec, point, workload, shipped_profile

        run_on_ray(ray, address, run_staged_point, todo, args, done)
    finally:
        if started:
            ray.shutdown()
