"""Bad input through the real entry point: exit 2, one line, no traceback, nothing written.

Each case here got a traceback (or was silently accepted) before; they run
through ``twin.cli.main.run``, the function the ``twin`` script calls.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from twin.cli.main import run
from twin.workloads.examples import example_path
from twin.workloads.schema import METADATA_KEY

ROOT = Path(__file__).resolve().parents[1]
CHAT = example_path("chat")
TINY = ["-m", "tiny-hybrid", "--cache-gb", "0.001"]


def assert_clean_error(capsys, argv: list[str], folder: Path, needle: str) -> str:
    """``twin argv`` exits 2 with one ``error:`` line containing ``needle``; writes nothing."""
    before = sorted(p.name for p in folder.rglob("*"))
    rc = run(argv)
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == 2, (rc, out, err)
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in out + err
    assert needle in lines[0], lines[0]
    assert sorted(p.name for p in folder.rglob("*")) == before, "something was written"
    return lines[0]


def _rewrite(src: Path, dst: Path, table=None, metadata=None) -> Path:
    table = pq.read_table(src) if table is None else table
    if metadata is not None:
        table = table.replace_schema_metadata(metadata)
    pq.write_table(table, dst)
    return dst


# --- workload files -------------------------------------------------------------------


def test_corrupted_token_page_is_one_line_in_info_replay_simulate(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.parquet"
    column = pq.ParquetFile(CHAT).metadata.row_group(0).column(4)
    assert column.path_in_schema.startswith("input_tokens")
    data = bytearray(CHAT.read_bytes())
    # Break the zstd frame of the first input_tokens page: the footer and the
    # light columns still read, so only reading the tokens finds it.
    magic = data.index(b"\x28\xb5\x2f\xfd", column.data_page_offset)
    data[magic : magic + 4] = b"\0\0\0\0"
    bad.write_bytes(bytes(data))
    for argv in (
        ["workload", "info", str(bad)],
        ["replay", str(bad), *TINY, "-p", "vllm+"],
        ["simulate", str(bad), *TINY, "--out", str(tmp_path / "sim")],
    ):
        line = assert_clean_error(capsys, argv, tmp_path, "corrupt data")
        assert "input_tokens" in line
    assert not (tmp_path / "sim").exists() or not any((tmp_path / "sim").iterdir())


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (b"{not json", "not valid UTF-8 JSON"),
        (b"\xff\xfe\x00", "not valid UTF-8 JSON"),
        (b"[1, 2]", "must be a JSON object"),
    ],
)
def test_broken_file_metadata(tmp_path, capsys, raw: bytes, needle: str) -> None:
    bad = _rewrite(CHAT, tmp_path / "meta.parquet", metadata={METADATA_KEY: raw})
    assert_clean_error(capsys, ["workload", "info", str(bad)], tmp_path, needle)


@pytest.mark.parametrize("column", ["arrival_s", "think_s"])
def test_nan_times_are_refused_not_read_as_null(tmp_path, capsys, column: str) -> None:
    table = pq.read_table(CHAT)
    values = table.column(column).to_numpy(zero_copy_only=False).astype(float)
    row = int(np.flatnonzero(~np.isnan(values))[3])
    values[row] = np.nan  # a real NaN (not a null)
    arr = pa.array(values, pa.float64(), mask=np.isnan(values) & (np.arange(len(values)) != row))
    table = table.set_column(table.schema.get_field_index(column), column, arr)
    bad = _rewrite(CHAT, tmp_path / "nan.parquet", table=table)
    line = assert_clean_error(capsys, ["workload", "info", str(bad)], tmp_path, "NaN")
    assert f"row {row}" in line and repr(column) in line


def test_zero_row_workload_is_refused(tmp_path, capsys) -> None:
    empty = _rewrite(CHAT, tmp_path / "empty.parquet", table=pq.read_table(CHAT).slice(0, 0))
    assert_clean_error(capsys, ["workload", "info", str(empty)], tmp_path, "no rows")


# --- Mooncake traces --------------------------------------------------------------------


def _mooncake_line(**over) -> str:
    rec = {"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [0, 1]}
    rec.update(over)
    return json.dumps(rec)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (_mooncake_line(hash_ids=[0, True]) + "\n", "expected integers, found True"),
        ('{"hash_ids": ' + "[" * 100_000 + "]" * 100_000 + "}\n", "nested too deeply"),
        ("", "no requests in it"),
        ("\n\n", "no requests in it"),
    ],
)
def test_bad_mooncake_traces(tmp_path, capsys, text: str, needle: str) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text(text)
    out = tmp_path / "m.parquet"
    argv = ["workload", "import", "mooncake", str(trace), "-o", str(out)]
    line = assert_clean_error(capsys, argv, tmp_path, needle)
    assert "trace.jsonl" in line


# --- flags and paths ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--cache-gb", "inf"], "--cache-gb inf: must be a finite number"),
        (["--seed", "-1"], "--seed"),
        (["--policy-option", "jobs=abc"], "jobs=abc: expected a whole number"),
        (["--policy-option", "bootstrap_multiplier=nan"], "must be a finite number"),
        (["--policy-option", "alpha=nan"], "alpha=nan: must be a finite number"),
        (["--policy-option", "alpha=-1"], "alpha must be >= 0"),
        (["--gpu-mem-util", "5"], "--gpu-mem-util 5: must be <= 1"),
        (["--session-rate", "nan"], "--session-rate nan: must be a finite number"),
    ],
)
def test_simulate_flags(tmp_path, capsys, args: list[str], needle: str) -> None:
    argv = ["simulate", "-m", "tiny-hybrid", *args, "--out", str(tmp_path / "sim")]
    assert_clean_error(capsys, argv, tmp_path, needle)


def test_profile_pointing_at_a_binary_file(tmp_path, capsys) -> None:
    blob = tmp_path / "blob.json"
    blob.write_bytes(bytes(range(256)) * 4)
    argv = ["simulate", "-m", "tiny-hybrid", "--profile", str(blob), "--out", str(tmp_path / "s")]
    assert_clean_error(capsys, argv, tmp_path, "cannot read profile")


def test_output_paths_of_the_wrong_kind(tmp_path, capsys) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    adir = tmp_path / "adir"
    adir.mkdir()
    for argv, needle in (
        (["simulate", *TINY, "--out", str(afile)], "is a file"),
        (["simulate", *TINY, "--out", str(afile / "sub")], "is a file, not a folder"),
        (["workload", "generate", "chat", "-n", "2", "-o", str(adir)], "is a folder"),
        (["workload", "export", "marconi", str(CHAT), "-o", str(adir)], "is a folder"),
        (["report", "capacity", str(CHAT), "-m", "tiny-hybrid", "--out", str(afile)], "is a file"),
        (["workload", "generate", "chat", "-o", str(afile / "x.parquet")], "not a folder"),
        (["replay", str(CHAT), *TINY, "-p", "vllm+", "--requests", str(adir)], "is a folder"),
    ):
        assert_clean_error(capsys, argv, tmp_path, needle)


def test_an_existing_output_file_is_replaced_not_refused(tmp_path, capsys) -> None:
    out = tmp_path / "w.parquet"
    out.write_text("old")
    assert run(["workload", "generate", "chat", "-n", "2", "-o", str(out)]) == 0
    assert pq.read_table(out).num_rows > 0


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through folder permissions")
def test_unwritable_output_folder(tmp_path, capsys) -> None:
    locked = tmp_path / "ro"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        argv = ["workload", "generate", "chat", "-n", "2", "-o", str(locked / "w.parquet")]
        assert_clean_error(capsys, argv, tmp_path, "not writable")
    finally:
        locked.chmod(0o700)


def test_generate_flags_that_do_not_fit_the_run(tmp_path, capsys) -> None:
    out = ["-o", str(tmp_path / "w.parquet")]
    for argv, needle in (
        (["-n", "5", "--duration", "60"], "--sessions and --duration are mutually exclusive"),
        (["--duration", "-1"], "--duration -1: must be > 0"),
        (["--isl", "512"], "--isl: only the 'fixed' kind takes it, not 'chat'"),
        (["--prefix-len", "8"], "--prefix-len: only the 'fixed' kind"),
    ):
        assert_clean_error(capsys, ["workload", "generate", "chat", *argv, *out], tmp_path, needle)
    for argv, needle in (
        (["--isl", "8", "--set", "isl=9"], "--isl and --set isl=... both given"),
        (["--osl", "0"], "--osl 0: must be >= 1"),
        (["--isl", "many"], "Invalid value for '--isl'"),
        (["--osl-dist", "zipf"], "--osl-dist zipf: expected one of fixed, uniform, lognormal"),
        (["--isl-dist", "uniform"], "--isl-dist uniform: needs isl_spread > 0"),
        (["--prefix-len", "2000"], "--prefix-len 2000: the prefix is part of the prompt"),
        (["--prefix-len", "64", "--max-context", "64"], "--max-context 64 is too small"),
    ):
        assert_clean_error(capsys, ["workload", "generate", "fixed", *argv, *out], tmp_path, needle)


def test_usage_errors_are_one_line(tmp_path, capsys) -> None:
    assert_clean_error(capsys, ["simulate", "--no-such-flag"], tmp_path, "No such option")
    assert_clean_error(capsys, ["workload", "generate", "chat"], tmp_path, "--out")


def test_square_brackets_survive_in_messages(tmp_path, capsys) -> None:
    from twin.errors import TwinError

    def boom():
        raise TwinError("pip install 'twin[ray]'")

    import twin.cli.root as root

    @root.app.command("boom-for-test", hidden=True)
    def _boom() -> None:
        boom()

    try:
        line = assert_clean_error(capsys, ["boom-for-test"], tmp_path, "'twin[ray]'")
        assert line == "error: pip install 'twin[ray]'"
    finally:
        root.app.registered_commands.pop()


def test_ctrl_c_during_start_up_is_one_line(tmp_path) -> None:
    # A KeyboardInterrupt while the command modules are still importing.
    code = (
        "import sys\n"
        "class Stop:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'pyarrow':\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Stop())\n"
        "from twin.cli import main\n"
        "main()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run(
        [sys.executable, "-c", code, "workload", "info", "x.parquet"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert res.returncode == 130, res.stderr
    assert res.stderr.strip() == "interrupted"


def test_commands_import_no_plotting_or_fitting_libraries() -> None:
    code = (
        "import sys\n"
        "from twin.cli.main import run\n"
        "rc = run(['--version'])\n"
        "top = {m.split('.')[0] for m in sys.modules}\n"
        "heavy = sorted(top & {'matplotlib', 'scipy', 'torch'})\n"
        "print(rc, heavy)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert res.stdout.strip().splitlines()[-1] == "0 []", res.stdout + res.stderr
