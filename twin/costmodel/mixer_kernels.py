"""Kernels of the Mamba-1 and Gated DeltaNet mixers (issue 13): features and fallbacks.

Features follow ``twin.costmodel.features`` (FLOPs, the fewest bytes moved, extras)
and count FLOPs as ``twin.mixers`` does, so a kernel's FLOPs over a prompt equal the
model's. A profile that carries no fit for one of these families (every shipped
profile today: NVIDIA's tables time neither, and no GPU was at hand) is priced with
``FALLBACK``: a datasheet roofline at assumed efficiencies, labelled as such.

Mamba-1's selective scan (mamba_ssm ``csrc/selective_scan``; its decode step,
``ops/triton/selective_state_update.py``) runs its recurrence in fp32 on CUDA cores,
not tensor cores: its compute time divides by the GPU's fp32 (non-tensor) peak,
``fp32_flops``. The GDN kernels of flash-linear-attention (``fla/ops/gated_delta_rule``)
do their chunk products with ``tl.dot`` on tensor cores.
"""

from __future__ import annotations

from twin.costmodel.profile import Profile
from twin.hardware import GPUS
from twin.mixers import gdn_chunk_flops_per_head, mamba1_scan_flops_per_channel

# The datasheet profiles' assumptions (``twin.calibration.datasheet``), the mixers' too:
# the roofline's smooth-max exponent, assumed 4 (within ~19% of a hard max at the ridge
# point, exact away from it); the launch overhead of one CUDA kernel seen from a stream,
# assumed 5 us (eager PyTorch launches are a few microseconds each).
_P = 4.0
_T0 = 5e-6
# Tensor to fp32 CUDA-core peak ratio when a device has no fp32 figure: A100 312 / 19.5
# = 16 (datasheet); assumed for devices we have no sheet for.
FP32_RATIO = 16.0

FALLBACK: dict[str, dict[str, float]] = {
    # One selective_scan_fwd kernel; efficiencies assumed (a sequential scan over
    # d_state per channel: half the fp32 peak, half the HBM bandwidth).
    "mamba1_scan": {"t0_s": _T0, "eff_flops": 0.5, "eff_bytes": 0.5, "p": _P},
    "mamba1_step": {"t0_s": _T0, "eff_flops": 0.1, "eff_bytes": 0.5, "p": _P},  # as ssm_step
    # chunk_gated_delta_rule_fwd launches six kernels (chunk_local_cumsum,
    # chunk_scaled_dot_kkt, solve_tril, recompute_w_u, chunk_fwd_h, chunk_fwd_o):
    # 6 x t0; efficiencies assumed as for Mamba2's chunk scan (small matmuls).
    "gdn_chunk": {"t0_s": 6 * _T0, "eff_flops": 0.3, "eff_bytes": 0.5, "p": _P, "c_chunks": 0.0},
    "gdn_step": {"t0_s": _T0, "eff_flops": 0.1, "eff_bytes": 0.5, "p": _P},  # as ssm_step
}
# The GDN chunk fallback's two measured terms per GPU: NVIDIA's timings of SGLang 0.5.14's
# ``chunk_gated_delta_rule`` (aiconfigurator-core 0.12.0, ``systems/data/<gpu>/
# linear_attention/sglang/0.5.14/gdn_perf.parquet``; the same FLA Triton kernels that
# SGLang 0.5.9 vendors in ``layers/attention/fla/chunk.py`` and runs for every extend but
# a target verify, ``hybrid_linear_attn_backend.py`` ``GDNAttnBackend.forward_extend``).
# The roofline above alone prices 0.40-0.47 of those rows: the chunks of one sequence run
# one after another (``chunk_gated_delta_rule_fwd_h`` loops over them), so a long prompt
# takes about ``GDN_CHUNK_SEQ_S`` a chunk whatever its heads, and many sequences together
# cost about ``GDN_CHUNK_HEAD_S`` per chunk and value head on the compute side. The price
# is the larger of the two (``gdn_chunk_s``). Fitted on Qwen3.5-397B-A17B's tp 4 and tp 8
# shapes (16 and 8 value heads), every batch size, 1,024-65,536 tokens, 96 rows per GPU,
# least mean APE on a grid (``benchmarks/results/moe-prefill/fit_gdn_chunk.py``): mean APE
# B200 7%, B300 9%, GB200 11% (H200 29%: its table times 16 heads at 2.7x 8 heads at
# 8,192 tokens, which neither term follows). A GPU without a table keeps the roofline.
GDN_CHUNK_HEAD_S: dict[str, float] = {
    "b200": 0.90e-7,
    "b300": 0.95e-7,
    "gb200": 1.10e-7,
    "h200": 1.40e-7,
}
GDN_CHUNK_SEQ_S: dict[str, float] = {
    "b200": 3.3e-6,
    "b300": 3.2e-6,
    "gb200": 3.5e-6,
    "h200": 2.7e-6,
}


def fallback_params(name: str, gpu: str) -> dict[str, float]:
    """``FALLBACK[name]`` for a profile of ``gpu``: the GDN chunk kernel with its measured
    time per chunk and value head where ``GDN_CHUNK_HEAD_S`` has the GPU."""
    params = FALLBACK[name]
    if name == "gdn_chunk" and gpu in GDN_CHUNK_HEAD_S:
        return {**params, "c_chunks": GDN_CHUNK_HEAD_S[gpu]}
    return params


def gdn_chunk_s(kernel_s: float, depth: int, seq_s: float) -> float:
    """Seconds of a GDN chunk call: its kernel's price, or the sequential pass over the
    ``depth`` chunks of its longest prompt at ``seq_s`` a chunk where that is longer."""
    return max(kernel_s, seq_s * depth)


def _peak(profile: Profile, key: str, sheet: float | None, ratio: float) -> float:
    """The profile's own ``key`` peak, else the datasheet's (``sheet``), else the tensor
    peak / ``ratio`` (the CPU profile: the same peak)."""
    if key in profile.peaks:
        return float(profile.peaks[key])
    if sheet:
        return float(sheet)
    if profile.gpu == "cpu":
        return float(profile.peaks["flops"])
    return float(profile.peaks["flops"]) / ratio


def fp32_peak(profile: Profile) -> float:
    """FP32 CUDA-core FLOP/s of the profile's device: its own peak, the datasheet's, or
    the tensor peak / ``FP32_RATIO``."""
    spec = GPUS.get(profile.gpu)
    return _peak(profile, "fp32_flops", spec.fp32_flops if spec else None, FP32_RATIO)


def tf32_peak(profile: Profile) -> float:
    """Dense TF32 tensor-core FLOP/s of the profile's device: its own ``tf32_flops`` peak,
    the datasheet's (``GpuSpec.tf32_flops``), or half the FP16/BF16 tensor peak (every
    sheet of ``twin.hardware`` that gives TF32 gives half)."""
    spec = GPUS.get(profile.gpu)
    return _peak(profile, "tf32_flops", spec.tf32_flops if spec else None, 2.0)


def mamba1_scan_sums(
    tokens: float, channels: int, d_state: int, e: int
) -> tuple[float, float, float]:
    """(FLOPs, bytes, 0) of a selective scan over ``tokens`` prompt tokens.

    Bytes per token: u, delta, z in and y out (``channels`` each) plus B and C
    (``d_state`` each) at ``e`` bytes; A (fp32) read once per launch.
    """
    flops = tokens * channels * mamba1_scan_flops_per_channel(d_state)
    nbytes = e * tokens * (4.0 * channels + 2.0 * d_state) + 4.0 * channels * d_state
    return float(flops), float(nbytes), 0.0


def mamba1_step_features(
    batch: int, channels: int, d_state: int, e: int, state_e: int
) -> tuple[float, float]:
    """(FLOPs, bytes) of one decode token per sequence: each state read and written once."""
    flops = batch * channels * mamba1_scan_flops_per_channel(d_state)
    nbytes = batch * (2 * channels * d_state * state_e + e * (4 * channels + 2 * d_state))
    return float(flops), float(nbytes)


def gdn_chunk_sums(
    tokens: float,
    n_chunks: float,
    v_heads: int,
    k_heads: int,
    k_dim: int,
    v_dim: int,
    chunk: int,
    e: int,
) -> tuple[float, float, float]:
    """(FLOPs, bytes, chunks x heads) of the chunked delta rule over ``n_chunks`` chunks.

    FLOPs over whole chunks (a last partial chunk is computed padded), per value head as
    ``twin.mixers.gdn_chunk_flops_per_head``. Bytes: q, k, v, the gate and beta in and o
    out per token, plus one fp32 state per chunk and head written and read back.
    """
    flops = n_chunks * chunk * v_heads * gdn_chunk_flops_per_head(k_dim, v_dim, chunk)
    io = 2 * k_heads * k_dim + 2 * v_heads * v_dim + 2 * v_heads
    nbytes = e * tokens * io + 8.0 * n_chunks * v_heads * k_dim * v_dim
    return float(flops), float(nbytes), float(n_chunks * v_heads)


def gdn_step_features(
    batch: int, v_heads: int, k_heads: int, k_dim: int, v_dim: int, e: int, state_e: int
) -> tuple[float, float]:
    """(FLOPs, bytes) of one decode token per sequence.

    Per value head: decay the state, read it against k, the rank-one delta update and
    the readout against q: four k_dim x v_dim passes (2 FLOPs each, 8 in all).
    """
    flops = batch * v_heads * 8 * k_dim * v_dim
    state = 2 * v_heads * k_dim * v_dim * state_e  # read + write
    io = e * (2 * k_heads * k_dim + 2 * v_heads * v_dim + 2 * v_heads)
    return float(flops), float(batch * (state + io))
