"""The collectives' families' names: the MoE all-to-all's (issue 34: DeepEP's modes and
phases, each family's profile key and terms), the lines of the all-reduce's and of NCCL's
all-gather / reduce-scatter (``KernelFormula.lines``), and the profile keys of the fits
stored per GPU count (``<op>_<n>gpu``) with the family each names (``family``). Their
formulas are in the registry, ``twin.costmodel.formulas``.
"""

from __future__ import annotations

import re

# MoE all-to-all (issue 34): the dispatch and the combine of expert parallelism's
# tokens, per DeepEP mode: ``ht`` (high-throughput, "normal": prefill batches) and ``ll``
# (low-latency: decode batches), as NVIDIA's ``moe_a2a_perf`` / ``wideep_deepep_*``
# tables time them (``calibration.aic_a2a``; features ``twin.costmodel.a2a``).
A2A_MODES = ("ht", "ll")
A2A_PHASES = ("dispatch", "combine")


def a2a_kernel(mode: str, phase: str) -> str:
    """The profile key of the all-to-all fit of DeepEP mode ``mode`` (``ht``, ``ll``) and
    ``phase`` (``dispatch``, ``combine``)."""
    return f"a2a_{mode}_{phase}"


# The terms each family adds to its byte time (``twin.costmodel.a2a``, where each is
# read from DeepEP's kernels): the high-throughput kernels' work per token of the rank,
# their hidden elements per token (the 20-SM budget's row copies and reductions), one
# row's (the smallest batch's warp copy) and the rows sent, a token's one per rank it
# reaches (each a warp's slot, copy and metadata: ``a2a.rank_rows``); the low-latency
# dispatch's per local expert, the rows one SM sends in series and the rows one warp of an
# expert's group receives in series (its launch: ``a2a.ll_launch``); the low-latency
# combine's per local expert and the rows one receiving group reduces in series, a token's
# top-k rows one TMA load after another (``a2a.ll_combine_slots``).
A2A_HT_EXTRAS = ("tokens", "token_elems", "row_elems", "rank_rows")
# Every all-to-all family is priced as the larger of a fitted floor and the formula
# (``KernelFormula.floor``, set for each below): the time a small batch's work hides under.
# - In DeepEP's kernels (73b6ea4) each receiver spins until every peer's signal has
#   arrived (``csrc/kernels/internode_ll.cu``: the dispatch's receive waits on
#   ``rdma_recv_count`` per source rank, the combine's on ``rdma_recv_flag``;
#   ``intranode.cu``'s ``notify_dispatch`` and ``barrier_block`` before the channels
#   run), while its own sends proceed: a small batch's sends hide under the slowest
#   peer's arrival, and the time is flat until the work outgrows that wait, then rises
#   (TensorRT-LLM 1.3.0rc11's H100 low-latency dispatch: ~70 us from 8 to 96 tokens).
# - vLLM's high-throughput dispatch adds the host's: its table times the whole
#   ``DeepEPHTPrepareAndFinalize.prepare`` between two CUDA events, eager (aiconfigurator
#   at 7d2513dc2, ``collector/wideep/vllm/collect_moe_a2a.py``), and that call holds the
#   host: ``buffer.dispatch(handle=None)`` without ``num_worst_tokens`` (vLLM 0.24.0
#   ``fused_moe/prepare_finalize/deepep_ht.py``) busy-waits on DeepEP's receive counter
#   until ``notify_dispatch`` has run (DeepEP 73b6ea4 ``csrc/deep_ep.cpp``
#   ``Buffer::intranode_dispatch``), then allocates and launches the rest; the end event
#   passes when the host has recorded it and the kernels before it are done. A serving
#   step's dispatch is the same eager call.
# A table with no such floor fits one below its fastest row, where it never binds.
A2A_EXTRAS = {
    a2a_kernel("ht", "dispatch"): A2A_HT_EXTRAS,
    a2a_kernel("ht", "combine"): A2A_HT_EXTRAS,
    a2a_kernel("ll", "dispatch"): ("local_experts", "sm_row_elems", "group_row_elems"),
    a2a_kernel("ll", "combine"): ("local_experts", "topk_rows"),
}


# The all-reduce families' lines (``KernelFormula.lines``): an all-reduce of B bytes a
# GPU is the least of ``t0_i + 2 (n-1)/n B / (eff_bytes_i * interconnect_bw)`` over the
# algorithms the engine picks among by message size, each with its own latency and
# bandwidth. The engines switch where one algorithm overtakes the next, so the least of
# the lines follows their switches without a threshold table per engine, release, GPU
# and GPU count:
# - SGLang and vLLM's custom all-reduce: the one-shot kernel (every rank reads all its
#   peers' buffers, (n-1) B) below 512 KB at 4 GPUs and 256 KB at 8, at every size at 2;
#   the two-shot kernel (reduce-scatter then all-gather, the ring's bytes) above (vLLM
#   ``csrc/custom_all_reduce.cuh`` ``CustomAllreduce::allreduce``; SGLang's
#   ``sgl-kernel/csrc/allreduce/custom_all_reduce.cuh`` the same rule); NCCL from the
#   custom all-reduce's largest size (SGLang ``distributed/device_communicators/
#   custom_all_reduce.py`` ``_MAX_CAR_SIZE`` 8 MiB on CUDA, called the NCCL crossover
#   there; vLLM ``all_reduce_utils.py`` ``CUSTOM_ALL_REDUCE_MAX_SIZES``, then its
#   symmetric-memory all-reduce to ``SYMM_MEM_ALL_REDUCE_MAX_SIZES``, then NCCL);
# - TensorRT-LLM's ``AllReduceStrategy.AUTO``: one-shot, two-shot (Lamport kernels) or
#   NCCL from its strategy table by size (``thop/allreduceOp.cpp`` ``selectImplementation``;
#   NVIDIA's collector times AUTO with the autotuner off: aiconfigurator
#   ``collector/network/collect_all_reduce.py``);
# - NCCL alone: its tuner prices every algorithm and protocol as a latency plus bytes
#   over a bandwidth and runs the least (``src/graph/tuning.cc`` ``ncclTopoGetAlgoTime``;
#   three protocols: LL, LL128, Simple).
# The one-shot kernel's (n-1) B is n/2 times the ring's bytes at a fixed GPU count (one
# fit per count), so its line's efficiency is fitted on the ring's bytes as the others'.
# Up to three lines, not one per named algorithm: a fit places them where the table bends,
# and on a table with fewer regimes a line may never be the least over the tables' sizes
# (47 of the 211 shipped all-reduce fits; session 35's review), its parameters then
# meaningless on their own. Tables, per family: ``benchmarks/results/ar35-s35/``
# (docs/decisions.md, "Issue 34, step: the all-reduce families as the least of three lines").
ALLREDUCE_LINES = 3

# NCCL's all-gather and reduce-scatter families' lines (``KernelFormula.lines``), the same
# form on the ring's bytes, ``(n-1)/n B`` a GPU: NCCL's tuner prices each algorithm x
# protocol it may run as a latency plus the bytes over a bandwidth and runs the least
# (NCCL v2.29.2-1 and v2.30.7-1 ``src/graph/tuning.cc``: ``ncclTopoTuneModel`` fills
# ``latencies`` / ``bandwidths``, ``ncclTopoGetAlgoTime`` is ``lat + bytes / bw``). Within
# one node it may run, for these two collectives, the ring with its three protocols (LL,
# LL128, Simple) and NVLS with Simple where the switch has it (PAT needs one GPU a node;
# CollNet a network): up to four lines. Three, as the all-reduce's: NVLS and the ring's
# Simple are both the large messages' regime, and a fit places the lines where the table
# bends
# (docs/decisions.md, "Issue 34, step: NCCL's all-gather and reduce-scatter as the least
# of three lines").
GATHER_LINES = 3


_PER_GPU_COUNT = re.compile(r"^(allreduce_nccl|allreduce|allgather|reducescatter)_(\d+)gpu$")


def allreduce_kernel(n_gpus: int) -> str:
    """The profile key of the all-reduce fit for ``n_gpus`` GPUs."""
    return collective_kernel("allreduce", n_gpus)


def is_allreduce_kernel(name: str) -> bool:
    """Whether profile key ``name`` is an engine's all-reduce fit (:func:`allreduce_kernel`
    of some GPU count; not NCCL's alone, :func:`nccl_allreduce_kernel`)."""
    return re.fullmatch(r"allreduce_\d+gpu", name) is not None


def collective_kernel(op: str, n_gpus: int) -> str:
    """The profile key of collective ``op``'s fit (``allreduce``, ``allgather``,
    ``reducescatter``) for ``n_gpus`` GPUs."""
    return f"{op}_{n_gpus}gpu"


def nccl_allreduce_kernel(n_gpus: int) -> str:
    """The profile key of NCCL's all-reduce fit for ``n_gpus`` GPUs."""
    return collective_kernel("allreduce_nccl", n_gpus)


def family(kernel: str) -> str:
    """The formula family of a profile key: ``allreduce_8gpu`` -> ``allreduce``."""
    m = _PER_GPU_COUNT.match(kernel)
    return m.group(1) if m else kernel


__all__ = [
    "A2A_EXTRAS",
    "A2A_HT_EXTRAS",
    "A2A_MODES",
    "A2A_PHASES",
    "ALLREDUCE_LINES",
    "GATHER_LINES",
    "a2a_kernel",
    "allreduce_kernel",
    "collective_kernel",
    "family",
    "is_allreduce_kernel",
    "nccl_allreduce_kernel",
]
