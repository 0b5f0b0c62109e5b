"""Fuzzing the command line: broken workload files, random traces and flag values.

Whatever goes in, ``twin`` either succeeds (exit 0) or fails with exit 2, one
``error:`` line on stderr, no traceback and nothing written. Any other outcome
(an exception escaping ``run``, a second line, a half-written output) fails.

The default suite runs a small, derandomised sample in a few seconds; the
``-m slow`` versions draw many more cases at random.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twin.cli.main import run
from twin.workloads.generators import get_generator
from twin.workloads.schema import METADATA_KEY

QUICK = settings(
    max_examples=25,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
LONG = settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def small_workload(tmp_path_factory) -> Path:
    """A valid 4-session chat workload (a few hundred KB at most)."""
    path = tmp_path_factory.mktemp("fuzz") / "small.parquet"
    return get_generator("chat")().write(path, 4, 1.0, 0, 2048)


def _fresh(folder: Path) -> Path:
    """An empty folder (hypothesis reuses one ``tmp_path`` for every example)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    return folder


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def check_outcome(capsys, argv: list[str], folder: Path, outputs: list[Path]) -> int:
    """Run ``twin argv``; assert it ends cleanly (exit 0, or exit 2 with one line, nothing new)."""
    before = _listing(folder)
    rc = run(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    if rc == 0:
        return rc
    lines = err.strip().splitlines()
    assert rc == 2, (argv, rc, err[-2000:])
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-2000:]
    after = _listing(folder)
    assert after == before, f"{argv}: failed but wrote {set(after) - set(before)}"
    assert not any(p.exists() for p in outputs)
    return rc


# --- workload files -----------------------------------------------------------------------

_WEIRD_FLOATS = [math.nan, math.inf, -math.inf, -1.0, 0.0, 1e308, None]
_WEIRD_INTS = [-1, 0, 2**31 - 1, -(2**31), None]


@st.composite
def table_mutation(draw, table: pa.Table) -> pa.Table:
    """One plausible way a workload file goes wrong, at the table level."""
    kind = draw(st.sampled_from(["value", "drop", "type", "metadata", "slice", "tokens"]))
    n = table.num_rows
    if kind == "slice":
        lo = draw(st.integers(0, n))
        return table.slice(lo, draw(st.integers(0, n - lo)))
    name = draw(st.sampled_from(table.column_names))
    idx = table.schema.get_field_index(name)
    if kind == "drop":
        return table.remove_column(idx)
    if kind == "metadata":
        raw = draw(st.sampled_from([b"", b"{", b"\xff", b"null", b"[]", b'"x"', b"1e999"]))
        return table.replace_schema_metadata({METADATA_KEY: raw})
    if kind == "type":
        return table.set_column(idx, name, pa.array([str(i) for i in range(n)]))
    if kind == "tokens":
        col = "input_tokens" if draw(st.booleans()) else "output_tokens"
        values = table.column(col).to_pylist()
        row = draw(st.integers(0, n - 1))
        values[row] = draw(
            st.sampled_from([None, [], [-5], [2**31 - 1, 0], [1] * 40_000, [None, 3]])
        )
        typ = pa.list_(pa.int64())
        return table.set_column(table.schema.get_field_index(col), col, pa.array(values, typ))
    values = table.column(name).to_pylist()
    row = draw(st.integers(0, n - 1))
    field = table.schema.field(name)
    if pa.types.is_floating(field.type):
        values[row] = draw(st.sampled_from(_WEIRD_FLOATS))
    elif pa.types.is_integer(field.type):
        values[row] = draw(st.sampled_from(_WEIRD_INTS))
    elif pa.types.is_boolean(field.type):
        values[row] = draw(st.sampled_from([True, False, None]))
    else:
        values[row] = None
    try:
        arr = pa.array(values, field.type)
    except (pa.ArrowInvalid, OverflowError):
        arr = pa.array(values)
    if pa.types.is_floating(field.type):  # keep real NaNs as NaN, not null
        arr = pa.array(
            np.array([math.nan if v is None else v for v in values], float),
            field.type,
            mask=np.array([v is None for v in values]),
        )
    return table.set_column(idx, name, arr)


def _fuzz_workload(data, capsys, small_workload: Path, tmp_path: Path) -> None:
    folder = _fresh(tmp_path / "case")
    bad = folder / "w.parquet"
    if data.draw(st.booleans()):
        table = data.draw(table_mutation(pq.read_table(small_workload)))
        pq.write_table(table, bad)
    else:  # raw bytes: flips and truncation anywhere in the file
        raw = bytearray(small_workload.read_bytes())
        for _ in range(data.draw(st.integers(1, 8))):
            pos = data.draw(st.integers(0, len(raw) - 1))
            raw[pos] ^= data.draw(st.integers(1, 255))
        if data.draw(st.booleans()):
            raw = raw[: data.draw(st.integers(0, len(raw)))]
        bad.write_bytes(bytes(raw))
    check_outcome(capsys, ["workload", "info", str(bad)], folder, [])
    sim = folder / "sim"
    argv = ["simulate", str(bad), "-m", "tiny-hybrid", "--cache-gb", "0.001", "--out", str(sim)]
    if check_outcome(capsys, argv, folder, [sim]) == 0:
        assert (sim / "summary.json").is_file()


@QUICK
@given(data=st.data())
def test_fuzz_workload_files(data, capsys, small_workload, tmp_path) -> None:
    _fuzz_workload(data, capsys, small_workload, tmp_path)


@pytest.mark.slow
@LONG
@given(data=st.data())
def test_fuzz_workload_files_long(data, capsys, small_workload, tmp_path) -> None:
    _fuzz_workload(data, capsys, small_workload, tmp_path)


# --- Mooncake traces ------------------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=5),
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=5), kids, max_size=4)
    ),
    max_leaves=12,
)
_record = st.fixed_dictionaries(
    {},
    optional={
        "timestamp": st.one_of(st.integers(-5, 10**6), _json),
        "input_length": st.one_of(st.integers(-5, 2000), _json),
        "output_length": st.one_of(st.integers(-5, 50), _json),
        "hash_ids": st.one_of(st.lists(st.integers(-3, 50), max_size=6), _json),
    },
)
_line = st.one_of(
    _record.map(lambda r: json.dumps(r).encode()),
    _json.map(lambda r: json.dumps(r).encode()),
    st.text(max_size=30).map(str.encode),
    st.binary(max_size=30),  # not UTF-8, or a stray newline
)


def _fuzz_trace(lines: list[bytes], capsys, tmp_path: Path) -> None:
    folder = _fresh(tmp_path / "trace")
    trace = folder / "t.jsonl"
    trace.write_bytes(b"\n".join(lines) + (b"\n" if lines else b""))
    out = folder / "t.parquet"
    argv = ["workload", "import", "mooncake", str(trace), "-o", str(out)]
    if check_outcome(capsys, argv, folder, [out]) == 0:
        assert out.is_file()


@QUICK
@given(lines=st.lists(_line, max_size=6))
def test_fuzz_mooncake_traces(lines, capsys, tmp_path) -> None:
    _fuzz_trace(lines, capsys, tmp_path)


@pytest.mark.slow
@LONG
@given(lines=st.lists(_line, max_size=12))
def test_fuzz_mooncake_traces_long(lines, capsys, tmp_path) -> None:
    _fuzz_trace(lines, capsys, tmp_path)


# --- flags ------------------------------------------------------------------------------

_VALUES = ["nan", "inf", "-inf", "-1", "0", "1e309", "abc", "", "0.5", "2", "1e-300", "5"]
_FLAGS = [
    "--cache-gb",
    "--seed",
    "--gpu-mem-util",
    "--session-rate",
    "--request-rate",
    "--warmup-s",
    "--until-s",
    "--max-running",
    "--max-batched-tokens",
    "--replicas",
    "--tp",
]
_OPTIONS = ["alpha", "bootstrap_multiplier", "jobs", "alpha_metric", "nonsense", "block_size"]


@st.composite
def simulate_flags(draw) -> list[str]:
    argv: list[str] = []
    for flag in draw(st.lists(st.sampled_from(_FLAGS), max_size=3, unique=True)):
        argv += [flag, draw(st.sampled_from(_VALUES))]
    for key in draw(st.lists(st.sampled_from(_OPTIONS), max_size=2, unique=True)):
        argv += ["--policy-option", f"{key}={draw(st.sampled_from(_VALUES))}"]
    if draw(st.booleans()):
        argv += ["--policy", draw(st.sampled_from(["marconi", "vllm+", "lru9", ""]))]
    return argv


def _fuzz_flags(argv: list[str], capsys, small_workload: Path, tmp_path: Path) -> None:
    folder = _fresh(tmp_path / "flags")
    sim = folder / "sim"
    full = ["simulate", str(small_workload), "-m", "tiny-hybrid", "--out", str(sim), "--force"]
    # Bound the run so that accepted extreme values (a huge --until-s) stay quick.
    check_outcome(capsys, [*full, "--until-s", "30", *argv], folder, [])


@QUICK
@given(argv=simulate_flags())
def test_fuzz_simulate_flags(argv, capsys, small_workload, tmp_path) -> None:
    _fuzz_flags(argv, capsys, small_workload, tmp_path)


@pytest.mark.slow
@LONG
@given(argv=simulate_flags())
def test_fuzz_simulate_flags_long(argv, capsys, small_workload, tmp_path) -> None:
    _fuzz_flags(argv, capsys, small_workload, tmp_path)
