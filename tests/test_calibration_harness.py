"""The harness end to end on the CPU (tiny shapes), device checks, and the GPU path."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from twin.calibration.device import DeviceInfo, refusal
from twin.calibration.sweep import SHAPE_COLUMNS
from twin.costmodel import CostModel
from twin.costmodel.formulas import KERNELS
from twin.costmodel.profile import Profile
from twin.presets import get_model

torch = pytest.importorskip("torch")

from twin.calibration.harness import calibrate  # noqa: E402
from twin.calibration.kernels import SweepContext, registry  # noqa: E402
from twin.torch_ops.mamba_triton import import_mamba_triton  # noqa: E402

HAS_CUDA = torch.cuda.is_available()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("cal") / "cpu.json"
    return calibrate("cpu", level="tiny", out=out)


def test_tiny_cpu_run_yields_a_measured_profile(tiny) -> None:
    p = Profile.load(tiny.profile_path)
    assert p.source == "measured" and p.gpu == "cpu"
    assert p.provenance_label.startswith("measured on ")
    assert set(p.kernels) == set(KERNELS)
    for key in ("torch", "date", "python", "implementations", "measured_ceilings"):
        assert key in p.provenance
    assert "PyTorch SSD reference" in p.provenance["implementations"]["ssm_scan"]
    for name, fit in p.kernels.items():
        assert fit.n_shapes >= 6, name
        assert fit.n_heldout >= 2 and fit.heldout_median_rel_err is not None
        # Timings on a loaded 2-core machine bound nothing (a held-out error of 2.5
        # was seen under load): the error must exist; its size is reported by
        # `twin calibrate`, never asserted on wall-clock data.
        err = fit.heldout_median_rel_err
        assert math.isfinite(err) and err >= 0, (name, err)
    print({k: round(f.heldout_median_rel_err, 3) for k, f in p.kernels.items()})


def test_raw_parquet_has_one_row_per_shape(tiny) -> None:
    table = pq.read_table(tiny.raw_path)
    cols = set(table.column_names)
    assert {"kernel", "dtype", "device", "repeats", "median_s", "p10_s", "p90_s"} <= cols
    assert set(SHAPE_COLUMNS) <= cols
    rows = table.to_pylist()
    assert len(rows) == tiny.n_rows
    for r in rows:
        assert r["p10_s"] <= r["median_s"] <= r["p90_s"] and r["median_s"] > 0
        assert r["device"] == "cpu" and r["repeats"] >= 3


def test_cost_model_runs_on_the_measured_cpu_profile(tiny) -> None:
    cm = CostModel(get_model("tiny-hybrid"), tiny.profile)
    assert cm.prefill(64, 64) <= cm.prefill(128)
    assert cm.provenance == tiny.profile.provenance_label


def test_inputs_are_random_and_rotate() -> None:
    ctx = SweepContext(
        torch=torch,
        device="cpu",
        dtype=torch.float32,
        dtype_bytes=4,
        level="tiny",
        model=get_model("tiny-hybrid"),
    )
    gemm = registry()["gemm"]
    shape = {"m": 4, "k": 64, "n": 32}
    nbuf = gemm.n_buffers(shape, ctx)
    assert nbuf > 2  # small sets rotate through many buffers
    run = gemm.build(shape, ctx, nbuf)
    a, b = run(0), run(1)
    assert a.data_ptr() != b.data_ptr() and float(a.abs().min()) >= 0
    assert float(a.abs().sum()) > 0  # never zeros


@pytest.mark.parametrize("length", [1, 2, 3, 4, 37])
def test_tap_conv_equals_torch_causal_conv1d(length: int) -> None:
    from twin.torch_ops.conv import causal_conv1d_taps

    x = torch.randn(2, 8, length, dtype=torch.float64)
    w, bias = torch.randn(8, 4, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    ref = torch.nn.functional.conv1d(x, w[:, None, :], bias, padding=3, groups=8)[..., :length]
    assert torch.allclose(causal_conv1d_taps(x, w, bias), ref, rtol=1e-12, atol=1e-12)


def test_refusal_sentence_names_what_was_found() -> None:
    cpu = DeviceInfo("cpu", "AMD EPYC (2 threads)", "cpu")
    msg = refusal("a100", cpu)
    assert msg is not None and msg.startswith(
        "twin calibrate --gpu a100: this machine has no CUDA GPU (found: cpu"
    )
    assert "--transfer-from" in msg and "\n" not in msg
    h100 = DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", "h100", 80e9)
    msg = refusal("a100", h100)
    assert msg is not None and "NVIDIA H100 80GB HBM3" in msg and "not an A100" in msg
    assert refusal("h100", h100) is None and refusal("auto", h100) is None
    assert refusal("cpu", h100) is None
    assert "none of the GPUs" in (refusal("auto", DeviceInfo("cuda", "Tesla V100", None)) or "")


def test_mamba_import_guard_falls_back_with_a_note() -> None:
    fn, note = import_mamba_triton("ops.triton.ssd_combined", "mamba_chunk_scan_combined")
    if fn is None:
        assert "not importable" in note
    assert "mamba_ssm" not in sys.modules or fn is not None


@pytest.mark.slow
def test_quick_cpu_run(tmp_path: Path) -> None:
    result = calibrate("cpu", level="quick", out=tmp_path / "cpu.json")
    errs = {k: f.heldout_median_rel_err for k, f in result.profile.kernels.items()}
    print(errs)
    assert all(e is not None and e < 0.5 for e in errs.values()), errs


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_gpu_quick_run(tmp_path: Path) -> None:
    result = calibrate("auto", level="quick", out=tmp_path / "gpu.json")
    p = result.profile
    assert p.source == "measured" and p.gpu != "cpu"
    assert p.provenance["cuda"] and p.dtype == "bfloat16"
    for fit in p.kernels.values():
        assert fit.heldout_median_rel_err is not None and fit.heldout_median_rel_err < 0.3
