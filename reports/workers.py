"""A local process pool whose workers never outlive the sweep that started them.

``concurrent.futures.ProcessPoolExecutor`` on its own has two faults here:

- a SIGKILLed parent leaves its workers running (and, once idle, sleeping
  forever on the call queue); each worker therefore watches its parent and
  exits when it is gone (Linux: ``PR_SET_PDEATHSIG``, elsewhere a thread
  polling ``os.getppid``);
- on Ctrl-C the terminal sends SIGINT to every worker as well, the executor
  hands each ``KeyboardInterrupt`` back as a result and goes on running the
  queued points, and ``with`` waits for all of them (tens of seconds). Workers
  here ignore SIGINT; the parent, on any exception, cancels what is queued and
  kills the workers at once.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _watch_parent(parent: int) -> None:
    while True:
        if os.getppid() != parent:
            os._exit(1)
        time.sleep(0.5)


def _init_worker(parent: int) -> None:
    """Runs first in each worker: ignore Ctrl-C (the parent handles it), die with the parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    # Also covers the parent dying before prctl took effect, and non-Linux systems.
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()


def kill_workers(pool: ProcessPoolExecutor) -> None:
    """Stop a pool now: drop queued work and kill its processes (no waiting for points)."""
    # ``_processes`` is the executor's pid -> Process map (CPython 3.8+); the
    # public API has no way to stop a running task.
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        with contextlib.suppress(Exception):
            proc.kill()
    for proc in procs:
        with contextlib.suppress(Exception):
            proc.join(timeout=5)


def run_in_pool(
    fn: Callable[..., R],
    items: Iterable[T],
    args: Callable[[T], tuple[Any, ...]],
    jobs: int,
    on_result: Callable[[T, R], None],
) -> None:
    """Run ``fn(*args(item))`` for each item in ``jobs`` processes; ``on_result`` as each lands.

    Any exception (a failed point, ``KeyboardInterrupt``) stops the pool at once
    and propagates; results already handed to ``on_result`` stay handed.
    """
    pool = ProcessPoolExecutor(max_workers=jobs, initializer=_init_worker, initargs=(os.getpid(),))
    try:
        futures: dict[Future[R], T] = {pool.submit(fn, *args(item)): item for item in items}
        for fut in as_completed(futures):
            on_result(futures[fut], fut.result())
    except BaseException:
        kill_workers(pool)
        raise
    pool.shutdown(wait=True)
