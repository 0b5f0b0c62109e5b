"""Report tests' stand-in for the engine's steady-state judgement.

The capacity report counts a point as meeting its SLOs only when the engine
judged its steady state ``stable`` (``summary["steady_state"]``). The tiny
sweeps of the report tests are short, so the verdict they would get is not
what those tests are about: :func:`judge_steady_state` makes every simulation
of the test report the verdict it names, so the report's logic is tested on a
known verdict.
"""

from __future__ import annotations

from typing import Any

import pytest


def judge_steady_state(monkeypatch: pytest.MonkeyPatch, verdict: str = "stable") -> None:
    """Every in-process simulation's summary says ``verdict`` (sweeps with ``jobs=1``)."""
    import twin.engine.run as run

    real = run.simulate

    def judged(*args: Any, **kwargs: Any) -> dict[str, Any]:
        summary = real(*args, **kwargs)
        summary["steady_state"] = {
            "verdict": verdict,
            "reason": f"the test says {verdict}",
            "arrival_rate_rps": 1.0,
            "completion_rate_rps": 1.0,
        }
        return summary

    monkeypatch.setattr(run, "simulate", judged)
