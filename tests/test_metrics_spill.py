"""Latencies spilled to temporary files give the same summary as latencies kept in memory."""

from __future__ import annotations

import twin.metrics
from twin.engine import build_run
from twin.metrics import to_json
from workloads.examples import example_path


def _summary() -> str:
    run = build_run(example_path("chat"), model="tiny-hybrid", cache_gb=0.001, seed=2)
    return to_json(run.simulate())


def test_spilling_latencies_changes_no_byte_of_the_summary(monkeypatch) -> None:
    kept = _summary()
    monkeypatch.setattr(twin.metrics, "SPILL_AT", 7)  # many spills, and a tail in memory
    spilled = _summary()
    assert spilled == kept
    assert '"ttft_s"' in kept
