"""The engine's clock: the one module that imports SimPy (issue 33).

The engine is a set of SimPy processes, and it speaks SimPy 4's public API alone,
through this module: the types below (re-exported from ``simpy``) and, on them,
``Environment.now``, ``timeout``, ``event``, ``process``, ``all_of``/``any_of``,
``run(until=...)``, ``peek``, ``step`` and ``active_process``; ``Event.succeed``,
``triggered`` and ``value``; ``Process.interrupt`` and :class:`Interrupt`'s
``cause``. No module writes or reads a private attribute of a SimPy object, and
none moves an event's callbacks (``tests/test_sim_adapter.py`` scans ``twin/``).

What the engine needs beyond single calls lives here:

- :func:`wait_until`: a wait that ends at an absolute time exactly. A decode run's
  chunks are priced lazily; the wait for a later chunk is set at the previous
  chunk's end but must end where a timeout set at the run's start would have
  (``t0 + end``, to the bit), which a delay from ``now`` reaches in one timeout
  except when the float sum's rounding skips it.
- :func:`redirect` and :func:`redirected`: an arrival cuts a decode run short; the
  waiting loop must resume at the step boundary where the newcomer joins instead
  of at the chunk's end. The arrival schedules the boundary's timeout itself (so
  it takes its place in SimPy's (time, priority, id) order where it did before
  this module existed) and interrupts the loop with that timeout as the cause;
  the loop catches the :class:`Interrupt` and waits on it. The interruption is
  one urgent event at the arrival's time, processed before any ordinary event of
  that instant, so nothing else sees the loop between the two waits.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import Any

from simpy import AllOf, AnyOf, Environment, Event, Interrupt, Process, Timeout

__all__ = [
    "AllOf",
    "AnyOf",
    "Environment",
    "Event",
    "Interrupt",
    "Process",
    "Timeout",
    "delay_to",
    "redirect",
    "redirected",
    "wait_until",
]


def delay_to(now: float, at: float) -> tuple[float, bool]:
    """The delay ``d`` with ``now + d == at`` (``at >= now``) and ``True``; where the
    sum's rounding skips ``at``, the largest ``d`` with ``now + d < at`` and ``False``."""
    d = at - now
    while d > 0.0 and now + d > at:
        d = math.nextafter(d, 0.0)
    while now + d < at:
        up = math.nextafter(d, math.inf)
        if now + up > at:
            return d, False
        d = up
    return d, True


def wait_until(env: Environment, at: float) -> Generator[Event, Any, None]:
    """Wait (``yield from``) until ``at`` exactly (``at >= env.now``): a timeout set later
    in a run then fires at the very time one set at the run's start would have.

    Where no delay from ``now`` lands on ``at`` (``at`` over twice ``now``, ``now``'s
    offset half a unit of ``at``'s last place and ``at``'s last bit odd), a first
    timeout lands on the last time before ``at`` that one can; from there the
    difference is exact (Sterbenz) and a second one lands on ``at``. That second
    timeout is scheduled a moment later than a single one would be, so it follows,
    among events due at exactly ``at``, those scheduled in between.
    """
    d, exact = delay_to(env.now, at)
    if not exact:
        yield env.timeout(d)
        d, exact = delay_to(env.now, at)
        assert exact
    yield env.timeout(d)


def redirect(process: Process, event: Event) -> None:
    """Make ``process``, suspended on some event, wait on ``event`` instead (an event
    not yet processed, scheduled by the caller): ``process`` is interrupted with
    ``event`` as the cause; its wait catches the :class:`Interrupt` and yields
    :func:`redirected` of it."""
    process.interrupt(event)


def redirected(interrupt: Interrupt) -> Event:
    """The event :func:`redirect` moved the interrupted process's wait to."""
    event = interrupt.cause
    assert isinstance(event, Event)
    return event
