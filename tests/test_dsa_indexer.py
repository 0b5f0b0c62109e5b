"""DeepSeek Sparse Attention's indexer (GLM-5: ``ModelSpec.index_n_heads``,
``index_head_dim``): read from the config, refused without MLA layers, and priced per MLA
layer as its launches (``twin.costmodel.mla_pricing.MlaPricing._indexer``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from twin.costmodel import CostModel
from twin.costmodel import mla_features as mf
from twin.costmodel.mla_pricing import MlaPricing
from twin.costmodel.profile_store import load_profile
from twin.engine.kernel_layouts_sglang import (
    SGLANG_DSA_SPARSE_MODULE,
    sglang_kernel_layout,
    with_nsa_prefill_backend,
)
from twin.errors import TwinError
from twin.hardware import GPUS
from twin.hf_config import from_hf_config
from twin.mixers import keys_upto
from twin.precision import with_precision
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


def test_sglang_s_sparse_prefill_pads_hopper_s_heads_past_the_top_k() -> None:
    """SGLang 0.5.9 (``nsa_backend.py``) runs a prefill batch whose longest sequence
    exceeds ``index_topk`` through FlashMLA's sparse kernel, the rank's query heads
    padded to 64 on Hopper over a bf16 cache: at tp 8 GLM-5's 8 heads cost as 64, each
    new token over 2,048 latent keys; at or below the top-k the dense form stays."""
    assert (GLM5.index_topk, from_hf_config(HF / "glm-5.json").index_topk) == (2048, 2048)
    assert mf.sparse_prefill_heads("h200", 8, 2) == 64
    assert mf.sparse_prefill_heads("h200", 64, 2) == 64
    assert mf.sparse_prefill_heads("h200", 8, 1) == 0  # fp8 cache: flashmla_kv
    assert mf.sparse_prefill_heads("b200", 8, 2) == 0  # the scripts' trtllm prefill
    layout = sglang_kernel_layout(GLM5, "glm5-hopper", 8, 1, 1, "")
    v3 = sglang_kernel_layout(get_model("deepseek-v3"), "0.5.9", 8, 1, 1, "")
    assert layout.nsa_sparse_prefill and not v3.nsa_sparse_prefill
    h200 = load_profile("h200", "sglang")
    dense, sparse = CostModel(GLM5, h200, 8), CostModel(GLM5, h200, 8, kernel_layout=layout)
    assert sparse.prefill(2048) == dense.prefill(2048)
    added = sparse.prefill(8192) - dense.prefill(8192)
    # The padded heads' work: QK at 576 and AV at 512 wide per key, over 75 + 3 layers.
    flops = GLM5.mixer_counts["mla"] * 2.0 * 8192 * 64 * 2048 * (576 + 512)
    at_peak = flops / GPUS["h200"].flops
    assert 0.75 * at_peak < added < 3 * at_peak
    # Off Hopper, and over an fp8 cache, the dense price stays.
    b200 = load_profile("b200", "sglang")
    on_b200 = CostModel(GLM5, b200, 8, kernel_layout=layout).prefill(8192)
    assert on_b200 == CostModel(GLM5, b200, 8).prefill(8192)
    fp8 = dataclasses.replace(GLM5, kv_dtype="fp8")
    on_fp8 = CostModel(fp8, h200, 8, kernel_layout=layout).prefill(8192)
    assert on_fp8 == CostModel(fp8, h200, 8).prefill(8192)


def test_the_sparse_prefill_follows_the_cache_not_the_module_fits_features(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """GLM-5's fp8 checkpoint over SGLang's default bf16 cache on H200 takes SGLang's
    MLA module fits, priced at the fp8 features they were fitted with
    (``precision_kernels._mla_keys``); the sparse prefill's padded heads follow the
    cache the server runs (bf16: FlashMLA's sparse kernel), so an 8k prompt still pays
    them (the two rules met in session 24's merge and the pad was lost)."""
    # the checkpoint's block-scaled experts, as the silicon rows price it
    fp8 = dataclasses.replace(with_precision(GLM5, "fp8", "bf16"), moe_precision="fp8-block")
    h200 = load_profile("h200", "sglang").at_release("0.5.10.post1")  # the rows' release
    layout = sglang_kernel_layout(fp8, "glm5-hopper", 8, 1, 1, "")
    sparse, dense = CostModel(fp8, h200, 8, kernel_layout=layout), CostModel(fp8, h200, 8)
    assert sparse.priced.mla_kv_elem_bytes == (1, 1)  # the module fits' own features
    assert sparse.prefill(2048) == dense.prefill(2048)
    assert sparse.prefill(8192) > 1.2 * dense.prefill(8192)
    # Replacing the module fit, the sparse form prices what the fit included besides
    # attention (the projections, their norms and RoPE); the dense module price has them.
    with_parts = (sparse.prefill(8192), sparse.prefill(2048))
    monkeypatch.setattr(MlaPricing, "_projections", lambda self, t: (0.0, 0.0))
    without = CostModel(fp8, h200, 8, kernel_layout=layout)
    assert without.prefill(2048) == with_parts[1]
    assert 0.02 * with_parts[0] < with_parts[0] - without.prefill(8192) < 0.3 * with_parts[0]


def test_sglang_s_indexer_scores_each_prompt_s_own_keys_past_the_top_k() -> None:
    """SGLang 0.5.9's indexer computes its prefill logits and top-k only where the batch's
    longest sequence exceeds ``index_topk`` (``nsa_indexer.py`` ``forward_cuda``), each
    new token against its own sequence's keys (``_get_topk_ragged``): B200's measured
    rate a causal query-key pair in every MLA layer, nothing at or below 2,048 tokens,
    four 8k prompts in one step four times one prompt's pairs (not the batch's square)."""
    b200 = load_profile("b200", "sglang")
    layout = sglang_kernel_layout(GLM5, "nightly-dev", 8, 1, 1, "b200")
    rate = layout.nsa_indexer_pair_s
    assert rate == pytest.approx(8.56e-12)
    v3 = sglang_kernel_layout(get_model("deepseek-v3"), "0.5.9", 8, 1, 1, "b200")
    assert v3.nsa_indexer_pair_s == 0
    unmeasured = dataclasses.replace(layout, nsa_indexer_pair_s=0.0)
    fp8 = dataclasses.replace(GLM5, kv_dtype="fp8")
    priced = CostModel(fp8, b200, 8, kernel_layout=layout)
    plain = CostModel(fp8, b200, 8, kernel_layout=unmeasured)
    assert priced.prefill(2048) == plain.prefill(2048)
    layers = GLM5.mixer_counts["mla"]
    one = priced.prefill(8192) - plain.prefill(8192)
    assert one == pytest.approx(layers * rate * 8192 * 8193 / 2, rel=1e-3)
    assert 0.02 < one < 0.025  # about 22 ms an 8k prompt
    four = priced.step([(8192, 0)] * 4) - plain.step([(8192, 0)] * 4)
    assert four == pytest.approx(4 * one, rel=1e-6)
    # A chunk over a cached prefix scores its new tokens against the prefix too.
    chunk = priced.prefill(4096, 4096) - plain.prefill(4096, 4096)
    assert chunk == pytest.approx(one - layers * rate * 4096 * 4097 / 2, rel=1e-3)


def _table_rate(gpu: str, backend: str, kv: str, a: int, b: int) -> float:
    """aiconfigurator_core 0.12.0's SGLang 0.5.14 DSA context-module table on ``gpu`` (one
    layer, tp 8, batch 1, ``step`` 0: no cached prefix, the collector's ``prefix_len``):
    GLM-5-FP8 with the indexer minus GLM-5.2-FP8 without, on ``backend`` over a ``kv``
    cache, its growth from ``a`` to ``b`` prompt tokens a causal query-key pair."""
    pd = pytest.importorskip("pandas")
    aic = pytest.importorskip("aiconfigurator_core")
    table = (
        Path(aic.__file__).parent
        / f"systems/data/{gpu}/sparse_attention/sglang/0.5.14/dsa_context_module_perf.parquet"
    )
    d = pd.read_parquet(table)
    d = d[(d.tp_size == 8) & (d.batch_size == 1) & (d.step == 0) & (d.kv_cache_dtype == kv)]

    def indexer(isl: int) -> float:
        out = 0.0
        for model, source, sign in (
            ("zai-org/GLM-5-FP8", f"sglang_dsa_indexer_{backend}", 1.0),
            ("zai-org/GLM-5.2-FP8", f"sglang_dsa_skip_indexer_{backend}", -1.0),
        ):
            row = d[(d.model == model) & (d.kernel_source == source) & (d.isl == isl)]
            assert len(row) == 1
            out += sign * float(row.latency.iloc[0]) * 1e-3
        return out

    return (indexer(b) - indexer(a)) / ((b * (b + 1) - a * (a + 1)) / 2)


def test_the_indexer_rates_are_the_tables_growth_without_a_cached_prefix() -> None:
    """``SGLANG_DSA_INDEXER_PAIR_S`` from the tables at ``step`` 0 (averaging every step
    counts the prefix's keys as none: 3.31e-11 on B200, four times this): B200's
    ``--nsa-prefill-backend trtllm`` over fp8, the mean of 4k -> 8k and 8k -> 16k (B300
    the same); H200's ``glm5_fp8_h200.sh`` names no backend or KV dtype, so SGLang 0.5.9
    runs a bf16 cache and ``flashmla_sparse`` on Hopper, 4k -> 8k (its table's longest)."""
    b200 = sglang_kernel_layout(GLM5, "nightly-dev", 8, 1, 1, "b200").nsa_indexer_pair_s
    b300 = sglang_kernel_layout(GLM5, "nightly-dev", 8, 1, 1, "b300").nsa_indexer_pair_s
    measured = [_table_rate("b200_sxm", "trtllm", "fp8", a, 2 * a) for a in (4096, 8192)]
    assert b200 == b300 == pytest.approx(sum(measured) / 2, rel=0.01)
    h200 = sglang_kernel_layout(GLM5, "glm5-hopper", 8, 1, 1, "h200").nsa_indexer_pair_s
    assert h200 == pytest.approx(
        _table_rate("h200_sxm", "flashmla_sparse", "bfloat16", 4096, 8192), rel=0.01
    )


def test_h200_pays_its_indexer_rate_on_an_8k_prompt_not_a_2k_one() -> None:
    layout = sglang_kernel_layout(GLM5, "glm5-hopper", 8, 1, 1, "h200")
    rate = layout.nsa_indexer_pair_s
    assert rate == pytest.approx(2.19e-11)
    h200 = load_profile("h200", "sglang")
    priced = CostModel(GLM5, h200, 8, kernel_layout=layout)
    plain = CostModel(
        GLM5, h200, 8, kernel_layout=dataclasses.replace(layout, nsa_indexer_pair_s=0.0)
    )
    assert priced.prefill(2048) == plain.prefill(2048)
    one = priced.prefill(8192) - plain.prefill(8192)
    assert one == pytest.approx(GLM5.mixer_counts["mla"] * rate * 8192 * 8193 / 2, rel=1e-3)


# The skip-indexer module rows each forced sparse-MLA price was fitted on (kernel_layouts_sglang.
# SGLANG_DSA_SPARSE_MODULE), and the fit's largest error on them.
_SPARSE_TABLES = {
    ("b200", "trtllm"): ("zai-org/GLM-5.2-FP8", 0.01),
    ("b300", "trtllm"): ("nvidia/GLM-5.2-NVFP4", 0.01),
    ("b200", "flashmla_sparse"): ("zai-org/GLM-5.2", 0.06),
    ("b300", "flashmla_sparse"): ("nvidia/GLM-5.2-NVFP4", 0.04),
}


def test_the_forced_sparse_mla_modules_reproduce_their_table_rows() -> None:
    """Each measured module (floor + a rate a new token + a rate a selected key, a token's
    keys its position capped at 2,048) against every step-0, 8-head skip-indexer row of
    aiconfigurator_core 0.12.0's SGLang 0.5.14 table (batch 1/2/4 x 4k/8k/16k): trtllm
    within 1%, flashmla_sparse within 6%. Pricing every key at the top-k, or none, or
    only tokens, misses the trtllm rows by more (the batch-4 4k row: 16k tokens in
    sequences a quarter as long, 20% fewer keys than one 16k prompt)."""
    pd = pytest.importorskip("pandas")
    aic = pytest.importorskip("aiconfigurator_core")
    assert set(SGLANG_DSA_SPARSE_MODULE) == set(_SPARSE_TABLES)
    for (gpu, kernel), (model, tol) in _SPARSE_TABLES.items():
        table = (
            Path(aic.__file__).parent / f"systems/data/{gpu}_sxm/sparse_attention/sglang/"
            "0.5.14/dsa_context_module_perf.parquet"
        )
        d = pd.read_parquet(table)
        d = d[
            (d.step == 0)
            & (d.num_heads == 8)
            & (d.model == model)
            & (d.kernel_source == f"sglang_dsa_skip_indexer_{kernel}")
        ]
        assert len(d) == 6
        m = SGLANG_DSA_SPARSE_MODULE[(gpu, kernel)]
        assert m.kernel == kernel
        for batch, isl, ms in zip(d.batch_size, d.isl, d.latency, strict=True):
            keys = batch * keys_upto(int(isl), GLM5.index_topk)
            price = m.floor_s + m.token_s * batch * isl + m.key_s * keys
            assert price == pytest.approx(ms * 1e-3, rel=tol), (gpu, kernel, batch, isl)


def test_glm5_on_blackwell_prefills_through_the_measured_sparse_module_at_every_length() -> None:
    """SGLang 0.5.9 forces GLM-5's prefill onto sparse MLA on Blackwell
    (``SGLANG_NSA_FORCE_MLA``): at every length, 1k included, the layer's attention module
    is the measured one of the run's prefill backend (``--set nsa_prefill_backend``:
    trtllm, the fp8 scripts'; else SGLang's default flashmla_sparse), each new token over
    its position's keys capped at the top-k; the indexer stays priced apart, as before.
    Not on H200 (Hopper keeps its dense/padded-sparse rule), not at tp 4 (16 heads a rank:
    not fitted), not for DeepSeek-V3.2 (not forced)."""
    layout = sglang_kernel_layout(GLM5, "nightly-dev", 8, 1, 1, "b200")
    assert layout.nsa_sparse_module == SGLANG_DSA_SPARSE_MODULE[("b200", "flashmla_sparse")]
    trt = with_nsa_prefill_backend(layout, GLM5, 8, "b200", "trtllm")
    m = trt.nsa_sparse_module
    assert m == SGLANG_DSA_SPARSE_MODULE[("b200", "trtllm")]
    b300 = sglang_kernel_layout(GLM5, "nightly-dev", 8, 1, 1, "b300")
    assert (
        with_nsa_prefill_backend(b300, GLM5, 8, "b300", "trtllm").nsa_sparse_module
        == (SGLANG_DSA_SPARSE_MODULE[("b300", "trtllm")])
    )
    h200 = sglang_kernel_layout(GLM5, "glm5-hopper", 8, 1, 1, "h200")
    assert h200.nsa_sparse_module is None
    assert with_nsa_prefill_backend(h200, GLM5, 8, "h200", "trtllm") is h200
    assert sglang_kernel_layout(GLM5, "nightly-dev", 4, 1, 1, "b200").nsa_sparse_module is None
    v32 = dataclasses.replace(GLM5, name="deepseek-ai/DeepSeek-V3.2")
    assert sglang_kernel_layout(v32, "0.5.9", 8, 1, 1, "b200").nsa_sparse_module is None

    fp8 = dataclasses.replace(GLM5, kv_dtype="fp8")
    b200 = load_profile("b200", "sglang")
    forced = CostModel(fp8, b200, 8, kernel_layout=trt)
    dense = CostModel(fp8, b200, 8, kernel_layout=dataclasses.replace(trt, nsa_sparse_module=None))
    for n, cached in ((1024, 0), (8192, 0), (4096, 4096)):
        f = forced._aggregate([(n, cached)], [])
        keys = keys_upto(n + cached, 2048) - keys_upto(cached, 2048)
        assert f.prefill_topk_keys == keys
        parts = {kernel: s for _, kernel, s in forced._mla_parts(f)}
        measured = m.floor_s + m.token_s * n + m.key_s * keys
        # Kernel pricing: the projections, priced for every token in _mla_dense, come off.
        assert forced.mla_mode == "kernels/kernels"
        projections = sum(forced._projections(n))
        assert 0 < projections < 0.5 * measured
        assert parts["mla_sparse_module"] == pytest.approx(measured - projections, rel=1e-9)
        base = {kernel: s for _, kernel, s in dense._mla_parts(dense._aggregate([(n, cached)], []))}
        assert "mla_sparse_module" not in base
        assert parts.get("indexer_prefill") == base.get("indexer_prefill")  # not twice
    # Module pricing (the fp8 rows' profile): the measured module whole, 1.494 ms a layer
    # for an 8k prompt (the table's 1.498).
    forced.mla_mode = "module"
    kernel, per_layer = forced._dsa_sparse_module(forced._aggregate([(8192, 0)], []))
    assert kernel == "mla_sparse_module"
    assert per_layer == pytest.approx(1.494e-3, rel=0.005)
    forced.mla_mode = "kernels/kernels"
    assert forced.prefill(8192) != dense.prefill(8192)
    assert forced.prefill(1024) != dense.prefill(1024)


def test_the_forced_sparse_module_reads_the_heads_of_an_attention_rank_under_dp_attention() -> None:
    """The measured modules are of 8 query heads an attention rank: under attention DP the
    attention runs on ``tp / dp`` GPUs (``twin.engine.dp_attention``, its cost model at
    ``tp // dp``), so GLM-5 at tp 8 with 8 attention-DP ranks has all 64 heads on a rank
    (not fitted: the dense price), and at tp 16 with 2 ranks 8 (fitted, also under
    ``--set nsa_prefill_backend``)."""
    assert sglang_kernel_layout(GLM5, "nightly-dev", 8, 8, 1, "b200").nsa_sparse_module is None
    assert sglang_kernel_layout(GLM5, "nightly-dev", 8, 2, 1, "b200").nsa_sparse_module is None
    wide = sglang_kernel_layout(GLM5, "nightly-dev", 16, 2, 1, "b200")
    assert wide.nsa_sparse_module == SGLANG_DSA_SPARSE_MODULE[("b200", "flashmla_sparse")]
    trt = with_nsa_prefill_backend(wide, GLM5, 16, "b200", "trtllm", 2)
    assert trt.nsa_sparse_module == SGLANG_DSA_SPARSE_MODULE[("b200", "trtllm")]
