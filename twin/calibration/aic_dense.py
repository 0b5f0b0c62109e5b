"""The dense kernels' families from NVIDIA's tables (``calibration.aic_tables``): GEMMs
in bf16 and in each quantised mode, attention prefill and decode over a bf16 or an fp8 KV
cache, and Mamba2's causal conv1d.

A table that mixes kernel sources is narrowed to the engine's default one for that
GPU (:data:`ATTENTION_SOURCES`); the chosen source travels into the profile.
"""

from __future__ import annotations

from pathlib import Path

from twin import precision as px
from twin.calibration.aic_tables import (
    ELEM_BYTES,
    ENGINE_NAMES,
    ENGINES,
    FamilyRows,
    _family,
    _keep,
    _narrow,
    _read,
    _require,
    _row,
    latest_version,
    release_version,
    system_l2,
    system_sm_count,
)
from twin.costmodel import features as ft
from twin.costmodel import ssm_features as ssm_ft
from twin.errors import TwinError

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
    sms = system_sm_count(system)  # the waves of output tiles (``ft.gemm_wave_k``)
    source = ",".join(sorted({str(r.get("kernel_source", "")) for r in raw}))
    # The kernel's own tiles (``ft.gemm_tile_rule``), from the strings its fit's
    # provenance keeps (``_family``: the first row's device), as serving reads them.
    tiles = ft.gemm_tile_rule(source, str(raw[0].get("device", "")) if raw else "")
    # The activation quantisation the rows' calls run first (``ft.act_quant_scheme``), read
    # from the same string (the fit's ``provenance.kernel_source``) as serving reads it.
    quant = ft.act_quant_scheme(source)
    out = []
    for i, r in enumerate(raw):
        _require(r, ("m", "n", "k"), table, i)
        m, n, k = int(r["m"]), int(r["n"]), int(r["k"])
        feats = (
            ft.gemm_features(m, k, n, ELEM_BYTES, sms, tiles)
            if operands is None
            else ft.gemm_features_at(m, k, n, ELEM_BYTES, *operands, sms, tiles, quant)
        )
        out.append(_row(kernel, feats, r["latency"], {"m": m, "n": n, "k": k}))
    family = _family(kernel, table, raw, source, out)
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
# dynamic). vLLM's collector times a dynamic scale too (``collector/vllm/collect_gemm.py``
# ``Fp8Config(activation_scheme="dynamic")`` since ai-dynamo/aiconfigurator f027123fc,
# and at d5bad971c, the 0.24.0 collection of the tables; "static" before), but its rows
# are kept as measured: the dynamic per-token quantisation each call runs (one
# ``dynamic_per_token_scaled_fp8_quant`` kernel before the GEMM, vLLM's ``Fp8LinearMethod``
# ``kFp8DynamicTokenSym``) is the family's ``act_quant_bytes`` feature at a fixed physical
# rate (``ft.act_quant_scheme``, ``ft.act_quant_bytes``, ``formulas.GEMM_FP8_FIXED``), which
# serving drops for a static checkpoint whose quantisation vLLM's compile fuses
# (``DensePricing``, ``KernelLayout.fp8_static_activation``); the ``quantize/vllm``
# tables are not read.
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
    sms = system_sm_count(system)  # the decode launch's waves (``ft.attn_decode_waves_d``)
    # The decode kernel's launch rule, from the family's framework, device and kernel source
    # as serving reads them from the fit's ``provenance`` (``ft.decode_launch_rule``).
    rule = ft.decode_launch_rule(
        kernel,
        ENGINE_NAMES.get(engine, engine),
        str(raw[0].get("device", "")) if raw else "",
        source,
    )
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
            extras = {"score_elems": scores, "tiles": tiles}
        else:
            keys = int(r["step"]) + 1  # the cached tokens and the new one
            flops, nbytes, scores, tiles, waves = ft.attn_decode_sums(
                b, b * keys, h, kvh, hd, ELEM_BYTES, kv_e, sms, rule
            )
            shape = {"b": b, "c": keys - 1, "h": h, "kvh": kvh, "d": hd}
            extras = {"score_elems": scores, "tiles": tiles, "waves_d": waves}
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
    sms = system_sm_count(system)  # the update's waves of CTAs (``ssm_ft.conv1d_features``)
    l2 = system_l2(system)  # the update's buffers the table's replays keep in L2
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
            # The collector's batched call (``collector/trtllm/collect_mamba2.py``: x of
            # (batch, dim, seqlen), no ``query_start_loc``): not varlen. The update's
            # graph replays one call on the same buffers (``ssm_ft.conv1d_features``).
            feats = ssm_ft.conv1d_features(
                b, length, width, taps, ELEM_BYTES, update, sms, l2_bytes=l2 if update else None
            )
            shape = {"b": b, "l": length, "c": width, "k": taps}
            out.append(_row(kernel, feats, r["latency"], shape))
        if out:
            families.append(_family(kernel, table, mine, source, out))
    return families
