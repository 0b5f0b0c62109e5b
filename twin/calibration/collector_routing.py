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

from twin.costmodel.features import SGLANG_TRITON_SOURCE
from twin.costmodel.routing import ROUTINGS, RankLoad

# The kernel sources of the vLLM collector's rows (``collect_moe.py`` logs ``vllm_<method>``).
VLLM_SOURCE_PREFIX = "vllm_"
# The SGLang collector's rows timed through ``fused_moe`` on rank 0's workload: its Triton
# label (``features.SGLANG_TRITON_SOURCE``) and the table modes it runs that way, not
# through the framework layer (ai-dynamo/aiconfigurator 095f58a51
# ``collector/sglang/collect_moe.py`` ``build_rank0_workloads`` under ``moe_ep_size > 1``,
# the same routing as the vLLM collector's rank 0 above).
SGLANG_RANK0_MODES = frozenset({"bfloat16", "fp8_block"})


@functools.lru_cache(maxsize=65536)
def collector_rank0_load(tokens: int, n_experts: int, top_k: int, ep: int) -> RankLoad:
    """(rows, distinct experts) of EP rank 0 under the collector's balanced routing."""
    stride = math.ceil(n_experts / top_k)
    i = np.arange(tokens)[:, None]
    j = np.arange(top_k)[None, :]
    if tokens >= stride:
        experts = (i + j * stride) % n_experts
    else:  # torch's true division, then ``.long()`` (truncation) after the modulo
        experts = np.floor((i * stride / tokens + j * stride) % n_experts).astype(np.int64)
    mine = experts[experts < n_experts // ep]
    return RankLoad(float(mine.size), float(np.unique(mine).size))


def sglang_rank0_row(source: str, mode: str, ep: int) -> bool:
    """Whether the SGLang collector timed a row (kernel source ``source``, table mode
    ``mode``, ``ep`` ranks) on rank 0's workload (above)."""
    return source == SGLANG_TRITON_SOURCE and mode in SGLANG_RANK0_MODES and ep > 1


def table_rank_load(
    source: str, tokens: int, n_experts: int, top_k: int, ep: int, sglang_rank0: bool = False
) -> RankLoad:
    """The load of the rank a balanced ``moe_perf`` row of kernel source ``source`` timed:
    the vLLM collector's rank 0 (above), and the SGLang collector's where ``sglang_rank0``
    (``sglang_rank0_row``); the mean rank (``routing.Balanced``) otherwise."""
    if source.startswith(VLLM_SOURCE_PREFIX) or sglang_rank0:
        return collector_rank0_load(tokens, n_experts, top_k, ep)
    return ROUTINGS["balanced"].rank_load(tokens, n_experts, top_k, ep)
