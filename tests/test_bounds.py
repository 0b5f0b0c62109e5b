"""Sizes bounded before any work (issue 32): one line, exit 2, nothing written."""

from __future__ import annotations

import pytest

from twin.cli.main import run
from twin.workloads.examples import example_path


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["simulate", "--cache-gb", "1e308"], "--cache-gb"),
        (["simulate", "--replicas", "1000000000"], "--replicas: must be 1 to 100,000"),
        (["simulate", "--tp", "100000"], "--tp: must be 1 to 576"),
        (["simulate", "--warmup-s", "50", "--until-s", "10"], "--warmup-s: must end before"),
        (["report", "capacity", "{w}", "--seeds", "1000000000"], "at most 100,000"),
        (["report", "capacity", "{w}", "--cache-gb", "10,1e308"], "--cache-gb"),
    ],
)
def test_sizes_are_bounded_before_work(tmp_path, capsys, args, says):
    out = tmp_path / "o"
    argv = [a.format(w=example_path("chat")) for a in args]
    rc = run([*argv, "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert says in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["cost", "-m", "llama-3-8b", "-g", "h100", "--lengths", "1,2,,3"], "an empty entry"),
        (["cost", "-m", "llama-3-8b", "-g", "h100", "--batches", "1000000000"], "1 to 1,000,000"),
        (["cost", "-m", "llama-3-8b", "-g", "h100", "--batches", "1e9"], "expected comma-sep"),
        (
            ["cost", "-m", "llama-3-8b", "-g", "h100", "--lengths", ",".join(["8"] * 1001)],
            "at most 1,000",
        ),
        (["simulate", "--out", ""], "--out '': an empty value"),
        (["simulate", "--out="], "--out: an empty value"),
        (
            ["simulate", "-p", "marconi", "--policy-option", "jobs=0", "--out", "{o}"],
            "jobs must be 1 to 1,024",
        ),
        (["report", "capacity", "{w}", "--seeds", "1e9", "--out", "{o}"], "--seeds"),
        (["report", "capacity", "{w}", "-j", "100000", "--out", "{o}"], "--jobs"),
        (["workload", "generate", "chat", "-n", "1000000000", "-o", "{o}"], "--sessions"),
        (["workload", "generate", "chat", "--duration", "1e12", "-o", "{o}"], "at most 10,000,000"),
        (["models", "show", "--config", "{deep}"], "JSON nested deeper than 64 levels"),
        (["simulate", "-m", "{deep}", "--out", "{o}"], "JSON nested deeper than 64 levels"),
        (["cost", "-g", "h100", "-m", "{deep}"], "JSON nested deeper than 64 levels"),
    ],
)
def test_flag_doors_refuse_nonsense_in_one_line(tmp_path, capsys, argv, says):
    """The accepted-nonsense flags of issue 32: each one line, exit 2, nothing written."""
    deep = tmp_path / "deep.json"
    deep.write_text('{"a":' * 5000 + "1" + "}" * 5000)
    out = tmp_path / "o"
    argv = [a.format(w=example_path("chat"), o=out, deep=deep) for a in argv]
    rc = run(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert says in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: ")
    assert not out.exists()
