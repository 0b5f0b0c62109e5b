"""The engines' KV-pool sizing rules (twin.engine.memory_rules), each against an answer
worked by hand from the engine's source (the module docstring names the files)."""

from __future__ import annotations

import pytest

from twin.engine.budget import memory_budget
from twin.engine.config import EngineConfig, EngineModeConfig, MemoryConfig, SchedulerConfig
from twin.engine.memory_rules import (
    activation_bytes,
    non_torch_bytes,
    sglang_graph_max_bs,
    sglang_mem_fraction_static,
    sglang_piecewise_off,
    sglang_prefill_graph_sizes,
)
from twin.engine.modes_sglang import sglang_gpu_defaults
from twin.errors import TwinError
from twin.presets import get_model

GIB = 1 << 30
H100 = 80 * GIB  # aiconfigurator-core 0.12.0 systems/h100_sxm.yaml mem_capacity
B200 = 180 * GIB
LLAMA = get_model("llama-3-8b")


def test_sglang_prefill_graph_sizes_counts_its_capture_list():
    # _generate_piecewise_cuda_graph_tokens: 8 (4..32) + 14 (48..256) + 8 (288..512)
    # + 8 (576..1024) + 12 (1280..4096) + 8 (4608..8192) = 58 up to 8,192 tokens, and
    # 16 more (every 512 to 16,384) up to 16,384.
    assert sglang_prefill_graph_sizes(8192) == 58
    assert sglang_prefill_graph_sizes(16384) == 74
    assert sglang_prefill_graph_sizes(2048) == 8 + 14 + 8 + 8 + 4


@pytest.mark.parametrize(
    ("gpu", "tp", "release", "extra", "fraction"),
    [
        # 0.5.10.post1 H100 tp 1: 512 + 1.5 x 8,192 + 2 x 256 + 1,024 / 8 + 8 x 58
        # = 13,904 MiB reserved; (81,920 - 13,904) / 81,920 = 0.8303.
        (H100, 1, "0.5.10.post1", {}, 0.830),
        # tp 8: cuda_graph_max_bs 512: 512 + 12,288 + 1,024 + 1,024 + 464 = 15,312: 0.8131.
        (H100, 8, "0.5.10.post1", {}, 0.813),
        # B200 tp 1: chunk 16,384, 74 piecewise sizes: 512 + 24,576 + 1,024 + 128 + 592
        # = 26,832 of 184,320: 0.8544.
        (B200, 1, "0.5.10.post1", {}, 0.854),
        # EAGLE turns the piecewise graphs off and adds 4 GiB: 13,440 + 4,096 = 17,536: 0.7859.
        (H100, 1, "0.5.10.post1", {"speculative": "EAGLE"}, 0.786),
        # A draft model (STANDALONE) adds 6 GiB: 13,440 + 6,144 = 19,584: 0.7609.
        (H100, 1, "0.5.10.post1", {"speculative": "STANDALONE"}, 0.761),
        # NGRAM: no draft memory, the piecewise graphs still off: 13,440: 0.8359.
        (H100, 1, "0.5.10.post1", {"speculative": "NGRAM"}, 0.836),
        # Attention DP 8 on B200 tp 8 (max_bs 512 > 300): 512 + 24,576 + 1,024 + 1,024
        # + 512 x 8 x 3 + 512 x 8 x 1.5 = 45,568, no piecewise graphs: 0.7528.
        (B200, 8, "0.5.10.post1", {"dp_attention": 8}, 0.753),
        # MLA: 1,536 MiB for the piecewise graphs: 13,440 + 1,536 = 14,976: 0.8172.
        (H100, 1, "0.5.10.post1", {"mla": True}, 0.817),
        # A small chunk meets the 10 GiB floor above 60 GiB: 512 + 3,072 + 512 + 128
        # + 8 x 42 = 4,560 -> 10,240: 0.875.
        (H100, 1, "0.5.10.post1", {"chunk": 2048}, 0.875),
        # 0.5.23 (memory_hook.py): the same H100 tp 1 sum, 0.830 ...
        (H100, 1, "0.5.23", {}, 0.830),
        # ... no speculative term, the prefill graphs stay on: 0.830 with EAGLE too ...
        (H100, 1, "0.5.23", {"speculative": "EAGLE"}, 0.830),
        # ... and the decode graph's max_bs capped at max_running_requests 48:
        # 512 + 12,288 + 96 + 128 + 464 = 13,488: 0.8354.
        (H100, 1, "0.5.23", {"max_running": 48}, 0.835),
    ],
)
def test_sglang_mem_fraction_static_follows_its_release(gpu, tp, release, extra, fraction):
    kwargs = {"chunk": 16384 if gpu == B200 else 8192, **extra}
    assert sglang_mem_fraction_static(gpu, tp, release, **kwargs) == fraction


def test_sglang_default_mem_fraction_reaches_the_config_where_not_given():
    got = sglang_gpu_defaults(H100, 1, {"engine_release": "0.5.10.post1"}, "h100", LLAMA)
    assert got["memory_utilization"] == 0.830
    # An EAGLE draft (the twin's eagle method) is SGLang's EAGLE: 0.786.
    spec = {"engine_release": "0.5.10.post1", "speculative": {"method": "eagle"}}
    assert sglang_gpu_defaults(H100, 1, spec, "h100", LLAMA)["memory_utilization"] == 0.786
    # A given mem_fraction_static (or --gpu-mem-util) wins.
    given = {"engine_release": "0.5.10.post1", "memory_utilization": 0.9}
    assert "memory_utilization" not in sglang_gpu_defaults(H100, 1, given, "h100", LLAMA)


def test_sglang_graph_max_bs_by_memory_tp_and_release():
    """``_handle_gpu_memory_settings``' decode graph sizes (the rule's docstring): 0.5.23
    doubles them on 20-35 GiB GPUs (an RTX 4090's 24 GiB); elsewhere the releases agree."""
    small = 24 * 1024
    assert [sglang_graph_max_bs(small, tp, "0.5.10.post1") for tp in (1, 4)] == [24, 80]
    assert [sglang_graph_max_bs(small, tp, "0.5.23") for tp in (1, 4)] == [48, 160]
    assert [sglang_graph_max_bs(small, tp, "") for tp in (1, 4)] == [24, 80]
    for release in ("0.5.10.post1", "0.5.23"):
        assert sglang_graph_max_bs(16 * 1024, 1, release) == 8
        assert sglang_graph_max_bs(80 * 1024, 8, release) == 512


def test_sglang_listed_architectures_lose_their_piecewise_graphs_before_0_5_23():
    """``SGLANG_NO_PIECEWISE``'s stems (0.5.10's piecewise_cuda_graph_disabled_model_archs)
    turn the prefill graphs off; from 0.5.23 every model captures them."""
    assert sglang_piecewise_off("Qwen3-Next-80B-A3B", "0.5.10.post1")
    assert sglang_piecewise_off("glm-5", "")  # no release: the older release's rules
    assert not sglang_piecewise_off("glm-5", "0.5.23")
    assert not sglang_piecewise_off("llama-3-8b", "0.5.10.post1")
    qwen = get_model("qwen3-next-80b-a3b")
    # H100 tp 8, 0.5.10.post1: the 15,312 MiB of the llama case above less the 464 MiB of
    # piecewise graphs: (81,920 - 14,848) / 81,920 = 0.8188; 0.5.23 keeps them: 0.813.
    old = sglang_gpu_defaults(H100, 8, {"engine_release": "0.5.10.post1"}, "h100", qwen)
    new = sglang_gpu_defaults(H100, 8, {"engine_release": "0.5.23"}, "h100", qwen)
    assert (old["memory_utilization"], new["memory_utilization"]) == (0.819, 0.813)


def test_activation_estimate_is_aiconfigurators():
    # 2 x 8,192 tokens x 4,096 (32 heads x 128) x 11 (LLAMA at tp 1) bytes.
    assert activation_bytes(LLAMA, 8192, 1) == 2 * 8192 * 4096 * 11
    assert activation_bytes(LLAMA, 8192, 8) == 2 * 8192 * 4096 * 5
    assert activation_bytes(LLAMA, 1, 1) == 70 * (1 << 20)  # the floor
    assert non_torch_bytes(1) == 551 * (1 << 20)
    assert non_torch_bytes(4) == 411_041_792 + 551 * (1 << 20)


def _config(engine: str, **kw) -> EngineConfig:
    return EngineConfig.of(
        engine=engine, gpu_memory_bytes=H100, shared_pool=True, max_batched_tokens=8192, **kw
    )


def test_vllm_pool_holds_its_activation_peak_back():
    # determine_available_memory: 0.9 x total - weights - the profile run's peak.
    want = 0.9 * H100 - LLAMA.weight_bytes - 2 * 8192 * 4096 * 11
    assert memory_budget(LLAMA, _config("vllm")) == pytest.approx(want, abs=1)
    # The paper's world and SGLang: the fraction of the total less the weights only.
    plain = H100 * 0.9 - LLAMA.weight_bytes
    assert memory_budget(LLAMA, _config("paper", memory_utilization=0.9)) == plain
    assert memory_budget(LLAMA, _config("sglang", memory_utilization=0.9)) == plain


def test_trtllm_pool_is_a_fraction_of_the_free_memory():
    # _cal_max_tokens: (total - peak) x free_gpu_memory_fraction, the peak the weights,
    # the activations of max_num_tokens and the non-torch memory. For Llama-3-8B on one
    # H100: 0.9 x (85,899,345,920 - weights - 738,197,504 - 577,765,376).
    want = 0.9 * (H100 - LLAMA.weight_bytes - 738_197_504 - 577_765_376)
    got = memory_budget(LLAMA, _config("trtllm"))
    assert got == pytest.approx(want, abs=1)
    # The weights come out before the fraction: 0.1 x 16.1 GB of weights outweighs 0.9 x
    # 1.3 GB held back, so the pool is larger than 0.9 x total - weights.
    assert got > H100 * 0.9 - LLAMA.weight_bytes


def test_memory_error_names_the_activations():
    config = EngineConfig(
        memory=MemoryConfig(gpu_memory_bytes=17 * GIB, shared_pool=True),
        scheduling=SchedulerConfig(max_batched_tokens=8192),
        mode=EngineModeConfig(engine="vllm"),
    )
    with pytest.raises(TwinError, match="GB of activations"):
        memory_budget(LLAMA, config)
