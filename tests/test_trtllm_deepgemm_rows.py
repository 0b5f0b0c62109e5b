"""TensorRT-LLM 1.1's DEEPGEMM experts on B200: DeepGEMM's masked grouped GEMM without
swap-AB, each expert a step reaches computed as 128 rows
(``twin.engine.kernel_layouts_trtllm.trtllm_deepgemm_rows_per_expert``,
``MoePricing._moe_padded_rows``; issue 31)."""

from __future__ import annotations

import dataclasses

from twin.costmodel import CostModel
from twin.costmodel.profile_store import load_profile
from twin.engine.config import EngineConfig
from twin.engine.kernel_layouts_trtllm import (
    TRTLLM_CUDA_GRAPH_MAX_BATCH,
    trtllm_deepgemm_rows_per_expert,
    trtllm_kernel_layout,
)
from twin.engine.run_pricing import kernel_layout_of
from twin.presets import get_model

# DeepSeek-R1's checkpoint as the B200 fp8 rows price it: fp8 weights, block-fp8 experts.
BLOCK = dataclasses.replace(
    get_model("deepseek-r1"), precision="fp8", moe_precision="fp8-block", kv_dtype="fp8"
)
NVFP4 = dataclasses.replace(
    get_model("deepseek-r1"), precision="nvfp4", moe_precision="nvfp4", kv_dtype="fp8"
)


def test_the_1_1_line_pads_block_fp8_experts_on_b200_only() -> None:
    assert trtllm_deepgemm_rows_per_expert(BLOCK, "1.1.0rc2.post2", "b200") == 128
    assert trtllm_deepgemm_rows_per_expert(BLOCK, "1.1.0", "b200") == 128
    # 1.2 (the 1.2.0rc6 rows): the table's swapped kernel, the rows as routed
    assert trtllm_deepgemm_rows_per_expert(BLOCK, "1.2.0rc6.post3", "b200") == 0
    assert trtllm_deepgemm_rows_per_expert(BLOCK, "1.2.0rc0", "b200") == 0
    # Hopper (CUTLASS experts), SM 10.3, an unknown GPU; nvfp4 experts; no release
    assert trtllm_deepgemm_rows_per_expert(BLOCK, "1.1.0rc2.post2", "h200") == 0
    assert trtllm_deepgemm_rows_per_expert(BLOCK, "1.1.0rc2.post2", "b300") == 0
    assert trtllm_deepgemm_rows_per_expert(BLOCK, "1.1.0rc2.post2", "") == 0
    assert trtllm_deepgemm_rows_per_expert(NVFP4, "1.1.0rc2.post2", "b200") == 0
    assert trtllm_deepgemm_rows_per_expert(BLOCK, "", "b200") == 0
    assert trtllm_deepgemm_rows_per_expert(BLOCK, "nightly-dev", "b200") == 0
    dense = dataclasses.replace(get_model("llama-3-8b"), precision="fp8")
    assert trtllm_deepgemm_rows_per_expert(dense, "1.1.0rc2.post2", "b200") == 0


def test_the_layout_keeps_the_other_rules_beside_it() -> None:
    layout = trtllm_kernel_layout(BLOCK, "1.1.0rc2.post2", 8, 1, 8, "b200")
    assert layout.moe_rows_per_expert == 128
    assert layout.shared_expert_stream_tokens == TRTLLM_CUDA_GRAPH_MAX_BATCH
    adp = trtllm_kernel_layout(BLOCK, "1.1.0rc2.post2", 1, 8, 8, "b200")
    assert adp.moe_rows_per_expert == 128 and adp.moe_gather_scatter
    assert trtllm_kernel_layout(BLOCK, "1.2.0rc6.post2", 8, 1, 8, "b200").moe_rows_per_expert == 0


def test_a_run_on_b200_lays_out_its_build() -> None:
    old = EngineConfig.of(engine="trtllm", engine_build="1.1.0rc2.post2", tp=8, ep=8)
    new = EngineConfig.of(engine="trtllm", engine_build="1.2.0rc6.post2", tp=8, ep=8)
    assert kernel_layout_of(BLOCK, old, "b200").moe_rows_per_expert == 128
    assert kernel_layout_of(BLOCK, new, "b200").moe_rows_per_expert == 0
    assert kernel_layout_of(BLOCK, old, "h200").moe_rows_per_expert == 0
    # another moe_config.backend than DeepGEMM: the rows as routed
    for backend in ("CUTLASS", "TRTLLM"):
        flags = {"moe_backend": backend}
        other = EngineConfig.of(
            engine="trtllm", engine_build="1.1.0rc2.post2", tp=8, ep=8, engine_flags=flags
        )
        assert kernel_layout_of(BLOCK, other, "b200").moe_rows_per_expert == 0


def test_a_decode_step_pays_for_128_rows_an_expert_reached() -> None:
    b200 = load_profile("b200", "trtllm")
    old = trtllm_kernel_layout(BLOCK, "1.1.0rc2.post2", 8, 1, 8, "b200")
    new = trtllm_kernel_layout(BLOCK, "1.2.0rc6.post2", 8, 1, 8, "b200")
    padded = CostModel(BLOCK, b200, 8, ep=8, kernel_layout=old)
    plain = CostModel(BLOCK, b200, 8, ep=8, kernel_layout=new)
    # 8 sequences: 64 routed rows over a rank's 32 experts, each reached one padded to 128
    assert plain.decode([1536] * 8) < padded.decode([1536] * 8)
    step = padded.decode([1536] * 8, breakdown=True)
    base = plain.decode([1536] * 8, breakdown=True)
    extra = step.items["moe"]["moe"] - base.items["moe"]["moe"]
    assert extra > 0.0
    # only the routed experts move: attention and the other MoE-layer parts are the same
    assert step.items["attention"] == base.items["attention"]
    assert step.items["moe"]["allreduce"] == base.items["moe"]["allreduce"]
    # a prefill's rows exceed 128 an expert: the padding adds nothing there
    assert padded._moe_padded_rows(40_000.0, 32.0, 32.0) == (40_000.0, 0.0)
