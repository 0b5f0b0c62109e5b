"""``twin validate``, the command (fixed arrivals: test_validate_arrivals; the prediction
and the comparison: test_validate_compare).

Most tests need no torch: the fake executor of ``validate_fakes`` serves the requests
on the same cache and prices them with the twin's own cost model, so every error is
~0 and the hits match; the real executor runs in one end-to-end test.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import pytest
import typer
from typer.testing import CliRunner
from validate_fakes import FakeConfig, fake_reference

import twin.validate.entry as entry
from twin.atomic import MANIFEST_FILE, read_manifest
from twin.costmodel.profile_store import load_profile, shipped_profiles
from twin.errors import TwinError
from twin.presets import get_model
from twin.validate.compare import PLOT_FILE, REQUESTS_FILE, VALIDATION_FILE
from twin.validate.request import RequestSource, ValidationRequest

MODEL = get_model("tiny-hybrid")
runner = CliRunner()


# ----------------------------------------------------------------- the command
def _app() -> typer.Typer:
    from twin.cli import app

    return app


def _invoke(*args: str):
    return runner.invoke(_app(), ["validate", *args])


@pytest.fixture
def fake_executor(monkeypatch):
    """The command with the fake executor in place of the torch one."""
    import twin.cli.validate as cli

    torch = SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: False))
    monkeypatch.setattr(cli, "_executor", lambda: (torch, fake_reference, FakeConfig))


def test_command_with_a_fake_executor(fake_executor, tmp_path):
    out = tmp_path / "val"
    shipped = str(shipped_profiles()["cpu"])  # the fake prices with it: errors are 0
    result = _invoke(
        "--generate", "chat", "--requests", "25", "--profile", shipped, "--out", str(out)
    )
    assert result.exit_code == 0, result.output
    for text in (
        "service time",
        "TTFT P95",
        "token hit rate",
        "30% of the unbounded footprint",
        "all targets met",
        "validation.json",
    ):
        # Whitespace-normalised: the table title wraps at the table's width.
        assert text in " ".join(result.output.split()), text
    for name in ("workload.parquet", VALIDATION_FILE, REQUESTS_FILE, PLOT_FILE):
        assert (out / name).is_file(), name
    result = _invoke(
        "--generate",
        "chat",
        "--requests",
        "10",
        "--cache-gb",
        "0.001",
        "--policy",
        "sglang+",
        "--profile",
        shipped,
        "--out",
        str(out),
        "--json",
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["cache"] == {
        "bytes": 1_000_000,
        "source": "--cache-gb",
        "unbounded_footprint_bytes": None,
    }
    assert data["policy"] == "sglang+" and data["metrics"]["requests"] == 10


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "give one of --workload"),
        (("--generate", "chat", "--workload", "w.parquet"), "give one of --workload"),
        (("--generate", "nope"), "unknown generator"),
        (("--generate", "chat", "--device", "tpu"), "--device 'tpu'"),
        (("--generate", "chat", "--policy", "oracle"), "hindsight"),
        (("--generate", "chat", "--policy", "nope"), "unknown policy"),
        (("--generate", "chat", "--cache-gb", "-1"), "--cache-gb"),
        (("--generate", "chat", "--session-rate", "0"), "--session-rate"),
        (("--workload", "missing.parquet"), "no such workload file"),
        (("--generate", "chat", "--model", "nope"), "unknown model"),
    ],
)
def test_bad_input_is_one_twin_error(fake_executor, tmp_path, args, message):
    result = _invoke(*args, "--out", str(tmp_path / "o"))
    assert result.exit_code != 0
    assert isinstance(result.exception, TwinError), result.output
    assert message in str(result.exception)
    assert not (tmp_path / "o" / VALIDATION_FILE).exists()


def test_cuda_without_a_gpu_is_refused(fake_executor, tmp_path):
    result = _invoke("--generate", "chat", "--device", "cuda", "--out", str(tmp_path / "o"))
    assert isinstance(result.exception, TwinError) and "no CUDA GPU" in str(result.exception)


def test_missing_torch_gives_the_install_hint(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)  # ``import torch`` now raises ImportError
    result = _invoke("--generate", "chat", "--out", str(tmp_path / "o"))
    assert isinstance(result.exception, TwinError), result.output
    assert "pip install 'twin[torch]'" in str(result.exception)
    assert not (tmp_path / "o").exists()


def test_help_has_examples():
    result = _invoke("--help")
    assert result.exit_code == 0
    assert "Examples" in result.output and "--generate" in result.output


@pytest.mark.slow  # a whole validation on PyTorch: about a minute on a loaded CPU
def test_end_to_end_on_the_real_executor(tmp_path):
    """tiny-hybrid on the CPU: the executor and the twin hit the same tokens on every row."""
    pytest.importorskip("torch")
    out = tmp_path / "val"
    result = _invoke(
        "--generate", "chat", "--requests", "20", "--repeats", "1", "--out", str(out), "--json"
    )
    assert result.exit_code == 0, result.output
    saved = json.loads((out / VALIDATION_FILE).read_text())
    assert saved == json.loads(result.stdout)
    hit = saved["metrics"]["hit"]
    assert hit["identical"] and hit["measured"] == hit["predicted"]
    assert saved["executor"]["token_hit_rate"] == pytest.approx(hit["measured"]["token_hit_rate"])
    assert saved["device_name"] and saved["dtype"] == "float32" and saved["implementations"]
    assert saved["metrics"]["requests"] == 20
    for key in (
        "service_median_rel_err",
        "ttft_p50_rel_err",
        "ttft_p95_rel_err",
        "hit_tokens_identical",
    ):
        assert key in saved["targets"]
    assert (out / REQUESTS_FILE).is_file() and (out / PLOT_FILE).is_file()
    # Step 1 calibrated the CPU at tiny-hybrid's shapes, with its layers' host overhead.
    prof = load_profile(str(out / "profile.json"))
    assert prof.layer_overhead is not None and prof.provenance["shape_model"] == "tiny-hybrid"


# ----------------------------------------------------------------- inputs first, outputs as a set
def test_a_missing_workload_is_refused_before_calibrating(fake_executor, tmp_path, monkeypatch):
    # Regression (issue 17): it calibrated for minutes, then left OUT/profile.json behind.
    def no_calibration(*args, **kwargs):
        raise AssertionError("calibrated before checking the inputs")

    monkeypatch.setattr(entry, "_calibrate", no_calibration)
    result = _invoke("--workload", str(tmp_path / "missing.parquet"), "--out", str(tmp_path / "o"))
    assert isinstance(result.exception, TwinError), result.output
    assert "no such workload file" in str(result.exception)
    assert not (tmp_path / "o").exists()


def test_a_failed_validation_leaves_no_output_not_even_the_calibrated_profile(
    tmp_path, monkeypatch
):
    def calibrate(device, spec, path, bar):
        path.write_text(shipped_profiles()["cpu"].read_text())  # what a calibration leaves
        return load_profile("cpu")

    def broken(*args, **kwargs):
        raise TwinError("executor failed")

    monkeypatch.setattr(entry, "_calibrate", calibrate)
    torch = SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: False))
    out = tmp_path / "o"
    chat5 = ValidationRequest("tiny-hybrid", RequestSource(generate="chat", requests=5))
    with pytest.raises(TwinError, match="executor failed"):
        entry.validate_model(
            chat5,
            out,
            executor=lambda: (torch, broken, FakeConfig),
        )
    assert not out.exists()
    # The same run with a working executor publishes the whole set at once.
    report = entry.validate_model(
        chat5,
        out,
        executor=lambda: (torch, fake_reference, FakeConfig),
    )
    names = sorted(p.name for p in out.iterdir())
    published = ["profile.json", "workload.parquet", VALIDATION_FILE, REQUESTS_FILE, PLOT_FILE]
    assert names == sorted([*published, MANIFEST_FILE])
    assert sorted(read_manifest(out)["files"]) == sorted(published)  # one set, vouched for
    assert report["workload"]["path"] == str(out / "workload.parquet")
    assert json.loads((out / VALIDATION_FILE).read_text())["outputs"]["plot"] == str(
        out / PLOT_FILE
    )
