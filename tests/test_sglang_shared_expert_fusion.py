"""SGLang's Triton MoE runner folds DeepSeek-V3's shared expert into the routed launch as
a 257th expert every token reaches (SGLang 0.5.9 ``models/deepseek_v2.py``
``determine_num_fused_shared_experts``; ``twin.costmodel.moe_layout.fuses_shared_expert``;
docs/decisions.md, issue 31: the SGLang DeepSeek groups, session 25)."""

from __future__ import annotations

import dataclasses

from twin.costmodel import moe_layout
from twin.costmodel.model import CostModel
from twin.costmodel.profile_store import load_profile
from twin.precision import with_precision
from twin.presets import resolve_model

TRITON = moe_layout.SGLANG_TRITON_MOE_SOURCE


def test_only_deepseek_v3_s_shape_on_the_triton_runner_without_ep_fuses() -> None:
    ds = resolve_model("deepseek-r1")
    assert moe_layout.fuses_shared_expert(ds, 1, TRITON)
    assert not moe_layout.fuses_shared_expert(ds, 8, TRITON)  # expert parallelism
    assert not moe_layout.fuses_shared_expert(ds, 1, "sglang_flashinfer_trtllm_moe")
    assert not moe_layout.fuses_shared_expert(dataclasses.replace(ds, index_topk=2048), 1, TRITON)
    assert not moe_layout.fuses_shared_expert(dataclasses.replace(ds, moe_n_experts=384), 1, TRITON)
    assert not moe_layout.fuses_shared_expert(dataclasses.replace(ds, moe_shared_d_ff=0), 1, TRITON)


def test_h200_sglang_deepseek_prices_the_shared_expert_inside_the_fused_launch() -> None:
    prof = load_profile("h200", "sglang").at_release("0.5.9", group_limited=True)
    model = with_precision(resolve_model("deepseek-r1"), "fp8-block", None)
    cm = CostModel(model, prof, tp=8)
    assert cm._shared_fused
    parts = dict(cm._moe_fused(16, 0.0, 0.0))
    assert parts["gemm"] == cm._gemm(16, model.d_model, model.moe_n_experts)  # the router only
    # the launch carries one more expert and 16 more rows than the routed ones alone
    cm._shared_fused = False
    apart = dict(cm._moe_fused(16, 0.0, 0.0))
    assert parts["moe"] > apart["moe"]
    assert parts["gemm"] + parts["moe"] + parts["elementwise"] < (
        apart["gemm"] + apart["moe"] + apart["elementwise"]
    )
