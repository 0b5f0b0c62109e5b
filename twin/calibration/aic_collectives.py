"""The collectives' families from NVIDIA's tables (``calibration.aic_tables``): the
engine's custom all-reduce with NCCL's above it, NCCL's all-reduce alone, and NCCL's
all-gather and reduce-scatter. NCCL's table is named by NCCL's version, not the engine's:
its newest stands for every engine and release."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

from twin.calibration.aic_tables import (
    ELEM_BYTES,
    ENGINE_NAMES,
    FamilyRows,
    _read,
    _row,
    latest_version,
    release_version,
)
from twin.costmodel import collective_families as colf
from twin.costmodel import features as ft


def _nccl_by_size(
    system: Path, op_name: str = "all_reduce"
) -> tuple[dict[tuple[int, int], tuple[float, str, Path]], str]:
    """NCCL's half-precision ``op_name`` rows of ``system``'s newest ``comm/nccl`` table as
    (seconds, label, table) by (GPUs, elements), and the device they name (none where
    there is no table). NCCL's directory is named by NCCL's own version, not the
    engine's: its newest table stands for every engine and release."""
    nccl_dir = latest_version(system / "comm" / "nccl", "nccl_perf.parquet")
    by_size: dict[tuple[int, int], tuple[float, str, Path]] = {}
    if nccl_dir is None:
        return by_size, ""
    table, device = nccl_dir / "nccl_perf.parquet", ""
    for r in _read(table):
        if r.get("op_name") == op_name and r.get("nccl_dtype") in ("half", "bfloat16"):
            key = (int(r["num_gpus"]), int(r["message_size"]))
            by_size[key] = (float(r["latency"]), "NCCL " + nccl_dir.name, table)
            device = device or str(r.get("device", ""))
    return by_size, device


def _collective_families(
    by_size: dict[tuple[int, int], tuple[float, str, Path]],
    device: str,
    kernel_of: Callable[[int], str],
    release: str,
    op: str = "all_reduce",
    features: Callable[[float, int], ft.Features] = ft.allreduce_features,
) -> list[FamilyRows]:
    """One family per GPU count of a collective's rows ``by_size`` (latency, label, table by
    GPUs and elements: :func:`allreduce_rows`, :func:`gather_rows`), ``op``'s features."""
    families = []
    for n in sorted({k[0] for k in by_size}):
        kernel = kernel_of(n)
        out, labels, tables = [], set(), set()
        for (gpus, size), (lat, label, table) in sorted(by_size.items()):
            if gpus != n:
                continue
            nbytes = size * ELEM_BYTES
            out.append(_row(kernel, features(nbytes, n), lat, {"n": n, "bytes": nbytes}))
            labels.add(label)
            tables.add(str(Path(*table.parts[-5:])))
        families.append(
            FamilyRows(
                kernel=kernel,
                rows=out,
                framework=" + ".join(sorted(labels)),
                version="",
                device=device,
                kernel_source=op,
                tables=sorted(tables),
                release=release,
            )
        )
    return families


# NCCL's ``nccl_perf`` ops fitted as the all-gather and reduce-scatter families (a
# buffer of ``message_size`` elements, every GPU's share: nccl-tests' convention, which the
# 8-GPU bandwidth at the largest sizes bears out).
NCCL_GATHER_OPS = {"all_gather": "allgather", "reduce_scatter": "reducescatter"}


def gather_rows(system: Path) -> list[FamilyRows]:
    """One family per NCCL op of :data:`NCCL_GATHER_OPS` and GPU count, from the newest
    ``comm/nccl`` table's half-precision rows (:func:`_nccl_by_size`: NCCL's, not an
    engine's: every engine and release)."""
    families: list[FamilyRows] = []
    for op_name, op in NCCL_GATHER_OPS.items():
        by_size, device = _nccl_by_size(system, op_name)
        kernel_of = functools.partial(colf.collective_kernel, op)
        families += _collective_families(by_size, device, kernel_of, "", op, ft.gather_features)
    return sorted(families, key=lambda f: f.kernel)


# TensorRT-LLM custom all-reduce tables (system directory, release) that time, at decode
# sizes, the un-fused op's own algorithm picks, which a layer running the op fused with
# its next RMSNorm does not run there. The collector times the op un-fused
# (ai-dynamo/aiconfigurator ``collector/collect_all_reduce.py``: ``AllReduce`` with
# ``AllReduceStrategy.AUTO`` and ``AllReduceFusionOp.NONE``), and AUTO picks by fusion op
# (NVIDIA/TensorRT-LLM ``cpp/tensorrt_llm/thop/allreduceOp.cpp`` ``selectImplementation``
# -> ``cpp/tensorrt_llm/common/customAllReduceUtils.h`` ``selectStrategyLookUpTable``,
# ``AllReduceBestStrategyTableSM90``, stored tree): hidden 4096, fusion NONE, two-shot at
# 2 and 8 tokens on 2 GPUs and at 8-64 tokens on 4, one-shot around them; fusion
# RESIDUAL_RMS_NORM (``_torch/models/modeling_qwen3_moe.py`` ``Qwen3MoEDecoderLayer``:
# both all-reduces of a layer fused with the next RMSNorm, ``PRE_MOE_FUSION`` /
# ``POST_MOE_FUSION``), one-shot up to 1,024 / 256 tokens on 2 / 4 GPUs. In
# aiconfigurator-core 0.12.0's 1.2.0rc5 Hopper tables exactly those two-shot points stand
# out (H100, 2 GPUs: 9.9 / 8.4 us at 8 / 32 Ki elements against 3.4-3.8 at the sizes
# around them; 4 GPUs: 10.9-11.9 us at 32-256 Ki against 3.7 at 16 Ki and 13.2 at 512 Ki;
# H200 alike), where the 1.3.0rc10 and 1.3.0rc20 tables run smoothly through them (4 GPUs
# 3.7-7.9 us); the Blackwell 1.2.0rc5 table, whose SM100 column is one-shot there, has no
# such points (issue 31, helper q235h38). So such a table prices only a layout whose
# all-reduces run un-fused (``KernelLayout.norm_in_allreduce`` false: Llama-3.1-8B's,
# "Disable fusion for small models",
# ``twin.engine.kernel_layouts_trtllm.trtllm_norm_in_allreduce``),
# which runs exactly the NONE column it timed: its fit is kept apart
# (``twin.costmodel.profile.TableReleases.unfused_fits``, :func:`unfused_allreduce_rows`)
# and a fused layout's pick falls to the engine's other tables (for older releases the
# oldest of them); issue 31, helper trtar39.
UNFUSED_TWOSHOT_TABLES = frozenset({("h100_sxm", "1.2.0rc5"), ("h200_sxm", "1.2.0rc5")})


def unfused_versions(system: Path, engine: str) -> set[str]:
    """The releases of ``engine``'s custom all-reduce tables on ``system`` that time the
    un-fused op's own picks (:data:`UNFUSED_TWOSHOT_TABLES`)."""
    if engine != "trtllm":
        return set()
    return {v for s, v in UNFUSED_TWOSHOT_TABLES if s == system.name}


def custom_allreduce_dir(
    system: Path, engine: str, release: str | None, fused: bool = True
) -> Path | None:
    """The version directory whose custom all-reduce table prices engine release
    ``release`` (:func:`release_version`) for a layout running the op ``fused`` with the
    next norm (:func:`unfused_versions` passed over) or not (every table a candidate)."""
    passed_over = unfused_versions(system, engine) if fused else set()
    return release_version(
        system / "comm" / engine, "custom_allreduce_perf.parquet", release, passed_over
    )


def allreduce_rows(
    system: Path, engine: str, release: str | None = None, fused: bool = True
) -> list[FamilyRows]:
    """One family per GPU count: the engine's graph-mode custom all-reduce (engine release
    ``release``'s table for a layout running it ``fused`` or not:
    :func:`custom_allreduce_dir`), NCCL above it."""
    custom_dir = custom_allreduce_dir(system, engine, release, fused)
    by_size, device = _nccl_by_size(system)
    if custom_dir is not None:
        table = custom_dir / "custom_allreduce_perf.parquet"
        for r in _read(table):
            backend = str(r.get("backend") or r.get("kernel_source") or "")
            if "eager" in backend.lower():
                continue  # production engines replay the all-reduce inside CUDA graphs
            key = (int(r["num_gpus"]), int(r["message_size"]))
            label = f"{ENGINE_NAMES.get(engine, engine)} {custom_dir.name} custom"
            by_size[key] = (float(r["latency"]), label, table)
            device = device or str(r.get("device", ""))
    release_name = custom_dir.name if custom_dir is not None else ""
    return _collective_families(by_size, device, colf.allreduce_kernel, release_name)


def unfused_allreduce_rows(system: Path, engine: str) -> dict[str, dict[str, FamilyRows]]:
    """Per all-reduce family, by release, its rows from each table that only an un-fused
    layout reads (:func:`unfused_versions`; that release's own table, NCCL above it):
    the ``TableReleases.unfused_fits`` of ``twin calibrate --from aiconfigurator``."""
    out: dict[str, dict[str, FamilyRows]] = {}
    for version in sorted(unfused_versions(system, engine)):
        for fam in allreduce_rows(system, engine, version, fused=False):
            if fam.release == version:
                out.setdefault(fam.kernel, {})[version] = fam
    return out


def nccl_allreduce_rows(system: Path) -> list[FamilyRows]:
    """One family per GPU count of NCCL's all-reduce alone (``allreduce_nccl_<n>gpu``):
    what an engine runs above its custom all-reduce's size limit
    (``twin.costmodel.kernel_layout.KernelLayout.custom_allreduce_max_bytes``)."""
    by_size, device = _nccl_by_size(system)
    return _collective_families(by_size, device, colf.nccl_allreduce_kernel, "")
