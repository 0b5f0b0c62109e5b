"""The rank a ``moe_perf`` table's balanced row times, as aiconfigurator's vLLM collector
routes it.

The collector routes every token with ``helper.balanced_logits`` over all the model's
experts (ai-dynamo/aiconfigurator 095f58a51, ``collector/helper.py``: token ``i``'s
``j``-th expert is ``(i + j * stride) % E`` with ``stride = ceil(E / topk)`` from
``stride`` tokens up, ``(i * stride / tokens + j * stride) % E`` below) and times the
fused MoE of EP rank 0 (``collector/vllm/collect_moe.py``: one ``FusedMoE`` of the global
expert count, vLLM's linear expert placement: rank 0 holds experts ``0 .. E / ep - 1``).
Rank 0 always holds token 0's first expert, so a row of fewer routed rows than ranks
still times one expert's weights: NVIDIA's L40S vLLM 0.24.0 bf16 table, 6,144 x 3,072
experts, 128 of them, top-4, EP 8: 180 us at 1 token and at 2 (one expert each), where
the mean rank (``routing.Balanced``) holds half an expert at 1 token.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from twin.costmodel.moe_features import SGLANG_MARLIN_SOURCES, SGLANG_TRITON_SOURCE
from twin.costmodel.routing import ROUTINGS, RankLoad

# The kernel sources of the vLLM collector's rows (``collect_moe.py`` logs ``vllm_<method>``).
VLLM_SOURCE_PREFIX = "vllm_"
# The SGLang collector's rows timed on rank 0's workload: its Triton label
# (``moe_features.SGLANG_TRITON_SOURCE``) and the table modes it runs that way
# (ai-dynamo/aiconfigurator 095f58a51 ``collector/sglang/collect_moe.py``): bf16 and fp8-block
# through ``fused_moe`` (``build_rank0_workloads`` under ``moe_ep_size > 1``, the same routing
# as the vLLM collector's rank 0 above), mxfp4 through the framework layer
# (``_benchmark_framework_quantized_moe``: every token's balanced logits over the global
# experts, the layer built as EP rank 0, ``_patch_framework_moe_parallel(moe_ep_rank=0)``, so
# it computes rank 0's experts' rows; SGLang's Triton runner upcasts those experts to bf16,
# ``moe_features.sglang_upcast_experts``). The framework layer clamps nothing
# (``sglang_clamped_rows`` is the collector's own ``fused_moe`` call); its tables are 0.5.14's.
# Chosen on the fit rows (docs/decisions.md, issue 34, helper ``moe37b``, session 37).
SGLANG_RANK0_MODES = frozenset({"bfloat16", "fp8_block", "w4a16_mxfp4"})
# SGLang's Marlin rows (``moe_features.SGLANG_MARLIN_SOURCES``, every table mode: ``int4_wo`` and
# ``w4a16_mxfp4``) under EP are rank 0's workload in both releases the tables hold. 0.5.10
# (ai-dynamo/aiconfigurator cb4d907c7 ``collector/sglang/collect_moe.py``, the A100 / H100 /
# H200 int4 tables): ``run_moe_torch`` builds ``build_rank0_workloads`` under ``moe_ep_size >
# 1`` and ``benchmark_config`` runs ``fused_marlin_moe`` on the rank's ``E / ep`` experts with
# ``topk_ids.clamp(min=0)``, the masked slots on local expert 0 (``sglang_clamped_rows``, read
# where the release is in ``SGLANG_CLAMPED_RELEASES``). 0.5.14 (e23be5a79 and 095f58a51, the
# H100 / H200 / L40S / RTX PRO 6000 int4 tables and RTX PRO 6000's mxfp4): ``int4_wo`` and
# ``w4a16_mxfp4`` take ``_benchmark_framework_quantized_moe`` (``use_framework_layer``), whose
# ``FusedMoE`` is built under ``_patch_framework_moe_parallel`` with ``moe_ep_rank=0`` and
# labelled ``source_by_backend["marlin"]`` = ``sglang_marlin_moe``; every token is launched
# and no clamp is the collector's (as for its mxfp4 Triton rows above). Docs/decisions.md,
# issue 34, helper ``marlin38``, session 38.


def sglang_rank0_row(source: str, mode: str, ep: int) -> bool:
    """Whether the SGLang collector timed a row (kernel source ``source``, table mode
    ``mode``, ``ep`` ranks) on rank 0's workload (above): its Triton rows of
    ``SGLANG_RANK0_MODES`` and its Marlin rows of every mode, under EP."""
    rank0 = (
        source == SGLANG_TRITON_SOURCE and mode in SGLANG_RANK0_MODES
    ) or source in SGLANG_MARLIN_SOURCES
    return rank0 and ep > 1


def _balanced_experts(tokens: int, n_experts: int, top_k: int) -> np.ndarray:
    """The collector's balanced routing: each token's ``top_k`` experts (above)."""
    stride = math.ceil(n_experts / top_k)
    i = np.arange(tokens)[:, None]
    j = np.arange(top_k)[None, :]
    if tokens >= stride:
        return (i + j * stride) % n_experts
    # torch's true division, then ``.long()`` (truncation) after the modulo
    return np.floor((i * stride / tokens + j * stride) % n_experts).astype(np.int64)


@functools.lru_cache(maxsize=65536)
def collector_rank0_load(tokens: int, n_experts: int, top_k: int, ep: int) -> RankLoad:
    """(rows, distinct experts) of EP rank 0 under the collector's balanced routing."""
    experts = _balanced_experts(tokens, n_experts, top_k)
    mine = experts[experts < n_experts // ep]
    return RankLoad(float(mine.size), float(np.unique(mine).size))


# The SGLang table releases whose rank-0 rows ran the clamp below as computed rows. Its
# signature: rank 0 launches every one of its tokens' top-k slots, so while every token
# holds one of rank 0's experts (``E / ep`` at least the routing's stride ``E / topk``)
# the time does not fall with EP. NVIDIA's A100 SGLang 0.5.10 bf16 table, 2,048 x 768
# experts, 128, top 8, 16,384 tokens: 12.1 / 11.9 / 11.9 / 11.7 ms at EP 1 / 2 / 4 / 8,
# 5.3 at EP 16 (half the tokens); H200 0.5.10 fp8-block, 7,168 x 2,048, 256, top 8,
# 16,384 tokens: 17.1 / 16.5 / 16.5 / 16.3 ms at EP 1-8, 9.2 at EP 16. The 0.5.14 tables
# fall with EP instead (L40S, 4,096 x 2,048, 256, top 8, 8,192 tokens: 34.8 / 19.1 /
# 11.3 / 7.4 ms at EP 1 / 2 / 4 / 8), and would run above the dense bf16 peak were the
# slots computed (L40S 448-732 TFLOP/s against 362, RTX PRO 6000 529-717 against 468):
# their rows did not compute them, whatever the collector's source says (docs/decisions.md,
# helper ``moe32``, session 32). Regenerated on this reading: A100 ``moe``; H200's 0.5.10
# ``moe_fp8_block`` fit is kept as fitted before it (its refit moves the served H200 SGLang
# rows the wrong way: the same section).
SGLANG_CLAMPED_RELEASES = frozenset({"0.5.10"})


@functools.lru_cache(maxsize=65536)
def sglang_clamped_rows(tokens: int, n_experts: int, top_k: int, ep: int) -> float:
    """The rows the SGLang collector's rank-0 launch computes on rank 0's expert 0 for the
    slots of its tokens routed off the rank. ``build_rank0_local_workload``
    (``collector/helper.py``) keeps the tokens with an expert among rank 0's ``E / ep``
    and sets their other slots' expert to -1 and weight to 0; ``benchmark_config``
    (``collector/sglang/collect_moe.py``, ai-dynamo/aiconfigurator cb4d907c7 and
    e23be5a79, the commits that collected the 0.5.10 and 0.5.14 tables, and 095f58a51)
    passes ``topk_ids.clamp(min=0)`` to ``fused_moe`` ("The Triton fused_moe kernel
    indexes weight tensors by expert ID without masking, so clamp -1 to 0; the zero
    weight still ensures no contribution"): every masked slot is a row of local expert
    0, computed through both GEMMs. So the launch runs its tokens x ``top_k`` rows, the
    rank's own (``collector_rank0_load``) plus these on one expert, in the tables of
    ``SGLANG_CLAMPED_RELEASES``; a serving rank's remote slots are skipped instead."""
    local = _balanced_experts(tokens, n_experts, top_k) < n_experts // ep
    return float(local.any(axis=1).sum() * top_k - local.sum())


def table_rank_load(
    source: str, tokens: int, n_experts: int, top_k: int, ep: int, sglang_rank0: bool = False
) -> RankLoad:
    """The load of the rank a balanced ``moe_perf`` row of kernel source ``source`` timed:
    the vLLM collector's rank 0 (above), and the SGLang collector's where ``sglang_rank0``
    (``sglang_rank0_row``); the mean rank (``routing.Balanced``) otherwise."""
    if source.startswith(VLLM_SOURCE_PREFIX) or sglang_rank0:
        return collector_rank0_load(tokens, n_experts, top_k, ep)
    return ROUTINGS["balanced"].rank_load(tokens, n_experts, top_k, ep)
