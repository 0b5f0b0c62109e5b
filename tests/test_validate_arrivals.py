"""``twin validate``'s fixed arrivals: open loop, sorted, prefix-closed, seeded."""

from __future__ import annotations

import numpy as np
import pytest
from test_engine_helpers import generated, write_rows

from twin.errors import TwinError
from twin.validate import fix_arrivals
from twin.workloads.reader import Workload
from twin.workloads.schema import WorkloadRow


# ----------------------------------------------------------------- fixtures and fakes
@pytest.fixture(scope="module")
def chat(tmp_path_factory: pytest.TempPathFactory) -> Workload:
    """Closed-loop chat sessions (turn 0 timed, later turns after think time)."""
    return Workload.open(
        generated(tmp_path_factory.mktemp("w") / "chat.parquet", "chat", 12, 2.0, max_context=2048)
    )


# ----------------------------------------------------------------- fix_arrivals
def _full_prompts(workload: Workload) -> dict[tuple[int, int], np.ndarray]:
    return {(r.session_id, r.turn): r.prompt for r in workload.requests()}


def test_fixed_arrivals_are_open_loop_sorted_and_prefix_closed(chat, tmp_path):
    fixed = fix_arrivals(chat, tmp_path / "f.parquet", session_rate=None, seed=0, max_requests=40)
    arr = fixed.index["arrival_s"]
    assert fixed.num_rows == 40 and not np.isnan(arr).any()
    assert (np.diff(arr) > 0).all()
    sid, turn = fixed.index["session_id"], fixed.index["turn"]
    for s in np.unique(sid):
        assert sorted(turn[sid == s]) == list(range((sid == s).sum()))
    # The kept requests are the 40 earliest, with the same full prompts.
    before = _full_prompts(chat)
    for key, prompt in _full_prompts(fixed).items():
        np.testing.assert_array_equal(prompt, before[key])
    meta = fixed.metadata["fixed_arrivals"]
    assert meta["rows"] == 40 and meta["session_starts"] == "file arrival_s"
    assert fixed.metadata["generator"] == "chat"


def test_closed_loop_turns_follow_previous_arrival_plus_think(chat, tmp_path):
    fixed = fix_arrivals(chat, tmp_path / "f.parquet", session_rate=None, seed=0, max_requests=None)
    assert fixed.num_rows == chat.num_rows
    src, new = chat.index, fixed.index
    at = {
        (int(s), int(t)): a
        for s, t, a in zip(new["session_id"], new["turn"], new["arrival_s"], strict=True)
    }
    for s, t, a, think in zip(
        src["session_id"], src["turn"], src["arrival_s"], src["think_s"], strict=True
    ):
        expected = a if t == 0 else at[(int(s), int(t) - 1)] + think
        assert at[(int(s), int(t))] == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_fix_arrivals_is_deterministic_and_seeded(tmp_path):
    rng = np.random.default_rng(1)
    rows = [
        WorkloadRow(
            s, t, None, 0.5 if t else None, rng.integers(0, 99, 5, np.int32), t > 0, None, 2
        )
        for s in range(6)
        for t in range(2)
    ]
    src = Workload.open(write_rows(tmp_path / "closed.parquet", rows))
    a = fix_arrivals(src, tmp_path / "a.parquet", session_rate=2.0, seed=3, max_requests=None)
    b = fix_arrivals(src, tmp_path / "b.parquet", session_rate=2.0, seed=3, max_requests=None)
    c = fix_arrivals(src, tmp_path / "c.parquet", session_rate=2.0, seed=4, max_requests=None)
    np.testing.assert_array_equal(a.index["arrival_s"], b.index["arrival_s"])
    assert not np.array_equal(a.index["arrival_s"], c.index["arrival_s"])
    assert a.index["arrival_s"][0] == 0.0  # the first session starts at t = 0
    assert a.metadata["fixed_arrivals"]["session_starts"] == "poisson"
    with pytest.raises(TwinError, match="--session-rate"):
        fix_arrivals(src, tmp_path / "d.parquet", session_rate=None, seed=0, max_requests=None)
    assert not (tmp_path / "d.parquet").exists()


def test_metadata_rate_serves_when_session_starts_are_missing(tmp_path):
    rows = [
        WorkloadRow(s, 0, None, None, np.arange(4, dtype=np.int32), False, None, 1)
        for s in range(3)
    ]
    path = tmp_path / "w.parquet"
    from twin.workloads.writer import WorkloadWriter

    with WorkloadWriter(path, {"generator": "test", "session_rate": 4.0}) as w:
        w.write_all(rows)
    fixed = fix_arrivals(
        Workload.open(path), tmp_path / "f.parquet", session_rate=None, seed=0, max_requests=None
    )
    assert fixed.metadata["fixed_arrivals"]["session_rate"] == 4.0


def test_tied_arrivals_are_spread_in_row_order(tmp_path):
    p = np.arange(6, dtype=np.int32)
    rows = [
        WorkloadRow(0, 0, 1.0, None, p, False, None, 1),
        WorkloadRow(1, 0, 1.0, None, p + 10, False, None, 1),
        WorkloadRow(0, 1, None, None, p[:2], True, None, 1),
    ]  # null think: same instant
    fixed = fix_arrivals(
        Workload.open(write_rows(tmp_path / "t.parquet", rows)),
        tmp_path / "f.parquet",
        session_rate=None,
        seed=0,
        max_requests=None,
    )
    arr = fixed.index["arrival_s"]
    assert list(fixed.index["session_id"]) == [0, 1, 0] and (np.diff(arr) > 0).all()
    assert arr[-1] - arr[0] < 1e-12
    assert fixed.metadata["fixed_arrivals"]["tied_arrivals_spread"] == 2


def test_fix_arrivals_refuses_bad_arguments(chat, tmp_path):
    with pytest.raises(TwinError, match="--requests"):
        fix_arrivals(chat, tmp_path / "f.parquet", session_rate=None, seed=0, max_requests=0)
    with pytest.raises(TwinError, match="--session-rate"):
        fix_arrivals(chat, tmp_path / "f.parquet", session_rate=-1.0, seed=0, max_requests=None)
