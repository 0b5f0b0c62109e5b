"""The reader's session token buffers give every turn the tokens plain concatenation would."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import twin.workloads.reader as reader_mod
from twin.workloads import Workload


def _random_workload(path, rng: np.random.Generator, sessions: int = 40) -> list[dict]:
    """Interleaved multi-turn sessions: some turns start afresh, some give output ids."""
    turns = {s: int(rng.integers(1, 9)) for s in range(sessions)}
    order = [s for s in range(sessions) for _ in range(turns[s])]
    rng.shuffle(order)
    rows, seen = [], dict.fromkeys(range(sessions), 0)
    for s in order:
        t = seen[s]
        seen[s] += 1
        n_out = int(rng.integers(1, 30))
        given = bool(rng.random() < 0.3)
        rows.append(
            {
                "session_id": s,
                "turn": t,
                "arrival_s": None,
                "think_s": 0.5,
                "input_tokens": rng.integers(0, 1000, int(rng.integers(1, 60))).tolist(),
                "extends_history": t > 0 and bool(rng.random() < 0.8),
                "output_tokens": rng.integers(0, 1000, n_out).tolist() if given else None,
                "output_len": n_out,
            }
        )
    types = {
        "session_id": pa.int64(),
        "turn": pa.int32(),
        "arrival_s": pa.float64(),
        "think_s": pa.float64(),
        "input_tokens": pa.list_(pa.int32()),
        "extends_history": pa.bool_(),
        "output_tokens": pa.list_(pa.int32()),
        "output_len": pa.int32(),
    }
    table = pa.table({k: pa.array([r[k] for r in rows], v) for k, v in types.items()})
    pq.write_table(table, path)
    return rows


def _expected(rows: list[dict]) -> list[tuple[list[int], list[int]]]:
    """Prompt and output of each row by the definition: history + input, fresh ids from -1."""
    history: dict[int, list[int]] = {}
    fresh = 0
    out = []
    for r in rows:
        prompt = (history.get(r["session_id"], []) if r["extends_history"] else []) + r[
            "input_tokens"
        ]
        output = r["output_tokens"]
        if output is None:
            output = list(range(-1 - fresh, -1 - fresh - r["output_len"], -1))
            fresh += r["output_len"]
        history[r["session_id"]] = prompt + output
        out.append((prompt, output))
    return out


@pytest.mark.parametrize("batch_rows", [3, 128])
def test_turns_equal_plain_concatenation_and_earlier_turns_stay_intact(
    tmp_path, monkeypatch, batch_rows
):
    monkeypatch.setattr(reader_mod, "_BATCH_ROWS", batch_rows)  # batches end mid-session
    rows = _random_workload(tmp_path / "w.parquet", np.random.default_rng(batch_rows))
    expected = _expected(rows)
    reqs = []
    for req, (prompt, output) in zip(
        Workload.open(tmp_path / "w.parquet").requests(), expected, strict=True
    ):
        assert req.prompt.tolist() == prompt and req.output.tolist() == output
        assert req.full.tolist() == prompt + output
        assert req.full.dtype == req.prompt.dtype == req.output.dtype == np.int32
        # One array: the cache takes ``full`` without copying the conversation again.
        assert np.shares_memory(req.full, req.prompt) and np.shares_memory(req.full, req.output)
        reqs.append(req)
    # Later turns appended to the same buffers: every earlier turn still reads as it did.
    for req, (prompt, output) in zip(reqs, expected, strict=True):
        assert req.full.tolist() == prompt + output
