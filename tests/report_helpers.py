"""Report tests' stand-in for the engine's steady-state judgement.

The capacity report counts a point as meeting its SLOs only when the engine
judged its steady state ``stable`` (``RunSummary.steady_state``). The tiny
sweeps of the report tests are short, so the verdict they would get is not
what those tests are about: :func:`judge_steady_state` makes every simulation
of the test report the verdict it names, so the report's logic is tested on a
known verdict.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from twin.metrics import RequestRecord
from twin.steady_state import SteadyState
from twin.summary import RunSummary


def judge_steady_state(monkeypatch: pytest.MonkeyPatch, verdict: str = "stable") -> None:
    """Every in-process simulation's summary says ``verdict`` (sweeps with ``jobs=1``)."""
    import twin.engine.run as run

    real = run.simulate

    def judged(*args: Any, **kwargs: Any) -> RunSummary:
        summary = real(*args, **kwargs)
        window = (0.0, summary.throughput.window_s)
        state = SteadyState(verdict, f"the test says {verdict}", window, 0, *[None] * 4, 1.0, 1.0)
        return dataclasses.replace(summary, steady_state=state)

    monkeypatch.setattr(run, "simulate", judged)


def record(
    arrival: float, ttft: float, done: float, inp: int = 10, hit: int = 0, out: int = 2, **kw: Any
) -> RequestRecord:
    """A request admitted on arrival (row, session, turn and replica 0, no checkpoints)."""
    return RequestRecord(0, 0, 0, 0, arrival, arrival, arrival + ttft, done, inp, hit, out, 0, **kw)
