"""Per-layer mixer kinds (issue 13): patterns, bytes, FLOPs and Hugging Face configs.

Known answers are the models' published config.json values (each preset in
``twin/presets.py`` cites its file), worked out by hand here.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from twin import mixers as mx
from twin.errors import TwinError
from twin.hf_config import from_hf_config
from twin.model import ModelSpec
from twin.presets import get_model, override_model

HF = Path(__file__).parent / "data" / "hf_configs"

NEW = (
    "qwen3.5-9b",
    "qwen3.5-35b-a3b",
    "qwen3-next-80b-a3b",
    "granite-4.0-h-small",
    "falcon-h1-7b",
    "gpt-oss-20b",
    "gemma-3-4b",
)

# GDN layer of Qwen3-Next / Qwen3.5 (linear_num_value_heads 32, key/value head dim 128,
# linear_num_key_heads 16, conv 4): state 32 x 128 x 128 bf16 + conv (2*16*128 + 32*128) x 4.
GDN_QWEN = 32 * 128 * 128 * 2 + (2 * 16 * 128 + 32 * 128) * 4 * 2


@pytest.mark.parametrize(
    ("name", "pattern", "kv", "state"),
    [
        # 8 full-attention layers x K,V x 4 kv heads x 256 x bf16; 24 GDN layers.
        ("qwen3.5-9b", "(3 gdn, 1 attn) x 8; ffn mlp", 8 * 2 * 4 * 256 * 2, 24 * GDN_QWEN),
        ("qwen3.5-35b-a3b", "(3 gdn, 1 attn) x 10; ffn moe", 10 * 2 * 2 * 256 * 2, 30 * GDN_QWEN),
        ("qwen3-next-80b-a3b", "(3 gdn, 1 attn) x 12; ffn moe", 12 * 2048, 36 * GDN_QWEN),
        # Mamba-1: d_inner 8192 x N 16 state + 8192 x 4 conv (x only, no B/C channels).
        ("jamba-1.5-mini", None, 4 * 2 * 8 * 128 * 2, 28 * (8192 * 16 * 2 + 8192 * 4 * 2)),
        # Mamba2 with 128 heads x 64, N 128, 1 group: conv over x, B, C.
        (
            "granite-4.0-h-small",
            "(5 mamba2, 1 attn, 4 mamba2) x 4; ffn moe",
            4 * 2 * 8 * 128 * 2,
            36 * (8192 * 128 * 2 + (8192 + 2 * 128) * 4 * 2),
        ),
        # Parallel hybrid: all 44 layers hold KV and a Mamba2 state (24 x 128 ch, N 256).
        (
            "falcon-h1-7b",
            "44 attn+mamba2; ffn mlp",
            44 * 2 * 2 * 128 * 2,
            44 * (3072 * 256 * 2 + (3072 + 2 * 256) * 4 * 2),
        ),
        ("gpt-oss-20b", "(1 swa, 1 attn) x 12; ffn moe", 24 * 2 * 8 * 64 * 2, 0),
        ("gemma-3-4b", "(5 swa, 1 attn) x 5, 4 swa; ffn mlp", 34 * 2 * 4 * 256 * 2, 0),
    ],
)
def test_known_answers(name: str, pattern: str | None, kv: int, state: int) -> None:
    m = get_model(name)
    if pattern is not None:
        assert m.pattern == pattern
    assert (m.kv_bytes_per_token, m.ssm_checkpoint_bytes) == (kv, state)


def test_bytes_split_by_kind() -> None:
    g = get_model("gemma-3-4b")  # 29 sliding-window + 5 full layers
    assert g.mixer_counts == {"swa": 29, "attention": 5}
    assert g.kv_bytes_per_token_of("swa") == 29 * 4096
    assert g.kv_bytes_per_token_of("attention") == 5 * 4096
    q = get_model("qwen3-next-80b-a3b")
    assert q.state_bytes_of("gdn") == q.ssm_checkpoint_bytes == 36 * GDN_QWEN
    assert (q.n_attention_layers, q.n_ssm_layers, q.n_mlp_layers, q.n_moe_layers) == (12, 36, 0, 48)
    f = get_model("falcon-h1-7b")
    assert (f.n_attention_layers, f.n_ssm_layers, f.n_mlp_layers) == (44, 44, 44)


# ---------------------------------------------------------------- FLOPs
def test_gdn_flops_by_hand() -> None:
    m = get_model("tiny-gdn-hybrid")  # d 64; GDN 2 key heads, 4 value heads, dims 16, C 16
    n = 10
    kw, vw = 2 * 16, 4 * 16
    in_proj = 2 * n * 64 * (2 * kw + 2 * vw + 2 * 4)
    conv = 2 * n * (2 * kw + vw) * 4
    core = n * 4 * (6 * 16 * 16 + 4 * 16 * 16 + 6 * 16 * 16 + 16 * 16)
    out = 2 * n * vw * 64
    assert m.prefill_flops_by_mixer(n)["gdn"] == 3 * (in_proj + conv + core + out)


def test_mamba1_flops_by_hand() -> None:
    m = get_model("tiny-mamba1-hybrid")  # d 64, d_inner 128, N 8, dt rank ceil(64/16) = 4
    n = 7
    per = (
        2 * n * 64 * 256  # in_proj -> x, z
        + 2 * n * 128 * 4  # conv
        + 2 * n * 128 * (4 + 16)  # x_proj
        + 2 * n * 4 * 128  # dt_proj
        + n * 128 * (8 * 8 + 2)  # selective scan
        + 2 * n * 128 * 64  # out_proj
    )
    assert m.prefill_flops_by_mixer(n)["mamba1"] == 3 * per


def test_swa_flops_cap_keys_at_the_window() -> None:
    m = get_model("tiny-swa")  # window 8; 3 swa + 1 full layer
    f = m.prefill_flops_by_mixer(1, 100)  # one token after 100: sees 8 keys vs 101
    proj = 2 * 64 * (64 + 2 * 32) + 2 * 64 * 64
    assert f["swa"] == 3 * (proj + 4 * 64 * 8)
    assert f["attention"] == proj + 4 * 64 * 101


@pytest.mark.parametrize(
    ("n", "cached", "window", "keys", "kv_rows"),
    [
        (4, 0, None, 1 + 2 + 3 + 4, 4),  # full attention, no context: a triangle
        (2, 5, None, 6 + 7, 7),  # after 5 cached: every row read
        (3, 0, 8, 1 + 2 + 3, 3),  # inside the window: as full attention
        (2, 10, 4, 4 + 4, 4 + 2),  # past it: 4 keys a query; the window's rows + the new ones
        (6, 2, 4, 3 + 4 + 4 + 4 + 4 + 4, 8),  # starting inside it: every cached row + 6 new
    ],
)
def test_a_chunks_keys_and_kv_rows_by_hand(
    n: int, cached: int, window: int | None, keys: int, kv_rows: int
) -> None:
    """``chunk_keys`` / ``chunk_kv_rows`` (the Python step's, the attention features' and,
    compiled, the compiled step's one rule) against hand counts: the compiled step's ``==``
    tests compare the rule with itself, so a change to it would pass them."""
    assert mx.chunk_keys(n, cached, window) == keys
    assert mx.chunk_kv_rows(n, cached, window) == kv_rows


def test_gated_attention_doubles_the_query_projection() -> None:
    m = get_model("tiny-gdn-hybrid")
    plain = dataclasses.replace(m, attn_output_gate=False)
    extra = m.prefill_flops(5)["attention"] - plain.prefill_flops(5)["attention"]
    assert extra == 2 * 5 * 64 * 64  # one more d x (heads x head_dim) GEMM
    assert m.n_params - plain.n_params == 64 * 64


@pytest.mark.parametrize("name", [*NEW, "jamba-1.5-mini", "tiny-swa", "tiny-gdn-hybrid"])
def test_flops_exactly_additive(name: str) -> None:
    m = get_model(name)
    for a, b, c in ((100, 37, 0), (5000, 3000, 200), (1, 1, 129)):
        whole = m.prefill_flops_by_mixer(a + b, c)
        parts = [m.prefill_flops_by_mixer(a, c), m.prefill_flops_by_mixer(b, c + a)]
        assert whole == {k: parts[0][k] + parts[1][k] for k in whole}


def test_mamba1_scan_is_not_priced_as_mamba2() -> None:
    jamba = get_model("jamba-1.5-mini")
    as_mamba2 = dataclasses.replace(
        jamba, layers=tuple(t.replace("mamba1", "mamba2") for t in jamba.layers)
    )
    assert jamba.prefill_flops(1000)["ssm"] != as_mamba2.prefill_flops(1000)["ssm"]
    assert mx.mamba1_scan_flops_per_channel(16) == 130


# ---------------------------------------------------------------- configs
@pytest.mark.parametrize("name", NEW)
def test_hf_config_equals_preset(name: str) -> None:
    m = from_hf_config(HF / f"{name}.json")
    p = get_model(name)
    assert dataclasses.replace(m, name=p.name, source=p.source) == p


def test_pattern_validation() -> None:
    base = dict(name="x", d_model=64, vocab_size=10, n_heads=2, n_kv_heads=1, head_dim=32)
    with pytest.raises(TwinError, match=r"layers\[1\] = 'lstm/mlp'"):
        ModelSpec(**base, layers=("attention/mlp", "lstm/mlp"), mlp_d_ff=8)
    with pytest.raises(TwinError, match="sliding_window"):
        ModelSpec(**base, layers=("swa/mlp",), mlp_d_ff=8)
    with pytest.raises(TwinError, match=r"n_attention_layers.*is 3 but the layer pattern has 1"):
        ModelSpec(**base, layers=("attention/mlp",), mlp_d_ff=8, n_attention_layers=3)
    with pytest.raises(TwinError, match="gdn_k_heads"):
        ModelSpec(**base, layers=("gdn/mlp",), mlp_d_ff=8)


def test_round_trip_and_model_set() -> None:
    m = get_model("gpt-oss-20b")
    d = m.to_dict()
    assert d["pattern"] == "(1 swa, 1 attn) x 12; ffn moe"
    d["layers"] = list(d["layers"])  # as JSON gives it back
    assert ModelSpec.from_dict(d) == m
    w = override_model(m, ["sliding_window=4096"])
    assert w.kv_bytes_per_token == m.kv_bytes_per_token
    assert w.prefill_flops(8192)["attention"] > m.prefill_flops(8192)["attention"]
    flipped = override_model(get_model("tiny-swa"), ["layers=swa/mlp,attention/mlp"])
    assert flipped.mixer_counts == {"swa": 1, "attention": 1}
    assert flipped.n_attention_layers == 2


def test_models_show_prints_pattern_and_bytes() -> None:
    from typer.testing import CliRunner

    from twin.cli import app

    out = CliRunner().invoke(app, ["models", "show", "qwen3.5-9b"])
    assert out.exit_code == 0, out.output
    assert "layers: (3 gdn, 1 attn) x 8; ffn mlp" in out.output
    assert "32,768" in out.output and f"{24 * GDN_QWEN:,}" in out.output
    out = CliRunner().invoke(app, ["models", "show", str(HF / "gpt-oss-20b.json")])
    assert out.exit_code == 0, out.output
    assert "(1 swa, 1 attn) x 12" in out.output and "window 128" in out.output


def test_hf_hybrid_configs_refuse_bad_input(tmp_path: Path) -> None:
    import json

    bad = json.loads((HF / "gpt-oss-20b.json").read_text())
    bad["layer_types"] = ["sliding_attention", "linear_attention"] * 12
    (tmp_path / "config.json").write_text(json.dumps(bad))
    with pytest.raises(TwinError, match=r"config.json: key 'layer_types' has unknown layer"):
        from_hf_config(tmp_path)
    wrapper = {"model_type": "qwen3_5", "vision_config": {}}
    (tmp_path / "config.json").write_text(json.dumps(wrapper))
    with pytest.raises(TwinError, match="needs a 'text_config' object"):
        from_hf_config(tmp_path)
    short = json.loads((HF / "falcon-h1-7b.json").read_text())
    short["mamba_d_head"] = 100  # 24 x 100 != mamba_d_ssm 3072
    (tmp_path / "config.json").write_text(json.dumps(short))
    with pytest.raises(TwinError, match="mamba_d_head"):
        from_hf_config(tmp_path)
