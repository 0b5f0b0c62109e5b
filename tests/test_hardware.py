"""GpuSpec registry: datasheet peaks and recognising device names."""

from __future__ import annotations

import re

import pytest

from twin.calibration.aic_tables import SYSTEMS, package_dir
from twin.errors import TwinError
from twin.hardware import AIC_MEM, GIB, GPUS, MIB, get_gpu, identify_gpu


def test_required_gpus_are_known_with_datasheet_peaks() -> None:
    for name in ("a100", "a100-80gb", "h100", "h200", "l4"):
        assert name in GPUS
    h100 = get_gpu("h100")
    assert h100.flops == pytest.approx(989e12)
    assert h100.hbm_bw == pytest.approx(3350e9)
    assert get_gpu("a100-80gb").hbm_bw == pytest.approx(2039e9)
    assert get_gpu("h200").hbm_bytes == 141 * GIB  # the driver's total, not 141e9
    assert get_gpu("L4").flops == pytest.approx(121e12)  # case-insensitive


def test_interconnect_is_per_direction() -> None:
    # The datasheet's NVLink figure counts both directions; PCIe is already per direction.
    assert get_gpu("h100").interconnect_bw == pytest.approx(450e9)
    assert get_gpu("a100").interconnect_bw == pytest.approx(300e9)
    assert get_gpu("l4").interconnect_bw == pytest.approx(32e9)  # no NVLink: PCIe


def test_peaks_have_what_profiles_need() -> None:
    for name in GPUS:
        peaks = get_gpu(name).peaks()
        for key in ("flops", "mem_bw", "host_bw", "interconnect_bw", "allreduce_latency_s"):
            assert peaks[key] > 0


def test_unknown_gpu_names_the_valid_ones() -> None:
    with pytest.raises(TwinError, match="valid names: a100"):
        get_gpu("v100")


@pytest.mark.parametrize(
    ("device_name", "memory", "expected"),
    [
        ("NVIDIA A100-SXM4-40GB", 40e9, "a100"),
        ("NVIDIA A100-PCIE-40GB", 40e9, "a100"),
        ("NVIDIA A100-SXM4", 42_405_855_232, "a100"),  # CUDA's total on a 40GB part
        ("NVIDIA A100-SXM4-80GB", 80e9, "a100-80gb"),
        ("NVIDIA A100 80GB PCIe", 80e9, "a100-80gb-pcie"),
        ("NVIDIA A100-SXM4", 81e9, "a100-80gb"),  # the memory decides
        ("NVIDIA H100 80GB HBM3", 80e9, "h100"),
        ("NVIDIA H100 PCIe", 80e9, None),  # different peaks: not our h100
        ("NVIDIA H200", 141e9, "h200"),
        ("NVIDIA L4", 24e9, "l4"),
        ("NVIDIA L40S", 48e9, "l40s"),  # not an L4
        ("NVIDIA B200", 180e9, "b200"),
        ("NVIDIA GB200", 186e9, "gb200"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 96e9, "rtx-pro-6000"),
        ("Tesla V100-SXM2-16GB", 16e9, None),
    ],
)
def test_identify_gpu(device_name: str, memory: float, expected: str | None) -> None:
    assert identify_gpu(device_name, memory) == expected


def test_every_gpu_memory_names_its_source() -> None:
    # Device memory is the driver's total (binary units), never the decimal datasheet
    # figure: an H100 is 80 GiB, a B200 180 GiB, an L40S nvidia-smi's 46,068 MiB.
    for spec in GPUS.values():
        assert spec.mem_source, spec.name
        assert spec.hbm_bytes % MIB == 0, spec.name
    assert get_gpu("h100").hbm_bytes == 85_899_345_920
    assert get_gpu("b200").hbm_bytes == 180 * GIB
    assert get_gpu("a100").hbm_bytes == 40 * GIB  # nvidia-smi: 40,960 MiB


def _aic_mem_capacity(system: str) -> int:
    """``mem_capacity`` of aiconfigurator's ``systems/<system>.yaml`` (installed package)."""
    text = (package_dir() / "systems" / f"{system}.yaml").read_text()
    found = re.search(r"^\s*mem_capacity:\s*(\d+)", text, re.MULTILINE)
    assert found, system
    return int(found.group(1))


def test_gpu_memory_is_aiconfigurators_mem_capacity() -> None:
    pytest.importorskip("aiconfigurator_core")  # the aic extra; CI does not install it
    cited = {
        spec.name: spec.mem_source.split("systems/")[1].split(".yaml")[0]
        for spec in GPUS.values()
        if spec.mem_source.startswith(AIC_MEM.split(" systems/")[0])
    }
    # Every GPU whose kernel tables come from aiconfigurator cites the same system's memory.
    for gpu, system in SYSTEMS.items():
        assert cited.get(gpu) == system, gpu
    assert len(cited) >= len(SYSTEMS) + 2  # also the A100 80GB PCIe and the L4
    for name, system in cited.items():
        assert get_gpu(name).hbm_bytes == _aic_mem_capacity(system), name
