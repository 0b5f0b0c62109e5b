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
