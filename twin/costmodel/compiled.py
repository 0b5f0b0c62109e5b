"""The engine's hot pricing paths as compiled code (numba), equal to the Python to the bit.

Two calls, each in place of a dozen Python calls:

- :func:`fill_ends`: a chunk of a decode run's steps (``twin.engine.decode_run.DecodeRun``)
  when the attention decode kernel is not affine in the context (a measured p-norm
  roofline), each step priced and the run's cumulative ends written in place;
- :func:`step_seconds`: a step of at most one prefill chunk and a decode batch
  (``CostModel.step_spread``, about one a request; each decode step of a sliding-window
  model) for every mixer kind (full and sliding-window attention, Mamba2, Mamba-1, GDN);
  the dense layers' price depends on the token count alone and comes from
  ``CostModel``'s memo.

Each transliterates Python pieces, named where they are, with the same float and
integer operations in the same order, so every price equals the Python path's to the
bit (``tests/test_compiled_decode.py``, ``tests/test_compiled_step.py``, ``==`` on every
shipped profile and preset and on random constants). No ``fastmath`` (``twin.jit``: no
FMA contraction, no reassociation); ``x ** y`` on floats is LLVM's ``pow`` intrinsic,
which calls the C library's ``pow`` as CPython's ``float.__pow__`` does (numba links the
process's own libm). Integer sums are int64: ``CostModel.step_spread`` asks only for
counts under ``model.MAX_TOKENS`` (``keys_upto`` of 2^30 tokens is under 2^59).

Why one module, past 400 lines: numba caches each compiled function on disk keyed by
its own source file, and a cached function carries the code of what it calls; both
paths call :func:`_kernel_s`, so a change to it in another file would leave the other's
cache stale.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from twin.costmodel import latency as lat
from twin.costmodel.features import (
    DECODE_PACKED_ROWS,
    FLASHINFER_BLOCKS_PER_SM,
    GEMM_TILE_M,
    GEMM_TILE_N,
    XQA_ENABLE_MIN_BLOCK_FACTOR,
    XQA_MAX_GROUP,
    XQA_MIN_HISTORY_TOKENS_PER_BLOCK,
    launch_code,
)
from twin.costmodel.ssm_features import CONV_UPDATE_RESIDENT, CONV_UPDATE_THREADS
from twin.jit import jit


@jit("f8(f8[::1], f8, f8, f8, f8, f8)")
def _kernel_s(k: np.ndarray, flops: float, nbytes: float, x: float, y: float, z: float) -> float:
    """``latency._compile_pair``'s ``fast`` (or the bandwidth-only ``scalar``) of the kernel
    whose constants are ``k`` (a ``latency.KernelConstants``, in its order; ``z`` the third
    extra, the attention decode families' ``waves_d``, 0 for every other kernel).

    ``fast`` ends ``m * ((a/m)**p + (b/m)**p) ** inv_p`` with ``m`` the larger side; here
    that side's term is 1.0, as in ``compile_affine``'s loop: ``m / m`` is exactly 1.0,
    ``pow(1.0, p)`` is exactly 1.0 (C99 F.9.4.4) and ``+`` commutes, so the price is the
    same to the bit, one ``pow`` call fewer."""
    t0, inv_b = k[1], k[2]
    if k[0] == 0.0:
        return t0 + nbytes * inv_b
    inv_f, cx, cy, p, inv_p, cz = k[3], k[4], k[5], k[6], k[7], k[8]
    a = flops * inv_f + cx * x + cy * y + cz * z
    b = nbytes * inv_b
    if a <= 0.0:
        return t0 + b
    if b <= 0.0:
        return t0 + a
    if a > b:
        return t0 + a * (1.0 + (b / a) ** p) ** inv_p
    return t0 + b * ((a / b) ** p + 1.0) ** inv_p


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
        # ``decode_steps``: the parts in ``_sum_parts``' order, then ``_with_host``.
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


@jit("f8(f8[:, ::1], i8[::1], i8, i8, i8, i8, i8)")
def _attention_s(
    kc: np.ndarray, mi: np.ndarray, row: int, queries: int, keys: int, kv_rows: int, seqs: int
) -> float:
    """``features.attn_prefill_sums`` priced by kernel ``row``; the decode kernel's
    (``ATTN_DECODE``) with its launch extra (``features.attn_decode_launch``: the FA3 grid's
    waves x head dim, FlashInfer's (``flashinfer_decode_waves``), or TensorRT-LLM Hopper's XQA
    CTAs from ``xqa_from_keys`` on; integers,
    exact as there)."""
    e, heads, kv_heads, head_dim = mi[ELEM], mi[HEADS], mi[KV_HEADS], mi[HEAD_DIM]
    kv_e = mi[KV_ELEM]
    flops = 4.0 * heads * head_dim * keys
    if kv_e == e:
        nbytes = e * (2.0 * queries * heads * head_dim + 2.0 * kv_rows * kv_heads * head_dim)
    else:
        nbytes = e * 2.0 * queries * heads * head_dim + kv_e * 2.0 * kv_rows * kv_heads * head_dim
    waves = 0
    sms = mi[SMS]
    if row == ATTN_DECODE and sms and seqs > 0 and mi[LAUNCH] == 1:
        group = heads // kv_heads
        if 1 < group <= XQA_MAX_GROUP and head_dim % 16 == 0 and 16 <= head_dim <= 256:
            blocks = -(-sms // (XQA_ENABLE_MIN_BLOCK_FACTOR * kv_heads * seqs))
            start = 0 if blocks <= 1 else seqs * (XQA_MIN_HISTORY_TOKENS_PER_BLOCK * blocks + 1)
            if keys >= start:
                waves = kv_heads * seqs
    elif row == ATTN_DECODE and sms and seqs > 0 and mi[LAUNCH] == 2:
        group = heads // kv_heads
        tile_q = 128 if group > 64 else (64 if group > 16 else 16)  # flashinfer_cta_tile_q
        ctas = seqs * kv_heads * -(-group // tile_q)
        waves = -(-ctas // (FLASHINFER_BLOCKS_PER_SM * sms)) * head_dim
    elif row == ATTN_DECODE and sms and seqs > 0:
        blocks = -(-(heads // kv_heads) // DECODE_PACKED_ROWS)
        waves = -(-(seqs * kv_heads * blocks) // sms) * head_dim
    x, y = float(heads) * keys, float(kv_heads * seqs)
    return _kernel_s(kc[row], flops, nbytes, x, y, float(waves))


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
    its prefill over one chunk of ``n`` tokens (if any), then its decodes."""
    if n:
        total += layers * _attention_s(kc, mi, ATTN_PREFILL, n, keys, kv_rows, 1)
    if batch:
        total += layers * _attention_s(kc, mi, ATTN_DECODE, batch, decode_keys, decode_keys, batch)
    return total


@jit("i8(i8, i8)")
def _keys_upto(m: int, window: int) -> int:
    """``mixers.keys_upto``: keys attended by the first ``m`` causal tokens (``window``
    -1: full attention, ``None`` there)."""
    if window < 0 or m <= window:
        return m * (m + 1) // 2
    return window * (window + 1) // 2 + (m - window) * window


@jit("f8(f8[:, ::1], i8, i8, i8, i8, i8)")
def _conv_prompt(kc: np.ndarray, e: int, n: int, chunks: int, width: int, taps: int) -> float:
    """``MixerPricing._conv`` over a step's prompt tokens: ``conv1d_features(1, n, width,
    taps, e, sequences=chunks)``, a varlen call: the chunks' channels are its CTAs, every
    one unaligned (both extra features)."""
    cf = 2.0 * 1 * n * width * taps
    cb = float(e * (2 * 1 * n * width + width * taps))
    ctas = float(chunks * width)
    return _kernel_s(kc[CONV1D], cf, cb, ctas, ctas, 0.0)


@jit("f8(f8[:, ::1], i8, i8, i8, i8, i8)")
def _conv_update(kc: np.ndarray, e: int, batch: int, width: int, taps: int, sms: int) -> float:
    """``MixerPricing._conv``'s decode update: ``conv1d_features(batch, 1, width, taps, e,
    True, sms)`` priced by ``CostModel._conv_update``: the waves of its 64-thread CTAs
    (``ssm_features.conv_update_waves``: fractional above one; 0 without an SM count) and no
    L2 bytes (serving's ``l2_bytes`` None: the second extra 0)."""
    cf = 2.0 * batch * 1 * width * taps
    ub = e * (2 * batch * 1 * width + width * taps)
    ub += e * 2 * batch * width * taps
    waves = 0.0
    if sms:
        ctas = batch * -(-width // CONV_UPDATE_THREADS)
        waves = max(1.0, ctas / (sms * CONV_UPDATE_RESIDENT))
    return _kernel_s(kc[CONV_UPDATE], cf, float(ub), waves, 0.0, 0.0)


@jit("f8(f8[:, ::1], i8[::1], i8, i8, i8, i8, f8)")
def step_seconds(
    kc: np.ndarray, mi: np.ndarray, n: int, cached: int, batch: int, context: int, dense: float
) -> float:
    """Seconds of a step of one prefill chunk of ``n`` new tokens after ``cached`` ones
    (``n = 0``: none) and ``batch`` decodes over ``context`` keys in all, whose dense
    layers cost ``dense`` (``CostModel.step_spread``; ``n + batch > 0``)."""
    e = mi[ELEM]
    # 1. ``aggregate_spread``: ``_prefill_sums`` of at most one chunk, then ``_features``.
    chunks = 1 if n else 0
    window = mi[WINDOW]
    p_keys = p_kv = s_keys = s_kv = scan_chunks = g_chunks = 0
    if n:
        if mi[ATTN_LAYERS]:
            p_keys = _keys_upto(cached + n, -1) - _keys_upto(cached, -1)
            p_kv = cached + n
        if mi[SWA_LAYERS]:
            s_keys = _keys_upto(cached + n, window) - _keys_upto(cached, window)
            s_kv = min(cached + n, window + n)
        scan_chunks = -(-n // mi[CHUNK])
        if mi[GDN_LAYERS]:
            g_chunks = -(-n // mi[GDN_CHUNK_LEN])
    d_keys = context + batch if mi[ATTN_LAYERS] else 0
    s_dec = 0
    if mi[SWA_LAYERS] and batch:
        base, extra = context // batch, context % batch  # the even spread (``divmod``)
        s_dec = extra * min(base + 2, window) + (batch - extra) * min(base + 1, window)
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
        nheads, channels, d_state = mi[SSM_HEADS], mi[SSM_HEADS] * mi[SSM_HEAD_DIM], mi[D_STATE]
        ngroups, chunk = mi[GROUPS], mi[SCAN_CHUNK]
        if chunks:
            # ``ssm_scan_sums(n, scan_chunks, ...)``
            padded = scan_chunks * chunk
            flops = padded * (
                2.0 * channels * (2 * d_state + chunk) + 2.0 * chunk * d_state * ngroups
            )
            nbytes = (
                e * n * (2.0 * channels + 2.0 * ngroups * d_state + nheads)
                + 8.0 * scan_chunks * channels * d_state
            )
            s = _kernel_s(kc[SSM_SCAN], flops, nbytes, float(scan_chunks * nheads), 0.0, 0.0)
            total += layers * s
            total += layers * _conv_prompt(kc, e, n, chunks, width, taps)
        if batch:
            # ``ssm_step_features(batch, ...)``, then the conv update
            sf = 6.0 * batch * channels * d_state
            sb = float(
                batch
                * (
                    2 * channels * d_state * mi[STATE_ELEM]
                    + e * (2 * channels + 2 * ngroups * d_state + 2 * nheads)
                )
            )
            total += layers * _kernel_s(kc[SSM_STEP], sf, sb, 0.0, 0.0, 0.0)
            total += layers * _conv_update(kc, e, batch, width, taps, mi[SMS])
    if mi[M1_LAYERS]:
        layers, inner, d_state, taps = mi[M1_LAYERS], mi[M1_INNER], mi[M1_STATE], mi[TAPS]
        per_channel = 8 * d_state + 2  # ``mixers.mamba1_scan_flops_per_channel``
        if chunks:
            # ``mixer_kernels.mamba1_scan_sums(n, inner, d_state, e)``, then the prompt conv
            flops = float(n * inner * per_channel)
            nbytes = e * n * (4.0 * inner + 2.0 * d_state) + 4.0 * inner * d_state
            total += layers * _kernel_s(kc[M1_SCAN], flops, nbytes, 0.0, 0.0, 0.0)
            total += layers * _conv_prompt(kc, e, n, chunks, inner, taps)
        if batch:
            # ``mamba1_step_features``, then the conv update
            sf = float(batch * inner * per_channel)
            sb = float(
                batch * (2 * inner * d_state * mi[STATE_ELEM] + e * (4 * inner + 2 * d_state))
            )
            total += layers * _kernel_s(kc[M1_STEP], sf, sb, 0.0, 0.0, 0.0)
            total += layers * _conv_update(kc, e, batch, inner, taps, mi[SMS])
    if mi[GDN_LAYERS]:
        layers, v_heads, k_heads = mi[GDN_LAYERS], mi[GDN_V], mi[GDN_K]
        k_dim, v_dim, g_chunk = mi[GDN_KDIM], mi[GDN_VDIM], mi[GDN_CHUNK_LEN]
        width, taps = mi[GDN_CONV], mi[GDN_TAPS]
        io = 2 * k_heads * k_dim + 2 * v_heads * v_dim + 2 * v_heads
        if chunks:
            # ``gdn_chunk_sums(n, g_chunks, ...)`` (``mixers.gdn_chunk_flops_per_head``)
            per_head = 6 * g_chunk * k_dim + 4 * g_chunk * v_dim + 6 * k_dim * v_dim
            per_head += g_chunk * g_chunk
            flops = float(g_chunks * g_chunk * v_heads * per_head)
            nbytes = e * n * io + 8.0 * g_chunks * v_heads * k_dim * v_dim
            x = float(g_chunks * v_heads)
            # ``mk.gdn_chunk_s``: the one chunk's sequential pass where longer
            chunk_s = max(
                _kernel_s(kc[GDN_CHUNK], flops, nbytes, x, 0.0, 0.0), kc[GDN_SEQ_ROW, 0] * g_chunks
            )
            total += layers * chunk_s
            total += layers * _conv_prompt(kc, e, n, chunks, width, taps)
        if batch:
            # ``gdn_step_features``, then the conv update
            sf = float(batch * v_heads * 8 * k_dim * v_dim)
            state = 2 * v_heads * k_dim * v_dim * mi[STATE_ELEM]
            sb = float(batch * (state + e * io))
            total += layers * _kernel_s(kc[GDN_STEP], sf, sb, 0.0, 0.0, 0.0)
            total += layers * _conv_update(kc, e, batch, width, taps, mi[SMS])
    # 3. ``_head``: embedding gather, final norm, the LM head's GEMM (``gemm_sums``).
    d, vocab = mi[D_MODEL], mi[VOCAB]
    embed = _kernel_s(kc[ELEMENTWISE], 0.0, e * 2.0 * tokens * d, 0.0, 0.0, 0.0)
    norm = _kernel_s(kc[ELEMENTWISE], 0.0, e * (2.0 * tokens * d + d), 0.0, 0.0, 0.0)
    lm = 0.0
    if sequences:
        lm_flops = 2.0 * sequences * d * vocab
        lm_bytes = float(e * (sequences * d + d * vocab + sequences * vocab))
        # ``features.gemm_wave_k(sequences, vocab, d, sms)``: integers, exact as there
        sms, waves = mi[SMS], 0
        if sms:
            tiles = -(-sequences // GEMM_TILE_M) * -(-vocab // GEMM_TILE_N)
            waves = -(-tiles // sms) * d
        lm = _kernel_s(kc[GEMM], lm_flops, lm_bytes, float(d * vocab), float(waves), 0.0)
    head = embed + norm + lm
    # ``_seconds`` and ``_with_host``
    kernels = dense + total + head
    host = kc[HOST_ROW, 0]
    if kc[HOST_ROW, 1] != 0.0:
        return host if host > kernels else kernels  # ``max(kernels, host)``
    return kernels + host
