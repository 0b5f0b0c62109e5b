"""Where device profiles live and which one a flag names.

The shipped profiles (``twin/calibration/profiles``), the user's own calibrations
(``user_profiles_dir``), and the one resolver every command uses for ``--gpu`` /
``--profile`` / ``--engine`` (``resolve_profile``). The format itself is
``twin.costmodel.profile``.
"""

from __future__ import annotations

import importlib.resources
import os
from pathlib import Path

from twin.costmodel.profile import Profile
from twin.errors import TwinError


def _shipped_dir() -> Path:
    """The ``profiles`` package data of ``twin.calibration`` (a checkout, an install, or a
    Ray worker's ``py_modules``), found through ``importlib.resources``."""
    return Path(str(importlib.resources.files("twin") / "calibration" / "profiles"))


PROFILES_DIR = _shipped_dir()


def shipped_profiles() -> dict[str, Path]:
    """Profiles shipped in ``twin/calibration/profiles``, by GPU name."""
    return {p.stem: p for p in sorted(PROFILES_DIR.glob("*.json"))}


def user_profiles_dir() -> Path:
    """Where ``twin calibrate`` writes without ``--out``: the user's data folder, never the
    installed package (``$TWIN_PROFILES_DIR``, else ``$XDG_DATA_HOME/twin/profiles``, else
    ``~/.local/share/twin/profiles``, the XDG base-directory default)."""
    explicit = os.environ.get("TWIN_PROFILES_DIR")
    if explicit:
        return Path(explicit)
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "twin" / "profiles"


def available_profiles() -> dict[str, Path]:
    """Every profile ``--gpu NAME`` can name: the shipped ones, and the user's own
    calibrations (:func:`user_profiles_dir`), which take precedence under the same name."""
    found = shipped_profiles()
    user = user_profiles_dir()
    if user.is_dir():
        found.update({p.stem: p for p in sorted(user.glob("*.json"))})
    return found


def profile_path(name: str) -> Path:
    """Where ``twin calibrate`` writes profile ``name`` by default (the user's folder)."""
    return user_profiles_dir() / f"{name}.json"


def load_profile(name_or_path: str | Path, engine: str | None = None) -> Profile:
    """A shipped profile by name, or a profile file by path.

    A GPU name means its measured profile for ``engine`` (default vLLM's kernels,
    ``twin.costmodel.kernel_sources``), else its datasheet profile; a full shipped
    name (``h100-sglang``, ``h100-datasheet``, ``cpu``) means that file.
    """
    text = str(name_or_path)
    path = Path(text)
    if text.endswith(".json") or path.exists():
        if engine is not None:
            raise TwinError("--engine picks a shipped profile: give it with --gpu, not a file")
        return Profile.load(path)
    return Profile.load(available_profiles()[shipped_name(text, engine)])


def shipped_name(gpu: str, engine: str | None = None) -> str:
    """The profile (shipped, or the user's own) that ``--gpu gpu [--engine engine]`` means."""
    from twin.costmodel.kernel_sources import profile_names

    shipped = available_profiles()
    candidates = profile_names(gpu, engine)
    for name in candidates:
        if name in shipped:
            return name
    mine = [n for n in shipped if n == gpu.lower() or n.startswith(f"{gpu.lower()}-")]
    if engine is not None and mine:
        raise TwinError(
            f"no {engine} profile for --gpu {gpu}: NVIDIA's tables do not cover it; "
            f"shipped for {gpu}: {', '.join(mine)}"
        )
    raise TwinError(
        f"no profile {gpu!r}: give a profile file or one of {', '.join(_gpu_names(shipped))} "
        "(or a full shipped name such as h100-sglang or h100-datasheet)"
    )


def _gpu_names(shipped: dict[str, Path]) -> list[str]:
    """The GPU names behind the shipped files (``h100-vllm`` -> ``h100``), in order."""
    from twin.costmodel.kernel_sources import DATASHEET, KERNEL_SOURCES

    suffixes = (*KERNEL_SOURCES, DATASHEET)
    out: list[str] = []
    for name in shipped:
        base = name
        for suffix in suffixes:
            if name.endswith(f"-{suffix}"):
                base = name[: -len(suffix) - 1]
        if base not in out:
            out.append(base)
    return out


def measured_profiles() -> dict[str, Path]:
    """Profiles measured on a device (the ones ``--transfer-from`` can use)."""
    out: dict[str, Path] = {}
    for name, path in available_profiles().items():
        try:
            if Profile.load(path).source == "measured":
                out[name] = path
        except TwinError:
            continue  # a broken file is reported when someone loads it by name
    return out


def resolve_profile(gpu: str | None, path: Path | None, engine: str | None = None) -> Profile:
    """The profile named by ``--gpu`` [``--engine``] (a shipped one) or ``--profile`` (a
    file); h100 if neither. The one resolver every command uses."""
    if gpu is not None and path is not None:
        raise TwinError("give --gpu or --profile, not both")
    if path is not None:
        if engine is not None:
            raise TwinError("--engine picks a shipped profile: give it with --gpu, not --profile")
        return Profile.load(path)
    return load_profile(gpu or "h100", engine)


def device_memory_bytes(profile: Profile) -> float:
    """HBM of the profile's device: its measured peak, else the datasheet of its GPU."""
    from twin.hardware import get_gpu  # late: keeps calibration importable on its own

    mem = profile.peaks.get("mem_bytes")
    if mem:
        return float(mem)
    try:
        return get_gpu(profile.gpu).hbm_bytes
    except TwinError:
        raise TwinError(
            f"profile {profile.gpu!r} gives no device memory (peaks.mem_bytes) "
            "and names no known GPU"
        ) from None
