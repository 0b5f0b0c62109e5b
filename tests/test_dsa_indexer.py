"""DeepSeek Sparse Attention's indexer (GLM-5: ``ModelSpec.index_n_heads``,
``index_head_dim``): read from the config, refused without MLA layers, and priced per MLA
layer as its launches (``twin.costmodel.mla_pricing.MlaPricing._indexer``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from twin.costmodel import CostModel
from twin.costmodel.profile_store import load_profile
from twin.errors import TwinError
from twin.hf_config import from_hf_config
from twin.presets import get_model

HF = Path(__file__).parent / "data" / "hf_configs"
GLM5 = get_model("glm-5")


def test_the_indexer_is_read_from_the_config() -> None:
    m = from_hf_config(HF / "glm-5.json")
    assert (m.index_n_heads, m.index_head_dim) == (32, 128)
    assert get_model("deepseek-v3").index_n_heads == 0  # dense MLA: none


def test_an_indexer_needs_mla_layers_and_both_sizes() -> None:
    with pytest.raises(TwinError, match="'index_head_dim' must be positive"):
        dataclasses.replace(GLM5, index_head_dim=0)
    with pytest.raises(TwinError, match="'index_n_heads' needs mla layers"):
        dataclasses.replace(get_model("minimax-m2.5"), index_n_heads=32, index_head_dim=128)


def test_every_mla_layer_pays_the_indexer_s_launches() -> None:
    profile = load_profile("b200", "sglang")
    without = dataclasses.replace(GLM5, index_n_heads=0, index_head_dim=0)
    with_it, plain = CostModel(GLM5, profile, 8), CostModel(without, profile, 8)
    gemm, passes = with_it._indexer(4)
    assert plain._indexer(4) == (0.0, 0.0)
    # Ten element-wise launches at the profile's floor, and more than the floors.
    floor = float(profile.kernels["elementwise"].params["t0_s"])
    assert 10 * floor < passes < 10 * floor * 1.1
    assert gemm > 2 * float(profile.kernels["gemm"].params["t0_s"])
    contexts = [4096] * 4
    added = with_it.decode(contexts) - plain.decode(contexts)
    assert added == pytest.approx(GLM5.mixer_counts["mla"] * (gemm + passes), rel=1e-9)


def test_the_indexer_s_keys_are_cached_beside_the_latent() -> None:
    """Each MLA layer of a sparse-attention model caches the indexer's key too: 128 fp8
    values and one fp32 scale (SGLang 0.5.9 ``NSATokenToKVPool``), whatever the KV dtype."""
    without = dataclasses.replace(GLM5, index_n_heads=0, index_head_dim=0)
    layers = GLM5.mixer_counts["mla"]
    assert GLM5.kv_bytes_per_token - without.kv_bytes_per_token == layers * (128 + 4)
    fp8 = dataclasses.replace(GLM5, kv_dtype="fp8")
    assert fp8.kv_bytes_per_token == layers * (576 + 132)
