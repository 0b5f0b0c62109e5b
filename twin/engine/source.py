"""The session source: when sessions start, when their turns arrive, read lazily from the file.

Rows come from :meth:`Workload.requests` on demand, never all at once:

- the arrival driver asks :meth:`SessionSource.sessions` for the next session
  start (a turn-0 row), pulling rows until one appears;
- a session that needs its next turn asks :meth:`SessionSource.next_turn`,
  pulling rows until that turn appears.

Rows pulled on someone else's behalf wait in per-session deques. Because rows
are in nominal arrival order, what is buffered is bounded by how far the
simulated sessions lag their nominal schedule, not by the file's size.

Arrival times (DESIGN.md, workload schema):

- open-loop rows (``arrival_s`` set) arrive at that time, scaled by
  ``file rate / --request-rate`` about the first arrival when a rate is given;
- closed-loop rows arrive ``think_s`` (0 if null) after the session's previous
  turn completes;
- with ``--session-rate`` the k-th session in file order starts at the k-th
  arrival of a seeded Poisson process (the first at t = 0, as the generators
  do; gamma gaps with ``--burstiness``), replacing the file's turn-0 time; the
  session's later open-loop turns keep their offsets from its turn 0. Without
  it every turn 0 needs a time;
- with ``--concurrency`` (``closed_loop``) no time in the file is used: a free
  client takes the next session in file order and sends its turn 0 ``think_s``
  (0 if null) after it became free (a benchmark client's dispatch delay:
  ``twin.validate.silicon.harness.Harness.dispatch_spread_s``), and every later
  turn ``think_s`` after the previous one completes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

import numpy as np

from twin.errors import TwinError, where
from twin.workloads.generators.base import session_start_times
from twin.workloads.reader import Request, Workload

# Bits of ``SessionSource.flags[row]``: the row is its session's last turn; the
# session's next turn arrives at its own time (open loop).
LAST_TURN = 1
NEXT_OPEN = 2


class SessionSource:
    """Session starts and turns of ``workload``; see the module docstring."""

    def __init__(
        self,
        workload: Workload,
        session_rate: float | None = None,
        request_rate: float | None = None,
        seed: int = 0,
        closed_loop: bool = False,
        burstiness: float = 1.0,
    ) -> None:
        self.workload = workload
        self.session_rate = session_rate
        # Closed-loop clients (--concurrency): every turn after the first waits for the
        # previous one, and sessions start when a client is free, not at a time.
        self.closed_loop = closed_loop
        index = workload.index
        sid, turn, arrival = index["session_id"], index["turn"], index["arrival_s"]
        self.num_rows = len(sid)
        self.num_sessions = int((turn == 0).sum())
        # Per row: is it its session's last turn, and is the next turn open loop?
        # (A session runs a turn inline when the next one waits for it anyway.)
        # One byte a row (``flags[row] & LAST_TURN``, ``& NEXT_OPEN``): indexing
        # bytes is cheaper than a numpy array's, and memory stays one byte a row.
        order = np.argsort(sid, kind="stable")
        same = sid[order[1:]] == sid[order[:-1]]
        flags = np.full(self.num_rows, LAST_TURN, np.uint8)
        flags[order[:-1][same]] = 0
        if not closed_loop:
            next_open = np.zeros(self.num_rows, bool)
            next_open[order[:-1][same]] = ~np.isnan(arrival[order[1:][same]])
            flags[next_open] |= NEXT_OPEN
        self.flags = flags.tobytes()
        known = arrival[~np.isnan(arrival)]
        self.first_arrival = float(known[0]) if known.size else 0.0
        self.file_request_rate = _rate(known)
        self.scale = 1.0
        if request_rate is not None:
            if self.file_request_rate is None:
                raise TwinError(
                    f"--request-rate: {workload.path} has no open-loop arrival span "
                    "to scale (fewer than two distinct arrival times)"
                )
            self.scale = self.file_request_rate / request_rate
        if session_rate is None and not closed_loop:
            missing = np.flatnonzero((turn == 0) & np.isnan(arrival))
            if missing.size:
                r = int(missing[0])
                raise TwinError(
                    f"{where(workload.path, r, 'arrival_s')}: session {sid[r]} has "
                    "no start time (closed loop); give --session-rate"
                )
        self.last_known_arrival = self.scaled(float(known[-1])) if known.size else 0.0
        self._seed, self._burstiness = seed, burstiness
        self._rows: Iterator[Request] = workload.requests()
        self._starts: deque[Request] = deque()
        self._pending: dict[int, deque[Request]] = {}
        self._dropped: set[int] = set()
        self.buffered = 0  # rows read but not yet handed out (for memory checks)
        self.peak_buffered = 0

    # ------------------------------------------------------------------ times
    def scaled(self, t: float) -> float:
        """A file arrival time on the simulated clock (``--request-rate`` scaling)."""
        if self.scale == 1.0:
            return t
        return self.first_arrival + (t - self.first_arrival) * self.scale

    def horizon(self) -> float:
        """When the last arrival is expected (for progress bars and sampling)."""
        if self.closed_loop:
            return 0.0  # set by how fast the clients are served: unknown before the run
        if self.session_rate is not None:
            return max(0.0, (self.num_sessions - 1) / self.session_rate)
        return self.last_known_arrival

    def turn_arrival(self, req: Request, first: Request, start: float) -> float | None:
        """When open-loop turn ``req`` of a session started at ``start`` arrives; None if closed."""
        if req.turn == 0:
            # Open loop: the driver already waited for the session start. Closed loop:
            # the client sends it ``think_s`` after it became free (``start``), as a
            # later turn after the previous one (``twin.workloads.exporters``' nominal
            # time of a closed-loop turn 0 likewise).
            return None if self.closed_loop else start
        if req.arrival_s is None or self.closed_loop:
            return None
        if self.session_rate is not None and first.arrival_s is not None:
            return start + (req.arrival_s - first.arrival_s) * self.scale
        return self.scaled(req.arrival_s)

    # ------------------------------------------------------------------ rows
    def sessions(self) -> Iterator[tuple[Request, float]]:
        """Each session's turn 0 with its start time, in file order, read lazily."""
        # The same Poisson stream as the workload generators' (one definition).
        rate = self.session_rate
        times = None if rate is None else session_start_times(rate, self._seed, self._burstiness)
        while True:
            first = self._next_start()
            if first is None:
                return
            if self.closed_loop:
                start = 0.0  # the client starts it when it is free
            elif self.session_rate is None:
                assert first.arrival_s is not None  # checked in __init__
                start = self.scaled(first.arrival_s)
            else:
                assert times is not None
                start = next(times)
            yield first, start

    def next_turn(self, session_id: int) -> Request:
        """The next turn of ``session_id`` (pulling rows until it appears)."""
        q = self._pending.get(session_id)
        if q:
            req = q.popleft()
            if not q:
                del self._pending[session_id]
            self.buffered -= 1
            return req
        for req in self._rows:
            if req.session_id == session_id:
                return req
            self._keep(req)
        raise AssertionError(f"session {session_id}: a later turn was promised but never read")

    def drop(self, session_id: int) -> None:
        """``session_id`` will ask for no more turns (``--until-s``): discard its rows."""
        q = self._pending.pop(session_id, None)
        if q:
            self.buffered -= len(q)
        self._dropped.add(session_id)

    def _next_start(self) -> Request | None:
        if self._starts:
            self.buffered -= 1
            return self._starts.popleft()
        for req in self._rows:
            if req.turn == 0:
                return req
            self._keep(req)
        return None

    def _keep(self, req: Request) -> None:
        if req.session_id in self._dropped:
            return
        if req.turn == 0:
            self._starts.append(req)
        else:
            q = self._pending.get(req.session_id)
            if q is None:
                q = self._pending[req.session_id] = deque()
            q.append(req)
        self.buffered += 1
        if self.buffered > self.peak_buffered:
            self.peak_buffered = self.buffered


def _rate(arrivals: np.ndarray) -> float | None:
    """Requests per second over the span of the known arrivals (None without a span)."""
    if arrivals.size < 2:
        return None
    span = float(arrivals[-1] - arrivals[0])
    return (arrivals.size - 1) / span if span > 0 else None
