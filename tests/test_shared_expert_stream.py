"""The MoE layer's shared expert on a second CUDA stream beside the router and the routed
experts: vLLM in every step of at most ``VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD``
tokens, TensorRT-LLM's DeepSeek-V3 module in its captured generation steps
(``twin.engine.kernel_layouts_vllm.vllm_shared_expert_stream_tokens`` /
``trtllm_shared_expert_stream``, ``twin.engine.run_pricing.kernel_layout_of``,
``KernelLayout.shared_expert_stream_tokens``, ``MoePricing._moe_fused``; issue 31)."""

from __future__ import annotations

import dataclasses

import pytest

from twin.costmodel import CostModel
from twin.costmodel.kernel_layout import DEFAULT_LAYOUT, KernelLayout
from twin.costmodel.profile_store import load_profile
from twin.engine.config import EngineConfig
from twin.engine.kernel_layouts_trtllm import (
    TRTLLM_CUDA_GRAPH_MAX_BATCH,
    trtllm_kernel_layout,
    trtllm_shared_expert_stream,
)
from twin.engine.kernel_layouts_vllm import (
    VLLM_SHARED_EXPERTS_STREAM_TOKENS,
    vllm_kernel_layout,
    vllm_shared_expert_stream_tokens,
)
from twin.engine.run_pricing import kernel_layout_of
from twin.errors import TwinError
from twin.presets import get_model

DEEPSEEK = dataclasses.replace(
    get_model("deepseek-r1"), precision="nvfp4", moe_precision="nvfp4", kv_dtype="fp8"
)


def test_vllm_overlaps_a_shared_expert_from_0_12_0_without_attention_dp() -> None:
    assert vllm_shared_expert_stream_tokens(DEEPSEEK, "0.17.0", 1) == 256
    assert vllm_shared_expert_stream_tokens(DEEPSEEK, "0.15.1", 1) == 256
    assert vllm_kernel_layout(DEEPSEEK, "0.19.0", 8, 1, 1, "b200").shared_expert_stream_tokens == (
        VLLM_SHARED_EXPERTS_STREAM_TOKENS
    )
    assert vllm_shared_expert_stream_tokens(DEEPSEEK, "0.10.2", 1) == 0  # not read
    assert vllm_shared_expert_stream_tokens(DEEPSEEK, "nightly-dev", 1) == 0
    assert vllm_shared_expert_stream_tokens(DEEPSEEK, "0.17.0", 8) == 0  # on the ranks
    # no shared expert: nothing to overlap, the layout stays the default
    gpt_oss = get_model("gpt-oss-120b")
    assert vllm_shared_expert_stream_tokens(gpt_oss, "0.19.0", 1) == 0
    assert vllm_kernel_layout(gpt_oss, "0.19.0", 2, 1, 1, "b200") == DEFAULT_LAYOUT
    with pytest.raises(TwinError, match="shared_expert_stream_tokens"):
        KernelLayout(shared_expert_stream_tokens=-1)


def test_trtllm_overlaps_deepseeks_shared_expert_up_to_the_graphs_batch() -> None:
    assert trtllm_shared_expert_stream(DEEPSEEK, 1)
    assert not trtllm_shared_expert_stream(DEEPSEEK, 8)  # attention DP: on the ranks
    assert not trtllm_shared_expert_stream(get_model("qwen3-235b-a22b"), 1)
    # TensorRT-LLM's default graphs (``twin cost``): up to 128 requests
    layout = trtllm_kernel_layout(DEEPSEEK, "1.2.0rc6", 8, 1, 1, "b200")
    assert layout.shared_expert_stream_tokens == TRTLLM_CUDA_GRAPH_MAX_BATCH == 128
    assert (
        trtllm_kernel_layout(DEEPSEEK, "1.2.0rc6", 8, 8, 8, "b200").shared_expert_stream_tokens == 0
    )
    config = EngineConfig.of(engine="trtllm", engine_build="1.2.0rc6", tp=8, concurrency=32)
    assert kernel_layout_of(DEEPSEEK, config, "b200").shared_expert_stream_tokens == 32
    # an open-loop run captures TensorRT-LLM's default graphs, not its whole running set
    open_loop = EngineConfig.of(engine="trtllm", engine_build="1.2.0rc6", tp=8, max_running=512)
    assert kernel_layout_of(DEEPSEEK, open_loop, "b200").shared_expert_stream_tokens == 128
    small = EngineConfig.of(engine="trtllm", engine_build="1.2.0rc6", tp=8, max_running=48)
    assert kernel_layout_of(DEEPSEEK, small, "b200").shared_expert_stream_tokens == 48
    mtp = dataclasses.replace(
        config,
        mode=dataclasses.replace(
            config.mode,
            speculative={
                "method": "mtp",
                "num_speculative_tokens": 3,
                "verify_tokens": 4,
                "acceptance_length": 2.78,
                "acceptance": "",
            },
        ),
    )
    assert kernel_layout_of(DEEPSEEK, mtp, "b200").shared_expert_stream_tokens == 32 * 4
    adp = EngineConfig.of(
        engine="trtllm", engine_build="1.2.0rc6", tp=8, ep=8, dp_attention=8, concurrency=32
    )
    assert kernel_layout_of(DEEPSEEK, adp, "b200").shared_expert_stream_tokens == 0


def test_the_layer_waits_for_the_longer_path_in_a_small_step() -> None:
    profile = load_profile("b200-trtllm")
    plain = CostModel(DEEPSEEK, profile, tp=8)
    stream = CostModel(
        DEEPSEEK, profile, tp=8, kernel_layout=KernelLayout(shared_expert_stream_tokens=64)
    )
    m = DEEPSEEK
    for t in (4, 64, 65, 512):
        e, d = plain.elem_bytes, plain.d_model
        norm = plain._k["elementwise"](0.0, e * (4.0 * t * d + d))
        ar = plain._allreduce(t)
        parts = dict(plain._moe(t, norm, ar))
        shared = sum(plain._shared_expert(t))
        routed = plain._router(t, m.moe_n_experts) + parts["moe"]
        got = sum(dict(stream._moe(t, norm, ar)).values())
        if t <= 64:  # the shared expert beside the router and experts
            assert got == pytest.approx(norm + ar + max(routed, shared), rel=1e-12)
            assert got < sum(parts.values())
        else:  # one stream: the sum, as before
            assert got == sum(parts.values())
    # the whole step: a decode of 4 sequences saves the shared expert of every MoE layer
    saved = plain.decode([4096] * 4) - stream.decode([4096] * 4)
    assert saved == pytest.approx(m.n_moe_layers * sum(plain._shared_expert(4)), rel=1e-9)
