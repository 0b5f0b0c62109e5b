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

Rows come back to the driver, which alone writes the results file. Tasks are
submitted in a window of a few per CPU of the cluster, not all at once, so
the driver's bookkeeping stays small however many points a sweep has; each
result says which node computed it.

A cluster address is checked with a plain TCP connection before any work
(a few seconds at most): Ray's own connect would wait 30 s (Ray Client) or
retry the head for minutes before it gave up on an address nobody answers.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import tempfile
import urllib.parse
import warnings
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from twin.atomic import atomic_path
from twin.errors import TwinError

T = TypeVar("T")
R = TypeVar("R")

# The project's one top-level package (pyproject's packages.find), shipped to the workers.
PACKAGES = ("twin",)
# Ray Client's server port on the head when ray://HOST gives none (Ray's default,
# ray.util.client: DEFAULT_CLIENT_PORT; docs.ray.io "Ray Client").
CLIENT_PORT = 10001
CONNECT_TIMEOUT_S = 5.0  # how long the address check waits for the head to answer
# Tasks in flight per CPU of the cluster, and at least this many (run_on_ray).
TASKS_PER_CPU = 4
MIN_IN_FLIGHT = 64


def import_ray(address: str | None = None) -> Any:
    """The ray module, or a TwinError saying how to get it (ray is an optional extra).

    With an ``address`` (``--ray-address``) or ``$RAY_ADDRESS`` it also checks
    that a cluster answers there (:func:`check_address`), before any work.
    """
    try:
        import ray
    except ImportError:
        raise TwinError("--executor ray: ray is not installed; pip install 'twin[ray]'") from None
    if address:
        check_address(address, "--ray-address")
    elif os.environ.get("RAY_ADDRESS"):
        check_address(os.environ["RAY_ADDRESS"], "$RAY_ADDRESS")
    return ray


def address_host_port(address: str, flag: str) -> tuple[str, int] | None:
    """The (host, port) a Ray address connects to; None for ``auto``, ``local`` or another
    scheme, which are left to Ray. ``ray://HOST`` means Ray Client's port 10001; a bare
    address (the head's GCS, ``HOST:6379``) needs its port."""
    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = "", address
    if scheme not in ("", "ray") or (not scheme and rest in ("auto", "local")):
        return None
    where = urllib.parse.urlsplit("//" + rest)
    try:
        port = where.port
    except ValueError:
        port = -1
    if not where.hostname or port == -1 or (port is None and scheme != "ray") or where.path:
        raise TwinError(
            f"{flag} {address!r}: expected ray://HOST:PORT (Ray Client, port 10001 by default) "
            "or HOST:PORT (the head node, e.g. HOST:6379)"
        )
    return where.hostname, CLIENT_PORT if port is None else port


def check_address(address: str, flag: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """A TwinError naming ``flag`` unless something answers at ``address`` within
    ``timeout_s`` (a TCP connection to its host and port)."""
    target = address_host_port(address, flag)
    if target is None:
        return
    try:
        socket.create_connection(target, timeout=timeout_s).close()
    except OSError as err:
        reason = "timed out" if isinstance(err, TimeoutError) else (err.strerror or str(err))
        raise TwinError(
            f"{flag} {address}: no Ray cluster answers at {target[0]}:{target[1]} ({reason}); "
            "check the address and that the cluster (or its port-forward) is up"
        ) from None


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
    from twin.reports.sweep import run_point

    local: dict[str, Any] = {"workload": str(stage_file(workload[2], workload[0], workload[1]))}
    if profile is not None:
        local["profile"] = str(stage_file(profile[2], profile[0], profile[1]))
    if any(k == "workload_cache" for k, _ in spec.settings):
        # The driver's OUT/workloads is not on this node: the node's points keep their
        # stretched workloads in one folder beside the staged files.
        where = str(Path(tempfile.gettempdir()) / "twin-workloads")
        local["settings"] = tuple(
            (k, where if k == "workload_cache" else v) for k, v in spec.settings
        )
    return run_point(replace(spec, **local), point)


def _connect(ray: Any, address: str | None) -> bool:
    """Connect to ``address``, else $RAY_ADDRESS, else start a local ray; ``True`` if we did.

    A ray already initialised here is used as it is. The project's code rides
    along as the job's runtime environment (module docstring).
    """
    if ray.is_initialized():
        return False
    target = address or os.environ.get("RAY_ADDRESS") or None
    # Ray's warnings are shown once it has joined; on a failure the one line says it all.
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        try:
            ray.init(address=target, runtime_env=project_runtime_env(), log_to_driver=False)
        except (ConnectionError, TimeoutError) as err:  # answered, but not as a Ray cluster
            flag = "--ray-address" if address else "$RAY_ADDRESS"
            raise TwinError(f"{flag} {target}: cannot join a Ray cluster there ({err})") from None
    for w in said:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return True


def _on_node(fn: Callable[..., R], *args: Any) -> tuple[str, R]:
    """In a task: ``fn(*args)`` and the id of the node that ran it."""
    import ray

    return ray.get_runtime_context().get_node_id(), fn(*args)


def _in_flight(ray: Any) -> int:
    """How many tasks to keep submitted: a few per CPU the cluster has now (a cluster
    that autoscales on queued work still sees a queue)."""
    cpus = int(ray.cluster_resources().get("CPU", 1))
    return max(MIN_IN_FLIGHT, TASKS_PER_CPU * cpus)


def run_on_ray(
    ray: Any,
    address: str | None,
    fn: Callable[..., R],
    items: Iterable[T],
    args: Callable[[T], tuple[Any, ...]],
    on_result: Callable[[T, R], None],
) -> dict[str, int]:
    """Run ``fn(*args(item))`` as one ray task per item; ``on_result`` in the driver as each
    lands. Returns how many items each node (by id) ran.

    Results are handed over here, in the driver, so whatever stores them has
    one writer. Tasks go out in a window (:func:`_in_flight`), in ``items``
    order, refilled as results land; on an error (or Ctrl-C) the ones still
    queued are cancelled. A ray this call started is shut down at the end
    (the next run may name another cluster).
    """
    started = _connect(ray, address)
    nodes: Counter[str] = Counter()
    pending: dict[Any, T] = {}
    try:
        task = ray.remote(num_cpus=1)(_on_node)
        queue, window = iter(items), _in_flight(ray)
        while True:
            for item in queue:
                pending[task.remote(fn, *args(item))] = item
                if len(pending) >= window:
                    break
            if not pending:
                break
            refs = list(pending)
            ready, rest = ray.wait(refs, num_returns=1)
            if rest:  # whatever else has landed meanwhile, without waiting
                ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
            for ref in ready:  # one by one: a failed task loses no other's result
                node, result = ray.get(ref)
                nodes[node] += 1
                on_result(pending.pop(ref), result)
    except BaseException:
        for ref in pending:
            with contextlib.suppress(Exception):
                ray.cancel(ref)
        raise
    finally:
        if started:
            ray.shutdown()
    return dict(nodes)


def run_points_on_ray(
    ray: Any,
    address: str | None,
    todo: list[tuple[Any, Any]],
    done: Callable[[tuple[Any, Any], dict[str, Any]], None],
) -> dict[str, int]:
    """Run sweep points ``todo`` ((spec, point) pairs: one spec's points, or a plan's
    points of one spec per candidate) as ray tasks, handing each pair's row to ``done``
    as it lands; return how many points each node ran.

    Each distinct workload (and ``--profile`` file) travels through the object store
    once, so the cluster's nodes need none of the driver's files.
    """
    started = _connect(ray, address)
    shipped: dict[str | None, Any] = {}

    def put(path: str | None) -> Any:
        if path not in shipped:
            shipped[path] = ray.put(_shipped(path))
        return shipped[path]

    def args(pair: tuple[Any, Any]) -> tuple[Any, ...]:
        spec, point = pair
        profile = spec.profile if spec.profile and Path(spec.profile).is_file() else None
        return spec, point, put(spec.workload), put(profile)

    try:
        return run_on_ray(ray, address, run_staged_point, todo, args, done)
    finally:
        if started:
            ray.shutdown()
