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
    # DeepSeek-V3.2: a DSA indexer with grouped top-k (another architecture's name)
    v32 = dataclasses.replace(ds, index_topk=2048)
    assert ds.moe_n_group > 1 and not moe_layout.fuses_shared_expert(v32, 1, TRITON)
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


def test_glm5_fuses_its_shared_expert_as_its_own_architecture_asks() -> None:
    """0.5.9 ``models/glm4_moe.py`` ``GlmMoeDsaForCausalLM`` passes its own name to the
    check: GLM-5 (a DSA indexer, plain top-k, 256 routed and one shared) fuses."""
    glm = resolve_model("glm-5")
    assert glm.index_topk > 0 and glm.moe_n_group == 1
    assert moe_layout.fuses_shared_expert(glm, 1, TRITON)
    assert not moe_layout.fuses_shared_expert(glm, 8, TRITON)
