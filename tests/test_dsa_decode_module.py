"""SGLang's sparse-MLA decode on Hopper (``KernelLayout.nsa_decode_module``): a
DeepSeek-sparse-attention model's decode step reads at most ``index_topk`` latent keys a
sequence, and its indexer scores every key, priced from the measured module
(``twin.engine.kernel_layouts_sglang.SGLANG_DSA_DECODE_MODULE``,
``MlaPricing._dsa_decode_module``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from twin.costmodel import CostModel
from twin.costmodel.kernel_layout import SparseMlaDecodeModule
from twin.costmodel.profile_store import load_profile
from twin.costmodel.step_features import aggregate_spread, aggregate_step
from twin.engine.kernel_layouts_sglang import SGLANG_DSA_DECODE_MODULE, sglang_kernel_layout
from twin.errors import TwinError
from twin.precision import with_precision
from twin.presets import get_model

GLM5_FP8 = with_precision(get_model("glm-5"), "fp8", None)
LAYERS = GLM5_FP8.mixer_counts["mla"]


def _layout(model=GLM5_FP8, tp=8, dp=1, gpu="h200"):  # type: ignore[no-untyped-def]
    return sglang_kernel_layout(model, "glm5-hopper", tp, dp, 1, gpu)


def test_the_decode_module_follows_the_cache_heads_precision_and_gpu() -> None:
    """InferenceMAX's ``glm5_fp8_h200.sh`` (bf16 cache: SGLang 0.5.9's Hopper default, decode
    ``fa3``) takes the fa3 module; an fp8 cache ``flashmla_kv``'s; 16 heads a rank (tp 4),
    bf16 projections, a Blackwell GPU and a model without an indexer keep the dense price."""
    assert _layout().nsa_decode_module is SGLANG_DSA_DECODE_MODULE[("h200", "fa3")]
    fp8_kv = with_precision(get_model("glm-5"), "fp8", "fp8")
    assert _layout(fp8_kv).nsa_decode_module is SGLANG_DSA_DECODE_MODULE[("h200", "flashmla_kv")]
    assert _layout(tp=4).nsa_decode_module is None
    assert _layout(tp=16, dp=2).nsa_decode_module is not None  # 8 heads an attention rank
    assert _layout(get_model("glm-5")).nsa_decode_module is None  # bf16 projections
    assert _layout(gpu="b200").nsa_decode_module is None
    ds = with_precision(get_model("deepseek-r1"), "fp8", None)
    assert _layout(ds).nsa_decode_module is None


def test_the_decode_keys_are_capped_at_the_top_k_per_sequence() -> None:
    kinds = GLM5_FP8.mixer_counts
    contexts = [100, 2047, 2048, 9000]
    f = aggregate_step((), contexts, kinds, 0, 1, 1, 0, 2048)
    assert f.decode_keys == sum(contexts) + 4
    assert f.decode_topk_keys == 101 + 2048 + 2048 + 2048
    assert aggregate_step((), contexts, kinds, 0, 1, 1).decode_topk_keys == 0  # no top-k
    even = aggregate_spread((), 4, 4 * 1500 + 3, kinds, 0, 1, 1, 0, 2048)
    assert even == aggregate_step((), [1501, 1501, 1501, 1500], kinds, 0, 1, 1, 0, 2048)
    assert even.decode_topk_keys == 3 * 1502 + 1501


def test_a_decode_step_s_attention_is_the_measured_module() -> None:
    """Each MLA layer of a pure decode step costs the module's price (it holds the
    projections and the indexer; the step's pre-norm and all-reduce stay), exactly where
    the decode is priced by module fits (the rows' 0.5.10.post1 tables); past the top-k a
    longer context adds only the indexer's keys, where the dense price read every key,
    in either pricing mode."""
    shipped = load_profile("h200", "sglang")
    layout = _layout()
    module = layout.nsa_decode_module
    assert module is not None
    dense_layout = dataclasses.replace(layout, nsa_decode_module=None)
    for profile, mode in ((shipped.at_release("0.5.10.post1"), "module"), (shipped, "kernels")):
        priced = CostModel(GLM5_FP8, profile, 8, kernel_layout=layout)
        dense = CostModel(GLM5_FP8, profile, 8, kernel_layout=dense_layout)
        assert (priced.mla_mode == "module") == (mode == "module")
        for batch in (8, 64):
            short, long = [4096] * batch, [8192] * batch
            grown = priced.decode(long) - priced.decode(short)
            assert grown == pytest.approx(LAYERS * module.index_key_s * batch * 4096, rel=1e-6)
            assert dense.decode(long) - dense.decode(short) > 2 * grown
            if mode != "module":
                continue
            cost = priced.decode(long, breakdown=True)
            attn = cost.items["attention"]  # type: ignore[union-attr]
            indexer = sum(priced._indexer(batch))
            per_layer = attn["mla_sparse_decode_module"] / LAYERS + indexer
            whole = module.price(batch, batch * 8193, batch * 2048)
            # The twin's own indexer launches can exceed the module's floor (8 sequences:
            # by 0.4 us); then the layer pays them and the module's key terms.
            launches = module.price(batch, 0, 0)
            assert per_layer == pytest.approx(whole - launches + max(launches, indexer))
    # Below the top-k the selection is not paid; a sequence's own keys stop at the top-k.
    more = module.index_key_s * 8000 + (module.key_s * 4 + module.seq_key_s) * 1048
    assert module.price(4, 4000, 4000) + module.past_topk_s == pytest.approx(
        module.price(4, 12000, 4 * 2048) - more
    )


def test_a_model_without_the_module_prices_as_before() -> None:
    profile = load_profile("h200", "sglang")
    ds = with_precision(get_model("deepseek-r1"), "fp8", None)
    layout = _layout(ds)
    assert layout.nsa_decode_module is None
    assert CostModel(ds, profile, 8, kernel_layout=layout).decode([4096] * 16) == CostModel(
        ds, profile, 8
    ).decode([4096] * 16)


def test_a_module_refuses_negative_rates() -> None:
    with pytest.raises(TwinError, match="every rate must be >= 0"):
        SparseMlaDecodeModule(1e-5, -1.0, 0.0, 0.0, 0.0)
    with pytest.raises(TwinError, match="every rate must be >= 0"):
        SparseMlaDecodeModule(1e-5, 0.0, 0.0, 0.0, 0.0, -1e-9)
    assert SparseMlaDecodeModule(1e-5, 1e-7, 1e-10, 1e-10, 1e-5).price(0, 0, 0) == 0.0


def test_the_decode_modules_reproduce_their_table_rows() -> None:
    """The fits against aiconfigurator_core 0.12.0's SGLang 0.5.14 H200 rows (GLM-5-FP8,
    tp 8, batches 1-256, cached prefixes to 32k): median within 5%, P90 within 8.5%, every
    row within 16%."""
    pd = pytest.importorskip("pandas")
    aic = pytest.importorskip("aiconfigurator_core")
    table = (
        Path(aic.__file__).parent
        / "systems/data/h200_sxm/sparse_attention/sglang/0.5.14/dsa_generation_module_perf.parquet"
    )
    d = pd.read_parquet(table)
    for backend in ("fa3", "flashmla_kv"):
        rows = d[
            (d.model == "zai-org/GLM-5-FP8")
            & (d.kernel_source == f"sglang_dsa_indexer_{backend}")
            & (d.tp_size == 8)
            & (d.batch_size <= 256)
            & (d.step <= 32768)
        ]
        assert len(rows) == 125
        m = SGLANG_DSA_DECODE_MODULE[("h200", backend)]
        errors = []
        for batch, step, ms in zip(rows.batch_size, rows.step, rows.latency, strict=True):
            keys = int(step) + 1
            price = m.price(int(batch), batch * keys, batch * min(keys, GLM5_FP8.index_topk))
            errors.append(abs(price / (ms * 1e-3) - 1.0))
        errors.sort()
        assert errors[len(errors) // 2] < 0.05, backend
        assert errors[int(0.9 * len(errors))] < 0.085, backend
        assert errors[-1] < 0.16, backend
