"""``twin calibrate`` through the console entry point and through typer."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from twin.calibration.datasheet import datasheet_profile
from twin.cli import app
from twin.cli.calibrate import calibrate
from twin.costmodel.profile import KernelFit, Profile
from twin.costmodel.profile_store import PROFILES_DIR, load_profile, shipped_profiles
from twin.errors import TwinError

HAS_TORCH = importlib.util.find_spec("torch") is not None

# Runs twin.cli.main() exactly as the `twin` script does; registers the command
# first only if twin/cli/__init__.py does not (yet) do so itself.
ENTRY = (
    "from twin.cli import app, main\n"
    "import twin.cli.calibrate as c\n"
    "names = {cmd.name or cmd.callback.__name__ for cmd in app.registered_commands}\n"
    "if 'calibrate' not in names:\n"
    "    app.command('calibrate')(c.calibrate)\n"
    "main()\n"
)


def _twin(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", ENTRY, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "200", "PATH": "/usr/bin"},
    )


def _no_cuda() -> bool:
    if not HAS_TORCH:
        return True
    import torch

    return not torch.cuda.is_available()


@pytest.mark.skipif(not _no_cuda(), reason="this machine has a GPU")
def test_a100_without_an_a100_refuses_in_one_sentence() -> None:
    proc = _twin("calibrate", "--gpu", "a100")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "twin calibrate --gpu a100" in lines[0]
    assert "--transfer-from" in lines[0]
    if HAS_TORCH:
        assert "this machine has no CUDA GPU (found: cpu" in lines[0]
        assert "run it on an A100" in lines[0]
    else:
        assert "PyTorch" in lines[0]


def test_unknown_gpu_name_is_refused() -> None:
    proc = _twin("calibrate", "--gpu", "v100")
    assert proc.returncode == 2 and "expected one of a100" in proc.stderr
    assert "Traceback" not in proc.stderr


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command("calibrate")(calibrate)

    @app.command("noop")
    def _noop() -> None:  # a second command keeps typer's sub-command layout
        pass

    return app


def _measured_h100(folder: Path) -> Path:
    """A profile labelled measured on an H100 (the datasheet fits, 5% held-out error)."""
    base = datasheet_profile("h100")
    return Profile(
        gpu="h100",
        device="NVIDIA H100 80GB HBM3",
        source="measured",
        peaks=base.peaks,
        kernels={
            k: KernelFit(f.model, dict(f.params), 0.05, 0.2, 20, 5) for k, f in base.kernels.items()
        },
        provenance={"date": "2026-11-22"},
    ).save(folder / "h100.json")


def test_transfer_from_a_measured_profile(tmp_path: Path) -> None:
    measured = _measured_h100(tmp_path)
    out = tmp_path / "a100.json"
    res = CliRunner().invoke(
        _app(),
        [
            "calibrate",
            "--gpu",
            "a100",
            "--transfer-from",
            str(measured),
            "--out",
            str(out),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["provenance_label"] == "transferred from h100"
    assert summary["heldout"]["gemm"]["median"] == 0.05
    assert Profile.load(out).source == "transferred"


def test_help_has_an_example() -> None:
    res = CliRunner().invoke(_app(), ["calibrate", "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0 and "twin calibrate --gpu cpu --quick" in res.output


@pytest.mark.skipif(not HAS_TORCH, reason="needs torch")
def test_cpu_tiny_level_through_the_cli(tmp_path: Path) -> None:
    out = tmp_path / "cpu.json"
    proc = _twin(
        "calibrate",
        "--gpu",
        "cpu",
        "--level",
        "tiny",
        "--kernels",
        "elementwise,copy_h2d",
        "--out",
        str(out),
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["source"] == "measured" and Path(summary["raw"]).exists()
    assert set(summary["heldout"]) == {"elementwise", "copy_h2d"}
    assert summary["heldout"]["copy_h2d"]["median"] is not None


@pytest.mark.slow
@pytest.mark.skipif(not HAS_TORCH, reason="needs torch")
def test_cpu_quick_sweep_through_the_cli_writes_a_measured_profile(tmp_path: Path) -> None:
    out = tmp_path / "cpu.json"
    proc = _twin("calibrate", "--gpu", "cpu", "--quick", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "Held-out relative error" in proc.stdout and "measured on" in proc.stdout


def test_calibrate_without_out_writes_to_the_user_folder_never_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 18: without --out, `twin calibrate` overwrote the tracked, shipped profile."""
    user = tmp_path / "mine"
    monkeypatch.setenv("TWIN_PROFILES_DIR", str(user))
    shipped_before = {n: p.read_bytes() for n, p in shipped_profiles().items()}
    measured = _measured_h100(tmp_path)
    res = CliRunner().invoke(
        _app(), ["calibrate", "--gpu", "a100", "--transfer-from", str(measured), "--json"]
    )
    assert res.exit_code == 0, res.output
    written = Path(json.loads(res.stdout)["profile"])
    assert written == user / "a100.json" and written.is_file()
    assert PROFILES_DIR not in written.parents
    assert {n: p.read_bytes() for n, p in shipped_profiles().items()} == shipped_before
    # --gpu a100 now finds the user's own calibration before the shipped datasheet one.
    assert load_profile("a100").source == "transferred"
    monkeypatch.setenv("TWIN_PROFILES_DIR", str(tmp_path / "empty"))
    assert load_profile("a100").source == "datasheet"


def test_a_flag_the_calibration_does_not_read_is_named_in_one_line() -> None:
    """``_only``'s refusal reads "not read with --FLAG" or "not read when <phrase>"."""
    res = CliRunner().invoke(app, ["calibrate", "--gpu", "h100", "--refit", "moe"])
    assert isinstance(res.exception, TwinError)
    assert str(res.exception) == "--refit: not read when timing this machine; drop it"
    res = CliRunner().invoke(
        app, ["calibrate", "--gpu", "a100", "--transfer-from", "x.json", "--seed", "3"]
    )
    assert str(res.exception) == "--seed: not read with --transfer-from; drop it"
