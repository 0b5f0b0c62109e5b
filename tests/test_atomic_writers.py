"""Writers under injected faults, and commands that would write over their own input
(issue 32): the previous complete file survives, never a truncated one under its name."""

from __future__ import annotations

import errno
import shutil

import pyarrow.parquet as pq
import pytest

from twin.cli.main import run
from twin.workloads.examples import example_path
from twin.workloads.generators import get_generator
from twin.workloads.reader import Workload
from twin.workloads.writer import WorkloadWriter


def _full_disk(*_a, **_k):
    raise OSError(errno.ENOSPC, "No space left on device")


# The patched close also fails in the abandoned writer's __del__ (the fault, not a leak).
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@pytest.mark.parametrize("where", ["close", "write_batch"])
def test_a_full_disk_keeps_the_previous_workload(tmp_path, monkeypatch, where, capsys):
    out = tmp_path / "w.parquet"
    assert run(["workload", "generate", "chat", "-n", "3", "-o", str(out)]) == 0
    before = out.read_bytes()
    monkeypatch.setattr(pq.ParquetWriter, where, _full_disk)
    rc = run(["workload", "generate", "chat", "-n", "5", "--seed", "2", "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "No space left" in err
    assert out.read_bytes() == before  # the old file, whole
    assert Workload.open(out).num_sessions == 3
    assert [p.name for p in tmp_path.iterdir()] == ["w.parquet"]  # no temporary left


def test_the_writer_renames_only_after_a_successful_close(tmp_path, monkeypatch):
    out = tmp_path / "w.parquet"
    monkeypatch.setattr(pq.ParquetWriter, "close", _full_disk)
    rows = get_generator("chat")().rows(3, 1.0, 0)
    with pytest.raises(OSError), WorkloadWriter(out, {"generator": "test"}) as w:
        w.write_all(rows)
    assert not out.exists()


@pytest.mark.parametrize(
    "args",
    [
        ["workload", "import", "mooncake", "{w}", "-o", "{w}"],
        ["workload", "export", "marconi", "{w}", "-o", "{w}"],
        ["replay", "{w}", "-m", "tiny-hybrid", "--cache-gb", "1", "--requests", "{w}"],
    ],
)
def test_a_command_never_writes_over_its_own_input(tmp_path, capsys, args):
    w = tmp_path / "w.parquet"
    shutil.copy(example_path("chat"), w)
    before = w.read_bytes()
    rc = run([a.format(w=w) for a in args])
    err = capsys.readouterr().err
    assert rc == 2 and "is also the input" in err, err
    assert w.read_bytes() == before
