"""How much of NVIDIA's measured set the twin can express as a model and a layout (issue 34).

A count, not a score: an aggregated row of ``silicon_sample.csv`` is *expressible* when
its model maps to a preset (``PRESET_OF_MODEL_PATH``) and its parallel layout is one
the preset can take (``twin.parallel``: heads divisible by the attention TP, experts by
EP). Whether a profile prices the row (MLA kernels, fp4 on Hopper, pipeline stages) is
:func:`twin.validate.silicon.plan_row`'s question; this one is whether the twin can
describe the deployment at all.

The CSV's layout columns follow aiconfigurator's convention: a replica has
``tp_size x attention_dp_size`` GPUs, which the MoE layers use as ``moe_tp_size x
moe_ep_size`` (e.g. DeepSeek-R1 ``tp 1, attention dp 8, moe tp 1, moe ep 8``: 8 GPUs,
DP attention, the experts over 8 EP ranks). Empty or 0 cells mean 1. A dense model's
MoE columns are ignored.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from twin.errors import TwinError
from twin.parallel import Layout, check_layout
from twin.presets import get_model
from twin.validate.silicon import SiliconRow

# The CSV's model_path -> the preset with its shapes. A quantised or instruction-tuned
# repository has its base model's shapes (NVIDIA's ModelOpt checkpoints keep the base
# config; ``-Instruct`` changes weights, not shapes); zhipuai/GLM-5 is zai-org/GLM-5.
PRESET_OF_MODEL_PATH = {
    "deepseek-ai/DeepSeek-R1": "deepseek-r1",
    "nvidia/DeepSeek-R1-NVFP4": "deepseek-r1",
    "deepseek-ai/DeepSeek-V3": "deepseek-v3",
    "MiniMaxAI/MiniMax-M2.5": "minimax-m2.5",
    "openai/gpt-oss-120b": "gpt-oss-120b",
    "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b",
    "Qwen/Qwen3-32B": "qwen3-32b",
    "nvidia/Qwen3-32B-NVFP4": "qwen3-32b",
    "Qwen/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b",
    "Qwen/Qwen3.5-397B-A17B": "qwen3.5-397b-a17b",
    "moonshotai/Kimi-K2.5": "kimi-k2.5",
    "zhipuai/GLM-5": "glm-5",
}
REASON_NOT_AGG = "not aggregated (mode disagg)"
REASON_PP = "pipeline parallel (pp_size > 1): not modelled yet"


def _one(v: int | None) -> int:
    return v if v else 1


def row_layout(row: SiliconRow, moe: bool) -> Layout | str:
    """The row's :class:`Layout`, or why its columns do not make one."""
    gpus = _one(row.tp) * _one(row.attention_dp)
    if not moe:
        return Layout(gpus, dp=_one(row.attention_dp))
    moe_gpus = _one(row.moe_tp) * _one(row.moe_ep)
    if moe_gpus != gpus:
        return f"moe_tp_size x moe_ep_size ({moe_gpus}) is not tp_size x attention_dp_size ({gpus})"
    return Layout(gpus, ep=_one(row.moe_ep), dp=_one(row.attention_dp))


def expressible(row: SiliconRow) -> tuple[str, str | None]:
    """``(preset or model path, reason)``: the reason is None when the twin can express
    the row's model and layout."""
    preset = PRESET_OF_MODEL_PATH.get(row.model_path)
    if row.mode != "agg":
        return preset or row.model_path, REASON_NOT_AGG
    if preset is None:
        return row.model_path, f"no preset for {row.model_path}"
    if _one(row.pp) > 1:
        return preset, REASON_PP
    model = get_model(preset)
    try:
        layout = row_layout(row, bool(model.n_moe_layers))
        if isinstance(layout, str):
            return preset, layout
        check_layout(model, layout)
    except TwinError as err:
        return preset, str(err)
    return preset, None


def coverage(rows: Iterable[SiliconRow]) -> dict[str, Any]:
    """Aggregated rows the twin can express, by model, and the rest by reason."""
    agg = expressed = 0
    by_model: dict[str, Counter[str]] = {}
    reasons: Counter[str] = Counter()
    for row in rows:
        name, reason = expressible(row)
        if reason == REASON_NOT_AGG:
            continue
        agg += 1
        counts = by_model.setdefault(name, Counter())
        counts["rows"] += 1
        if reason is None:
            expressed += 1
            counts["expressible"] += 1
        else:
            reasons[reason] += 1
    return {
        "aggregated_rows": agg,
        "expressible": expressed,
        "share": round(expressed / agg, 4) if agg else 0.0,
        "by_model": {
            k: {"rows": v["rows"], "expressible": v["expressible"]}
            for k, v in sorted(by_model.items(), key=lambda kv: -kv[1]["rows"])
        },
        "not_expressible": dict(reasons.most_common()),
    }


__all__ = ["PRESET_OF_MODEL_PATH", "coverage", "expressible", "row_layout"]
