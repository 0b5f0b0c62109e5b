"""Read NVIDIA's public kernel tables (``aiconfigurator-core``): the installed package,
its version directories, a table's rows, and the fitting rows every family is made of.

The package keeps parquet tables under
``aiconfigurator_core/systems/data/<system>/<op>/<framework>/<version>/<table>.parquet``,
every row labelled with framework, version, device and kernel source, latency in
milliseconds. This module finds them in the installed package (never a copy in
this repository) and turns a timed row into a fitting row: ``{"kernel", "flops",
"bytes", <extra>, "median_s"}`` plus the shape it came from (:class:`FamilyRows` holds a
family's). Which table feeds which kernel family: :mod:`calibration.aic_families`.

Which version directory: every reader takes an engine ``release`` and reads the table
:func:`twin.costmodel.table_release.pick_version` picks for it (the newest collected at
or before the release, as aiconfigurator's ``get_database(system, backend, version)``
reads a version's own rows and fills from older ones; the newest without a release).
Two tables are not the engine's: NCCL's (named by NCCL's version) and the Mamba2 conv1d
rows (TensorRT-LLM's only): their newest stands for every release.
:func:`calibration.aic_families.release_families` lists, per family, the tables other
releases read instead (``twin calibrate --from aiconfigurator`` fits them into the
profile's ``table_releases``).
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twin.costmodel import features as ft
from twin.costmodel.table_release import newest_first, pick_version
from twin.errors import TwinError
from twin.hardware import get_gpu

PACKAGE = "aiconfigurator-core"
PACKAGE_VERSION = "0.12.0"  # the pinned extra ``twin[aic]``
ENGINES = ("vllm", "sglang", "trtllm")
ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM", "nccl": "NCCL"}

# twin GPU name -> the database's system directory.
SYSTEMS = {
    "a100-80gb": "a100_sxm",
    "h100": "h100_sxm",
    "h200": "h200_sxm",
    "b200": "b200_sxm",
    "b300": "b300_sxm",
    "gb200": "gb200",
    "gb300": "gb300",
    "l40s": "l40s",
    "rtx-pro-6000": "rtx_pro_6000_server",
}


def system_gpu(system: Path) -> str | None:
    """The twin GPU whose tables are under ``system`` (``systems/data/<system>``)."""
    return next((g for g, d in SYSTEMS.items() if d == system.name), None)


def system_l2(system: Path) -> float | None:
    """The L2 bytes (``twin.hardware.L2_BYTES``) of the GPU whose tables are under
    ``system``; None where not tabulated (every byte then read from HBM)."""
    gpu = system_gpu(system)
    return get_gpu(gpu).l2_bytes if gpu is not None else None


def system_sm_count(system: Path) -> int | None:
    """The SMs (``twin.hardware.SM_COUNTS``) of the GPU whose tables are under ``system``;
    None where not tabulated."""
    gpu = system_gpu(system)
    return get_gpu(gpu).sm_count if gpu is not None else None


ELEM_BYTES = 2  # bf16


@dataclass
class FamilyRows:
    """The fitting rows of one kernel family and where they were read."""

    kernel: str
    rows: list[dict[str, Any]]
    framework: str
    version: str
    device: str
    kernel_source: str
    tables: list[str] = field(default_factory=list)
    # The engine release of the table read (``version``, or for an all-reduce family,
    # whose version is empty, the custom all-reduce's); "" when no engine table was read.
    release: str = ""
    # A fused-MoE family whose series were read from the same-silicon sibling's table
    # (``calibration.moe_sibling``): the rule, that table, the ratio and the series.
    sibling: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.release = self.release or self.version


def package_dir(needed_by: str = "--from aiconfigurator") -> Path:
    """The installed ``aiconfigurator_core`` folder; a ``TwinError`` naming the extra (and
    ``needed_by``, what asked for it) if the package is absent."""
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or spec.origin is None:
        raise TwinError(
            f"{needed_by} needs the optional extra: pip install 'twin[aic]' "
            f"({PACKAGE}=={PACKAGE_VERSION})"
        )
    return Path(spec.origin).parent


def data_root() -> Path:
    """``systems/data`` of the installed package; a ``TwinError`` naming the extra if absent."""
    root = package_dir() / "systems" / "data"
    if not root.is_dir():
        raise TwinError(f"{PACKAGE} is installed but has no systems/data at {root}")
    return root


def installed_version() -> str:
    """The installed package's version (goes into the profile's provenance)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(PACKAGE)
    except PackageNotFoundError:
        return "unknown"


def system_dir(gpu: str, root: Path | None = None) -> Path:
    """The database directory of twin GPU ``gpu``; a ``TwinError`` listing the covered ones."""
    if gpu not in SYSTEMS:
        raise TwinError(
            f"--gpu {gpu!r}: NVIDIA's kernel database covers {', '.join(SYSTEMS)}; "
            "other GPUs keep their datasheet profile"
        )
    path = (root or data_root()) / SYSTEMS[gpu]
    if not path.is_dir():
        raise TwinError(f"--gpu {gpu!r}: no data directory {path}")
    return path


def _versions(directory: Path, table: str) -> list[Path]:
    """Version directories under ``directory`` holding ``table``, newest first (PEP 440
    order: ``twin.costmodel.table_release``). Some version directories hold only a
    ``reuse.yaml`` pointing at an older collection; they are skipped, and so is an
    engine's table whose rows name another engine (:func:`foreign_table`)."""
    found = [p for p in directory.iterdir() if (p / table).is_file()] if directory.is_dir() else []
    engine = directory.name if directory.name in ENGINES else None
    by_name = {p.name: p for p in found if engine is None or not foreign_table(p / table, engine)}
    return [by_name[v] for v in newest_first(by_name)]


def _engine_key(framework: str) -> str:
    """A table's ``framework`` label as an engine key: "SGLang" -> "sglang", "TRTLLM" and
    "TensorRT-LLM" -> "trtllm", "vLLM" -> "vllm"."""
    key = "".join(c for c in framework.lower() if c.isalnum())
    return "trtllm" if key == "tensorrtllm" else key


def foreign_table(path: Path, engine: str) -> bool:
    """True where the table at ``path``, filed under ``engine``'s directory, holds rows
    labelled with another engine's ``framework``: it times that engine's kernel, not this
    one's, so it prices no release of ``engine``. aiconfigurator-core 0.12.0 files
    TensorRT-LLM 1.2.0rc5's custom all-reduce rows (``framework`` TRTLLM, byte-identical
    to ``comm/trtllm/1.2.0rc5/custom_allreduce_perf.parquet``) as SGLang 0.5.6.post2's on
    H100 and H200, and TensorRT-LLM rows as SGLang 0.5.9's on L40S; they are the
    package's only such tables (issue 31, helper q235)."""
    return bool(_frameworks(path, path.stat().st_mtime_ns) - {engine})


@functools.lru_cache(maxsize=256)
def _frameworks(path: Path, mtime_ns: int) -> frozenset[str]:
    """The engine keys of the ``framework`` labels of the table's rows (empty: no such
    column); only that column is read."""
    import pyarrow.parquet as pq

    try:
        if "framework" not in pq.read_schema(path).names:
            return frozenset()
        column = pq.read_table(path, columns=["framework"]).column(0)
    except Exception as err:  # pyarrow raises several types for a broken file
        raise TwinError(f"{path}: cannot read the table ({err})") from None
    return frozenset(_engine_key(str(v)) for v in column.unique().to_pylist() if v)


def latest_version(directory: Path, table: str) -> Path | None:
    """The newest version directory under ``directory`` holding ``table`` (``_versions``)."""
    versions = _versions(directory, table)
    return versions[0] if versions else None


def release_version(
    directory: Path, table: str, release: str | None, passed_over: Collection[str] = ()
) -> Path | None:
    """The version directory under ``directory`` whose ``table`` prices engine release
    ``release`` (``twin.costmodel.table_release.pick_version``: the newest at or before
    it; ``None``, the newest); the versions named in ``passed_over`` price no release."""
    by_name = {p.name: p for p in _versions(directory, table) if p.name not in passed_over}
    chosen = pick_version(by_name, release)
    return None if chosen is None else by_name[chosen]


def table_versions(system: Path, engine: str) -> list[str]:
    """Every version directory of ``engine``'s tables on this system, newest first: the
    releases whose picks :func:`release_families` compares."""
    found = {v.name for v in system.glob(f"*/{engine}/*") if v.is_dir()}
    return newest_first(found)


def _read(path: Path) -> list[dict[str, Any]]:
    """The table's rows (read once per process: :func:`release_families` reads each
    table once per release it compares; the rows are never modified)."""
    return list(_read_once(path, path.stat().st_mtime_ns if path.exists() else 0))


@functools.lru_cache(maxsize=64)
def _read_once(path: Path, mtime_ns: int) -> tuple[dict[str, Any], ...]:
    import pyarrow.parquet as pq

    try:
        return tuple(pq.read_table(path).to_pylist())
    except Exception as err:  # pyarrow raises several types for a broken file
        raise TwinError(f"{path}: cannot read the table ({err})") from None


def _keep(row: dict[str, Any], **wanted: Any) -> bool:
    """True if every column present in ``row`` among ``wanted`` has an accepted value."""
    for column, accepted in wanted.items():
        if column in row and row[column] not in accepted:
            return False
    return True


def _narrow(rows: list[dict[str, Any]], preferred: Sequence[str], where: Path) -> tuple[list, str]:
    """Rows of the first preferred kernel source present (all rows if none is listed)."""
    present = {str(r.get("kernel_source", "")) for r in rows}
    for source in preferred:
        if source in present:
            return [r for r in rows if r.get("kernel_source") == source], source
    if len(present) == 1:
        return rows, present.pop()
    raise TwinError(f"{where}: kernel sources {sorted(present)}, none of {list(preferred)}")


def _require(row: dict[str, Any], columns: Sequence[str], where: Path, i: int) -> None:
    for c in columns:
        if c not in row or row[c] is None:
            raise TwinError(f"{where}, row {i}: missing column {c!r}")
    lat = row.get("latency")
    if lat is None or not lat > 0:
        raise TwinError(f"{where}, row {i}, column 'latency': must be positive (got {lat!r})")


def _row(kernel: str, feats: ft.Features, latency_ms: float, shape: dict[str, Any]) -> dict:
    flops, nbytes, extras = feats
    return {
        "kernel": kernel,
        "flops": flops,
        "bytes": nbytes,
        **extras,
        "median_s": latency_ms * 1e-3,
        "shape": shape,
    }


def _family(
    kernel: str,
    table: Path,
    rows: list[dict[str, Any]],
    source: str,
    out: list[dict],
    sibling: dict[str, Any] | None = None,
) -> FamilyRows:
    first = rows[0] if rows else {}
    return FamilyRows(
        kernel=kernel,
        rows=out,
        framework=ENGINE_NAMES.get(table.parts[-3], table.parts[-3]),
        version=table.parts[-2],
        device=str(first.get("device", "")),
        kernel_source=source,
        tables=[str(Path(*table.parts[-5:]))],
        sibling=sibling or {},
    )
