"""Trace importers (Mooncake, Marconi) and the Marconi exporter."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from twin.errors import TwinError
from twin.workloads.exporters import export_marconi
from twin.workloads.importers import IMPORTERS, get_importer
from twin.workloads.importers.marconi import MarconiImporter
from twin.workloads.importers.mooncake import MooncakeImporter
from twin.workloads.reader import Workload
from twin.workloads.schema import WorkloadRow
from twin.workloads.writer import WorkloadWriter

DATA = Path(__file__).parent / "data"
MOONCAKE = DATA / "mooncake_small.jsonl"
MARCONI = DATA / "marconi_small.jsonl"


def _write_lines(path: Path, lines: list[object]) -> Path:
    """Write JSON objects (or raw strings) one per line."""
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def _import(importer: object, src: Path, out: Path) -> Workload:
    """What the CLI does: the importer's rows through a WorkloadWriter."""
    with WorkloadWriter(out, importer.metadata(src)) as w:
        w.write_all(importer.rows(src))
    return Workload.open(out)


def _by_key(workload: Workload) -> dict[tuple[int, int], tuple[list[int], list[int]]]:
    return {
        (r.session_id, r.turn): (r.prompt.tolist(), r.output.tolist()) for r in workload.requests()
    }


# ---------------------------------------------------------------- registry


def test_registry_and_unknown_format() -> None:
    assert set(IMPORTERS) == {"mooncake", "marconi"}
    assert get_importer("mooncake") is MooncakeImporter
    assert get_importer("marconi") is MarconiImporter
    with pytest.raises(TwinError, match=r"unknown trace format 'azure'.*marconi, mooncake"):
        get_importer("azure")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TwinError, match="no such trace file"):
        list(MooncakeImporter().rows(tmp_path / "nope.jsonl"))


# ---------------------------------------------------------------- mooncake


def test_mooncake_shared_prefix_and_partial_block() -> None:
    rows = list(MooncakeImporter().rows(MOONCAKE))
    a, b = rows[0].input_tokens, rows[1].input_tokens
    assert (len(a), len(b)) == (1100, 1030)
    # hash_ids [0, 1, 2] vs [0, 1, 3]: same first 1024 tokens, different after.
    np.testing.assert_array_equal(a[:1024], b[:1024])
    assert not np.any(a[1024:1030] == b[1024:1030])
    np.testing.assert_array_equal(a[:512], np.arange(512))
    np.testing.assert_array_equal(a[1024:], 2 * 512 + np.arange(76))  # last block cut to 76
    np.testing.assert_array_equal(rows[3].input_tokens, 5 * 512 + np.arange(13))
    assert len(rows[2].input_tokens) == 512
    assert all(r.input_tokens.dtype == np.int32 for r in rows)
    # Block 0 appears again in request 4: the same run of ids.
    np.testing.assert_array_equal(rows[4].input_tokens[:512], a[:512])


def test_mooncake_row_fields() -> None:
    rows = list(MooncakeImporter().rows(MOONCAKE))
    assert [r.arrival_s for r in rows] == [0.0, 0.0, 1.5, 2.75, 3.0]
    assert [r.session_id for r in rows] == [0, 1, 2, 3, 4]
    assert [r.output_len for r in rows] == [5, 3, 1, 2, 7]
    assert all(r.turn == 0 and not r.extends_history for r in rows)
    assert all(r.output_tokens is None and r.think_s is None for r in rows)


def test_mooncake_round_trip_through_writer(tmp_path: Path) -> None:
    imp = MooncakeImporter()
    w = _import(imp, MOONCAKE, tmp_path / "m.parquet")
    expected = [r.input_tokens for r in imp.rows(MOONCAKE)]
    reqs = list(w.requests())
    assert len(reqs) == 5 and w.num_sessions == 5
    for req, tokens in zip(reqs, expected, strict=True):
        np.testing.assert_array_equal(req.prompt, tokens)
    assert [len(r.output) for r in reqs] == [5, 3, 1, 2, 7]
    assert w.metadata["importer"] == "mooncake"
    assert w.metadata["block_size"] == 512
    assert w.metadata["source"] == str(MOONCAKE)
    assert w.metadata["source_sha256"] == hashlib.sha256(MOONCAKE.read_bytes()).hexdigest()


def test_mooncake_progress_counts_every_byte() -> None:
    seen: list[int] = []
    list(MooncakeImporter().rows(MOONCAKE, on_progress=seen.append))
    assert sum(seen) == MOONCAKE.stat().st_size


def test_mooncake_block_size_option(tmp_path: Path) -> None:
    src = _write_lines(
        tmp_path / "t.jsonl",
        [{"timestamp": 5, "input_length": 6, "output_length": 1, "hash_ids": [3, 7]}],
    )
    (row,) = MooncakeImporter(block_size=4).rows(src)
    assert row.input_tokens.tolist() == [12, 13, 14, 15, 28, 29]
    assert row.arrival_s == 0.005
    with pytest.raises(TwinError, match="block_size"):
        MooncakeImporter(block_size=0)


_OK = {"timestamp": 30, "input_length": 600, "output_length": 2, "hash_ids": [0, 1]}
_MAX_HASH = (2**31 - 1) // 512


@pytest.mark.parametrize(
    ("line", "field", "message"),
    [
        ("{not json", None, "not valid JSON"),
        ("[1, 2]", None, "expected a JSON object"),
        ({"timestamp": 30, "input_length": 600, "output_length": 2}, "hash_ids", "missing"),
        ({**_OK, "input_length": "600"}, "input_length", "expected an integer"),
        ({**_OK, "output_length": True}, "output_length", "expected an integer"),
        ({**_OK, "input_length": 600.0}, "input_length", "expected an integer"),
        ({**_OK, "output_length": -1}, "output_length", "below the minimum 1"),
        ({**_OK, "input_length": 0, "hash_ids": []}, "input_length", "below the minimum 1"),
        ({**_OK, "timestamp": -5}, "timestamp", "negative"),
        ({**_OK, "timestamp": "soon"}, "timestamp", "expected a finite number"),
        ({**_OK, "hash_ids": [0]}, "hash_ids", r"1 block hashes.*ceil\(600/512\) = 2"),
        ({**_OK, "hash_ids": [0, 1, 2]}, "hash_ids", "3 block hashes"),
        ({**_OK, "hash_ids": "0,1"}, "hash_ids", "expected a list"),
        ({**_OK, "hash_ids": [0, 1.5]}, "hash_ids", "expected integers, found 1.5"),
        ({**_OK, "hash_ids": [0, -1]}, "hash_ids", "value -1 at position 1 is outside"),
        ({**_OK, "hash_ids": [0, _MAX_HASH + 1]}, "hash_ids", f"outside \\[0, {_MAX_HASH}\\]"),
        ({**_OK, "hash_ids": [0, 2**70]}, "hash_ids", "expected integers"),
        ({**_OK, "timestamp": 10}, "timestamp", "must not decrease.*10 after 20"),
    ],
)
def test_mooncake_errors(tmp_path: Path, line: object, field: str | None, message: str) -> None:
    # Line 2 is blank and line 3 the bad one: numbers must count blank lines.
    first = {**_OK, "timestamp": 20}
    src = _write_lines(tmp_path / "bad.jsonl", [first, "", line, _OK])
    out = tmp_path / "out.parquet"
    where = "bad.jsonl, line 3" + (f", field '{field}'" if field else "")
    with pytest.raises(TwinError, match=message) as err:
        _import(MooncakeImporter(), src, out)
    assert where in str(err.value)
    assert str(src) in str(err.value)
    assert not out.exists() and list(tmp_path.iterdir()) == [src]


def test_mooncake_max_hash_fits_int32(tmp_path: Path) -> None:
    src = _write_lines(
        tmp_path / "t.jsonl",
        [{"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [_MAX_HASH]}],
    )
    (row,) = MooncakeImporter().rows(src)
    assert int(row.input_tokens[-1]) == 2**31 - 1


# ---------------------------------------------------------------- marconi


def test_marconi_parse_order_and_extends() -> None:
    rows = list(MarconiImporter().rows(MARCONI))
    keys = [(r.session_id, r.turn) for r in rows]
    assert keys == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]
    assert [r.arrival_s for r in rows] == [0.0, 1.0, 2.5, 3.0, 4.0, 4.0]
    assert [r.extends_history for r in rows] == [False, False, True, True, True, False]
    assert rows[2].input_tokens.tolist() == [12, 13]  # after prompt 0 + output 0
    assert rows[4].input_tokens.tolist() == [14]
    # Session 1 turn 2 dropped an old observation: stored whole.
    assert rows[5].input_tokens.tolist() == [1, 40, 41, 33, 42, 34]
    assert rows[4].output_tokens.tolist() == [23, 24, 25] and rows[4].output_len == 3
    assert all(r.think_s is None for r in rows)


def test_marconi_round_trip_through_writer(tmp_path: Path) -> None:
    w = _import(MarconiImporter(), MARCONI, tmp_path / "m.parquet")
    got = _by_key(w)
    for line in MARCONI.read_text().splitlines():
        rec = json.loads(line)
        key = (rec["session_id"], rec["turn_id"])
        assert got[key] == (rec["input_tokens"], rec["output_tokens"])
    assert w.metadata["importer"] == "marconi"


def test_marconi_unsorted_file_is_sorted(tmp_path: Path) -> None:
    lines = MARCONI.read_text().splitlines()
    src = _write_lines(tmp_path / "u.jsonl", lines[::-1])
    a = [(r.session_id, r.turn, r.arrival_s) for r in MarconiImporter().rows(src)]
    b = [(r.session_id, r.turn, r.arrival_s) for r in MarconiImporter().rows(MARCONI)]
    assert a == b


def test_marconi_export_import_identical(tmp_path: Path) -> None:
    w = _import(MarconiImporter(), MARCONI, tmp_path / "m.parquet")
    out = tmp_path / "export.jsonl"
    seen: list[int] = []
    assert export_marconi(w, out, on_progress=seen.append) == 6
    assert sum(seen) == 6
    # Same key order, separators and float format as the artifact: byte-identical.
    assert out.read_text() == MARCONI.read_text()
    w2 = _import(MarconiImporter(), out, tmp_path / "m2.parquet")
    assert _by_key(w2) == _by_key(w)


def test_export_maps_fresh_ids_and_closed_loop(tmp_path: Path) -> None:
    i32 = np.int32
    rows = [
        WorkloadRow(7, 0, 1.0, None, np.array([5, 6], i32), False, None, 2),
        WorkloadRow(7, 1, None, 0.5, np.array([9], i32), True, None, 1),
        WorkloadRow(8, 0, 2.0, None, np.array([5, 100], i32), False, None, 3),
    ]
    with WorkloadWriter(tmp_path / "w.parquet", {"generator": "test"}) as wr:
        wr.write_all(rows)
    w = Workload.open(tmp_path / "w.parquet")
    out = tmp_path / "e.jsonl"
    assert export_marconi(w, out) == 3
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["ts"] for r in recs] == [1.0, 1.5, 2.0]  # closed loop: previous ts + think
    # Fresh ids -1, -2 | -3 | -4, -5, -6 map above the largest stored id (100).
    assert recs[0]["output_tokens"] == [101, 102]
    assert recs[1]["input_tokens"] == [5, 6, 101, 102, 9]
    assert recs[1]["output_tokens"] == [103]
    assert recs[2]["output_tokens"] == [104, 105, 106]
    w2 = _import(MarconiImporter(), out, tmp_path / "w2.parquet")
    assert [r.extends_history for r in w2.requests()] == [False, True, False]
    back = _by_key(w2)
    for req in w.requests():
        prompt, output = back[(req.session_id, req.turn)]
        fresh = lambda a: [x if x >= 0 else 100 - x for x in a.tolist()]  # noqa: E731
        assert (prompt, output) == (fresh(req.prompt), fresh(req.output))


def test_export_mooncake_workload(tmp_path: Path) -> None:
    w = _import(MooncakeImporter(), MOONCAKE, tmp_path / "m.parquet")
    out = tmp_path / "e.jsonl"
    export_marconi(w, out)
    w2 = _import(MarconiImporter(), out, tmp_path / "m2.parquet")
    a, b = _by_key(w), _by_key(w2)
    assert a.keys() == b.keys()
    base = 6 * 512 + 88  # 1 + the largest id: block 6 cut to 600 - 512 = 88 tokens
    outputs = [x for k in sorted(b) for x in b[k][1]]
    assert outputs == list(range(base, base + 18))
    assert all(a[k][0] == b[k][0] for k in a)
    assert [r.arrival_s for r in w2.requests()] == [0.0, 0.0, 1.5, 2.75, 3.0]


def _rec(sid: int = 0, turn: int = 0, ts: float = 0.0, **kw: object) -> dict:
    r = {
        "session_id": sid,
        "turn_id": turn,
        "ts": ts,
        "num_input_tokens": 2,
        "num_output_tokens": 1,
        "input_tokens": [1, 2],
        "output_tokens": [3],
    }
    return {**r, **kw}


@pytest.mark.parametrize(
    ("lines", "field", "message"),
    [
        ([_rec(), "{oops"], None, "not valid JSON"),
        ([_rec(), {k: v for k, v in _rec(1).items() if k != "ts"}], "ts", "missing"),
        ([_rec(), _rec(1, input_tokens=2)], "input_tokens", "expected a list"),
        ([_rec(), _rec(1, input_tokens=[1, 2**31])], "input_tokens", "2147483648 at position 1"),
        ([_rec(), _rec(1, output_tokens=[-3])], "output_tokens", "outside"),
        ([_rec(), _rec(1, input_tokens=[1, "a"])], "input_tokens", "expected integers"),
        ([_rec(), _rec(1, output_tokens=[], num_output_tokens=0)], "output_tokens", "empty"),
        ([_rec(), _rec(1, input_tokens=[], num_input_tokens=0)], "input_tokens", "empty"),
        ([_rec(), _rec(1, num_input_tokens=3)], "num_input_tokens", "3, but input_tokens holds 2"),
        ([_rec(), _rec(-1)], "session_id", "below the minimum 0"),
        ([_rec(), _rec(1, ts="1.0")], "ts", "expected a finite number"),
        ([_rec(), _rec(0, 2, 1.0)], "turn_id", "session 0 has turn 2 but no turn 1"),
        ([_rec(), _rec(0, 0, 1.0)], "turn_id", "turn 0 appears twice"),
        ([_rec(0, 0, 5.0), _rec(0, 1, 4.0)], "ts", "timestamps must not decrease"),
    ],
)
def test_marconi_errors(
    tmp_path: Path, lines: list[object], field: str | None, message: str
) -> None:
    src = _write_lines(tmp_path / "bad.jsonl", lines)
    out = tmp_path / "out.parquet"
    where = "bad.jsonl, line 2" + (f", field '{field}'" if field else "")
    with pytest.raises(TwinError, match=message) as err:
        _import(MarconiImporter(), src, out)
    assert where in str(err.value)
    assert not out.exists()
