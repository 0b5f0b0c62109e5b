"""Local process pools whose workers never outlive the command that started them.

Every pool of the project is made here, by :func:`guarded_executor` (a
``ProcessPoolExecutor`` for ``map``-style use: Marconi's alpha grid and the
oracle), directly or through :func:`run_in_pool` (sweeps, ``twin plan``,
reproductions, the silicon benchmark's scoring). ``tests/test_orphans.py``
SIGKILLs every command that starts workers and checks none survives.

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

While :func:`run_in_pool` waits, Ctrl-C only sets a flag that its loop turns
into ``KeyboardInterrupt`` between two waits: raised wherever the main thread
happened to be, the exception can land inside ``concurrent.futures.wait``
between acquiring two futures' locks, which then stay held, and the
executor's thread (joined at interpreter exit) blocks on them for ever.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_POLL_S = 0.5  # how often the parent relays workers' progress while it waits

# In a worker: where progress within a task goes (set by _init_worker).
_progress_queue: Any = None


def _watch_parent(parent: int) -> None:
    while True:
        if os.getppid() != parent:
            os._exit(1)
        time.sleep(0.5)


def _init_worker(
    parent: int,
    progress_queue: Any = None,
    then: Callable[..., Any] | None = None,
    then_args: tuple[Any, ...] = (),
) -> None:
    """Runs first in each worker: ignore Ctrl-C (the parent handles it), die with the
    parent; then the pool's own initializer ``then(*then_args)``, if any."""
    global _progress_queue
    _progress_queue = progress_queue
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A SIGTERM sent to the whole group ends a worker at once (a forked worker would
    # otherwise inherit the command's handler and hand ``Terminated`` back as a result);
    # the parent's own handler kills the rest.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    # Also covers the parent dying before prctl took effect, and non-Linux systems.
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    if then is not None:
        then(*then_args)


@contextlib.contextmanager
def guarded_executor(
    max_workers: int,
    initializer: Callable[..., Any] | None = None,
    initargs: tuple[Any, ...] = (),
    progress_queue: Any = None,
) -> Iterator[ProcessPoolExecutor]:
    """A ``ProcessPoolExecutor`` whose workers die with this process and ignore Ctrl-C;
    on any exception (or a generator closed early) its workers are killed at once.

    The one place the project makes a process pool (:func:`run_in_pool` too).
    ``progress_queue``: where :func:`_with_progress` tasks send their progress.
    """
    pool = ProcessPoolExecutor(
        max_workers=max_workers,
        initializer=_init_worker,
        initargs=(os.getpid(), progress_queue, initializer, initargs),
    )
    try:
        yield pool
    except BaseException:
        kill_workers(pool)
        raise
    pool.shutdown(wait=True)


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


class Batched:
    """A progress callback that adds up what it is told and hands the sum on at most every
    ``interval_s`` seconds.

    The engine reports progress at every occupancy sample, some 1,700 times in a
    point of a small workload: sent one by one through a process queue, a
    1,000-point sweep's workers put nearly two million messages. What is still
    held when a point ends is not lost: the sweep completes each point's
    share when its row is stored.
    """

    def __init__(self, send: Callable[[float], None], interval_s: float = _POLL_S / 2) -> None:
        self.send, self.interval_s = send, interval_s
        self.held, self.last = 0.0, float("-inf")  # the first movement goes out at once

    def __call__(self, x: float) -> None:
        self.held += x
        now = time.monotonic()
        if self.held > 0 and now - self.last >= self.interval_s:
            self.send(self.held)
            self.held, self.last = 0.0, now


def _with_progress(fn: Callable[..., R], index: int, *args: Any) -> R:
    """In a worker: ``fn(*args, progress=...)``, its progress sent to the parent as (index, x)
    (batched, :class:`Batched`)."""
    q = _progress_queue
    return fn(*args, progress=None if q is None else Batched(lambda x: q.put((index, x))))


@contextlib.contextmanager
def _interrupt_between_waits() -> Iterator[threading.Event]:
    """Ctrl-C sets the event instead of raising mid-statement (see the module's note).

    Only the main thread can own a signal handler, and a caller's own SIGINT
    handler is left alone: elsewhere the event is never set and Ctrl-C acts as before.
    """
    stop = threading.Event()
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield stop
        return
    previous = signal.signal(signal.SIGINT, lambda _sig, _frame: stop.set())
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


def run_in_pool(
    fn: Callable[..., R],
    items: Iterable[T],
    args: Callable[[T], tuple[Any, ...]],
    jobs: int,
    on_result: Callable[[T, R], None],
    on_progress: Callable[[T, float], None] | None = None,
) -> None:
    """Run ``fn(*args(item))`` for each item in ``jobs`` processes; ``on_result`` as each lands.

    With ``on_progress``, ``fn`` is called with a ``progress`` keyword too, and
    what it reports reaches ``on_progress(item, x)`` in this process while the
    task runs (a long point shows movement before it finishes).

    Any exception (a failed point, ``KeyboardInterrupt``) stops the pool at once
    and propagates; results already handed to ``on_result`` stay handed.
    """
    todo = list(items)
    q: Any = multiprocessing.Queue() if on_progress is not None else None

    def relay() -> None:
        while q is not None and on_progress is not None:
            try:
                index, x = q.get_nowait()
            except queue.Empty:
                return
            on_progress(todo[index], x)

    try:
        with (
            _interrupt_between_waits() as interrupted,
            guarded_executor(jobs, progress_queue=q) as pool,
        ):
            futures: dict[Future[R], T] = {
                (
                    pool.submit(_with_progress, fn, i, *args(item))
                    if q is not None
                    else pool.submit(fn, *args(item))
                ): item
                for i, item in enumerate(todo)
            }
            pending = set(futures)
            while pending:
                done, pending = wait(pending, timeout=_POLL_S, return_when=FIRST_COMPLETED)
                if interrupted.is_set():
                    raise KeyboardInterrupt
                relay()
                for fut in done:
                    on_result(futures[fut], fut.result())
    finally:
        if q is not None:
            q.close()
            q.cancel_join_thread()
