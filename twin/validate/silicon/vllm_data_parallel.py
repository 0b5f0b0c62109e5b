"""The vLLM rows whose CSV layout leaves the data-parallel size to be read off the MoE
columns: a replica of ``moe_tp_size x moe_ep_size`` GPUs whose attention ran on
``tp_size`` of them a rank (vLLM's ``--data-parallel-size``)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from twin.validate.silicon.rows import SiliconRow


# aiconfigurator writes a vLLM deployment's layout as ``--tensor-parallel-size tp``,
# ``--data-parallel-size dp`` and ``--enable-expert-parallel`` (package ``aiconfigurator``
# 0.12.0, ``generator/config/backend_config_mapping.yaml``: vLLM has no
# ``enable_attention_dp`` and no MoE TP flag), and reads one back as ``moe_tp = GPUs / (pp x
# moe_ep)`` over ``tp x pp x dp`` GPUs (``sdk/config_adapter/dynamo.py``,
# ``_service_layout``). vLLM itself runs the MoE layers of a data-parallel deployment over
# the ``dp x tp`` GPUs (0.12.0 ``model_executor/layers/fused_moe/config.py``
# ``FusedMoEParallelConfig.make``: ``tp_size = dp_size x tp_size`` without expert
# parallelism, ``ep_size`` that product with it), while each DP rank is an engine of its own
# over ``tp`` GPUs. So a row whose MoE columns span ``k > 1`` times its attention GPUs and
# whose ``attention_dp_size`` is empty ran ``k`` data-parallel ranks: the gap-analysis
# collection's Qwen3-235B-A22B-FP8 H200 vLLM 0.12.0 file (``tp 1, moe_tp 2``; ``tp 1, moe_tp
# 4``; ``tp 2, moe_tp 4``: 19 rows). Read as written they would put 235 GB of fp8 weights on
# one 141 GB GPU (the tp 1 rows) or the experts on half the GPUs that ran them; their
# measured TPOT follows the MoE GPUs, not ``tp_size`` (tp 1 and 2 at 2 MoE GPUs 51-59 ms, at
# 4 MoE GPUs 37-46 ms; docs/decisions.md, "the vLLM 0.12.0 H200 aiperf rows diagnosed").


def vllm_data_parallel_layout(row: SiliconRow) -> SiliconRow:
    """``row`` with ``attention_dp`` the data-parallel ranks its MoE columns imply (above);
    unchanged unless it is an aggregated vLLM row whose attention-DP column is empty or 1
    and whose ``moe_tp_size x moe_ep_size`` is a multiple ``k > 1`` of ``tp_size x pp_size``. The
    CSV's columns stay in ``csv_layout``."""
    if row.backend != "vllm" or row.mode != "agg" or (row.attention_dp or 1) > 1:
        return row
    attention_gpus = (row.tp or 1) * (row.pp or 1)
    moe_gpus = (row.moe_tp or 1) * (row.moe_ep or 1)
    if moe_gpus <= attention_gpus or moe_gpus % attention_gpus:
        return row
    return dataclasses.replace(
        row, attention_dp=moe_gpus // attention_gpus, csv_layout=row.layout_columns
    )
