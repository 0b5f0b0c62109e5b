"""Which device is visible, whether it is the one asked for, and the versions to record."""

from __future__ import annotations

import datetime as _dt
import platform
import shutil
import subprocess
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from twin.costmodel.profile_store import measured_profiles
from twin.errors import TwinError, expect_one_of
from twin.hardware import GPUS, get_gpu, identify_gpu
from twin.torch_ops.host import cpu_name

CHOICES = (*GPUS, "auto", "cpu")


@dataclass(frozen=True)
class DeviceInfo:
    """The device the harness would time."""

    kind: str  # "cuda" or "cpu"
    name: str  # "NVIDIA H100 80GB HBM3" or "AMD EPYC (2 threads)"
    gpu: str | None  # registry name (``h100``, ``cpu``); None for a GPU twin does not know
    total_memory: float | None = None


def import_torch(flag: str) -> Any:
    """``torch``, or a one-line ``TwinError`` saying how to get it."""
    try:
        import torch
    except ImportError:
        raise TwinError(
            f"twin calibrate {flag} times kernels with PyTorch, which is not installed: "
            "pip install 'twin[torch]' (torch==2.13.0), or derive a profile without "
            "measuring with --transfer-from PROFILE"
        ) from None
    return torch


def detect_device(torch: Any) -> DeviceInfo:
    """The first CUDA device if there is one, else the CPU."""
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        name = torch.cuda.get_device_name(0)
        return DeviceInfo(
            "cuda", name, identify_gpu(name, props.total_memory), float(props.total_memory)
        )
    return DeviceInfo("cpu", cpu_name(), "cpu")


def _transfer_hint() -> str:
    gpus = [p for name, p in measured_profiles().items() if name != "cpu"]
    if gpus:
        return f" (e.g. --transfer-from {gpus[0]})"
    return " (none ships yet; until then twin cost uses the datasheet profile)"


def refusal(requested: str, found: DeviceInfo) -> str | None:
    """The one sentence refusing to calibrate ``requested`` on ``found``; None when it matches."""
    if requested == "cpu" or (requested == "auto" and found.gpu is not None):
        return None
    if requested == "auto":
        return (
            f"twin calibrate --gpu auto: found {found.name}, which is none of the GPUs "
            f"twin has datasheet peaks for ({', '.join(GPUS)}); run it on one of those, "
            "or add the GPU to twin/hardware.py"
        )
    spec = get_gpu(requested)
    if found.gpu == spec.name:
        return None
    if found.kind != "cuda":
        what = f"this machine has no CUDA GPU (found: cpu, {found.name})"
    else:
        known = f"twin's {found.gpu}" if found.gpu else "a GPU twin has no datasheet for"
        what = f"this machine's GPU is {found.name} ({known}), not an {spec.display_name}"
    return (
        f"twin calibrate --gpu {requested}: {what}; run it on an {spec.display_name}, "
        f"or derive one from a measured profile with --transfer-from "
        f"PROFILE.json{_transfer_hint()}."
    )


def check_requested(requested: str, torch: Any) -> DeviceInfo:
    """The device to time for ``--gpu requested``, or a ``TwinError`` refusing."""
    requested = requested.lower()
    expect_one_of(requested, CHOICES, "--gpu")
    found = detect_device(torch)
    if requested == "cpu":
        return DeviceInfo("cpu", cpu_name(), "cpu")
    message = refusal(requested, found)
    if message:
        raise TwinError(message)
    return found


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def driver_version() -> str | None:
    """The NVIDIA driver version from nvidia-smi, when it is there."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None


def provenance(torch: Any, device: DeviceInfo) -> dict[str, Any]:
    """Versions, driver, date and machine: what the profile's numbers depend on."""
    info: dict[str, Any] = {
        "device_name": device.name,
        "device_kind": device.kind,
        "date": _dt.datetime.now(_dt.timezone.utc).date().isoformat(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "driver": driver_version() if device.kind == "cuda" else None,
        "triton": _version("triton"),
        "mamba_ssm": _version("mamba-ssm") or _version("mamba_ssm"),
        "causal_conv1d": _version("causal-conv1d") or _version("causal_conv1d"),
        "numpy": _version("numpy"),
        "scipy": _version("scipy"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch_threads": torch.get_num_threads(),
    }
    if device.total_memory is not None:
        info["device_memory_bytes"] = device.total_memory
    return info
