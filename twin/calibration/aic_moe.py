"""The fused-MoE families from NVIDIA's ``moe_perf`` tables (``calibration.aic_tables``):
one per expert format, each row featured per GPU (:func:`moe_row`), read after the
same-silicon and cross-die rules of ``calibration.moe_sibling``; TensorRT-LLM's
min-latency and TRTLLM-gen kernels; the mxfp4 experts with mxfp8 activations."""

from __future__ import annotations

import functools
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
    _versions,
    system_l2,
    system_sm_count,
)
from twin.calibration.collector_routing import (
    SGLANG_CLAMPED_RELEASES,
    sglang_clamped_rows,
    sglang_rank0_row,
    table_rank_load,
)
from twin.calibration.moe_sibling import (
    BAND,
    MOE_SHAPE_COLUMNS,
    SiblingFill,
    cross_die_of,
    fill_pair_slow_series,
    fill_slow_series,
    sibling_of,
)
from twin.costmodel import moe_families as moef
from twin.costmodel import moe_features as moe_ft
from twin.costmodel.routing import ROUTINGS
from twin.costmodel.table_release import pick_version


def reads_replay_l2(params: dict[str, float]) -> bool:
    """Whether a fused-MoE fit was fitted on rows whose working set a table's replays keep
    in L2 (``moe_features.moe_features``): a fit of that form has a positive ``c_l2_bytes``
    (the fit's parameters are exponentials, never 0); one written before reads with 0
    (``fit_upgrade.upgrade_fit``) and was fitted with every byte from HBM."""
    return params.get("c_l2_bytes", 0.0) > 0.0


MOE_COLUMNS = ("num_tokens", *MOE_SHAPE_COLUMNS)


def moe_row(
    r: dict[str, Any],
    fmt: px.WeightFormat,
    kernel: str,
    latency_ms: float,
    l2_bytes: float | None = None,
    timed_rank: bool = True,
    sms: int | None = None,
    clamped: bool = False,
    table_mode: str | None = None,
) -> dict[str, Any]:
    """One balanced ``moe_perf`` row as a fitting row, per GPU: the rank receives
    ``tokens x topk / ep`` rows (balanced routing spreads them evenly over the experts,
    so over the ranks), holds ``experts / ep`` experts of width ``inter / moe_tp``, and
    touches ``min(experts / ep, rows)`` of them (each expert's share is even: the
    ``balanced`` rule of ``twin.costmodel.routing``); with ``timed_rank``, a vLLM row's
    are those of the rank its collector timed (``collector_routing.table_rank_load``;
    False: the mean rank, as a fit written before the rule read them). ``l2_bytes``:
    the L2 of the table's GPU (``system_l2``): a working set that fits stays there
    across the collector's replays (``moe_features.moe_features``). SGLang's Triton rows
    above as many tokens as local experts ran its large-M default config
    (``moe_features.sglang_large_m``); vLLM's Marlin and FlashInfer TRT-LLM-gen mxfp4 rows
    take each expert's rows in the token tile the kernel picks (``moe_features.moe_token_tile``).
    ``sms``: the SMs of the table's GPU, for SGLang's Triton grid
    (``moe_features.sglang_grid_flops``, bf16 rows and the mxfp4 rows it upcasts to bf16,
    ``moe_features.sglang_upcast_experts``; None: not read, and SGLang's rows at the
    mean rank, as a fit written before the grid was fitted read them); with it, SGLang's
    Triton and Marlin rows under EP are those of its collector's rank 0 (``sglang_rank0_row``);
    ``clamped``: with the rows its clamp of the masked slots puts on expert 0
    (``sglang_clamped_rows``: a table of ``SGLANG_CLAMPED_RELEASES``); ``table_mode``: the
    table's expert mode where ``fmt``'s does not name the kernel (the mxfp8-activation rows,
    ``mxfp8_activation_rows``), for the token tile; None: ``fmt``'s."""
    t, d, inter, top, n_exp, mtp, ep = (int(r[c]) for c in MOE_COLUMNS)
    source = str(r.get("kernel_source", ""))
    rank0 = sms is not None and sglang_rank0_row(source, str(r.get("moe_dtype", "")), ep)
    load = (
        table_rank_load(source, t, n_exp, top, ep, rank0)
        if timed_rank
        else ROUTINGS["balanced"].rank_load(t, n_exp, top, ep)
    )
    rows, active = load.rows, load.active
    # SGLang's Triton runner upcasts mxfp4 experts to bf16 (``moe_features.sglang_upcast_experts``;
    # rows for a fit written before SGLang's grid keep the experts' own bytes)
    unquantised = fmt.bytes_per_param is None or moe_ft.sglang_upcast_experts(
        source, fmt.table_mode, sms is not None
    )
    act_e, w_e = (
        (float(ELEM_BYTES), float(ELEM_BYTES))
        if unquantised
        else px.gemm_operand_bytes(fmt, ELEM_BYTES)
    )
    width = inter // mtp
    routed = t * top * d  # every routed row of the batch, all ranks' (the hidden width)
    large_m = moe_ft.sglang_large_m(source, unquantised, t, n_exp // ep)
    mode = fmt.table_mode if table_mode is None else table_mode
    device = str(r.get("device", ""))
    launch = _rank_tokens(t, top, ep)
    # the clamping releases' collector launches rank 0's tokens itself, their masked slots on
    # expert 0 (``sglang_clamped_rows``); for SGLang's ``fused_marlin_moe`` (ai-dynamo/
    # aiconfigurator cb4d907c7 ``benchmark_config``) the row block is of those tokens, where
    # the framework layer (0.5.14) launches every token
    own_launch = rank0 and timed_rank and clamped
    clamped_launch = own_launch and source in moe_ft.SGLANG_MARLIN_SOURCES
    tile = moe_ft.expert_token_tile(
        source,
        device,
        mode,
        fmt.table_mode,
        launch if clamped_launch else t,
        launch,
        top,
        n_exp // ep,
        width,
    )
    # the collector's clamped slots: rows of rank 0's expert 0 (``sglang_clamped_rows``)
    hot = sglang_clamped_rows(t, n_exp, top, ep) if own_launch else 0.0
    triton_bf16 = moe_ft.sglang_default_config(source, unquantised)
    grid = (
        moe_ft.sglang_grid_flops(rows, active, d, width, 2, large_m, sms, hot)
        if triton_bf16
        else 0.0
    )
    feats = moe_ft.moe_features(
        rows,
        routed,
        active,
        d,
        width,
        2,
        ELEM_BYTES,
        act_e,
        w_e,
        l2_bytes,
        large_m,
        tile,
        grid,
        hot,
        moe_ft.vllm_triton_routed_elems(source, t * top, rows, d, width, 2),
    )
    shape = {"t": t, "d": d, "i": inter, "k": top, "e": n_exp, "tp": mtp, "ep": ep}
    return _row(kernel, feats, latency_ms, shape)


def _rank_tokens(tokens: int, top: int, ep: int) -> float:
    """The tokens SGLang's collector launches on the timed rank (``collector/sglang/
    collect_moe.py`` ``build_rank0_workloads``: the tokens routing at least one of their
    ``top`` experts to rank 0), under uniform routing: all of them at EP 1."""
    return tokens * (1.0 - (1.0 - 1.0 / ep) ** top)


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
    system: Path,
    engine: str,
    release: str | None = None,
    replay_l2: bool = True,
    sglang_grid: bool = True,
) -> list[FamilyRows]:
    """The fused-MoE families of ``engine``: one per expert format the tables timed, each
    from the table of engine release ``release`` among the versions with rows of that
    format (``twin.costmodel.table_release.pick_version``; None: the newest such).
    ``replay_l2`` False: every row's bytes from HBM and vLLM's rows at the mean rank, the
    features a fit written before the L2 term (and the collector's rank,
    ``collector_routing``) was fitted on (its ``c_l2_bytes`` 0: ``reads_replay_l2``).
    ``sglang_grid`` False: SGLang's Triton rows without the grid and at the mean rank, as
    a fit written before them was fitted (``reads_sglang_grid``)."""
    versions = _versions(system / "moe" / engine, "moe_perf.parquet")
    l2 = system_l2(system) if replay_l2 else None
    sms = system_sm_count(system) if sglang_grid else None
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
            if r.get("kernel_source") == moef.MOE_MIN_LATENCY_SOURCE
            and int(r.get("num_tokens") or 0) <= moef.MOE_MIN_LATENCY_MAX_TOKENS
        ]
        raw = [r for r in every if r.get("kernel_source") != moef.MOE_MIN_LATENCY_SOURCE]
        if small and fmt.table_mode in moef.MOE_MIN_LATENCY_MODES:
            fast = moef.moe_min_latency_kernel(fmt.table_mode)
            rows = [moe_row(r, fmt, fast, r["latency"], l2, replay_l2) for r in small]
            src = moef.MOE_MIN_LATENCY_SOURCE
            note = _sibling_note(table, src, dtype)
            families.append(_family(fast, table, small, src, rows, note))
            # The same kernel at every token count: TensorRT-LLM's TRTLLM MoE backend
            # (formulas: ``moe_trtllm_gen_kernel``).
            gen = moef.moe_trtllm_gen_kernel(fmt.table_mode)
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
        clamped = chosen in SGLANG_CLAMPED_RELEASES  # the collector's clamped slots
        out = []
        for i, r in enumerate(raw):
            _require(r, MOE_COLUMNS, table, i)
            out.append(moe_row(r, fmt, kernel, r["latency"], l2, replay_l2, sms, clamped))
        note = _sibling_note(table, source, dtype)
        families.append(_family(kernel, table, raw, source, out, note))
    return families


# The mxfp4 experts with mxfp8 activations (``moe_families.moe_mxfp8_activation_kernel``) that
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
TRTLLM_MXFP8_ACTIVATION_SOURCE = moe_ft.TRTLLM_MOE_SOURCE


def _trtllm_mxfp8_versions(system: Path) -> list[Path]:
    """TensorRT-LLM's MoE table versions that also time the bf16-activation mxfp4
    experts, newest first (above)."""
    plain = next(d for d, name in px.MOE_TABLE_MODES.items() if name == "mxfp4")
    versions = _versions(system / "moe" / "trtllm", "moe_perf.parquet")
    return [v for v in versions if _moe_raw(v / "moe_perf.parquet", plain)]


def mxfp8_activation_rows(system: Path, engine: str, replay_l2: bool = True) -> list[FamilyRows]:
    """The mxfp4-weights, mxfp8-activations fused-MoE family of vLLM (above: SGLang's
    newest table with such rows of FlashInfer's TRT-LLM-gen kernel) and of TensorRT-LLM
    (its own table's ``moe_torch_flow`` rows), featured as the mxfp4 experts are; none for
    the other engines or without such a table. ``replay_l2`` as :func:`moe_rows`'s."""
    if engine == "vllm":
        owner, source = MXFP8_ACTIVATION_SOURCE
        versions = _versions(system / "moe" / owner, "moe_perf.parquet")
    elif engine == "trtllm":
        source = TRTLLM_MXFP8_ACTIVATION_SOURCE
        versions = _trtllm_mxfp8_versions(system)
    else:
        return []
    dtype = moe_ft.MXFP8_ACTIVATION_MODE
    families = []
    for mode in moef.MOE_MXFP8_ACTIVATION_MODES:
        fmt = px.WEIGHT_FORMATS[mode]
        kernel = moef.moe_mxfp8_activation_kernel(mode)
        for version in versions:
            table = version / "moe_perf.parquet"
            raw = [r for r in _moe_raw(table, dtype) if r.get("kernel_source") == source]
            if not raw:
                continue
            for i, r in enumerate(raw):
                _require(r, MOE_COLUMNS, table, i)
            l2 = system_l2(system) if replay_l2 else None
            out = [
                moe_row(r, fmt, kernel, r["latency"], l2, replay_l2, table_mode=dtype) for r in raw
            ]
            note = _sibling_note(table, source, dtype)
            families.append(_family(kernel, table, raw, source, out, note))
            break
    return families
