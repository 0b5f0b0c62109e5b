"""``twin workload`` end to end through the real entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from twin.workloads.examples import EXAMPLES, build_all, example_path

DATA = Path(__file__).parent / "data"


def twin(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "twin", *args], capture_output=True, text=True, timeout=120
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def info_json(path: Path) -> dict:
    return json.loads(twin("workload", "info", str(path), "--json").stdout)


def test_generate_is_byte_identical_for_a_seed_and_info_describes_it(tmp_path):
    a, b, c = tmp_path / "a.parquet", tmp_path / "b.parquet", tmp_path / "c.parquet"
    for out, seed in ((a, "7"), (b, "7"), (c, "8")):
        twin("workload", "generate", "chat", "-n", "12", "--seed", seed, "-o", str(out))
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()
    s = info_json(a)
    assert s["sessions"] == 12
    assert s["producer"]["generator"] == "chat" and s["producer"]["seed"] == 7
    # Multi-turn chat re-sends its history: most prompt tokens are a previous turn's.
    assert 0.5 < s["infinite_cache"]["token_hit_rate"] < 1.0
    assert s["arrivals"]["request_rate_per_s"] is None  # closed-loop turns
    assert s["prompt_tokens"]["max"] + s["output_tokens"]["max"] <= 2 * 32768


def test_import_export_round_trip_keeps_every_prompt(tmp_path):
    imported = tmp_path / "m.parquet"
    twin("workload", "import", "mooncake", str(DATA / "mooncake_small.jsonl"), "-o", str(imported))
    exported = tmp_path / "m.jsonl"
    twin("workload", "export", "marconi", str(imported), "-o", str(exported))
    again = tmp_path / "again.parquet"
    twin("workload", "import", "marconi", str(exported), "-o", str(again))
    s1, s2 = info_json(imported), info_json(again)
    assert s1["requests"] == s2["requests"] > 0
    assert s1["tokens"]["prompt_total"] == s2["tokens"]["prompt_total"]
    assert s1["infinite_cache"]["hit_tokens"] == s2["infinite_cache"]["hit_tokens"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["workload", "info", "absent.parquet"], "absent.parquet: no such workload file"),
        (["workload", "generate", "chess", "-o", "x.parquet"], "unknown"),
        (["workload", "generate", "chat", "--set", "nope=1", "-o", "x.parquet"], "--set nope"),
        (
            ["workload", "generate", "chat", "--set", "mean_turns", "-o", "x.parquet"],
            "--set 'mean_turns': expected KEY=VALUE",
        ),
        (["workload", "import", "mooncake", "absent.jsonl", "-o", "x.parquet"], "absent.jsonl"),
        (["workload", "export", "vidur", "x.parquet", "-o", "x.jsonl"], "'vidur' is unknown"),
        (["models", "show", "gpt-9"], "gpt-9"),
        # usage errors (typer's) name the flag, in one line too
        (["workload", "generate", "chat", "-n", "0", "-o", "x.parquet"], "--sessions"),
        (["workload", "generate", "chat", "--session-rate", "fast", "-o", "x.parquet"], "rate"),
        (["models", "list", "--no-such-flag"], "--no-such-flag"),
    ],
)
def test_bad_input_is_one_clear_line_and_nothing_written(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    proc = twin(*args, check=False)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_every_command_has_help_with_an_example():
    for cmd in (
        ["models", "list"],
        ["models", "show"],
        ["workload", "generate"],
        ["workload", "kinds"],
        ["workload", "import"],
        ["workload", "export"],
        ["workload", "info"],
    ):
        out = twin(*cmd, "--help").stdout
        assert "Example" in out and f"twin {' '.join(cmd)}" in out, cmd


def test_shipped_examples_equal_a_fresh_build(tmp_path):
    for path in build_all(tmp_path):
        shipped = example_path(path.stem)
        assert shipped.stat().st_size < 2_000_000
        assert pq.read_table(shipped).equals(pq.read_table(path)), path.stem
    assert sorted(p.stem for p in tmp_path.iterdir()) == sorted(EXAMPLES)


def test_a_duration_file_holds_the_sessions_a_count_file_starts_with(tmp_path, capsys):
    from twin.cli.main import run
    from twin.workloads.reader import Workload

    timed, counted = tmp_path / "timed.parquet", tmp_path / "counted.parquet"
    argv = ["workload", "generate", "chat", "--session-rate", "0.5", "--seed", "4"]
    assert run([*argv, "--duration", "40", "-o", str(timed)]) == 0
    meta = Workload.open(timed).metadata
    n = meta["sessions"]
    assert meta["duration_s"] == 40.0 and n == Workload.open(timed).num_sessions > 1
    assert f"in {n} sessions" in capsys.readouterr().out
    assert run([*argv, "-n", str(n), "-o", str(counted)]) == 0
    assert pq.read_table(timed).equals(pq.read_table(counted))
    assert run(["workload", "generate", "chat", "-o", str(tmp_path / "default.parquet")]) == 0
    assert Workload.open(tmp_path / "default.parquet").num_sessions == 100
