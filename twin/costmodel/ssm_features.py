"""Features of the state-space mixers' kernels: the SSD scan, its decode step, the causal conv1d.

Each returns ``(flops, bytes, {extra: value})`` as ``twin.costmodel.features``' functions do
(the extras named in ``twin.costmodel.formulas.FORMULAS``); ``ssm_scan_sums`` the same summed
over a batched launch's sequences. The conv's launch rules (its CTAs and their waves) are read
from the kernel's source, cited above them. Pure Python.
"""

from __future__ import annotations

from twin.costmodel.features import Features, replay_l2


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
    flops, nbytes = ssm_step_sums(batch, nheads, headdim, d_state, ngroups, e, state_e)
    return flops, nbytes, {}


def ssm_step_sums(
    batch: int, nheads: int, headdim: int, d_state: int, ngroups: int, e: int, state_e: int
) -> tuple[float, float]:
    """(FLOPs, bytes) of :func:`ssm_step_features`."""
    sc = nheads * headdim
    flops = 6.0 * batch * sc * d_state  # decay, outer product update, C.h readout
    nbytes = float(
        batch * (2 * sc * d_state * state_e + e * (2 * sc + 2 * ngroups * d_state + 2 * nheads))
    )
    return flops, nbytes


# The causal conv1d's launches (TensorRT-LLM 1.3.0rc20's copy of Dao-AILab causal-conv1d,
# ``cpp/tensorrt_llm/kernels/causalConv1d/causalConv1d.cu``, read at NVIDIA/TensorRT-LLM
# 0c8de69; the same code as sgl-kernel's CUDA copy, which SGLang serves). vLLM serves its
# own Triton port instead (``vllm/model_executor/layers/mamba/ops/causal_conv1d.py``
# ``_causal_conv1d_fwd_kernel``, vllm-project/vllm as stored), whose launch this does not
# read: its prices take this kernel's fit and terms, as every engine's conv did before
# (review38, session 38; left to the lead). The prompt pass:
# ``causal_conv1d_fwd_launch`` grid ``(batch, dim)``, one CTA of 128 threads per (sequence,
# channel), 8 bf16 elements a thread, so 1,024 tokens a loop iteration; vectorised loads
# only when ``seqlen % 8 == 0`` and the call is not varlen (``kIsVecLoad``), else cub's
# warp-transposed loads and stores through shared memory. The decode update:
# ``causal_conv1d_update_launch`` grid ``(batch, ceil(dim / 64))``, 64 threads, a thread
# per channel.
CONV_VEC_ELEMS = 8
CONV_UPDATE_THREADS = 64
# Resident 64-thread CTAs an SM holds: 32 (the block limit of compute capability 8.0, 9.0
# and 10.0, 2,048 threads; sm_89 / sm_120 hold 24, an approximation the fit's
# ``c_cta_waves`` scales; NVIDIA's CUDA C++ Programming Guide, "Technical Specifications
# per Compute Capability": maximum resident blocks and threads per SM).
CONV_UPDATE_RESIDENT = 32


def conv_update_waves(batch: int, channels: int, sms: int | None) -> float:
    """Waves of the decode update's 64-thread CTAs (grid ``(batch, ceil(channels / 64))``)
    over ``sms`` SMs of ``CONV_UPDATE_RESIDENT`` slots, fractional above one:
    ``max(1, CTAs / slots)``; 0 without an SM count. Not rounded up: a CTA loads its
    channel's ``width - 1`` state elements and one input, stores as many, and retires, so the
    block scheduler refills a slot as each retires and the last, partial wave costs about a
    CTA's lifetime, not a whole wave's (a GEMM tile's long-lived CTAs are what
    ``features.tile_waves``' ceiling counts). A launch of fewer CTAs than slots still takes
    one CTA's lifetime: one wave. Chosen on the tables' train rows over the ceiling
    (docs/decisions.md, issue 34, helper upd39: mean over the 8 GPUs of train median / P90
    5.3 / 14.0 -> 4.4 / 14.1%)."""
    if not sms:
        return 0.0
    ctas = batch * -(-channels // CONV_UPDATE_THREADS)
    return max(1.0, ctas / (sms * CONV_UPDATE_RESIDENT))


def conv1d_features(
    batch: int,
    seqlen: int,
    channels: int,
    kernel: int,
    e: int,
    with_state: bool = False,
    sms: int | None = None,
    sequences: int | None = None,
    l2_bytes: float | None = None,
) -> Features:
    """Causal depthwise conv; ``with_state`` adds the decode conv-state read + write.

    A prompt pass (``with_state=False``) counts its CTAs, one per sequence x channel
    (``seq_channels``; ~1 ns each on H100), and those of them that run the kernel's
    unvectorised load path (``unaligned_ctas``: every CTA of a varlen call, else of a
    length not a multiple of 8; NVIDIA's tables: 1-4 token prompts ~1.3x the cost of 8-512
    token ones, which cost the same). ``sequences``: a varlen call (the engines' serving
    call, ``query_start_loc`` set) of that many sequences packed into ``batch x seqlen``
    tokens. A decode update counts the waves of its 64-thread CTAs over ``sms`` SMs
    (``cta_waves``, :func:`conv_update_waves`: fractional above one; 0 without an SM
    count), and the bytes a kernel table's replays read
    from an L2 of ``l2_bytes`` (``l2_bytes``, on the compute side; the HBM bytes then 0):
    NVIDIA's collector (ai-dynamo/aiconfigurator ``collector/trtllm/collect_mamba2.py``,
    ``run_mamba2_generation_benchmark``, through ``collector/helper.py``
    ``benchmark_with_power``, read at 9a0cf44d) captures one ``causal_conv1d_update`` call
    in a CUDA graph (its input pool's index is read once, at capture) and replays it, so
    the same ``x``, output, weight and ``conv_state`` every replay; where those buffers
    (the state, read and written in place, counted once) fit (``replay_l2``, the rule of
    ``mla_features.kernel_replay_l2``) every byte comes from L2. ``l2_bytes`` None (a
    serving step: a layer's state was last touched a forward pass earlier): 0, the HBM
    bytes as before.
    """
    flops, nbytes = conv1d_sums(batch, seqlen, channels, kernel, e, with_state)
    if with_state:
        waves = conv_update_waves(batch, channels, sms)
        buffers = e * (2 * batch * channels + channels * kernel + batch * channels * (kernel - 1))
        hbm, l2 = replay_l2(float(nbytes), l2_bytes, float(buffers))
        return flops, hbm, {"cta_waves": float(waves), "l2_bytes": l2}
    ctas, unaligned = conv1d_ctas(batch, seqlen, channels, sequences)
    return flops, float(nbytes), {"seq_channels": ctas, "unaligned_ctas": unaligned}


def conv1d_sums(
    batch: int, seqlen: int, channels: int, kernel: int, e: int, with_state: bool
) -> tuple[float, int]:
    """(FLOPs, bytes) of :func:`conv1d_features` (its bytes an integer: from HBM in
    serving, ``l2_bytes`` None)."""
    flops = 2.0 * batch * seqlen * channels * kernel
    nbytes = e * (2 * batch * seqlen * channels + channels * kernel)
    if with_state:
        nbytes += e * 2 * batch * channels * kernel
    return flops, nbytes


def conv1d_ctas(
    batch: int, seqlen: int, channels: int, sequences: int | None
) -> tuple[float, float]:
    """A prompt pass's CTAs and those of them unaligned (:func:`conv1d_features`'
    ``seq_channels``, ``unaligned_ctas``): one per sequence x channel, all of them unaligned
    in a varlen call (``sequences`` not None) or at a length not a multiple of 8."""
    ctas = float((batch if sequences is None else sequences) * channels)
    unaligned = sequences is not None or seqlen % CONV_VEC_ELEMS != 0
    return ctas, ctas * unaligned


__all__ = [
    "conv1d_ctas",
    "conv1d_features",
    "conv1d_sums",
    "conv_update_waves",
    "ssm_scan_features",
    "ssm_scan_sums",
    "ssm_step_features",
    "ssm_step_sums",
]
