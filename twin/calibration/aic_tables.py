"""Read NVIDIA's public kernel tables (``aiconfigurator-core``) as the twin's kernel rows.

The package keeps parquet tables under
``aiconfigurator_core/systems/data/<system>/<op>/<framework>/<version>/<table>.parquet``,
every row labelled with framework, version, device and kernel source, latency in
milliseconds. This module finds them in the installed package (never a copy in
this repository), keeps the rows that match how the twin prices a kernel (bf16
weights and activations, bf16 KV cache, full attention, no beams; and, as families
of their own, each quantised GEMM mode and an fp8 KV cache) and turns each
into a fitting row: ``{"kernel", "flops", "bytes", <extra>, "median_s"}`` plus the
shape it came from. Which table feeds which kernel family:

- ``gemm``: ``gemm_perf`` (m x n x k, ``gemm_dtype`` bfloat16); ``gemm_<mode>`` the same
  table's rows of each quantised mode (``fp8``, ``fp8_block``, ``nvfp4``: the precision
  fits of ``twin.precision``), their features at the format's operand bytes; every
  kernel source of a mode is kept (their shapes are disjoint: the engine's dispatcher
  picks one per shape, e.g. vLLM's DeepGEMM, FlashInfer and CUTLASS block-fp8 kernels);
- ``attn_prefill``: ``context_attention_perf`` (batch x isl, no cached prefix: ``step`` 0);
- ``attn_decode``: ``generation_attention_perf`` (batch, ``step`` = cached length, so
  each query reads ``step + 1`` keys);
- ``attn_prefill_fp8kv``, ``attn_decode_fp8kv``: the same tables' rows with
  ``kv_cache_dtype`` fp8 (K/V read at 1 byte), of the engine's default kernel source;
  the context FMHA in fp8 where the table has it (``attn_dtype`` fp8, what
  aiconfigurator pairs with an fp8 KV cache: ``fmha_quant_mode`` fp8 in its
  ``sdk/models/helpers.py`` ``_infer_quant_modes_from_raw_config``), else bf16;
- ``conv1d``: ``mamba2_perf``'s ``causal_conv1d_fn`` (prefill) and
  ``causal_conv1d_update`` (decode) rows; only TensorRT-LLM collected them, and it is
  the same CUDA kernel (Dao-AILab causal-conv1d) that vLLM and SGLang call;
- ``moe`` and ``moe_<mode>``: ``moe_perf``'s fused-MoE rows per ``moe_dtype``
  (``twin.precision.MOE_TABLE_MODES``), ``distribution`` balanced only, gated (SwiGLU)
  kernels only (``moe_torch_flow_nongated`` is Nemotron's relu2 MLP); features per GPU
  (``moe_row``); per dtype the version directory with such rows that the release
  picks (below) and, where several kernel sources timed it, the one with the most rows
  (the backend the collector swept: the engine's default for that format); a series
  the same-silicon sibling (B200 / GB200, B300 / GB300) timed far faster is read from the
  sibling's table of the same version (``calibration.moe_sibling``, :func:`moe_table`),
  and on B200's die a series both GPUs of the pair timed slow from B300's die's;
  ``moe_nvfp4_min_latency`` TensorRT-LLM's min-latency nvfp4 rows (kernel source
  ``moe_torch_flow_min_latency``) of at most 128 tokens, the steps it prices
  (``twin.costmodel.formulas.MOE_MIN_LATENCY_MAX_TOKENS``);
- ``moe_mxfp4_mxfp8`` (vLLM only): the mxfp4 experts with mxfp8 activations, SGLang's
  rows of the FlashInfer kernel vLLM runs for them (:func:`mxfp8_activation_rows`);
- ``mla_*``: the MLA tables (``calibration.aic_mla``);
- ``a2a_*``: DeepEP's all-to-all dispatch and combine (``calibration.aic_a2a``);
- ``allreduce_<n>gpu``: the engine's ``custom_allreduce_perf`` (CUDA-graph backend)
  where it has the message size, NCCL ``nccl_perf`` all_reduce above that;
  ``message_size`` counts elements (2 bytes each), not bytes;
- ``allreduce_nccl_<n>gpu``: NCCL's ``nccl_perf`` all_reduce alone (an engine's
  fallback above its custom all-reduce's size limit).

A table that mixes kernel sources is narrowed to the engine's default one for that
GPU (``ATTENTION_SOURCES``); the chosen source travels into the profile.

Which version directory: every reader takes an engine ``release`` and reads the table
:func:`twin.costmodel.table_release.pick_version` picks for it (the newest collected at
or before the release, as aiconfigurator's ``get_database(system, backend, version)``
reads a version's own rows and fills from older ones; the newest without a release).
Two tables are not the engine's: NCCL's (named by NCCL's version) and the Mamba2 conv1d
rows (TensorRT-LLM's only): their newest stands for every release.
:func:`release_families` lists, per family, the tables other releases read instead
(``twin calibrate --from aiconfigurator`` fits them into the profile's
``table_releases``).
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twin import precision as px
from twin.calibration.collector_routing import table_rank_load
from twin.calibration.moe_sibling import (
    BAND,
    MOE_SHAPE_COLUMNS,
    SiblingFill,
    cross_die_of,
    fill_pair_slow_series,
    fill_slow_series,
    sibling_of,
)
from twin.costmodel import features as ft
from twin.costmodel import formulas as fm
from twin.costmodel.routing import ROUTINGS
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


def reads_replay_l2(params: dict[str, float]) -> bool:
    """Whether a fused-MoE fit was fitted on rows whose working set a table's replays keep
    in L2 (``features.moe_features``): a fit of that form has a positive ``c_l2_bytes``
    (the fit's parameters are exponentials, never 0); one written before reads with 0
    (``profile._upgrade``) and was fitted with every byte from HBM."""
    return params.get("c_l2_bytes", 0.0) > 0.0


# Attention kernel of each engine's default backend, in order of preference (the
# first one present in a table is kept). vLLM: FlashAttention 3 on Hopper, FA2
# elsewhere, FlashInfer (its TRT-LLM kernels) on Blackwell (vllm/platforms/cuda.py
# backend selection); SGLang: fa3 on Hopper, FlashInfer elsewhere
# (sglang/srt/server_args.py attention-backend defaults); TensorRT-LLM: its
# PyTorch-flow attention op, which also applies RoPE and writes the KV cache.
ATTENTION_SOURCES = {
    "vllm": (
        "vllm_flash_attn_fa3",
        "vllm_flashinfer_trtllmprefill",
        "vllm_flashinfer_trtllmdecode",
        "vllm_flashinfer",
        "vllm_flash_attn_fa2",
        "vllm_flash_attn",
    ),
    "sglang": ("fa3", "flashinfer", "flash_attention", "triton"),
    "trtllm": ("torch_flow",),
}
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
    ``reuse.yaml`` pointing at an older collection; they are skipped."""
    found = [p for p in directory.iterdir() if (p / table).is_file()] if directory.is_dir() else []
    by_name = {p.name: p for p in found}
    return [by_name[v] for v in newest_first(by_name)]


def latest_version(directory: Path, table: str) -> Path | None:
    """The newest version directory under ``directory`` holding ``table`` (``_versions``)."""
    versions = _versions(directory, table)
    return versions[0] if versions else None


def release_version(directory: Path, table: str, release: str | None) -> Path | None:
    """The version directory under ``directory`` whose ``table`` prices engine release
    ``release`` (``twin.costmodel.table_release.pick_version``: the newest at or before
    it; ``None``, the newest)."""
    by_name = {p.name: p for p in _versions(directory, table)}
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


def gemm_rows(
    system: Path, engine: str, mode: str = "bfloat16", release: str | None = None
) -> FamilyRows | None:
    """GEMMs of ``engine`` on this system in ``mode`` (``bfloat16``, or a quantised mode of
    ``twin.precision``: family ``gemm_<mode>``), from engine release ``release``'s table
    (:func:`release_version`; None: the newest)."""
    version = release_version(system / "gemm" / engine, "gemm_perf.parquet", release)
    if version is None:
        return None
    table = version / "gemm_perf.parquet"
    if mode == "bfloat16":
        kernel, accepted = "gemm", {"bfloat16", "float16"}
        operands = None
    else:
        fmt = px.WEIGHT_FORMATS[px.TABLE_MODES[mode]]
        kernel, accepted = fmt.kernel, {mode}
        operands = px.gemm_operand_bytes(fmt, ELEM_BYTES)
    raw = [r for r in _read(table) if _keep(r, gemm_dtype=accepted)]
    if mode != "bfloat16":
        raw = [r for r in raw if r.get("gemm_dtype") == mode]  # a table without the column
    out = []
    for i, r in enumerate(raw):
        _require(r, ("m", "n", "k"), table, i)
        m, n, k = int(r["m"]), int(r["n"]), int(r["k"])
        feats = (
            ft.gemm_features(m, k, n, ELEM_BYTES)
            if operands is None
            else ft.gemm_features_at(m, k, n, ELEM_BYTES, *operands)
        )
        out.append(_row(kernel, feats, r["latency"], {"m": m, "n": n, "k": k}))
    sources = sorted({str(r.get("kernel_source", "")) for r in raw})
    family = _family(kernel, table, raw, ",".join(sources), out)
    if mode == "fp8" and engine in DYNAMIC_FP8_GEMMS:
        _static_fp8(family, system, engine, version.name)
    return family


# Engines whose collected per-tensor ``fp8`` GEMM rows time a *dynamic* activation scale.
# aiconfigurator's TensorRT-LLM collector (``collector/trtllm/collect_gemm.py``
# ``_build_weights``) loads an fp8 Linear with a weight scale and no ``input_scale``, so
# TensorRT-LLM (1.x ``_torch/modules/linear.py`` ``FP8QDQLinearMethod``:
# ``process_weights_after_loading_vanilla`` sets ``input_scale = None``; ``apply`` then
# runs ``quantize_e4m3_per_tensor``, an amax reduction before the quantisation) pays a
# scale computation per GEMM. The per-tensor FP8 checkpoints TensorRT-LLM serves
# (ModelOpt's, ``nvidia/*-FP8``) carry a calibrated ``input_scale``: ``apply`` runs
# ``static_quantize_e4m3_per_tensor`` alone. The same collection times that difference
# per (m, k) (``collector/trtllm/collect_computescale.py``: ``compute_scale`` = dynamic
# less static quantisation), and aiconfigurator prices such checkpoints as its
# ``fp8_static`` mode, "static FP8 derived from dynamic FP8" and those tables
# (aiconfigurator-core 0.12.0 ``sdk/perf_database.py`` ``_gemm_key_names``,
# ``sdk/models/helpers.py``: per-tensor fp8 is static unless the checkpoint says
# dynamic). vLLM's collector builds its fp8 rows with ``activation_scheme="static"``
# (``collector/vllm/collect_gemm.py``): nothing to take off.
DYNAMIC_FP8_GEMMS = ("trtllm",)
COMPUTE_SCALE_TABLE = "computescale_perf.parquet"


def _static_fp8(family: FamilyRows, system: Path, engine: str, version: str) -> None:
    """``family``'s rows less the dynamic scale's time at their (m, k): the static-scale
    GEMM (:data:`DYNAMIC_FP8_GEMMS`), from the same release's ``quantize`` table. A row
    without a timed (m, k), or one the subtraction would leave non-positive, is kept as
    measured; without the table the family stays as measured."""
    found = release_version(system / "quantize" / engine, COMPUTE_SCALE_TABLE, version)
    if found is None:
        return
    table = found / COMPUTE_SCALE_TABLE
    scale: dict[tuple[int, int], float] = {}
    for i, r in enumerate(_read(table)):
        if r.get("quant_dtype", "fp8") != "fp8":
            continue
        if r.get("m") is None or r.get("k") is None or r.get("latency") is None:
            raise TwinError(f"{table}, row {i}: needs columns 'm', 'k' and 'latency'")
        scale[(int(r["m"]), int(r["k"]))] = float(r["latency"]) * 1e-3
    taken = 0
    for row in family.rows:
        dynamic = scale.get((row["shape"]["m"], row["shape"]["k"]), 0.0)
        if 0.0 < dynamic < row["median_s"]:
            row["median_s"] -= dynamic
            taken += 1
    if taken:
        family.kernel_source += ", static input scale"
        family.tables.append(str(Path(*table.parts[-5:])))


_ATTN = {"attn_dtype": {"bfloat16", "float16"}, "kv_cache_dtype": {"bfloat16", "float16"}}
# The context FMHA's dtype with an fp8 KV cache, in order of preference (see the docstring).
FP8_KV_FMHA = ("fp8", "bfloat16")


def attention_rows(
    system: Path,
    engine: str,
    phase: str,
    kv_cache: str = "bfloat16",
    release: str | None = None,
) -> FamilyRows | None:
    """Context (``phase='prefill'``) or generation attention of ``engine``, full attention,
    over a bf16 KV cache or (``kv_cache='fp8'``, family ``attn_<phase>_fp8kv``) an fp8 one,
    from engine release ``release``'s table (:func:`release_version`; None: the newest)."""
    name = "context" if phase == "prefill" else "generation"
    table_name = f"{name}_attention_perf.parquet"
    version = release_version(system / "attention" / engine, table_name, release)
    if version is None:
        return None
    table = version / table_name
    kernel = f"attn_{phase}"
    kv_e = ELEM_BYTES
    if kv_cache == "bfloat16":
        raw = [r for r in _read(table) if _keep(r, window_size={0}, beam_width={1}, **_ATTN)]
        raw, source = _narrow(raw, ATTENTION_SOURCES.get(engine, ()), table)
    else:
        kernel, kv_e = px.ATTN_FP8_KV[kernel], px.KV_FP8_BYTES
        raw = [
            r
            for r in _read(table)
            if r.get("kv_cache_dtype") == kv_cache and _keep(r, window_size={0}, beam_width={1})
        ]
        preferred = ATTENTION_SOURCES.get(engine, ())
        if not any(r.get("kernel_source") in preferred for r in raw):
            return None  # not the engine's default kernel (L40S: FlashInfer only): bf16 KV's
        raw, source = _narrow(raw, preferred, table)
        dtypes = {r.get("attn_dtype") for r in raw}
        fmha = next((d for d in FP8_KV_FMHA if d in dtypes), None)
        raw = [r for r in raw if r.get("attn_dtype") == fmha]
        if phase == "prefill" and fmha == "fp8":
            source = f"{source}, fp8 FMHA"
    out = []
    for i, r in enumerate(raw):
        _require(r, ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim"), table, i)
        b, h, kvh, hd = (
            int(r[c]) for c in ("batch_size", "num_heads", "num_key_value_heads", "head_dim")
        )
        if phase == "prefill":
            if int(r.get("step", 0) or 0):
                continue  # a cached prefix: not the table's main grid
            s = int(r["isl"])
            flops, nbytes, scores, tiles = ft.attn_prefill_sums(
                b * s, b * s * (s + 1) // 2, b * s, b, h, kvh, hd, ELEM_BYTES, kv_e
            )
            shape = {"b": b, "s": s, "h": h, "kvh": kvh, "d": hd}
        else:
            keys = int(r["step"]) + 1  # the cached tokens and the new one
            flops, nbytes, scores, tiles = ft.attn_decode_sums(
                b, b * keys, h, kvh, hd, ELEM_BYTES, kv_e
            )
            shape = {"b": b, "c": keys - 1, "h": h, "kvh": kvh, "d": hd}
        extras = {"score_elems": scores, "tiles": tiles}
        out.append(_row(kernel, (flops, nbytes, extras), r["latency"], shape))
    return _family(kernel, table, raw, source, out)


def conv1d_rows(system: Path) -> list[FamilyRows]:
    """Mamba2 causal conv1d: prompt pass (``conv1d``) and decode update (``conv1d_update``)."""
    base = system / "linear_attention"
    for engine in ENGINES:  # whichever engine collected mamba2 kernels (today: trtllm)
        version = latest_version(base / engine, "mamba2_perf.parquet")
        if version is not None:
            break
    else:
        return []
    table = version / "mamba2_perf.parquet"
    raw = _read(table)
    families = []
    for kernel, source in (
        ("conv1d", "causal_conv1d_fn"),
        ("conv1d_update", "causal_conv1d_update"),
    ):
        mine = [r for r in raw if r.get("kernel_source") == source]
        out = []
        for i, r in enumerate(mine):
            _require(
                r,
                ("batch_size", "seq_len", "nheads", "head_dim", "n_groups", "d_state", "d_conv"),
                table,
                i,
            )
            b, s, taps = int(r["batch_size"]), int(r["seq_len"]), int(r["d_conv"])
            # conv channels = d_inner + 2 x groups x d_state (x, B and C go through the conv)
            width = int(r["nheads"]) * int(r["head_dim"]) + 2 * int(r["n_groups"]) * int(
                r["d_state"]
            )
            update = kernel == "conv1d_update"
            length = 1 if update else s
            feats = ft.conv1d_features(b, length, width, taps, ELEM_BYTES, with_state=update)
            shape = {"b": b, "l": length, "c": width, "k": taps}
            out.append(_row(kernel, feats, r["latency"], shape))
        if out:
            families.append(_family(kernel, table, mine, source, out))
    return families


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
        kernel_of = functools.partial(fm.collective_kernel, op)
        families += _collective_families(by_size, device, kernel_of, "", op, ft.gather_features)
    return sorted(families, key=lambda f: f.kernel)


def allreduce_rows(system: Path, engine: str, release: str | None = None) -> list[FamilyRows]:
    """One family per GPU count: the engine's graph-mode custom all-reduce (engine release
    ``release``'s table: :func:`release_version`), NCCL above it."""
    custom = "custom_allreduce_perf.parquet"
    custom_dir = release_version(system / "comm" / engine, custom, release)
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
    return _collective_families(by_size, device, fm.allreduce_kernel, release_name)


def nccl_allreduce_rows(system: Path) -> list[FamilyRows]:
    """One family per GPU count of NCCL's all-reduce alone (``allreduce_nccl_<n>gpu``):
    what an engine runs above its custom all-reduce's size limit
    (``twin.costmodel.kernel_layout.KernelLayout.custom_allreduce_max_bytes``)."""
    by_size, device = _nccl_by_size(system)
    return _collective_families(by_size, device, fm.nccl_allreduce_kernel, "")


MOE_COLUMNS = ("num_tokens", *MOE_SHAPE_COLUMNS)


def moe_row(
    r: dict[str, Any],
    fmt: px.WeightFormat,
    kernel: str,
    latency_ms: float,
    l2_bytes: float | None = None,
    timed_rank: bool = True,
) -> dict[str, Any]:
    """One balanced ``moe_perf`` row as a fitting row, per GPU: the rank receives
    ``tokens x topk / ep`` rows (balanced routing spreads them evenly over the experts,
    so over the ranks), holds ``experts / ep`` experts of width ``inter / moe_tp``, and
    touches ``min(experts / ep, rows)`` of them (each expert's share is even: the
    ``balanced`` rule of ``twin.costmodel.routing``); with ``timed_rank``, a vLLM row's
    are those of the rank its collector timed (``collector_routing.table_rank_load``;
    False: the mean rank, as a fit written before the rule read them). ``l2_bytes``:
    the L2 of the table's GPU (``system_l2``): a working set that fits stays there
    across the collector's replays (``features.moe_features``). SGLang's Triton rows
    above as many tokens as local experts ran its large-M default config
    (``features.sglang_large_m``)."""
    t, d, inter, top, n_exp, mtp, ep = (int(r[c]) for c in MOE_COLUMNS)
    source = str(r.get("kernel_source", ""))
    load = (
        table_rank_load(source, t, n_exp, top, ep)
        if timed_rank
        else ROUTINGS["balanced"].rank_load(t, n_exp, top, ep)
    )
    rows, active = load.rows, load.active
    act_e, w_e = (
        (float(ELEM_BYTES), float(ELEM_BYTES))
        if fmt.bytes_per_param is None
        else px.gemm_operand_bytes(fmt, ELEM_BYTES)
    )
    width = inter // mtp
    routed = t * top * d  # every routed row of the batch, all ranks' (the hidden width)
    large_m = ft.sglang_large_m(source, fmt.bytes_per_param is None, t, n_exp // ep)
    feats = ft.moe_features(
        rows, routed, active, d, width, 2, ELEM_BYTES, act_e, w_e, l2_bytes, large_m
    )
    shape = {"t": t, "d": d, "i": inter, "k": top, "e": n_exp, "tp": mtp, "ep": ep}
    return _row(kernel, feats, latency_ms, shape)


def _moe_raw(table: Path, dtype: str) -> list[dict[str, Any]]:
    """``table``'s balanced, gated rows of expert format ``dtype``."""
    return moe_table_rows(table, dtype, "balanced")


def moe_table(table: Path) -> SiblingFill:
    """A ``moe_perf`` table's rows after both rules of ``calibration.moe_sibling``: its
    slow series read from the same-silicon sibling's table of the same version, then
    (B200's die) the series both dies of the pair timed slow from the cross die's."""
    return moe_fills(table)[1]


def moe_fills(table: Path) -> tuple[SiblingFill, SiblingFill]:
    """The same-silicon rule's fill of ``table`` and the cross-die rule's fill of that
    (its rows the table's final rows; it replaced nothing where the GPU has no cross
    die or a table is missing)."""
    same = _same_silicon(table)
    sibling, cross = sibling_of(table), cross_die_of(table)
    sibling_cross = cross_die_of(sibling) if sibling is not None else None
    if sibling is None or cross is None or sibling_cross is None:
        return same, SiblingFill(same.rows)
    pair = _cross_die_once(
        table, _mtime(table), _mtime(sibling), _mtime(cross), _mtime(sibling_cross)
    )
    return same, pair


def _same_silicon(table: Path) -> SiblingFill:
    sibling = sibling_of(table)
    return _moe_table_once(table, _mtime(table), sibling, _mtime(sibling))


def _mtime(path: Path | None) -> int:
    return path.stat().st_mtime_ns if path is not None and path.exists() else 0


@functools.lru_cache(maxsize=16)
def _moe_table_once(table: Path, _m: int, sibling: Path | None, _ms: int) -> SiblingFill:
    own = _read(table)
    if sibling is None:
        return SiblingFill(tuple(own))
    return fill_slow_series(own, _read(sibling), sibling_table=str(Path(*sibling.parts[-5:])))


@functools.lru_cache(maxsize=16)
def _cross_die_once(table: Path, *_mtimes: int) -> SiblingFill:
    sibling, cross = sibling_of(table), cross_die_of(table)
    assert sibling is not None and cross is not None  # moe_fills checked
    sibling_cross = cross_die_of(sibling)
    assert sibling_cross is not None
    return fill_pair_slow_series(
        _same_silicon(table).rows,
        _same_silicon(sibling).rows,
        _same_silicon(cross).rows,
        _same_silicon(sibling_cross).rows,
        cross_table=str(Path(*cross.parts[-5:])),
    )


def _sibling_note(table: Path, source: str, dtype: str) -> dict[str, Any]:
    """The provenance of a family whose series either rule of ``calibration.moe_sibling``
    replaced in ``table``; {} when they replaced none."""
    same, pair = moe_fills(table)
    lo, hi = BAND
    note: dict[str, Any] = {}
    series = same.replaced_labels(source, dtype)
    if series:
        note = {
            "rule": (
                "twin.calibration.moe_sibling: a series whose median time ratio to the "
                f"same-silicon sibling's same series is above {hi} x the tables' median ratio "
                "takes the sibling's rows times that median"
            ),
            "band": [lo, hi],
            "sibling_table": same.sibling_table,
            "median_ratio": round(same.median_ratio, 4),
            "series": series,
        }
    crossed = pair.replaced_labels(source, dtype)
    if crossed:
        note["cross_die"] = {
            "rule": (
                "twin.calibration.moe_sibling.fill_pair_slow_series: a series whose median "
                f"time ratio to the cross die's same series is above {hi} x the tables' "
                "median ratio on both GPUs of the same-silicon pair takes the cross die's "
                "rows times this table's median ratio"
            ),
            "cross_table": pair.sibling_table,
            "median_ratio": round(pair.median_ratio, 4),
            "series": crossed,
        }
    return note


def moe_table_rows(table: Path, dtype: str, distribution: str) -> list[dict[str, Any]]:
    """``table``'s gated rows of expert format ``dtype`` timed under routing
    ``distribution`` (``balanced``, ``power_law_1.01``, ``power_law_1.2``), after the
    same-silicon and cross-die rules (:func:`moe_table`)."""
    return [
        r
        for r in moe_table(table).rows
        if r.get("moe_dtype") == dtype
        and r.get("distribution") == distribution
        and "nongated" not in str(r.get("kernel_source", ""))
    ]


def moe_rows(
    system: Path, engine: str, release: str | None = None, replay_l2: bool = True
) -> list[FamilyRows]:
    """The fused-MoE families of ``engine``: one per expert format the tables timed, each
    from the table of engine release ``release`` among the versions with rows of that
    format (``twin.costmodel.table_release.pick_version``; None: the newest such).
    ``replay_l2`` False: every row's bytes from HBM and vLLM's rows at the mean rank, the
    features a fit written before the L2 term (and the collector's rank,
    ``collector_routing``) was fitted on (its ``c_l2_bytes`` 0: ``reads_replay_l2``)."""
    versions = _versions(system / "moe" / engine, "moe_perf.parquet")
    l2 = system_l2(system) if replay_l2 else None
    families = []
    for dtype, name in px.MOE_TABLE_MODES.items():
        fmt = px.WEIGHT_FORMATS[name]
        kernel = fmt.moe_kernel
        timed = {v.name: v for v in versions if _moe_raw(v / "moe_perf.parquet", dtype)}
        chosen = pick_version(timed, release)
        if chosen is None:
            continue
        table = timed[chosen] / "moe_perf.parquet"
        every = _moe_raw(table, dtype)
        # TensorRT-LLM's min-latency kernel is a family of its own (formulas:
        # ``moe_min_latency_kernel``), fitted on the steps it prices (at most
        # MOE_MIN_LATENCY_MAX_TOKENS tokens); never the default kernel.
        small = [
            r
            for r in every
            if r.get("kernel_source") == fm.MOE_MIN_LATENCY_SOURCE
            and int(r.get("num_tokens") or 0) <= fm.MOE_MIN_LATENCY_MAX_TOKENS
        ]
        raw = [r for r in every if r.get("kernel_source") != fm.MOE_MIN_LATENCY_SOURCE]
        if small and fmt.table_mode in fm.MOE_MIN_LATENCY_MODES:
            fast = fm.moe_min_latency_kernel(fmt.table_mode)
            rows = [moe_row(r, fmt, fast, r["latency"], l2, replay_l2) for r in small]
            src = fm.MOE_MIN_LATENCY_SOURCE
            note = _sibling_note(table, src, dtype)
            families.append(_family(fast, table, small, src, rows, note))
            # The same kernel at every token count: TensorRT-LLM's TRTLLM MoE backend
            # (formulas: ``moe_trtllm_gen_kernel``).
            gen = fm.moe_trtllm_gen_kernel(fmt.table_mode)
            every_gen = [r for r in every if r.get("kernel_source") == src]
            rows = [moe_row(r, fmt, gen, r["latency"]) for r in every_gen]
            families.append(_family(gen, table, every_gen, src, rows, note))
        if not raw:
            continue
        counts: dict[str, int] = {}
        for r in raw:
            src = str(r.get("kernel_source", ""))
            counts[src] = counts.get(src, 0) + 1
        source = max(sorted(counts), key=lambda k: counts[k])
        raw = [r for r in raw if str(r.get("kernel_source", "")) == source]
        out = []
        for i, r in enumerate(raw):
            _require(r, MOE_COLUMNS, table, i)
            out.append(moe_row(r, fmt, kernel, r["latency"], l2, replay_l2))
        note = _sibling_note(table, source, dtype)
        families.append(_family(kernel, table, raw, source, out, note))
    return families


# The mxfp4 experts with mxfp8 activations (``formulas.moe_mxfp8_activation_kernel``) that
# vLLM runs on Blackwell under ``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1`` (0.15.1
# ``quantization/mxfp4.py`` ``Mxfp4MoEMethod.apply_monolithic``: ``mxfp8_quantize`` then
# FlashInfer's ``trtllm_fp4_block_scale_moe``, routing in the kernel) are read from
# SGLang's table of that kernel: vLLM 0.24.0's own ``w4a8_mxfp4_mxfp8`` rows time another
# class (``TrtLlmMxfp4ExpertsModular``, vLLM's routing) and only at hidden 4,096 / 7,168,
# not gpt-oss's 2,880 x 2,880, 128 experts, top 4, which SGLang 0.5.14's
# ``sglang_flashinfer_trtllm_moe`` rows time at moe_tp 1-32 (aiconfigurator's
# collector/sglang/collect_moe.py, ai-dynamo/aiconfigurator 095f58a51: ``Mxfp4MoEMethod``
# under the ``flashinfer_mxfp4`` runner, ``flashinfer_mxfp4_moe_precision`` bf16 for
# ``w4a16_mxfp4`` and mxfp8 for ``w4a8_mxfp4_mxfp8``). That it is vLLM's kernel: the same
# table's ``w4a16_mxfp4`` rows at gpt-oss's two shapes (32 and 128 experts) time 0.84-1.04x
# vLLM 0.24.0's ``..._mxfp4_bf16_trtllmmxfp4expertsmonolithic`` rows at equal tokens, TP
# and EP (median 0.964 on B200's 648, 0.973 on B300's 1,296; 5-95%: 0.91-1.00), so the
# family is ~3% faster than vLLM's collector would time it (left unscaled). The
# TensorRT-LLM 1.3.0rc20 rows of the shape (``moe_torch_flow``, moe_tp 1) are 1.7-3x
# slower in bf16 than both: not this kernel.
MXFP8_ACTIVATION_SOURCE = ("sglang", "sglang_flashinfer_trtllm_moe")
# TensorRT-LLM's own rows of the kernel it runs for an mxfp4 checkpoint on Blackwell:
# ``_torch/model_config.py`` ``ModelConfig.get_mxfp4_quant_algo`` (NVIDIA/TensorRT-LLM,
# the 1.2 line read) gives ``W4A8_MXFP4_MXFP8`` on SM100+ unless the MoE backend is TRITON
# (``W4A8_MXFP4_FP8``) or ``OVERRIDE_QUANT_ALGO`` says otherwise, and
# ``TRTLLMGenFusedMoE`` runs it (``MxE4m3MxE2m1BlockScaleMoERunner``). aiconfigurator's
# collector times that class (``collector/trtllm/collect_moe.py``, ai-dynamo/aiconfigurator
# 006afd78: ``w4a8_mxfp4_mxfp8`` on SM100 with ``moe_backend = "trtllm"``, logged as
# ``moe_torch_flow``). Read from the table of the release the bf16-activation mxfp4
# family reads (the newest with rows of that format: 1.3.0rc20 on B200, the one timing
# gpt-oss's 2,880 x 2,880, 128 experts, top 4; 1.3.0rc23's rows time other shapes only).
TRTLLM_MXFP8_ACTIVATION_SOURCE = "moe_torch_flow"


def _trtllm_mxfp8_versions(system: Path) -> list[Path]:
    """TensorRT-LLM's MoE table versions that also time the bf16-activation mxfp4
    experts, newest first (above)."""
    plain = next(d for d, name in px.MOE_TABLE_MODES.items() if name == "mxfp4")
    versions = _versions(system / "moe" / "trtllm", "moe_perf.parquet")
    return [v for v in versions if _moe_raw(v / "moe_perf.parquet", plain)]


def mxfp8_activation_rows(system: Path, engine: str) -> list[FamilyRows]:
    """The mxfp4-weights, mxfp8-activations fused-MoE family of vLLM (above: SGLang's
    newest table with such rows of FlashInfer's TRT-LLM-gen kernel) and of TensorRT-LLM
    (its own table's ``moe_torch_flow`` rows), featured as the mxfp4 experts are; none for
    the other engines or without such a table."""
    if engine == "vllm":
        owner, source = MXFP8_ACTIVATION_SOURCE
        versions = _versions(system / "moe" / owner, "moe_perf.parquet")
    elif engine == "trtllm":
        source = TRTLLM_MXFP8_ACTIVATION_SOURCE
        versions = _trtllm_mxfp8_versions(system)
    else:
        return []
    dtype = fm.MOE_MXFP8_ACTIVATION_TABLE_MODE
    families = []
    for mode in fm.MOE_MXFP8_ACTIVATION_MODES:
        fmt = px.WEIGHT_FORMATS[mode]
        kernel = fm.moe_mxfp8_activation_kernel(mode)
        for version in versions:
            table = version / "moe_perf.parquet"
            raw = [r for r in _moe_raw(table, dtype) if r.get("kernel_source") == source]
            if not raw:
                continue
            for i, r in enumerate(raw):
                _require(r, MOE_COLUMNS, table, i)
            out = [moe_row(r, fmt, kernel, r["latency"], system_l2(system)) for r in raw]
            note = _sibling_note(table, source, dtype)
            families.append(_family(kernel, table, raw, source, out, note))
            break
    return families


def _mla_rows(system: Path, engine: str, release: str | None) -> list[FamilyRows]:
    from twin.calibration.aic_mla import mla_rows  # late: it reads this module's helpers

    return mla_rows(system, engine, release)


def _a2a_rows(system: Path, engine: str, release: str | None) -> list[FamilyRows]:
    from twin.calibration.aic_a2a import a2a_rows  # late: it reads this module's helpers

    return a2a_rows(system, engine, release)


def read_families(
    gpu: str, engine: str, root: Path | None = None, release: str | None = None
) -> list[FamilyRows]:
    """Every kernel family the database has for ``gpu`` under ``engine``, each from the
    table of engine release ``release`` (``twin.costmodel.table_release``; None: the
    newest). The Mamba2 conv1d rows are TensorRT-LLM's only, a kernel every engine shares:
    their newest table stands for every engine and release."""
    if engine not in ENGINES:
        raise TwinError(f"--engine {engine!r}: expected one of {', '.join(ENGINES)}")
    system = system_dir(gpu, root)
    found = [
        gemm_rows(system, engine, release=release),
        attention_rows(system, engine, "prefill", release=release),
        attention_rows(system, engine, "decode", release=release),
        *conv1d_rows(system),
        *allreduce_rows(system, engine, release),
        # NCCL's all-gather / reduce-scatter: priced by TensorRT-LLM's layout alone
        # (``KernelLayout.moe_gather_scatter``), so fitted into its profiles only.
        *(gather_rows(system) if engine == "trtllm" else ()),
        *nccl_allreduce_rows(system),
        # The precision families (twin.precision): each quantised GEMM mode, fp8 KV.
        *(gemm_rows(system, engine, mode, release) for mode in fm.PRECISION_GEMMS),
        attention_rows(system, engine, "prefill", "fp8", release),
        attention_rows(system, engine, "decode", "fp8", release),
        # Issue 34: the fused-MoE experts of each format, the MLA families.
        *moe_rows(system, engine, release),
        *mxfp8_activation_rows(system, engine),
        *_mla_rows(system, engine, release),
        # Issue 34: DeepEP's all-to-all dispatch and combine (calibration.aic_a2a).
        *_a2a_rows(system, engine, release),
    ]
    return [f for f in found if f is not None and f.rows]


def release_families(
    gpu: str, engine: str, root: Path | None = None
) -> tuple[dict[str, str], dict[str, dict[str, FamilyRows]]]:
    """Per kernel family, the tables older engine releases read instead of the newest.

    Returns ``(default, others)``: ``default[kernel]`` the release of the table the
    newest pick reads (:func:`read_families` without a release), ``others[kernel]`` the
    family as read from each other release's table, by that table's release. Every
    version directory of the engine's tables on this GPU is asked for
    (:func:`table_versions`); a family that reads the same table at every release has no
    others.
    """
    newest = {f.kernel: f for f in read_families(gpu, engine, root)}
    default = {k: f.release for k, f in newest.items()}
    others: dict[str, dict[str, FamilyRows]] = {}
    for version in table_versions(system_dir(gpu, root), engine):
        for fam in read_families(gpu, engine, root, version):
            base = newest.get(fam.kernel)
            if not fam.release or (base is not None and fam.tables == base.tables):
                continue
            others.setdefault(fam.kernel, {}).setdefault(fam.release, fam)
    # A family the newest pick lacks (SGLang's MLA module tables: ``aic_mla.wideep_rows``):
    # its default names the release from which on no table of it is read.
    for kernel in [k for k in others if k not in newest]:
        default[kernel] = _last_without(gpu, engine, root, kernel)
    return default, others


def _last_without(gpu: str, engine: str, root: Path | None, kernel: str) -> str:
    """The oldest table version newer than the newest one reading ``kernel`` whose read
    lacks it (newest first: the version just before the first that has it)."""
    last = ""
    for version in table_versions(system_dir(gpu, root), engine):
        if any(f.kernel == kernel for f in read_families(gpu, engine, root, version)):
            return last
        last = version
    return last
