"""NVIDIA's MLA tables (``aiconfigurator-core`` 0.12.0) as the twin's MLA kernel rows.

``systems/data/<gpu>/mla/<engine>/<version>/`` and ``mla_bmm/...`` hold, per engine:

- ``context_mla_perf`` / ``generation_mla_perf`` (SGLang, TensorRT-LLM): the attention
  kernel alone, prefill (``isl`` new tokens, ``step`` 0) and decode (``step`` cached
  tokens, one new), at DeepSeek-V3's widths with ``num_heads`` the rank's heads
  (``num_heads // tp_size``: ``collector/{sglang,trtllm}/collect_mla.py``); families
  ``mla_prefill`` and ``mla_decode`` (``_fp8kv`` over an fp8 cache);
- ``mla_bmm_perf`` (all three): the absorbed decode's two per-head batched GEMMs,
  ``mla_gen_pre`` (W_UK: nope -> kv_lora) and ``mla_gen_post`` (W_UV: kv_lora -> v),
  per ``bmm_dtype``; family ``mla_bmm`` (``mla_bmm_fp8``);
- ``mla_context_module_perf`` / ``mla_generation_module_perf`` (vLLM, TensorRT-LLM): the
  whole attention module of DeepSeek-V3 with ``num_heads`` heads (its projections at
  ``gemm_type``, the attention over a ``kv_cache_dtype`` cache), ``step`` the sequence
  length including the new token in generation (``collector/vllm/collect_mla_module.py``
  logs ``step = seq_len``); families ``mla_module_prefill`` / ``mla_module_decode`` per
  GEMM mode and KV dtype. aiconfigurator prices DeepSeek's attention with these rows
  first (``MLAModule`` as the primary of a ``FallbackOp`` whose fallback is the
  kernel-and-GEMM path: ``sdk/models/deepseek.py``), and so does the twin
  (``twin.costmodel.mla_pricing``).

Rows kept: the attention computed in bf16 (``mla_dtype`` bfloat16: vLLM's fp8 prefill
query rows are an opt-in, ``TRTLLM_RAGGED``); every kernel source of a module table but
vLLM's context rows that ran its decode path (``VLLM_MLA_DECODE_SOURCES``: the absorbed
form, which the prefill families do not price).

SGLang's ``wideep_context_mla_perf`` / ``wideep_generation_mla_perf`` (collected at 0.5.6.post2
and 0.5.10, before SGLang's kernel tables at 0.5.14) time the attention module, not the
kernel: aiconfigurator prices with them the whole attention of a DeepSeek layer but the
replicated q_a/kv_a projection (``sdk/models/deepseek.py``: "q_b/kv_b/o projections live
inside the WideEP MLA module rows", the GEMM ``qkv_a_proj`` priced outside), and the
timings say so (H200, 16 heads, one sequence of 4,096 tokens: 0.046 ms against 0.030 ms
for 0.5.14's fp8-KV kernel alone, and 0.10 ms at 128 heads, where the kernel alone stays
at 0.033 ms: the per-head projection weights). :func:`wideep_rows` reads them as the
module families (fp8 projections, fp8 KV: the only collection), for the releases they
price (:func:`wideep_version`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from twin import precision as px
from twin.calibration.aic_tables import (
    ELEM_BYTES,
    FamilyRows,
    _family,
    _read,
    _require,
    _row,
    release_version,
    system_gpu,
    system_l2,
    system_sm_count,
)
from twin.costmodel import formulas as fm
from twin.costmodel import mla_families as mlaf
from twin.costmodel.mla_bmm import (
    bmm_k_steps,
    bmm_quant_rule,
    bmm_quant_steps,
    mla_bmm_features,
    module_quant_rule,
)
from twin.costmodel.mla_decode_kernels import (
    TRTLLM_MLA_SOURCE,
    VLLM_TRITON_MLA_SOURCE,
    decode_block_keys,
    decode_block_rows,
    decode_kernel_features,
    decode_tile_rule,
    decode_tiles,
    kernel_decode_rule,
    mla_decode_launch,
    module_decode_rule,
)
from twin.costmodel.mla_features import (
    MlaDims,
    kernel_replay_l2,
    mla_decode_sums,
    mla_prefill_sums,
    mla_prefill_waves,
)
from twin.costmodel.mla_module import (
    mla_module_decode_sums,
    mla_module_prefill_sums,
    module_decode_features,
    module_prefill_features,
    module_quant_steps,
    module_replay_l2,
)
from twin.costmodel.table_release import pick_version
from twin.errors import TwinError
from twin.hardware import get_gpu

# DeepSeek-V3's MLA widths (its config.json, as cached in aiconfigurator-core 0.12.0
# ``model_configs/deepseek-ai--DeepSeek-V3_config.json``): the collectors hard-code them
# for the kernel tables (``KV_LORA_RANK = 512``, ``QK_NOPE_HEAD_DIM = 128``,
# ``QK_ROPE_HEAD_DIM = 64`` in ``collect_mla.py``) and build the module from that config.
DSV3 = {"d_model": 7168, "q_lora": 1536, "kv_lora": 512, "nope": 128, "rope": 64, "v": 128}
KV_DTYPES = {"bfloat16": "bfloat16", "float16": "bfloat16", "fp8": "fp8"}
# The attention widths of the rows read (``mla_dtype``; module docstring).
_MLA_16BIT = ("bfloat16", "float16")
# Module GEMM modes -> the weight format whose operand bytes they move.
MODULE_FORMATS = {"bfloat16": "bf16", "fp8_block": "fp8-block", "nvfp4": "nvfp4"}
BMM_FORMATS = {"bfloat16": "bf16", "fp8": "fp8"}


def dims(heads: int) -> MlaDims:
    """DeepSeek-V3's MLA widths with ``heads`` heads on the rank."""
    return MlaDims(heads=heads, **DSV3)


def operand_bytes(fmt_name: str) -> tuple[float, float]:
    """(activation, weight) bytes per element of a GEMM of weight format ``fmt_name``."""
    return px.gemm_operand_bytes(px.WEIGHT_FORMATS[fmt_name], ELEM_BYTES)


def system_sms(system: Path) -> int:
    """The SM count (``twin.hardware.SM_COUNTS``) of the GPU whose tables are under
    ``system`` (``systems/data/<system>``)."""
    sms = system_sm_count(system)
    if sms is None:
        raise TwinError(f"{system}: no SM count for this GPU (twin.hardware.SM_COUNTS)")
    return sms


def _kernel_row(
    kernel: str, r: dict[str, Any], phase: str, kv_e: int, sms: int, gpu: str, l2: float | None
) -> dict[str, Any]:
    """One attention-kernel row; its bytes the table's replays keep in an L2 of ``l2``
    (None: none) read from there (``mla_features.kernel_replay_l2``)."""
    b, h = int(r["batch_size"]), int(r["num_heads"])
    dm = dims(h)
    if phase == "prefill":
        s = int(r["isl"])
        (flops, nbytes, tiles, seq), l2_bytes = kernel_replay_l2(
            mla_prefill_sums(b * s, b * s * (s + 1) // 2, b * s, b, dm, ELEM_BYTES, kv_e), l2
        )
        shape = {"b": b, "s": s, "h": h}
        waves = mla_prefill_waves(b * s, b, h, sms)
        extras = {"tiles": tiles, "seq_keys": seq, "l2_bytes": l2_bytes, "waves": waves}
    else:
        keys = int(r["step"]) + 1  # the cached tokens and the new one
        flops, nbytes, tiles, seq = mla_decode_sums(b, b * keys, dm, ELEM_BYTES, kv_e)
        shape = {"b": b, "c": keys - 1, "h": h}
        source = str(r.get("kernel_source", ""))
        rule = kernel_decode_rule(gpu, source, kv_e)
        tiles = decode_tiles(decode_tile_rule(gpu, source, kv_e), tiles, b, h, kv_e)
        sums, l2_bytes = kernel_replay_l2((flops, nbytes, tiles, seq), l2)
        launch = mla_decode_launch(rule, b, b * keys, 1, dm, kv_e, sms)
        block = decode_block_rows(gpu, source, kv_e)
        flops, nbytes, *features = decode_kernel_features(
            sums, decode_block_keys(block, b * keys, h), launch, l2_bytes
        )
        extras = dict(zip(fm.get_formula(kernel).features, features, strict=True))
    return _row(kernel, (flops, nbytes, extras), r["latency"], shape)


def _module_row(
    kernel: str,
    r: dict[str, Any],
    phase: str,
    operands: tuple[float, float],
    kv_e: int,
    gpu: tuple[str, int, float | None],
    gemm: str = "",
) -> dict[str, Any]:
    """One module row; ``gpu`` the table's GPU, its SMs (a prefill row's attention
    waves, ``mla_module.module_prefill_features``; a decode row's attention
    launch: ``mla_module.module_decode_features``, its rule from the row's
    ``kernel_source``; the linears' quantisation steps where ``mla_bmm.module_quant_rule``
    holds for the table's ``gemm`` type) and its L2 (the working set the replays keep
    there: ``mla_module.module_replay_l2``)."""
    b, h = int(r["batch_size"]), int(r["num_heads"])
    dm = dims(h)
    act_e, w_e = operands
    quant = module_quant_rule(gpu[0], str(r.get("kernel_source", "")), gemm)
    sums: tuple[Any, ...]
    if phase == "prefill":
        s = int(r["isl"])
        sums = module_prefill_features(
            mla_module_prefill_sums(
                dm, b * s, b * s * (s + 1) // 2, b * s, b, ELEM_BYTES, act_e, w_e, kv_e
            ),
            mla_prefill_waves(b * s, b, h, gpu[1]),
            module_quant_steps(dm, b * s, b * s, gpu[1]) if quant else 0.0,
        )
        shape = {"b": b, "s": s, "h": h}
    else:
        keys = int(r["step"])  # the module tables' step counts the new token
        module, l2 = module_replay_l2(
            mla_module_decode_sums(dm, b, b * keys, ELEM_BYTES, act_e, w_e, kv_e), gpu[2]
        )
        rule = module_decode_rule(gpu[0], str(r.get("kernel_source", "")), kv_e)
        launch = mla_decode_launch(rule, b, b * keys, 1, dm, kv_e, gpu[1])
        steps = module_quant_steps(dm, b, 0, gpu[1]) if quant else 0.0
        sums = module_decode_features(module, launch, l2, steps)
        shape = {"b": b, "c": keys - 1, "h": h}
    flops, nbytes, *features = sums
    extras = dict(zip(fm.get_formula(kernel).features, features, strict=True))
    return _row(kernel, (flops, nbytes, extras), r["latency"], shape)


def _bmm_row(
    kernel: str,
    r: dict[str, Any],
    operands: tuple[float, float],
    gpu: tuple[str, int],
    l2: float | None,
) -> dict[str, Any]:
    t, h = int(r["num_tokens"]), int(r["num_heads"])
    pre = r["op_name"] == "mla_gen_pre"
    k, n = (DSV3["nope"], DSV3["kv_lora"]) if pre else (DSV3["kv_lora"], DSV3["v"])
    sms = gpu[1]
    rule = bmm_quant_rule(gpu[0], str(r.get("kernel_source", "")))
    flops, hbm, *launch = mla_bmm_features(t, h, k, n, ELEM_BYTES, *operands, sms, l2)
    shape = {"t": t, "h": h, "k": k, "n": n}
    quant = bmm_quant_steps(rule, t, h, k, sms)
    extras = dict(zip(mlaf.MLA_BMM_EXTRAS, launch, strict=True))
    extras.update(quant_steps=quant, k_steps=bmm_k_steps(k))
    return _row(kernel, (flops, hbm, extras), r["latency"], shape)


_KERNEL_COLUMNS = ("batch_size", "isl", "num_heads", "step")
# The context-kernel rows that time the decompressed form the engine serves prefills in.
# SGLang runs an extend as MHA (``MHA_CHUNKED_KV`` / ``MHA_ONE_SHOT``: without a cached
# prefix, and with one on the default chunked-prefix cache; ``_handle_attention_backend``
# for fa3, flashinfer, flashmla in ``python/sglang/srt/models/deepseek_v2.py``), but its
# collector times the decompressed form only on Blackwell (``trtllm_mla``); elsewhere it
# times FA3 / Triton on the latent form (``head_dim`` 576, ``v_head_dim`` 512:
# ``collector/sglang/collect_mla.py``), 3.4x the FLOPs a prompt token takes. Those rows
# are not read: SGLang's prefill there takes the GQA stand-in over its own FA3 MHA fit.
# TensorRT-LLM's collector always times the decompressed form (``collect_mla.py``).
PREFILL_SOURCES: dict[str, frozenset[str]] = {"sglang": frozenset({TRTLLM_MLA_SOURCE})}


def _phase_tables(
    system: Path, engine: str, release: str | None, template: str
) -> Iterator[tuple[str, Path, list[dict[str, Any]]]]:
    """Per phase with a table (``template`` of ``context`` / ``generation``, ``mla/<engine>``
    at ``release``): the phase, the table and its rows of a 16-bit MLA (``_MLA_16BIT``)."""
    for phase, name in (("prefill", "context"), ("decode", "generation")):
        table_name = template.format(name)
        version = release_version(system / "mla" / engine, table_name, release)
        if version is None:
            continue
        table = version / table_name
        yield phase, table, [r for r in _read(table) if r.get("mla_dtype") in _MLA_16BIT]


def kernel_rows(
    system: Path, engine: str, release: str | None = None, replay_l2: bool = True
) -> list[FamilyRows]:
    """``mla_prefill`` / ``mla_decode`` (and ``_fp8kv``) from the attention-kernel tables;
    ``replay_l2`` False: no row's bytes read from L2 (``mla_features.kernel_replay_l2``),
    as a fit written before that term was fitted (its ``c_l2_bytes`` 0:
    ``fit_upgrade.upgrade_fit``; a bench pricing it)."""
    families = []
    sms = 0
    l2 = system_l2(system) if replay_l2 else None
    for phase, table, raw in _phase_tables(system, engine, release, "{}_mla_perf.parquet"):
        sources = PREFILL_SOURCES.get(engine) if phase == "prefill" else None
        if sources is not None:
            raw = [r for r in raw if r.get("kernel_source") in sources]
        for dtype, kv in mlaf.MLA_KV.items():
            mine = [r for r in raw if KV_DTYPES.get(str(r.get("kv_cache_dtype"))) == dtype]
            if not mine:
                continue
            kernel = f"mla_{phase}{kv}"
            kv_e = px.KV_FP8_BYTES if dtype == "fp8" else ELEM_BYTES
            sms = sms or system_sms(system)
            gpu = system_gpu(system) or ""
            out = []
            for i, r in enumerate(mine):
                _require(r, _KERNEL_COLUMNS, table, i)
                out.append(_kernel_row(kernel, r, phase, kv_e, sms, gpu, l2))
            families.append(_family(kernel, table, mine, _sources(mine), out))
    return families


def _gpu(system: Path) -> tuple[str, int, float | None]:
    """The twin GPU of ``system``, its SMs (a module row's decode launch; no GPU or no
    SM count: no launch read, ``mla_decode_kernels.mla_decode_launch``) and its L2 (None:
    nothing resident, ``mla_module.module_replay_l2``)."""
    gpu = system_gpu(system)
    if gpu is None:
        return ("", 0, None)
    return (gpu, get_gpu(gpu).sm_count or 0, system_l2(system))


# vLLM's MLA decode backends (``AttentionBackendEnum`` names, vllm 0.24.0 wheel from PyPI,
# the tables' release). vLLM runs a batch whose every query is at most the backend's
# ``reorder_batch_threshold`` tokens through its decode path, the absorbed form (W_UK, MQA
# over the latent, W_UV; no kv_b_proj): ``model_executor/layers/attention/
# mla_attention.py`` ``MLACommonMetadataBuilder`` calls ``v1/attention/backends/utils.py``
# ``split_decodes_and_prefills(decode_threshold=self.reorder_batch_threshold)``, and
# ``v1/attention/backends/mla/flashattn_mla.py`` sets ``reorder_batch_threshold = 512``
# ("process small prefills with decode pathway"), ``flashmla.py`` 128, the others 1. The
# module collector names such a context row by the decode backend it ran
# (ai-dynamo/aiconfigurator 095f58a51, ``collector/vllm/collect_mla_module.py``
# ``_mla_backend_name``: "context" batches that vLLM classified entirely as decodes, e.g.
# s=1, run ``attn_backend``), so the tables say it row by row: H100 / H200 bf16 KV
# ``FLASH_ATTN_MLA`` at 1-512 prompt tokens, fp8 KV ``FLASHMLA`` at 1-128, Blackwell
# ``FLASHINFER_MLA`` and L40S / RTX PRO 6000 ``TRITON_MLA`` at 1. Those rows time the
# absorbed kernel chain, not the decompressed one the ``mla_module_prefill`` families price
# (``mla_module.mla_module_prefill_sums``; one fit of both forms priced H100's
# decompressed rows at median / P90 3.8 / 9.3% against 1.4 / 4.5% without them:
# docs/decisions.md, helper ``mla-prefill30``): the prefill families leave them out.
VLLM_MLA_DECODE_SOURCES = frozenset(
    {"FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "CUTLASS_MLA", VLLM_TRITON_MLA_SOURCE}
)


def prefill_form(engine: str, row: dict[str, Any]) -> bool:
    """Whether a module table's context ``row`` timed the decompressed prefill form: all
    but vLLM's rows that ran its decode path (``VLLM_MLA_DECODE_SOURCES``)."""
    return engine != "vllm" or str(row.get("kernel_source")) not in VLLM_MLA_DECODE_SOURCES


def module_rows(
    system: Path, engine: str, release: str | None = None, replay_l2: bool = True
) -> list[FamilyRows]:
    """``mla_module_<phase>[_<gemm>][_fp8kv]`` from the module tables; ``replay_l2``
    False: no row's working set read from L2 (``mla_module.module_replay_l2``), as a
    decode-module fit written before that term was fitted (a bench pricing it)."""
    families = []
    gpu = _gpu(system)
    if not replay_l2:
        gpu = (*gpu[:2], None)
    for phase, table, rows in _phase_tables(system, engine, release, "mla_{}_module_perf.parquet"):
        raw = [
            r
            for r in rows
            if str(r.get("model", "deepseek-ai/DeepSeek-V3")) == "deepseek-ai/DeepSeek-V3"
            and (phase != "prefill" or prefill_form(engine, r))
        ]
        for gemm, fmt_name in MODULE_FORMATS.items():
            for dtype in mlaf.MLA_KV:
                mine = [
                    r
                    for r in raw
                    if r.get("gemm_type") == gemm
                    and KV_DTYPES.get(str(r.get("kv_cache_dtype"))) == dtype
                ]
                if not mine:
                    continue
                kernel = mlaf.mla_kernel(f"mla_module_{phase}", gemm, dtype)
                kv_e = px.KV_FP8_BYTES if dtype == "fp8" else ELEM_BYTES
                operands = operand_bytes(fmt_name)
                out = []
                for i, r in enumerate(mine):
                    _require(r, _KERNEL_COLUMNS, table, i)
                    out.append(_module_row(kernel, r, phase, operands, kv_e, gpu, gemm))
                families.append(_family(kernel, table, mine, _sources(mine), out))
    return families


def bmm_rows(system: Path, engine: str, release: str | None = None) -> list[FamilyRows]:
    """``mla_bmm`` / ``mla_bmm_fp8``: the absorbed decode's BMMs, pre and post together."""
    version = release_version(system / "mla_bmm" / engine, "mla_bmm_perf.parquet", release)
    if version is None:
        return []
    table = version / "mla_bmm_perf.parquet"
    raw = _read(table)
    families = []
    for dtype, fmt_name in BMM_FORMATS.items():
        mine = [r for r in raw if r.get("bmm_dtype") == dtype]
        if not mine:
            continue
        kernel = mlaf.mla_kernel("mla_bmm", dtype)
        operands = operand_bytes(fmt_name)
        out = []
        l2 = system_l2(system)
        # The output tiles' waves (``mla_bmm_features``) and the GPU's quantisation rule.
        gpu = (system_gpu(system) or "", system_sms(system))
        for i, r in enumerate(mine):
            _require(r, ("num_tokens", "num_heads", "op_name"), table, i)
            out.append(_bmm_row(kernel, r, operands, gpu, l2))
        families.append(_family(kernel, table, mine, _sources(mine), out))
    return families


WIDEEP_TABLES = mlaf.SGLANG_MLA_MODULE_TABLES  # named fp8-KV, timed at a bf16 cache
# The attention backends whose rows are read, the first present: aiconfigurator's default
# for these tables (``sdk/models/deepseek.py``: ``attn_backend`` "flashinfer" when none
# is set) and what InferenceMAX's SGLang DeepSeek scripts on H200 run
# (``--attention-backend flashinfer``); the Blackwell collections time only
# ``trtllm_mla``.
WIDEEP_SOURCES = ("flashinfer", TRTLLM_MLA_SOURCE)
# The collector ran DeepSeek-R1's block-scaled fp8 checkpoint (``gemm_type`` fp8_block;
# 0.5.6.post2's table has no such column). aiconfigurator's query of these rows has no
# GEMM axis (``sdk/models/deepseek.py``: "whose query carries no gemm axis"), so they
# price a per-tensor fp8 checkpoint as well: one family per mode, each with its operand
# bytes (they differ by one scale per 128 x 128 block).
WIDEEP_GEMMS = ("fp8", "fp8_block")


def wideep_version(system: Path, engine: str, release: str | None) -> Path | None:
    """The version directory whose SGLang module tables price ``release``, or None.

    The rule of ``twin.costmodel.table_release`` over every MLA decode collection of the
    engine, kernel tables (``generation_mla_perf``) and module tables alike: the module
    tables price a release when they are the newest MLA collection at or before it (or,
    for a release older than every collection, the oldest); a release with a kernel
    table of its own, or none (the newest), reads the kernel table as before.
    """
    if engine != "sglang":
        return None
    root = system / "mla" / engine
    kernel = {p.parent.name for p in root.glob("*/generation_mla_perf.parquet")}
    module = {p.parent.name for p in root.glob(f"*/{WIDEEP_TABLES['decode']}")}
    chosen = pick_version(kernel | module, release) if release else None
    if chosen is None or chosen in kernel or chosen not in module:
        return None
    return root / chosen


def wideep_rows(system: Path, engine: str, release: str | None = None) -> list[FamilyRows]:
    """``mla_module_<phase>_<fp8|fp8_block>_fp8kv`` from SGLang's module tables of the
    release :func:`wideep_version` picks (none for other engines and releases); the rows
    of the first of :data:`WIDEEP_SOURCES` present, at one rank (``tp_size`` 1:
    ``num_heads`` the rank's heads)."""
    version = wideep_version(system, engine, release)
    if version is None:
        return []
    families = []
    gpu = _gpu(system)
    for phase, table_name in WIDEEP_TABLES.items():
        table = version / table_name
        if not table.exists():
            continue
        raw = [
            r
            for r in _read(table)
            if KV_DTYPES.get(str(r.get("kv_cache_dtype"))) == "fp8"
            and int(r.get("tp_size", 1) or 1) == 1
        ]
        present = {r.get("kernel_source") for r in raw}
        source = next((s for s in WIDEEP_SOURCES if s in present), None)
        if source is None:
            continue
        mine = [r for r in raw if r.get("kernel_source") == source]
        for gemm in WIDEEP_GEMMS:
            kernel = mlaf.mla_kernel(f"mla_module_{phase}", gemm, "fp8")
            operands = operand_bytes(px.TABLE_MODES[gemm])
            out = []
            for i, r in enumerate(mine):
                _require(r, _KERNEL_COLUMNS, table, i)
                # The generation rows' ``isl`` is the cached tokens (``step`` 0); the
                # module row's ``step`` counts the new token as well.
                row = r if phase == "prefill" else {**r, "step": int(r["isl"]) + 1}
                out.append(_module_row(kernel, row, phase, operands, px.KV_FP8_BYTES, gpu))
            families.append(_family(kernel, table, mine, source, out))
    return families


def _sources(rows: list[dict[str, Any]]) -> str:
    return ",".join(sorted({str(r.get("kernel_source", "")) for r in rows}))


def mla_rows(system: Path, engine: str, release: str | None = None) -> list[FamilyRows]:
    """Every MLA family the tables have for ``engine`` on this system, each table the one
    of engine release ``release`` (``aic_tables.release_version``; None: the newest)."""
    return [
        *kernel_rows(system, engine, release),
        *bmm_rows(system, engine, release),
        *module_rows(system, engine, release),
        *wideep_rows(system, engine, release),
    ]


__all__ = [
    "DSV3",
    "PREFILL_SOURCES",
    "VLLM_MLA_DECODE_SOURCES",
    "WIDEEP_SOURCES",
    "bmm_rows",
    "dims",
    "kernel_rows",
    "mla_rows",
    "module_rows",
    "prefill_form",
    "system_gpu",
    "system_sms",
    "wideep_rows",
    "wideep_version",
]
