"""The latency model of each kernel, and the FLOPs/bytes features it is fitted on.

One physically-shaped model for every kernel::

    t = t0 + smax_p(F / (eff_flops * flops_peak) + sum_j c_j x_j, B / (eff_bytes * bytes_peak))

``F`` is the FLOPs, ``B`` the fewest bytes the kernel must move, ``t0`` the launch
overhead, ``smax_p(a, b) = (a^p + b^p)^(1/p)`` a smooth maximum (p = 1 is no
overlap at all, large p a hard roofline), and the ``x_j`` extra features a kernel
needs beyond the roofline, on the compute side (they overlap with memory traffic
as arithmetic does): the score elements (query x key pairs x heads) of attention,
whose softmax costs per score and not per FLOP; the chunks x heads of the Mamba2
scan, whose state passing is sequential; and the weight elements of a GEMM, whose
per-panel work (packing, tile edges) makes few-token products slower than their
FLOPs. Every coefficient is non-negative and every feature grows with tokens and
context, so predictions are monotone in both. Byte-only kernels (copies,
element-wise passes) are ``t0 + B / (eff_bytes * bytes_peak)``.

Features are additive across the sequences of one batched launch, so a batch of
prefill chunks is priced as one launch with the summed features (one ``t0``).
This module is pure Python (numpy for the array form): the cost model and the fitting
import it without torch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import numpy as np

from twin.errors import TwinError
from twin.model import keys_upto


@dataclass(frozen=True)
class KernelFormula:
    """How one kernel's latency model reads a profile."""

    kernel: str
    bytes_peak: str  # the profile peak the byte time divides by: mem_bw or host_bw
    uses_flops: bool  # False: a pure byte-moving kernel (no FLOP term, no smooth max)
    extras: tuple[str, ...]  # extra linear features, each with a ``c_<name>`` coefficient
    doc: str
    # The peak the FLOP time divides by: tensor-core ``flops``, or ``fp32_flops`` for a
    # kernel that runs on CUDA cores in fp32 (Mamba-1's selective scan).
    flops_peak: str = "flops"

    def __post_init__(self) -> None:
        assert self.uses_flops or not self.extras, "extras sit on the compute side"

    @property
    def model_name(self) -> str:
        """Formula name stored in a profile."""
        base = "roofline" if self.uses_flops else "bandwidth"
        return "+".join((base, *self.extras))

    @property
    def param_names(self) -> tuple[str, ...]:
        """Parameter names in fitting order."""
        names = ["t0_s"]
        if self.uses_flops:
            names += ["eff_flops", "eff_bytes", "p"]
        else:
            names += ["eff_bytes"]
        return (*names, *(f"c_{x}" for x in self.extras))


FORMULAS: dict[str, KernelFormula] = {
    f.kernel: f
    for f in (
        KernelFormula(
            "gemm", "mem_bw", True, ("weight_elems",), "dense GEMM (m tokens x k) @ (k x n)"
        ),
        KernelFormula(
            "attn_prefill",
            "mem_bw",
            True,
            ("score_elems", "tiles"),
            "causal attention of n new tokens over c cached + n new keys",
        ),
        KernelFormula(
            "attn_decode",
            "mem_bw",
            True,
            ("score_elems", "tiles"),
            "one query token per sequence over its context",
        ),
        KernelFormula("ssm_scan", "mem_bw", True, ("chunks",), "Mamba2 chunked (SSD) scan"),
        KernelFormula("ssm_step", "mem_bw", True, (), "Mamba2 one-token state update (decode)"),
        KernelFormula(
            "conv1d", "mem_bw", True, ("seq_channels",), "causal depthwise conv1d over prompts"
        ),
        KernelFormula(
            "elementwise", "mem_bw", False, (), "element-wise pass / RMSNorm: bytes in and out"
        ),
        KernelFormula("copy_d2d", "mem_bw", False, (), "device-to-device copy (read + write)"),
        KernelFormula("copy_h2d", "host_bw", False, (), "pinned host to device copy"),
        KernelFormula("copy_d2h", "host_bw", False, (), "device to pinned host copy"),
        # Optional families (see OPTIONAL): the cost model falls back when a profile lacks one.
        KernelFormula(
            "conv1d_update",
            "mem_bw",
            True,
            (),
            "causal conv1d decode update: one token per sequence, conv state read + written",
        ),
        # Issue 13's mixer kinds (optional: a profile without them takes the datasheet
        # fallback of ``twin.costmodel.mixer_kernels``).
        KernelFormula(
            "mamba1_scan",
            "mem_bw",
            True,
            (),
            "Mamba-1 selective scan over prompts (selective_scan_cuda: fp32 on CUDA cores)",
            flops_peak="fp32_flops",
        ),
        KernelFormula(
            "mamba1_step",
            "mem_bw",
            True,
            (),
            "Mamba-1 one-token state update (selective_state_update, fp32 CUDA cores)",
            flops_peak="fp32_flops",
        ),
        KernelFormula(
            "gdn_chunk",
            "mem_bw",
            True,
            ("chunks",),
            "Gated DeltaNet chunked delta rule over prompts (FLA chunk_gated_delta_rule)",
        ),
        KernelFormula(
            "gdn_step",
            "mem_bw",
            True,
            (),
            "Gated DeltaNet one-token recurrent update (FLA fused_recurrent_gated_delta_rule)",
        ),
        # One fit per GPU count, stored as ``allreduce_<n>gpu``; without one the cost
        # model prices a ring from the profile's peaks.
        KernelFormula(
            "allreduce",
            "interconnect_bw",
            False,
            (),
            "all-reduce across the tensor-parallel GPUs (ring bytes per GPU)",
        ),
    )
}

# Families every profile must carry (the cost model refuses a profile without one).
OPTIONAL = ("conv1d_update", "allreduce", "mamba1_scan", "mamba1_step", "gdn_chunk", "gdn_step")
KERNELS: tuple[str, ...] = tuple(k for k in FORMULAS if k not in OPTIONAL)

_PER_GPU_COUNT = re.compile(r"^(allreduce)_(\d+)gpu$")


def allreduce_kernel(n_gpus: int) -> str:
    """The profile key of the all-reduce fit for ``n_gpus`` GPUs."""
    return f"allreduce_{n_gpus}gpu"


def family(kernel: str) -> str:
    """The formula family of a profile key: ``allreduce_8gpu`` -> ``allreduce``."""
    m = _PER_GPU_COUNT.match(kernel)
    return m.group(1) if m else kernel


def get_formula(kernel: str) -> KernelFormula:
    """The formula of ``kernel``; a ``TwinError`` naming the known kernels otherwise."""
    try:
        return FORMULAS[family(kernel)]
    except KeyError:
        raise TwinError(f"unknown kernel {kernel!r}; known: {', '.join(FORMULAS)}") from None


# ---------------------------------------------------------------- features
# Each returns (flops, bytes, {extra: value}); ``e`` is bytes per element.
Features = tuple[float, float, dict[str, float]]


def gemm_features(m: int, k: int, n: int, e: int) -> Features:
    """A (m x k) @ (k x n) product: activations in, weights in, output out."""
    flops, nbytes, weights = gemm_sums(m, k, n, e)
    return flops, nbytes, {"weight_elems": weights}


def gemm_sums(m: float, k: float, n: float, e: int) -> tuple[float, float, float]:
    """(FLOPs, bytes, weight elements) of an (m x k) @ (k x n) product."""
    return 2.0 * m * k * n, float(e * (m * k + k * n + m * n)), float(k * n)


def attn_prefill_features(
    n: int, c: int, heads: int, kv_heads: int, head_dim: int, e: int, window: int | None = None
) -> Features:
    """Causal attention of ``n`` new queries after ``c`` cached keys (bottom-right aligned)."""
    keys = keys_upto(c + n, window) - keys_upto(c, window)
    kv_rows = c + n if window is None else min(c + n, window + n)
    flops, nbytes, scores, tiles = attn_prefill_sums(
        n, keys, kv_rows, 1, heads, kv_heads, head_dim, e
    )
    return flops, nbytes, {"score_elems": scores, "tiles": tiles}


def attn_prefill_sums(
    queries: float,
    keys: float,
    kv_rows: float,
    sequences: float,
    heads: int,
    kv_heads: int,
    head_dim: int,
    e: int,
) -> tuple[float, float, float, float]:
    """(FLOPs, bytes, score elements, tiles) of prefill chunks batched in one launch.

    ``queries``, ``keys`` (query-key pairs) and ``kv_rows`` (K/V rows read) are
    summed over the ``sequences`` chunks. QK^T and AV cost 4 x head_dim FLOPs per
    score; Q in and O out are read/written once, K and V of the visible context
    once. A tile is one (sequence, KV head): varlen kernels set up each sequence's
    K/V for each KV head, the query heads sharing it packed together (FA3's
    PackGQA, FlashInfer's grouped heads); NVIDIA's tables show this fixed cost
    (~20 ns a tile on H100) dominating many short sequences.
    """
    flops = 4.0 * heads * head_dim * keys
    nbytes = e * (2.0 * queries * heads * head_dim + 2.0 * kv_rows * kv_heads * head_dim)
    return flops, nbytes, float(heads * keys), float(kv_heads * sequences)


def attn_decode_features(
    batch: int, keys: int, heads: int, kv_heads: int, head_dim: int, e: int
) -> Features:
    """``batch`` single-token queries, each over ``keys`` keys (KV read dominates)."""
    flops, nbytes, scores, tiles = attn_decode_sums(
        batch, batch * keys, heads, kv_heads, head_dim, e
    )
    return flops, nbytes, {"score_elems": scores, "tiles": tiles}


def attn_decode_sums(
    batch: float, keys: float, heads: int, kv_heads: int, head_dim: int, e: int
) -> tuple[float, float, float, float]:
    """(FLOPs, bytes, score elements, tiles) of ``batch`` decode queries over ``keys`` keys
    in all; each (sequence, KV head) is one tile (see ``attn_prefill_sums``)."""
    flops = 4.0 * heads * head_dim * keys
    nbytes = e * (2.0 * batch * heads * head_dim + 2.0 * kv_heads * head_dim * keys)
    # float(heads) * keys, not float(heads * keys): equal for counts below 2^53, and
    # ``keys`` may be an array of decode steps (``CostModel.decode_steps_s``).
    return flops, nbytes, float(heads) * keys, float(kv_heads * batch)


def ssm_scan_features(
    batch: int,
    seqlen: int,
    nheads: int,
    headdim: int,
    d_state: int,
    ngroups: int,
    chunk: int,
    e: int,
) -> Features:
    """SSD chunked scan over ``batch`` sequences of ``seqlen`` tokens."""
    n_chunks = batch * -(-seqlen // chunk)
    flops, nbytes, x = ssm_scan_sums(
        batch * seqlen, n_chunks, nheads, headdim, d_state, ngroups, chunk, e
    )
    return flops, nbytes, {"chunks": x}


def ssm_scan_sums(
    tokens: float,
    n_chunks: float,
    nheads: int,
    headdim: int,
    d_state: int,
    ngroups: int,
    chunk: int,
    e: int,
) -> tuple[float, float, float]:
    """(FLOPs, bytes, chunks x heads) of a scan over ``tokens`` in ``n_chunks`` chunks.

    FLOPs per token as ``ModelSpec.prefill_flops`` counts them (C.B^T within a
    chunk, the masked mixing, chunk states and outputs), over whole chunks: a
    sequence's last, partial chunk is computed in full. Bytes: x, dt, B, C in and
    y out per token, plus one fp32 chunk state per chunk written and read back.
    """
    channels = nheads * headdim
    padded = n_chunks * chunk
    flops = padded * (2.0 * channels * (2 * d_state + chunk) + 2.0 * chunk * d_state * ngroups)
    nbytes = (
        e * tokens * (2.0 * channels + 2.0 * ngroups * d_state + nheads)
        + 8.0 * n_chunks * channels * d_state
    )
    return float(flops), float(nbytes), float(n_chunks * nheads)


def ssm_step_features(
    batch: int, nheads: int, headdim: int, d_state: int, ngroups: int, e: int, state_e: int
) -> Features:
    """One decode token per sequence: read and write each recurrent state once."""
    sc = nheads * headdim
    flops = 6.0 * batch * sc * d_state  # decay, outer product update, C.h readout
    nbytes = float(
        batch * (2 * sc * d_state * state_e + e * (2 * sc + 2 * ngroups * d_state + 2 * nheads))
    )
    return flops, nbytes, {}


def conv1d_features(
    batch: int, seqlen: int, channels: int, kernel: int, e: int, with_state: bool = False
) -> Features:
    """Causal depthwise conv; ``with_state`` adds the decode conv-state read + write.

    A prompt pass (``with_state=False``) also counts sequences x channels: the
    varlen kernel sets up every channel of each sequence (NVIDIA's tables: ~1 ns per
    sequence-channel on H100, 0.7 ms for 64 one-token prompts of 10,240 channels).
    """
    flops = 2.0 * batch * seqlen * channels * kernel
    nbytes = e * (2 * batch * seqlen * channels + channels * kernel)
    if with_state:
        nbytes += e * 2 * batch * channels * kernel
        return flops, float(nbytes), {}
    return flops, float(nbytes), {"seq_channels": float(batch * channels)}


def elementwise_features(rows: int, width: int, e: int, passes: float = 2.0) -> Features:
    """An element-wise pass over rows x width touching ``passes`` tensors (RMSNorm: 2)."""
    return 4.0 * rows * width, float(e * (passes * rows * width + width)), {}


def allreduce_features(nbytes: float, n_gpus: int) -> Features:
    """A ring all-reduce of ``nbytes`` per GPU: each GPU sends and receives 2 (n-1)/n of it."""
    return 0.0, 2.0 * (n_gpus - 1) / n_gpus * float(nbytes), {}


def copy_features(nbytes: float, kernel: str) -> Features:
    """A copy of ``nbytes``; device-to-device counts the read and the write."""
    moved = 2.0 * nbytes if kernel == "copy_d2d" else float(nbytes)
    return 0.0, moved, {}


# ---------------------------------------------------------------- evaluation
def smooth_max(a: float, b: float, p: float) -> float:
    """(a^p + b^p)^(1/p) for a, b >= 0: between max(a, b) and a + b."""
    if a <= 0.0:
        return b
    if b <= 0.0:
        return a
    m = a if a > b else b
    return m * ((a / m) ** p + (b / m) ** p) ** (1.0 / p)


def predict(
    kernel: str,
    params: dict[str, float],
    peaks: dict[str, float],
    flops: float,
    nbytes: float,
    extras: dict[str, float] | None = None,
) -> float:
    """Seconds for one launch of ``kernel`` with these features."""
    return compile_kernel(kernel, params, peaks)(flops, nbytes, extras or {})


def compile_kernel(
    kernel: str, params: dict[str, float], peaks: dict[str, float]
) -> Callable[[float, float, dict[str, float]], float]:
    """A fast closure ``(flops, bytes, extras) -> seconds`` with the constants folded."""
    f = get_formula(kernel)
    missing = [p for p in f.param_names if p not in params]
    if missing:
        raise TwinError(f"kernel {kernel!r}: profile lacks parameter(s) {', '.join(missing)}")
    t0 = float(params["t0_s"])
    inv_b = 1.0 / (float(params["eff_bytes"]) * float(peaks[f.bytes_peak]))
    coeffs = [(x, float(params[f"c_{x}"])) for x in f.extras]
    if not f.uses_flops:

        def bandwidth(flops: float, nbytes: float, extras: dict[str, float]) -> float:
            return t0 + nbytes * inv_b

        return bandwidth
    inv_f = 1.0 / (float(params["eff_flops"]) * float(peaks[f.flops_peak]))
    p = float(params["p"])

    def roofline(flops: float, nbytes: float, extras: dict[str, float]) -> float:
        compute = flops * inv_f
        for name, c in coeffs:
            compute += c * extras.get(name, 0.0)
        return t0 + smooth_max(compute, nbytes * inv_b, p)

    return roofline


def compile_fast(
    kernel: str, params: dict[str, float], peaks: dict[str, float]
) -> Callable[..., float]:
    """Like ``compile_kernel`` but ``(flops, bytes, x=0, y=0)`` with ``x``, ``y`` the
    kernel's extra features in formula order: no dict per call, for the cost model."""
    return _compile_pair(kernel, params, peaks)[0]


def compile_many(
    kernel: str, params: dict[str, float], peaks: dict[str, float]
) -> Callable[..., np.ndarray]:
    """``compile_fast`` over arrays of features: one price per element, each equal to the
    scalar one to the bit (the same operations in the same order, and the same ``pow``:
    Python's, not numpy's, whose SIMD versions may round differently). For runs of
    decode steps (``CostModel.decode_steps_s``)."""
    return _compile_pair(kernel, params, peaks)[1]


def _compile_pair(
    kernel: str, params: dict[str, float], peaks: dict[str, float]
) -> tuple[Callable[..., float], Callable[..., np.ndarray]]:
    """The scalar and the array form of one kernel's model (one set of constants)."""
    f = get_formula(kernel)
    assert len(f.extras) <= 2, "compile_fast handles at most two extra features"
    compile_kernel(kernel, params, peaks)  # validates the parameters
    t0 = float(params["t0_s"])
    inv_b = 1.0 / (float(params["eff_bytes"]) * float(peaks[f.bytes_peak]))
    if not f.uses_flops:

        def bandwidth_many(flops: Any, nbytes: Any, x: Any = 0.0, y: Any = 0.0) -> np.ndarray:
            b = np.asarray(nbytes, np.float64) * inv_b
            return t0 + np.broadcast_arrays(b, np.asarray(flops))[0]

        return (lambda flops, nbytes, x=0.0, y=0.0: t0 + nbytes * inv_b), bandwidth_many
    inv_f = 1.0 / (float(params["eff_flops"]) * float(peaks[f.flops_peak]))
    p = float(params["p"])
    inv_p = 1.0 / p
    cx, cy = _coefficients(f, params)

    def fast(flops: float, nbytes: float, x: float = 0.0, y: float = 0.0) -> float:
        a = flops * inv_f + cx * x + cy * y
        b = nbytes * inv_b
        if a <= 0.0:
            return t0 + b
        if b <= 0.0:
            return t0 + a
        m = a if a > b else b
        return t0 + m * ((a / m) ** p + (b / m) ** p) ** inv_p

    def many(flops: Any, nbytes: Any, x: Any = 0.0, y: Any = 0.0) -> np.ndarray:
        a = np.asarray(flops, np.float64) * inv_f + cx * x + cy * y
        b = np.asarray(nbytes, np.float64) * inv_b
        if a.shape != b.shape:
            a, b = np.broadcast_arrays(a, b)
        m = np.maximum(a, b)  # ``a if a > b else b``: equal values, no NaN
        lo = np.minimum(a, b)
        edge = lo.min(initial=1.0) <= 0.0
        if edge:  # ratios only where both sides are positive (the rest: ``fast``'s branches)
            both = lo > 0.0
            lo, m = np.where(both, lo, 1.0), np.where(both, m, 1.0)
        # The larger side's ratio is exactly 1.0 and 1.0 ** p == 1.0, so ``fast``'s
        # ``(a/m)**p + (b/m)**p`` is ``1.0 + (lo/m)**p`` to the bit (+ commutes).
        n = m.size
        ratios = (lo / m).ravel().tolist()
        norms = map((1.0).__add__, map(pow, ratios, repeat(p)))
        root = np.fromiter(map(pow, norms, repeat(inv_p)), np.float64, n)
        out = t0 + m * root.reshape(m.shape)
        if edge:
            out = np.where(a <= 0.0, t0 + b, np.where(b <= 0.0, t0 + a, out))
        return out

    return fast, many


def _coefficients(f: KernelFormula, params: dict[str, float]) -> tuple[float, float]:
    """The extra features' coefficients in formula order, padded with zeros to two."""
    cs = [*(float(params[f"c_{name}"]) for name in f.extras), 0.0, 0.0]
    return cs[0], cs[1]


def predict_many(
    kernel: str,
    params: dict[str, float],
    peaks: dict[str, float],
    flops: list[float],
    nbytes: list[float],
    extras: dict[str, list[float]] | None = None,
) -> list[float]:
    """``predict`` over columns of features (used by fitting reports and tests)."""
    fn = compile_kernel(kernel, params, peaks)
    ex = extras or {}
    return [
        fn(f, b, {k: v[i] for k, v in ex.items()})
        for i, (f, b) in enumerate(zip(flops, nbytes, strict=True))
    ]


def check_params(kernel: str, params: dict[str, float]) -> None:
    """Refuse a parameter set that would break monotonicity or divide by zero."""
    for name in get_formula(kernel).param_names:
        v = params.get(name)
        if v is None or not math.isfinite(v) or v < 0:
            raise TwinError(
                f"kernel {kernel!r}: parameter {name} must be finite and >= 0 (got {v!r})"
            )
    for name in ("eff_flops", "eff_bytes"):
        if name in params and params[name] <= 0:
            raise TwinError(f"kernel {kernel!r}: {name} must be positive")
    if "p" in params and params["p"] < 1:
        raise TwinError(f"kernel {kernel!r}: smooth-max exponent p must be >= 1")


__all__ = [
    "FORMULAS",
    "KERNELS",
    "OPTIONAL",
    "Features",
    "KernelFormula",
    "allreduce_features",
    "allreduce_kernel",
    "attn_decode_features",
    "attn_decode_sums",
    "attn_prefill_features",
    "attn_prefill_sums",
    "check_params",
    "compile_fast",
    "compile_kernel",
    "compile_many",
    "conv1d_features",
    "copy_features",
    "elementwise_features",
    "family",
    "gemm_features",
    "gemm_sums",
    "get_formula",
    "predict",
    "predict_many",
    "smooth_max",
    "ssm_scan_features",
    "ssm_scan_sums",
    "ssm_step_features",
]
