"""The typed run summary (twin.summary): one builder, one serialisation, read back whole."""

from __future__ import annotations

import json

import pytest

from twin.engine import SUMMARY_FILE, build_run
from twin.errors import TwinError
from twin.metrics import to_json
from twin.reports.sweep import Point, SweepSpec, summary_row
from twin.slo import parse_slos
from twin.summary import SCHEMA, SCHEMA_VERSION, RunSummary
from twin.workloads.examples import example_path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
    """Two small runs: the paper's dedicated cache with SLOs, and a shared pool (preemption)."""
    out = tmp_path_factory.mktemp("summary")
    slos = parse_slos(["p95_ttft<=500ms", "p95_itl<=50ms"])
    dedicated = build_run(
        example_path("chat"), model="tiny-hybrid", cache_gb=0.001, seed=2, until_s=30.0
    )
    pooled = build_run(
        example_path("chat"), model="tiny-hybrid", engine="vllm", cache_gb="auto", until_s=30.0
    )
    return [
        (dedicated.simulate(out / "dedicated", slos=slos), out / "dedicated"),
        (pooled.simulate(out / "pooled"), out / "pooled"),
    ]


def test_the_builders_summary_is_the_stored_file(runs) -> None:
    for summary, out in runs:
        text = (out / SUMMARY_FILE).read_text()
        assert to_json(summary.to_dict()) == text
        stored = json.loads(text)
        assert (stored["schema"], stored["schema_version"]) == (SCHEMA, SCHEMA_VERSION)
        # Without the two schema keys: the summary.json of the tree before them.
        assert to_json(summary.to_dict(schema=False)) == to_json(
            {k: v for k, v in stored.items() if k not in ("schema", "schema_version")}
        )
    dedicated, pooled = (s for s, _ in runs)
    assert dedicated.slo is not None and dedicated.preemption is None
    assert pooled.preemption is not None and pooled.slo is None


def test_from_dict_inverts_to_dict(runs) -> None:
    for summary, out in runs:
        assert RunSummary.from_dict(summary.to_dict()) == summary
        # A stored file reads back to the same text (its floats already rounded).
        stored = RunSummary.from_dict(json.loads((out / SUMMARY_FILE).read_text()))
        assert to_json(stored.to_dict()) == (out / SUMMARY_FILE).read_text()


def test_a_newer_schema_is_refused(runs) -> None:
    d = runs[0][0].to_dict()
    with pytest.raises(TwinError, match=r"twin\.summary"):
        RunSummary.from_dict({**d, "schema_version": SCHEMA_VERSION + 1})
    with pytest.raises(TwinError, match=r"twin\.summary"):
        RunSummary.from_dict({**d, "schema": "other"})


def test_a_sweep_row_reads_the_typed_summary(runs) -> None:
    summary, out = runs[0]
    spec = SweepSpec(workload="w.parquet", model="tiny-hybrid", slos=("p95_ttft<=500ms",))
    row = summary_row(spec, Point(0.001, "marconi", 1.0, 2), summary)
    assert row["requests_measured"] == summary.requests.measured
    p95 = summary.latency.ttft_s.p95
    assert p95 is not None and row["ttft_p95_ms"] == pytest.approx(p95 * 1e3)
    assert row["throughput_rps"] == summary.throughput.requests_per_s
    assert summary.steady_state is not None and row["verdict"] == summary.steady_state.verdict
    # The same row from the file on disk.
    stored = RunSummary.from_dict(json.loads((out / SUMMARY_FILE).read_text()))
    assert summary_row(spec, Point(0.001, "marconi", 1.0, 2), stored).keys() == row.keys()
