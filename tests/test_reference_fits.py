"""A model too large for the reference executor's device is refused up front, in one line,
before any calibration (``twin validate``) or allocation (the executor)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from twin.errors import TwinError
from twin.hardware import GB
from twin.presets import get_model
from twin.reference.fits import DTYPE_BYTES, WEIGHT_SHARE, check_fits, free_memory


def test_weights_beyond_the_free_memory_are_refused_with_the_numbers() -> None:
    big = get_model("marconi-hybrid-7b")
    need = big.n_params * 4  # fp32 on the CPU
    with pytest.raises(TwinError) as err:
        check_fits(big, "cpu", need)  # the weights alone would fill every free byte
    text = str(err.value)
    assert "'marconi-hybrid-7b' is too large" in text and "float32" in text
    assert f"{need / GB:.1f} GB" in text and "--device cuda" in text and "\n" not in text
    check_fits(big, "cpu", int(need / WEIGHT_SHARE) + 1)  # just enough: accepted
    # on a GPU the executor runs in bf16: half the bytes
    check_fits(big, "cuda", int(need / 2 / WEIGHT_SHARE) + 1)
    with pytest.raises(TwinError, match="the GPU has"):
        check_fits(big, "cuda", need // 2)


def test_moe_experts_all_count() -> None:
    moe = get_model("qwen3.5-35b-a3b")
    assert moe.n_params > 30e9  # every expert is a real tensor, not only the active ones
    with pytest.raises(TwinError, match="too large"):
        check_fits(moe, "cpu", 64 * 2**30)
    check_fits(get_model("tiny-moe-hybrid"), "cpu", 64 * 2**20)


def test_free_memory_reads_the_host() -> None:
    assert free_memory("cpu") > 0
    fake = SimpleNamespace(cuda=SimpleNamespace(mem_get_info=lambda: (5 * 2**30, 80 * 2**30)))
    assert free_memory("cuda", fake) == 5 * 2**30
    assert DTYPE_BYTES["bfloat16"] == 2


def test_validate_refuses_before_calibrating(monkeypatch, tmp_path) -> None:
    import twin.cli.validate as cli
    import twin.validate.entry as entry
    from twin.cli import app

    def no_calibration(*args, **kwargs):
        raise AssertionError("calibrated before checking the model's size")

    def no_executor(*args, **kwargs):
        raise AssertionError("ran the executor")

    torch = SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: False))
    monkeypatch.setattr(cli, "_executor", lambda: (torch, no_executor, object))
    monkeypatch.setattr(entry, "_calibrate", no_calibration)
    monkeypatch.setattr(entry, "free_memory", lambda device, torch=None: 8 * 10**9)
    out = tmp_path / "o"
    result = CliRunner().invoke(
        app, ["validate", "--model", "marconi-hybrid-7b", "--generate", "chat", "--out", str(out)]
    )
    assert isinstance(result.exception, TwinError), result.output
    assert "too large for the reference executor on cpu" in str(result.exception)
    assert not out.exists()


def test_the_executor_refuses_before_allocating(monkeypatch) -> None:
    pytest.importorskip("torch")
    import twin.reference.executor as executor

    monkeypatch.setattr(executor, "free_memory", lambda device, torch=None: 10**6)
    with pytest.raises(TwinError, match="'tiny-moe-hybrid' is too large"):
        executor.ReferenceExecutor(get_model("tiny-moe-hybrid"), executor.ExecutorConfig())
