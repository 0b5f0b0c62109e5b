"""The engine's hot pricing paths as compiled code (numba), the Python path's own rules compiled.

Two calls, each in place of a dozen Python calls:

- :func:`fill_ends`: a chunk of a decode run's steps (``twin.engine.decode_run.DecodeRun``)
  when the attention decode kernel is not affine in the context (a measured p-norm
  roofline), each step priced and the run's cumulative ends written in place;
- :func:`step_seconds`: a step of at most one prefill chunk and a decode batch
  (``CostModel.step_spread``, about one a request; each decode step of a sliding-window
  model) for every mixer kind (full and sliding-window attention, Mamba2, Mamba-1, GDN);
  the dense layers' price depends on the token count alone and comes from
  ``CostModel``'s memo.

Each rule they apply is written once, as a plain scalar Python function where its concept
lives, which the Python path calls: the roofline (``latency.roofline_s``), the attention
sums and decode launch rules (``features.attn_prefill_sums``, ``decode_sums``,
``decode_launch`` and what it calls), a chunk's keys and K/V rows (``mixers.chunk_keys``,
``chunk_kv_rows``), the decodes' window keys (``step_features.spread_keys``), the convs'
sums, CTAs and waves (``ssm_features``), the Mamba2 / Mamba-1 / GDN sums (``ssm_features``,
``mixer_kernels``), the embedding's and final norm's bytes (``features.head_bytes``), the
LM head's GEMM and waves (``features.gemm_sums``, ``tile_wave_k``) and the host time
(``decode_pricing.with_host``). This module compiles those very functions (``twin.jit``: a
compiled rule calls the compiled forms of the rules it calls) and keeps only its own: the
packing of a model's constants into arrays and the step's assembly (the parts summed in
``_sum_parts``' order; a decode run's host time as ``decode_steps`` applies it to a run).
So every price equals the Python path's to the bit (``tests/test_compiled_decode.py``,
``tests/test_compiled_step.py``, ``==`` on every shipped profile and preset and on random
constants): the same operations in the same order. No ``fastmath`` (``twin.jit``: no FMA
contraction, no reassociation); ``x ** y`` on floats is LLVM's ``pow`` intrinsic, which
calls the C library's ``pow`` as CPython's ``float.__pow__`` does (numba links the
process's own libm). Integer sums are int64: ``CostModel.step_spread`` asks only for counts
under ``model.MAX_TOKENS`` (``keys_upto`` of 2^30 tokens is under 2^59).

numba caches each compiled function on disk keyed by its own source file, and a cached
function carries the code of what it calls: every function here and every rule it
compiles is cached under a hash of the cost model's sources (:data:`SOURCES`, every
module they come from), so a change to any of them recompiles all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from twin import mixers
from twin.costmodel import decode_pricing as dp
from twin.costmodel import features as ft
from twin.costmodel import latency as lat
from twin.costmodel import mixer_kernels as mk
from twin.costmodel import ssm_features as ssm_ft
from twin.costmodel import step_features as sf
from twin.costmodel.features import launch_code
from twin.jit import jit as jit_now

# The sources the compiled code comes from: the cost model's modules and ``twin.mixers``.
SOURCES = (Path(__file__).parent, Path(mixers.__file__))


def jit(signature: str) -> Any:
    """``twin.jit.jit`` for ``signature``, cached under :data:`SOURCES`."""
    return jit_now(signature, *SOURCES)


# The rules, each compiled after those it calls (``twin.jit``); counts are int64, a window
# None for full attention, an SM count 0 where not known.
jit("i8(i8, optional(i8))")(mixers.keys_upto)
_chunk_keys = jit("i8(i8, i8, optional(i8))")(mixers.chunk_keys)
_chunk_kv_rows = jit("i8(i8, i8, optional(i8))")(mixers.chunk_kv_rows)
_spread_keys = jit("i8(i8, i8, i8)")(sf.spread_keys)
jit("i8(i8)")(mixers.mamba1_scan_flops_per_channel)
jit("i8(i8, i8, i8)")(mixers.gdn_chunk_flops_per_head)
_roofline_s = jit("f8(f8, f8, f8, f8, f8, f8, f8, f8, f8, f8, f8, f8, f8)")(lat.roofline_s)
_bandwidth_s = jit("f8(f8, f8, f8, f8, f8, f8, f8)")(lat.bandwidth_s)
_prefill_sums = jit("UniTuple(f8, 4)(i8, i8, i8, i8, i8, i8, i8, i8, i8)")(ft.attn_prefill_sums)
jit("f8(i8, i8, i8, i8, i8, i8)")(ft.decode_grid_waves)
jit("f8(i8, i8, i8, i8, i8)")(ft.attn_decode_waves_d)
jit("i8(i8)")(ft.flashinfer_cta_tile_q)
jit("f8(i8, i8, i8, i8, i8)")(ft.flashinfer_decode_waves)
jit("f8(i8, i8, i8, i8, i8)")(ft.xqa_from_keys)
jit("UniTuple(f8, 2)(i8, i8, i8, i8, i8, i8)")(ft.decode_launch)
_decode_sums = jit("UniTuple(f8, 5)(i8, i8, i8, i8, i8, i8, i8, i8, i8)")(ft.decode_sums)
jit("i8(i8, i8, i8, i8, i8, i8)")(ft.tile_waves)
_tile_wave_k = jit("i8(i8, i8, i8, i8, i8)")(ft.tile_wave_k)
_gemm_sums = jit("UniTuple(f8, 3)(i8, i8, i8, i8)")(ft.gemm_sums)
_head_bytes = jit("UniTuple(f8, 2)(i8, i8, i8)")(ft.head_bytes)
_conv1d_sums = jit("Tuple((f8, i8))(i8, i8, i8, i8, i8, b1)")(ssm_ft.conv1d_sums)
_conv1d_ctas = jit("UniTuple(f8, 2)(i8, i8, i8, i8)")(ssm_ft.conv1d_ctas)
_conv_update_waves = jit("f8(i8, i8, i8)")(ssm_ft.conv_update_waves)
_ssm_scan_sums = jit("UniTuple(f8, 3)(i8, i8, i8, i8, i8, i8, i8, i8)")(ssm_ft.ssm_scan_sums)
_ssm_step_sums = jit("UniTuple(f8, 2)(i8, i8, i8, i8, i8, i8, i8)")(ssm_ft.ssm_step_sums)
_m1_scan_sums = jit("UniTuple(f8, 3)(i8, i8, i8, i8)")(mk.mamba1_scan_sums)
_m1_step = jit("UniTuple(f8, 2)(i8, i8, i8, i8, i8)")(mk.mamba1_step_features)
_gdn_chunk_sums = jit("UniTuple(f8, 3)(i8, i8, i8, i8, i8, i8, i8, i8)")(mk.gdn_chunk_sums)
_gdn_step = jit("UniTuple(f8, 2)(i8, i8, i8, i8, i8, i8, i8)")(mk.gdn_step_features)
_gdn_chunk_s = jit("f8(f8, i8, f8)")(mk.gdn_chunk_s)
_with_host = jit("f8(f8, f8, b1)")(dp.with_host)


@jit("f8(f8[::1], f8, f8, f8, f8, f8)")
def _kernel_s(k: np.ndarray, flops: float, nbytes: float, x: float, y: float, z: float) -> float:
    """The price of the kernel whose constants are ``k`` (a ``latency.KernelConstants``, in
    its order; ``z`` the third extra, the attention decode families' ``waves_d``, 0 for
    every other kernel): ``compile_fast``'s, ``latency.roofline_s`` or ``bandwidth_s``."""
    if k[0] == 0.0:
        return _bandwidth_s(k[1], k[2], flops, nbytes, x, y, z)
    return _roofline_s(k[1], k[2], k[3], k[4], k[5], k[6], k[7], k[8], flops, nbytes, x, y, z)


# ----- decode runs ----------------------------------------------------------------------
# Entries of a batch size's constants (:func:`pack_decode`): the step's parts
# (``CostModel._decode_shape``: dense layers, the mixers summed before full attention, its
# layer count, the head), the host time and its mode (1: a floor, 0: added), the attention
# decode features' coefficients in the keys (``decode_pricing.affine_in_keys``: FLOPs,
# bytes at 0 keys and per key, score elements per key, tiles, the launch extra and the keys
# from which it applies), the kernel's constants (``latency.KernelConstants``, 9 entries),
# then the count of the later parts and the parts.
DENSE, BEFORE, LAYERS, HEAD, HOST, HOST_FLOOR, FN, B0, BN, XN, Y, Z, ZK = range(13)
KERNEL = 13
N_CONSTANTS = len(lat.KernelConstants._fields)
N_AFTER = KERNEL + N_CONSTANTS
AFTER = N_AFTER + 1


def pack_decode(
    parts: tuple[float, float, int, Sequence[float], float],
    host_s: float,
    host_floor: bool,
    keys: tuple[float, float, float, float, float, float, float],
    kernel: lat.KernelConstants,
) -> np.ndarray:
    """The constants of one batch size: ``parts`` = ``(dense, before, layers, after, head)``
    (``CostModel._decode_shape``), ``keys`` = ``(fn, b0, bn, xn, y, z, zk)``
    (``affine_in_keys``)."""
    dense, before, layers, after, head = parts
    c = np.zeros(AFTER + len(after), np.float64)
    c[DENSE], c[BEFORE], c[LAYERS], c[HEAD] = dense, before, layers, head
    c[HOST], c[HOST_FLOOR] = host_s, float(host_floor)
    c[FN : ZK + 1] = keys
    c[KERNEL:N_AFTER] = kernel
    c[N_AFTER] = len(after)
    c[AFTER:] = after
    return c


@jit("void(f8[::1], i8, i8, f8[::1], i8, i8)")
def fill_ends(c: np.ndarray, keys0: int, batch: int, ends: np.ndarray, first: int, n: int) -> None:
    """``ends[first:first + n]``: the ends of steps ``first`` to ``first + n - 1`` of a run
    whose step j reads ``keys0 + j x batch`` keys, summed on from ``ends[first - 1]``.

    Transliterates ``CostModel.decode_steps_s``: the attention decode kernel over the
    keys (``latency.compile_affine``'s loop equals ``fast`` on the same features to the
    bit, which :func:`_kernel_s` is), then ``decode_pricing.decode_steps``; and
    ``DecodeRun.price_next``'s running sums (``itertools.accumulate``).
    """
    dense, before, layers, head = c[DENSE], c[BEFORE], c[LAYERS], c[HEAD]
    host, floor = c[HOST], c[HOST_FLOOR] != 0.0
    fn, b0, bn, xn, y, z, zk = c[FN], c[B0], c[BN], c[XN], c[Y], c[Z], c[ZK]
    kernel = c[KERNEL:N_AFTER]
    n_after = int(c[N_AFTER])
    total_s = ends[first - 1] if first else 0.0
    for j in range(first, first + n):
        keys = keys0 + j * batch
        r = _kernel_s(kernel, fn * keys, b0 + bn * keys, xn * keys, y, z if keys >= zk else 0.0)
        # ``decode_steps``: the parts in ``_sum_parts``' order, then its host time.
        total = before + layers * r
        for i in range(n_after):
            total += c[AFTER + i]
        step = dense + total + head
        if floor:
            if not step >= host:
                step = host
        elif host != 0.0:
            step = step + host
        # The running sum: ``accumulate`` (the first end is the first price itself).
        total_s = total_s + step if j else step
        ends[j] = total_s


# ----- mixed steps ----------------------------------------------------------------------
# Rows of the kernel table ``kc`` (each a ``latency.KernelConstants``), then the host row.
(ATTN_PREFILL, ATTN_DECODE, SSM_SCAN, CONV1D, SSM_STEP, CONV_UPDATE, ELEMENTWISE, GEMM) = range(8)
M1_SCAN, M1_STEP, GDN_CHUNK, GDN_STEP = range(8, 12)  # ``MixerPricing._opt``'s
HOST_ROW = 12  # (host seconds, 1.0 if a floor else 0.0 for added)
GDN_SEQ_ROW = 13  # (the GDN chunk's seconds a chunk of its sequential pass, ``mk.gdn_chunk_s``)
# Entries of the model's integers ``mi``.
(
    ATTN_LAYERS,  # 0: no full attention
    HEADS,
    KV_HEADS,
    HEAD_DIM,
    ELEM,
    M2_LAYERS,  # 0: no Mamba2
    SSM_HEADS,
    SSM_HEAD_DIM,
    D_STATE,
    GROUPS,
    SCAN_CHUNK,
    CONV_CHANNELS,
    TAPS,
    STATE_ELEM,
    D_MODEL,
    VOCAB,
    CHUNK,  # ``_shape_args``' chunk: the scan's, or 1 without Mamba2
    M1_LAYERS,  # 0: no Mamba-1
    M1_INNER,
    M1_STATE,
    GDN_LAYERS,  # 0: no GDN
    GDN_V,
    GDN_K,
    GDN_KDIM,
    GDN_VDIM,
    GDN_CHUNK_LEN,
    GDN_CONV,
    GDN_TAPS,
    SWA_LAYERS,  # 0: no sliding-window attention
    WINDOW,  # ``_shape_args``' window (0: none)
    KV_ELEM,  # bytes per K/V element attention reads (``CostModel.kv_elem_bytes``)
    SMS,  # the SMs a GEMM's / decode attention's waves run over (``CostModel.sms``; 0: not known)
    LAUNCH,  # the decode fit's launch rule (``features.launch_code``): 1 XQA, 2 FlashInfer, 0 FA3
) = range(33)
_KINDS = {"attention", "swa", "mamba2", "mamba1", "gdn"}


def pack_step(cm: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """``(kc, mi)`` for :func:`step_seconds` from a ``CostModel``; ``None`` where the step
    is priced in Python (another mixer kind, another host mode, a width not an int)."""
    kinds = {k: n for k, n in cm.kinds.items() if n}
    if not kinds or set(kinds) - _KINDS or cm.host_mode not in ("add", "max"):
        return None
    m = cm.model
    # ``_mixing_parts`` prices attention of either kind only when the model has its layers.
    heads = bool(m.n_attention_layers)
    if (kinds.get("attention") or kinds.get("swa")) and not heads:
        return None
    mamba2, mamba1, gdn = "mamba2" in kinds, "mamba1" in kinds, "gdn" in kinds
    ints = [
        kinds.get("attention", 0),
        cm.heads if heads else 0,
        cm.kv_heads if heads else 0,
        cm.head_dim if heads else 0,
        cm.elem_bytes,
        kinds.get("mamba2", 0),
        cm.ssm_heads if mamba2 else 0,
        cm.ssm_head_dim if mamba2 else 0,
        cm.ssm_d_state if mamba2 else 0,
        cm.ssm_groups if mamba2 else 0,
        cm.chunk_size if mamba2 else 0,
        cm.conv_channels if mamba2 else 0,
        m.ssm_conv_kernel,
        m.state_dtype_bytes,
        cm.d_model,
        cm.vocab,
        cm.chunk_size if mamba2 else 1,
        kinds.get("mamba1", 0),
        cm.m1_inner if mamba1 else 0,
        cm.m1_state if mamba1 else 0,
        kinds.get("gdn", 0),
        cm.gdn_v if gdn else 0,
        cm.gdn_k if gdn else 0,
        m.gdn_head_k_dim,
        m.gdn_head_v_dim,
        m.gdn_chunk_size,
        cm.gdn_conv if gdn else 0,
        m.gdn_conv_kernel,
        kinds.get("swa", 0),
        m.sliding_window or 0,
        cm.kv_elem_bytes,
        cm.sms or 0,
        launch_code(cm.decode_rule),
    ]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in ints):
        return None
    prof = cm.profile
    kc = np.zeros((GDN_SEQ_ROW + 1, N_CONSTANTS), np.float64)
    for row, name in (
        (ATTN_PREFILL, "attn_prefill"),
        (ATTN_DECODE, "attn_decode"),
        (SSM_SCAN, "ssm_scan"),
        (CONV1D, "conv1d"),
        (SSM_STEP, "ssm_step"),
        (ELEMENTWISE, "elementwise"),
        (GEMM, "gemm"),  # the LM head's: bf16 at every precision
    ):
        key = cm.kernel_keys[name]  # the fit the model's precision takes
        kc[row] = lat.kernel_constants(key, prof.kernels[key].params, prof.peaks)
    kc[CONV_UPDATE] = cm._conv_update_constants  # ``CostModel._conv_update``'s
    # Mamba-1's and GDN's kernels: the profile's fit, else the datasheet fallback.
    for row, name in (
        (M1_SCAN, "mamba1_scan"),
        (M1_STEP, "mamba1_step"),
        (GDN_CHUNK, "gdn_chunk"),
        (GDN_STEP, "gdn_step"),
    ):
        if name in cm._opt_constants:
            kc[row] = cm._opt_constants[name]
    kc[HOST_ROW, 0], kc[HOST_ROW, 1] = cm.host_s, float(cm.host_mode == "max")
    kc[GDN_SEQ_ROW, 0] = cm.gdn_seq_s if gdn else 0.0
    return kc, np.array(ints, np.int64)


@jit("f8(f8[:, ::1], i8[::1], f8, i8, i8, i8, i8, i8, i8)")
def _attention_kind(
    kc: np.ndarray,
    mi: np.ndarray,
    total: float,
    layers: int,
    n: int,
    keys: int,
    kv_rows: int,
    batch: int,
    decode_keys: int,
) -> float:
    """``total`` plus one attention kind's parts (``_mixing_parts``' group of that kind):
    its prefill over one chunk of ``n`` tokens (if any), then its decodes with the launch
    extra of the decode fit's rule (``features.decode_sums``)."""
    e, heads, kv_heads, head_dim, kv_e = (
        mi[ELEM],
        mi[HEADS],
        mi[KV_HEADS],
        mi[HEAD_DIM],
        mi[KV_ELEM],
    )
    if n:
        flops, nbytes, x, y = _prefill_sums(n, keys, kv_rows, 1, heads, kv_heads, head_dim, e, kv_e)
        total += layers * _kernel_s(kc[ATTN_PREFILL], flops, nbytes, x, y, 0.0)
    if batch:
        flops, nbytes, x, y, z = _decode_sums(
            batch, decode_keys, heads, kv_heads, head_dim, e, kv_e, mi[SMS], mi[LAUNCH]
        )
        total += layers * _kernel_s(kc[ATTN_DECODE], flops, nbytes, x, y, z)
    return total


@jit("f8(f8[:, ::1], i8, i8, i8, i8, i8)")
def _conv_prompt(kc: np.ndarray, e: int, n: int, chunks: int, width: int, taps: int) -> float:
    """``MixerPricing._conv`` over a step's prompt tokens: ``conv1d_features(1, n, width,
    taps, e, sequences=chunks)``, a varlen call."""
    flops, nbytes = _conv1d_sums(1, n, width, taps, e, False)
    ctas, unaligned = _conv1d_ctas(1, n, width, chunks)
    return _kernel_s(kc[CONV1D], flops, float(nbytes), ctas, unaligned, 0.0)


@jit("f8(f8[:, ::1], i8, i8, i8, i8, i8)")
def _conv_update(kc: np.ndarray, e: int, batch: int, width: int, taps: int, sms: int) -> float:
    """``MixerPricing._conv``'s decode update: ``conv1d_features(batch, 1, width, taps, e,
    True, sms)`` priced by ``CostModel._conv_update``, no L2 bytes (serving's ``l2_bytes``
    None: every byte from HBM, the second extra 0)."""
    flops, nbytes = _conv1d_sums(batch, 1, width, taps, e, True)
    waves = _conv_update_waves(batch, width, sms)
    return _kernel_s(kc[CONV_UPDATE], flops, float(nbytes), waves, 0.0, 0.0)


@jit("f8(f8[:, ::1], i8[::1], i8, i8, i8, i8, f8)")
def step_seconds(
    kc: np.ndarray, mi: np.ndarray, n: int, cached: int, batch: int, context: int, dense: float
) -> float:
    """Seconds of a step of one prefill chunk of ``n`` new tokens after ``cached`` ones
    (``n = 0``: none) and ``batch`` decodes over ``context`` keys in all, whose dense
    layers cost ``dense`` (``CostModel.step_spread``; ``n + batch > 0``)."""
    e, sms, state_e = mi[ELEM], mi[SMS], mi[STATE_ELEM]
    # 1. ``aggregate_spread``: ``_prefill_sums`` of at most one chunk, then ``_features``.
    chunks = 1 if n else 0
    window = mi[WINDOW]
    p_keys = p_kv = s_keys = s_kv = scan_chunks = g_chunks = 0
    if n:
        if mi[ATTN_LAYERS]:
            p_keys, p_kv = _chunk_keys(n, cached, None), _chunk_kv_rows(n, cached, None)
        if mi[SWA_LAYERS]:
            s_keys, s_kv = _chunk_keys(n, cached, window), _chunk_kv_rows(n, cached, window)
        scan_chunks = -(-n // mi[CHUNK])
        if mi[GDN_LAYERS]:
            g_chunks = -(-n // mi[GDN_CHUNK_LEN])
    d_keys = context + batch if mi[ATTN_LAYERS] else 0
    s_dec = _spread_keys(batch, context, window) if mi[SWA_LAYERS] else 0
    tokens = n + batch
    sequences = chunks + batch
    # 2. ``_mixing_parts`` summed as ``_sum_parts`` sums them (layers x seconds, in order).
    total = 0.0
    if mi[ATTN_LAYERS]:
        total = _attention_kind(kc, mi, total, mi[ATTN_LAYERS], n, p_keys, p_kv, batch, d_keys)
    if mi[SWA_LAYERS]:
        total = _attention_kind(kc, mi, total, mi[SWA_LAYERS], n, s_keys, s_kv, batch, s_dec)
    if mi[M2_LAYERS]:
        layers, width, taps = mi[M2_LAYERS], mi[CONV_CHANNELS], mi[TAPS]
        ssm = (mi[SSM_HEADS], mi[SSM_HEAD_DIM], mi[D_STATE], mi[GROUPS])
        if chunks:
            flops, nbytes, x = _ssm_scan_sums(n, scan_chunks, *ssm, mi[SCAN_CHUNK], e)
            total += layers * _kernel_s(kc[SSM_SCAN], flops, nbytes, x, 0.0, 0.0)
            total += layers * _conv_prompt(kc, e, n, chunks, width, taps)
        if batch:
            flops, nbytes = _ssm_step_sums(batch, *ssm, e, state_e)
            total += layers * _kernel_s(kc[SSM_STEP], flops, nbytes, 0.0, 0.0, 0.0)
            total += layers * _conv_update(kc, e, batch, width, taps, sms)
    if mi[M1_LAYERS]:
        layers, inner, d_state, taps = mi[M1_LAYERS], mi[M1_INNER], mi[M1_STATE], mi[TAPS]
        if chunks:
            flops, nbytes, x = _m1_scan_sums(n, inner, d_state, e)
            total += layers * _kernel_s(kc[M1_SCAN], flops, nbytes, x, 0.0, 0.0)
            total += layers * _conv_prompt(kc, e, n, chunks, inner, taps)
        if batch:
            flops, nbytes = _m1_step(batch, inner, d_state, e, state_e)
            total += layers * _kernel_s(kc[M1_STEP], flops, nbytes, 0.0, 0.0, 0.0)
            total += layers * _conv_update(kc, e, batch, inner, taps, sms)
    if mi[GDN_LAYERS]:
        layers, width, taps = mi[GDN_LAYERS], mi[GDN_CONV], mi[GDN_TAPS]
        dims = (mi[GDN_V], mi[GDN_K], mi[GDN_KDIM], mi[GDN_VDIM])
        if chunks:
            flops, nbytes, x = _gdn_chunk_sums(n, g_chunks, *dims, mi[GDN_CHUNK_LEN], e)
            kernel = _kernel_s(kc[GDN_CHUNK], flops, nbytes, x, 0.0, 0.0)
            # The one chunk's sequential pass: ``gdn_depth`` is its chunks.
            total += layers * _gdn_chunk_s(kernel, g_chunks, kc[GDN_SEQ_ROW, 0])
            total += layers * _conv_prompt(kc, e, n, chunks, width, taps)
        if batch:
            flops, nbytes = _gdn_step(batch, *dims, e, state_e)
            total += layers * _kernel_s(kc[GDN_STEP], flops, nbytes, 0.0, 0.0, 0.0)
            total += layers * _conv_update(kc, e, batch, width, taps, sms)
    # 3. ``DensePricing._head``: embedding gather, final norm (``features.head_bytes``), the
    # LM head's GEMM (``_gemm``: ``gemm_sums`` and ``gemm_wave_k``, whose default tile's is
    # ``tile_wave_k``).
    d, vocab = mi[D_MODEL], mi[VOCAB]
    embed_bytes, norm_bytes = _head_bytes(tokens, d, e)
    embed = _kernel_s(kc[ELEMENTWISE], 0.0, embed_bytes, 0.0, 0.0, 0.0)
    norm = _kernel_s(kc[ELEMENTWISE], 0.0, norm_bytes, 0.0, 0.0, 0.0)
    lm = 0.0
    if sequences:
        flops, nbytes, weights = _gemm_sums(sequences, d, vocab, e)
        waves = _tile_wave_k(sequences, vocab, d, sms, 1)
        lm = _kernel_s(kc[GEMM], flops, nbytes, weights, float(waves), 0.0)
    head = embed + norm + lm
    # ``CostModel._seconds``: ``decode_pricing.with_host``
    return _with_host(dense + total + head, kc[HOST_ROW, 0], kc[HOST_ROW, 1] != 0.0)
