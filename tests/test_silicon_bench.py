"""The silicon benchmark scripts (issue 31): ``benchmarks/bench_silicon.py``,
``benchmarks/silicon_rows.py`` and ``benchmarks/silicon_compare.py`` on the hand-made
sample (``silicon_small``). Tests that need ``aiconfigurator_core`` skip without it."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import pytest
from silicon_small import CONFIGS, EXPRESSED, REASONS, SMALL

from twin.errors import TwinError
from twin.validate import silicon as sil
from twin.validate.silicon import aiconfigurator as sil_aic


# ------------------------------------------------------------------ the benchmark
def _script(name: str, filename: str) -> Any:
    """``benchmarks/<filename>`` loaded as the module ``name``."""
    import importlib.util

    path = Path(__file__).parents[1] / "benchmarks" / filename
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _bench() -> Any:
    return _script("bench_silicon", "bench_silicon.py")


def test_bench_spread() -> None:
    spread = _bench().spread
    assert spread(list(range(10)), None) == list(range(10))
    assert spread(list(range(10)), 3) == [0, 3, 6]
    assert spread(list(range(4)), 9) == [0, 1, 2, 3]
    assert spread(list(range(4)), 0) == []


def _silicon_rows(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``benchmarks/silicon_rows.py`` (it imports ``bench_silicon`` by name)."""
    import sys

    monkeypatch.setitem(sys.modules, "bench_silicon", _bench())
    return _script("bench_silicon_rows", "silicon_rows.py")


def test_silicon_rows_deployment_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--deployment``: c-N is the row's concurrency minus N, DEL drops the key, numbers
    and booleans are read as such; a malformed pair is one line, exit 2."""
    rows = _silicon_rows(monkeypatch)

    @dataclasses.dataclass(frozen=True)
    class Plan:  # the two RowPlan fields the change reads
        concurrency: int
        deployment: dict[str, Any]

    plan = Plan(16, {"max_running": 16, "eager_prefill_s": 0.05, "max_batched_tokens": 2560})
    assert rows.changed(plan, []) is plan
    out = rows.changed(
        plan,
        [
            ("max_running", "c-1"),
            ("eager_prefill_s", "DEL"),
            ("max_batched_tokens", "512"),
            ("memory_utilization", "0.8"),
            ("sets", "true"),
        ],
    )
    assert out.deployment == {
        "max_running": 15,
        "max_batched_tokens": 512,
        "memory_utilization": 0.8,
        "sets": True,
    }
    assert plan.deployment["max_running"] == 16  # the plan itself is left as it was
    with pytest.raises(ValueError, match="c-N"):
        rows.changed(plan, [("max_running", "c-x")])
    # a name build_run lacks is refused before any row runs (each row would fail alone)
    with pytest.raises(TwinError, match=r"^'max_runing': not a setting of a run"):
        rows.changed(plan, [("max_runing", "4")])
    predictions = tmp_path / "p.csv"
    predictions.write_text("id,split,group\n")
    with pytest.raises(SystemExit) as exit_info:
        rows.main([str(predictions), "--deployment", "max_running", "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "expected KEY=VALUE" in capsys.readouterr().err


def test_bench_runs_without_aiconfigurator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without the ``aiconfigurator`` package the benchmark says so and still scores."""
    bench = _bench()
    for where in (sil, sil_aic):  # the benchmark's check and the scorer's
        monkeypatch.setattr(where, "aiconfigurator_available", lambda: False)
    results = tmp_path / "silicon.json"
    argv = ["--csv", str(SMALL), "--configs", str(CONFIGS), "--jobs", "1", "--limit", "1"]
    argv += ["--out", str(tmp_path / "out"), "--results", str(results)]
    assert bench.main(argv) == 0
    printed = capsys.readouterr().out
    assert "aiconfigurator not installed" in printed
    data = json.loads(results.read_text())
    assert data["aiconfigurator"] == sil.AIC_NOT_INSTALLED
    rows = data["summary"]["rows"]
    assert (rows["read"], rows["expressed"], rows["left_out_by_limit"]) == (
        20,
        1,
        len(EXPRESSED) - 1,
    )
    assert rows["not_expressed"] == len(REASONS)
    assert (tmp_path / "out" / "predictions.csv").is_file()
    nothing = ["--models", "nothing", "--out", str(tmp_path / "o2"), "--results", str(results)]
    assert bench.main([*argv[:2], *nothing]) == 0
    assert bench.main(["--csv", str(tmp_path / "none.csv")]) == 2
    assert "no such file" in capsys.readouterr().out


def test_silicon_compare_sets_two_runs_side_by_side(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``benchmarks/silicon_compare.py``: MAPE per split and group before and after, the
    rows whose prediction changed, and aiconfigurator on the rows it estimated only."""
    compare = _script("silicon_compare", "silicon_compare.py")
    head = (
        "id,split,model_path,system,backend,"
        "silicon_ttft_ms,silicon_tpot_ms,twin_ttft_ms,twin_tpot_ms"
    )
    rows = [
        "a,fit,org/M,h200_sxm,sglang,200,10,100,10",
        "b,fit,org/M,h200_sxm,sglang,100,10,100,12",
    ]
    before = tmp_path / "before.csv"
    before.write_text("\n".join([head, *rows]) + "\n", encoding="utf-8")
    after = tmp_path / "after.csv"
    after.write_text(
        "\n".join([head, rows[0].replace(",100,10", ",150,10"), rows[1]]) + "\n",
        encoding="utf-8",
    )
    aic = tmp_path / "aic.csv"
    aic.write_text("id,aic_ttft_ms,aic_tpot_ms\na,100,11\nb,,\n", encoding="utf-8")
    out = tmp_path / "compare.json"
    assert compare.main([str(before), str(after), "--aic", str(aic), "--out", str(out)]) == 0
    table = json.loads(out.read_text(encoding="utf-8"))
    group = table["fit|M|h200_sxm|sglang"]
    assert group == table["fit|ALL"]
    assert (group["rows"], group["rows_changed"]) == (2, 1)
    assert (group["ttft_mape_before"], group["ttft_mape_after"]) == (25.0, 12.5)
    assert (group["tpot_mape_before"], group["tpot_mape_after"]) == (10.0, 10.0)
    # aiconfigurator estimated row a only: its error and the twin's on that row
    assert (group["aic_ttft_rows"], group["aic_ttft_mape"]) == (1, 50.0)
    assert group["twin_ttft_mape_on_aic_rows"] == 25.0
    # a missing file, or a CSV without ids (with rows or a header alone), is one line
    # naming the file and exit status 2
    capsys.readouterr()
    noid, header = tmp_path / "noid.csv", tmp_path / "header.csv"
    noid.write_text("x,y\n1,2\n", encoding="utf-8")
    header.write_text("x,y\n", encoding="utf-8")
    for bad in (tmp_path / "missing.csv", noid, header):
        with pytest.raises(SystemExit) as stop:
            compare.main([str(bad), str(after)])
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(bad) in err


def test_bench_reuses_aiconfigurator_estimates(tmp_path: Path) -> None:
    """``--aic-from``: an earlier run's estimates by row id, with their errors recomputed;
    a file without the columns or with a bad number is one line naming it."""
    bench = _bench()
    good = tmp_path / "predictions.csv"
    good.write_text(
        "id,aic_ttft_ms,aic_tpot_ms,aic_error\na,100.0,10.0,\nb,,,RuntimeError: OOM\nc,,,\n",
        encoding="utf-8",
    )
    found = bench.read_aic_estimates(good)
    assert set(found) == {"a", "b"}  # c has no estimate: it is estimated again
    result = {"silicon_ttft_ms": 200.0, "silicon_tpot_ms": 8.0}
    bench.reuse_aic(result, found["a"])
    assert (result["aic_ttft_ms"], result["aic_ttft_ape"]) == (100.0, 50.0)
    assert result["aic_tpot_ape"] == pytest.approx(25.0)
    failed = {"silicon_ttft_ms": 200.0, "silicon_tpot_ms": 8.0}
    bench.reuse_aic(failed, found["b"])
    assert failed["aic_error"] == "RuntimeError: OOM" and failed["aic_ttft_ape"] is None
    assert "gpus" not in result  # only aiconfigurator's columns are copied
    # An estimate made at another layout of the row (its GPUs, the ``tp`` column) is
    # estimated again; one without the column is reused.
    laid = tmp_path / "laid.csv"
    laid.write_text(
        "id,tp,aic_ttft_ms,aic_tpot_ms,aic_error\na,4,100.0,10.0,\nb,2,90.0,9.0,\n",
        encoding="utf-8",
    )
    assert set(bench.reusable(bench.read_aic_estimates(laid), {"a": 2, "b": 2})) == {"b"}
    assert set(bench.reusable(found, {"a": 2, "b": 8, "z": 1})) == {"a", "b"}
    bad = tmp_path / "bad.csv"
    bad.write_text("id,aic_ttft_ms,aic_tpot_ms,aic_error\na,fast,1,\n", encoding="utf-8")
    with pytest.raises(TwinError, match=r"bad.csv: row 2, column aic_ttft_ms: not a number"):
        bench.read_aic_estimates(bad)
    with pytest.raises(TwinError, match="no column 'aic_error'"):
        (tmp_path / "x.csv").write_text("id,aic_ttft_ms,aic_tpot_ms\n", encoding="utf-8")
        bench.read_aic_estimates(tmp_path / "x.csv")
    with pytest.raises(TwinError, match="no such file"):
        bench.read_aic_estimates(tmp_path / "missing.csv")


def test_bench_resumes_a_stopped_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--resume`` scores only the rows a stopped run's journal lacks (a line cut short
    runs again) and writes what an unbroken run writes; another selection's journal, or
    a journal left without ``--resume``, is one line."""
    bench = _bench()
    for where in (sil, sil_aic):
        monkeypatch.setattr(where, "aiconfigurator_available", lambda: False)
    out = tmp_path / "out"
    argv = ["--csv", str(SMALL), "--configs", str(CONFIGS), "--jobs", "1", "--limit", "2"]
    argv += ["--out", str(out), "--results", str(tmp_path / "silicon.json")]
    monkeypatch.setattr(bench.Journal, "close", lambda self: None)  # a run that stopped
    assert bench.main(argv) == 0
    unbroken = (out / "predictions.csv").read_bytes()
    journal = out / bench.JOURNAL
    header, first, second = journal.read_text(encoding="utf-8").splitlines()
    journal.write_text(f"{header}\n{first}\n{second[:20]}", encoding="utf-8")
    (out / "predictions.csv").unlink()
    assert bench.main(argv) == 2  # the journal is there and --resume was not given
    assert "--resume to go on" in capsys.readouterr().out
    assert bench.main([*argv[:-4], "--limit", "1", *argv[-4:], "--resume"]) == 2
    assert "its rows differs" in capsys.readouterr().out
    scored: list[str] = []
    score_row = sil.score_row

    def counting(plan: Any, aic: bool) -> dict[str, Any]:
        scored.append(plan.row.id)
        return score_row(plan, aic)

    monkeypatch.setattr(sil, "score_row", counting)
    assert bench.main([*argv, "--resume"]) == 0
    ids = [line.split(",")[0] for line in unbroken.decode().splitlines()[1:]]
    assert json.loads(first)["id"] == ids[0] and scored == [ids[1]]

    def rows(text: str) -> list[dict[str, str]]:  # all but the wall time, which varies
        return [
            {k: v for k, v in r.items() if k != "twin_wall_s"}
            for r in csv.DictReader(io.StringIO(text))
        ]

    assert rows((out / "predictions.csv").read_text()) == rows(unbroken.decode())
