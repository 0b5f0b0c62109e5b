"""A new user's path: whole numbers in tables, progress in logs, examples that run."""

from __future__ import annotations

import re

import pytest

from twin.cli import common
from twin.cli.main import run
from twin.workloads.examples import example_path


def test_piped_tables_show_every_number_whole(capsys) -> None:
    assert run(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert "…" not in out
    assert "d_model" in out and "524,288" in out


def test_a_narrow_table_wraps_numbers_instead_of_cutting_them(monkeypatch, capsys) -> None:
    narrow = common._TableConsole(width=60)
    monkeypatch.setattr(common, "console", narrow)
    monkeypatch.setattr("twin.cli.models.console", narrow, raising=False)
    assert run(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert "…" not in out and "524," in out


def test_progress_prints_plain_lines_when_not_on_a_terminal(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(common, "PLAIN_PROGRESS_EVERY_S", 0.0)
    out = tmp_path / "chat.parquet"
    assert run(["workload", "generate", "chat", "-n", "4", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("generating chat:")]
    assert lines, err
    assert re.fullmatch(r"generating chat: 4/4 \(100%\), \d+ s elapsed", lines[-1])


def test_error_text_keeps_square_brackets_and_stays_one_line(tmp_path, capsys) -> None:
    try:
        import ray  # noqa: F401

        pytest.skip("ray is installed")
    except ImportError:
        pass
    out = tmp_path / "x"
    rc = run(["report", "capacity", str(example_path("chat")), "--executor", "ray", "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.strip() == "error: --executor ray: ray is not installed; pip install 'twin[ray]'"


def test_simulate_progress_counts_requests_to_the_end(tmp_path, monkeypatch, capsys) -> None:
    from twin.workloads.reader import Workload

    monkeypatch.setattr(common, "PLAIN_PROGRESS_EVERY_S", 0.0)
    wl = example_path("system-prompt")
    rows = Workload.open(wl).num_rows
    argv = ["simulate", str(wl), "-m", "tiny-hybrid", "--cache-gb", "0.001"]
    assert run([*argv, "--out", str(tmp_path / "sim")]) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("requests completed:")]
    assert len(lines) == rows  # one per request at this interval, none past the total
    assert lines[-1].startswith(f"requests completed: {rows:,}/{rows:,} (100%)")
