"""ModelSpec: cache bytes, FLOPs, validation, presets and Hugging Face configs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from twin.errors import TwinError
from twin.hf_config import from_hf_config
from twin.mixers import keys_upto
from twin.model import FLOP_KINDS, ModelSpec
from twin.presets import PRESETS, get_model

HF = Path(__file__).parent / "data" / "hf_configs"


# ---------------------------------------------------------------- known answers
def test_marconi_known_answer_17_4_gb_and_3_3x() -> None:
    """Marconi sec. 3: a 10K-token sequence, a checkpoint every 16 tokens, 17.4 GB, ~3.3x."""
    hybrid, llama = get_model("marconi-hybrid-7b"), get_model("llama-7b-transformer")
    n_tokens, every = 10_000, 16
    n_ckpt = n_tokens // every
    assert n_ckpt == 625
    hybrid_bytes = n_ckpt * hybrid.ssm_checkpoint_bytes + n_tokens * hybrid.kv_bytes_per_token
    assert hybrid_bytes == 17_397_760_000
    assert llama.kv_bytes_per_token * n_tokens == 5_242_880_000
    assert hybrid_bytes / (llama.kv_bytes_per_token * n_tokens) == pytest.approx(3.318, abs=1e-3)
    # The pieces, by hand: state d_model*N*2 B + conv (2d + 2N)*4*2 B per SSM layer.
    assert hybrid.ssm_state_bytes_per_layer == 4096 * 128 * 2 + (8192 + 256) * 4 * 2
    assert hybrid.kv_bytes_per_token == 4 * 2 * 32 * 128 * 2


@pytest.mark.parametrize(
    ("name", "kv", "ckpt"),
    [
        ("marconi-hybrid-7b", 65_536, 26_787_840),
        ("llama-7b-transformer", 524_288, 0),
        ("llama-3-8b", 131_072, 0),
        ("jamba-1.5-mini", 16_384, 28 * (8192 * 16 * 2 + 8192 * 4 * 2)),  # Mamba-1 conv: x only
        ("zamba2-7b", 13 * 2 * 32 * 224 * 2, 81 * (7168 * 64 * 2 + (7168 + 256) * 4 * 2)),
        ("nemotron-h-8b", 16_384, 24 * (8192 * 128 * 2 + (8192 + 2048) * 4 * 2)),
        ("mamba2-2.7b", 0, 64 * (5120 * 128 * 2 + (5120 + 256) * 4 * 2)),
    ],
)
def test_preset_bytes(name: str, kv: int, ckpt: int) -> None:
    m = get_model(name)
    assert (m.kv_bytes_per_token, m.ssm_checkpoint_bytes) == (kv, ckpt)


@pytest.mark.parametrize(
    ("name", "billions"),
    [
        ("llama-7b-transformer", 6.74),
        ("llama-3-8b", 8.03),
        ("mamba2-2.7b", 2.70),
        ("nemotron-h-8b", 8.1),
        ("jamba-1.5-mini", 51.5),
        ("qwen3.5-9b", 8.95),  # card: 9B (GGUF metadata: 8.95B)
        ("qwen3.5-35b-a3b", 35),
        ("qwen3-next-80b-a3b", 80),
        ("granite-4.0-h-small", 32),
        ("gpt-oss-20b", 20.91),  # gpt-oss model card: 20.91B total
        ("gemma-3-4b", 3.88),  # text tower: 3,880,099,328 (keras-hub gemma3_4b_text)
    ],
)
def test_parameter_counts_match_published_sizes(name: str, billions: float) -> None:
    assert get_model(name).n_params / 1e9 == pytest.approx(billions, rel=0.01)


def test_kinds_and_bytes_by_kind() -> None:
    hyb, tr, ssm = get_model("tiny-hybrid"), get_model("llama-3-8b"), get_model("mamba2-2.7b")
    assert (hyb.kind, tr.kind, ssm.kind) == ("hybrid", "transformer", "ssm")
    assert hyb.is_hybrid and not hyb.is_transformer and hyb.n_attention_layers > 0
    assert tr.is_transformer and not tr.is_hybrid
    assert tr.ssm_checkpoint_bytes == 0 and tr.ssm_state_bytes_per_layer == 0
    assert ssm.n_attention_layers == 0 and ssm.kv_bytes_per_token == 0
    assert ssm.prefill_flops(100)["attention"] == 0


# ---------------------------------------------------------------- FLOPs
@pytest.mark.parametrize("name", list(PRESETS))
@pytest.mark.parametrize(("a", "b"), [(0, 5), (1, 1), (7, 300), (4096, 4096), (100, 20_000)])
def test_prefill_flops_additive_over_splits(name: str, a: int, b: int) -> None:
    m = get_model(name)
    whole, first, rest = m.prefill_flops(a + b, 0), m.prefill_flops(a, 0), m.prefill_flops(b, a)
    for k in FLOP_KINDS:
        assert whole[k] == first[k] + rest[k]
    assert whole.total == first.total + rest.total


def test_additivity_with_sliding_window_across_the_window() -> None:
    m = dataclasses.replace(get_model("tiny-transformer"), sliding_window=50)
    for a in (0, 10, 49, 50, 51, 200):
        assert (
            m.prefill_flops(300, 0).total
            == m.prefill_flops(a, 0).total + m.prefill_flops(300 - a, a).total
        )


def test_attention_grows_with_cached_context_ssm_and_mlp_do_not() -> None:
    m = get_model("marconi-hybrid-7b")
    short, long = m.prefill_flops(512, 0), m.prefill_flops(512, 16_384)
    assert long["attention"] > short["attention"]
    assert long["ssm"] == short["ssm"] > 0
    assert long["mlp"] == short["mlp"] > 0
    # The quadratic term is exactly 4 * heads * head_dim * (extra keys) per layer.
    extra_keys = 512 * 16_384
    assert long["attention"] - short["attention"] == 4 * 4 * 32 * 128 * extra_keys


def test_attended_keys_match_brute_force() -> None:
    for window in (None, 1, 7, 64):
        for n_cached, n_new in ((0, 1), (0, 100), (30, 5), (100, 37)):
            cap = window or 10**9
            brute = sum(min(p + 1, cap) for p in range(n_cached, n_cached + n_new))
            assert keys_upto(n_cached + n_new, window) - keys_upto(n_cached, window) == brute


def test_sliding_window_caps_attended_keys() -> None:
    m = dataclasses.replace(get_model("tiny-transformer"), sliding_window=128)
    assert keys_upto(10_010, 128) - keys_upto(10_000, 128) == 10 * 128
    # Past the window, the per-token cost no longer depends on the context length.
    assert m.prefill_flops(10, 1_000) == m.prefill_flops(10, 100_000)
    full = get_model("tiny-transformer")
    assert full.prefill_flops(10, 100_000)["attention"] > m.prefill_flops(10, 100_000)["attention"]


def test_linear_flops_are_twice_the_matmul_parameters() -> None:
    """At one token with no context, FLOPs = 2 x (non-embedding matrix params) + the core."""
    m = get_model("tiny-transformer")
    d, layers = m.d_model, m.n_attention_layers
    norms = (m.n_attention_layers + m.n_mlp_layers + 1) * d
    matrix_params = m.n_params - norms - 2 * m.vocab_size * d
    core = layers * 4 * m.n_heads * m.head_dim * 1  # one query, one key
    assert m.prefill_flops(1).total == 2 * matrix_params + core


def test_moe_counts_top_k_experts_and_router() -> None:
    m = get_model("jamba-1.5-mini")
    per_layer = m.prefill_flops(1)["moe"] / m.n_moe_layers
    assert per_layer == 2 * 4096 * 14336 * 3 * 2 + 2 * 4096 * 16


def test_ssm_flops_by_hand_for_tiny_hybrid() -> None:
    m = get_model("tiny-hybrid")  # d 64, d_inner 128, N 16, P 16 (8 heads), G 1, Q 16
    n = 10
    in_proj = 2 * n * 64 * (2 * 128 + 2 * 16 + 8)
    conv = 2 * n * (128 + 32) * 4
    scan = n * (2 * 128 * (2 * 16 + 16) + 2 * 16 * 16 * 1)
    out_proj = 2 * n * 128 * 64
    assert m.prefill_flops(n)["ssm"] == 3 * (in_proj + conv + scan + out_proj)


@pytest.mark.parametrize(("n_new", "n_cached"), [(-1, 0), (1, -1), (1.5, 0), (True, 0)])
def test_bad_token_counts_are_refused(n_new: object, n_cached: object) -> None:
    with pytest.raises(TwinError, match=r"n_new|n_cached"):
        get_model("tiny-hybrid").prefill_flops(n_new, n_cached)  # type: ignore[arg-type]


# ---------------------------------------------------------------- validation
def _tiny(**changes: object) -> ModelSpec:
    return dataclasses.replace(get_model("tiny-hybrid"), **changes)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"d_model": 0}, "d_model"),
        ({"n_ssm_layers": -1}, "n_ssm_layers"),
        ({"n_heads": 2.5}, "n_heads"),
        ({"head_dim": True}, "head_dim"),
        ({"mlp_gated": 1}, "mlp_gated"),
        ({"n_kv_heads": 3}, "n_kv_heads"),
        ({"n_heads": 0}, "n_heads"),
        ({"vocab_size": 0}, "vocab_size"),
        ({"ssm_d_state": 0}, "ssm_d_state"),
        ({"ssm_head_dim": 48}, "ssm_head_dim"),
        ({"ssm_expand": 0}, "ssm_expand"),
        ({"ssm_expand": 1.01}, "ssm_expand"),
        ({"sliding_window": 0}, "sliding_window"),
        ({"n_mlp_layers": 2, "mlp_d_ff": 0}, "mlp_d_ff"),
        ({"n_moe_layers": 1, "moe_n_experts": 4, "moe_top_k": 5, "moe_d_ff": 8}, "moe_top_k"),
        ({"n_moe_layers": 1}, "moe_n_experts"),
        ({"n_attention_layers": 0, "n_ssm_layers": 0}, "n_attention_layers"),
    ],
)
def test_validation_names_the_field(changes: dict[str, object], field: str) -> None:
    with pytest.raises(TwinError, match=repr(field)):
        _tiny(**changes)


def test_fractional_expand_is_allowed_when_it_gives_whole_channels() -> None:
    m = _tiny(d_model=48, ssm_expand=7168 / 3072, n_heads=4, head_dim=12, ssm_head_dim=16)
    assert m.d_inner == 112


def test_spec_is_frozen_and_round_trips_through_json() -> None:
    m = get_model("zamba2-7b")
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.d_model = 1  # type: ignore[misc]
    data = json.loads(json.dumps(m.to_dict()))
    assert data["kv_bytes_per_token"] == m.kv_bytes_per_token and data["kind"] == "hybrid"
    assert ModelSpec.from_dict(data) == m
    with pytest.raises(TwinError, match="bogus"):
        ModelSpec.from_dict({**data, "bogus": 1})
    with pytest.raises(TwinError, match="incomplete"):
        ModelSpec.from_dict({"name": "x"})


# ---------------------------------------------------------------- presets
def test_presets_registry() -> None:
    names = list(PRESETS)
    for expected in (
        "marconi-hybrid-7b",
        "llama-3-8b",
        "llama-7b-transformer",
        "jamba-1.5-mini",
        "zamba2-7b",
        "nemotron-h-8b",
        "mamba2-2.7b",
        "tiny-hybrid",
        "tiny-transformer",
        "tiny-ssm",
    ):
        assert expected in names
        assert PRESETS[expected].source
    with pytest.raises(TwinError, match=r"unknown model 'gpt-9'.*marconi-hybrid-7b"):
        get_model("gpt-9")


# ---------------------------------------------------------------- HF configs
@pytest.mark.parametrize(
    ("file", "layers", "preset"),
    [
        ("llama-3-8b.json", (32, 0, 32, 0), "llama-3-8b"),
        ("mistral-7b-v0.1.json", (32, 0, 32, 0), None),
        ("jamba-1.5-mini.json", (4, 28, 16, 16), "jamba-1.5-mini"),
        ("zamba2-7b.json", (13, 81, 13, 0), "zamba2-7b"),
        ("nemotron-h-8b-base.json", (4, 24, 24, 0), "nemotron-h-8b"),
        ("mamba2-2.7b.json", (0, 64, 0, 0), "mamba2-2.7b"),
        ("mamba-codestral-7b.json", (0, 64, 0, 0), None),
    ],
)
def test_hf_configs_parse(file: str, layers: tuple[int, ...], preset: str | None) -> None:
    m = from_hf_config(HF / file)
    assert (m.n_attention_layers, m.n_ssm_layers, m.n_mlp_layers, m.n_moe_layers) == layers
    assert str(HF / file) in m.source
    if preset is not None:
        # Same shape as the hand-written preset, field for field.
        p = get_model(preset)
        assert dataclasses.replace(m, name=p.name, source=p.source) == p
        assert (m.kv_bytes_per_token, m.ssm_checkpoint_bytes, m.weight_bytes) == (
            p.kv_bytes_per_token,
            p.ssm_checkpoint_bytes,
            p.weight_bytes,
        )


def test_qwen3_dense_known_answer() -> None:
    """Qwen/Qwen3-32B's published config.json (huggingface.co/Qwen/Qwen3-32B): the model
    card gives 32.8B parameters, 31.2B of them outside the (untied) embeddings, 64
    layers, 64 query and 8 KV heads; head_dim is 128 from the file, not 5120 / 64 = 80."""
    m = from_hf_config(HF / "qwen3-32b.json", name="Qwen/Qwen3-32B")
    assert (m.n_attention_layers, m.n_mlp_layers, m.n_ssm_layers, m.n_moe_layers) == (64, 64, 0, 0)
    assert (m.n_heads, m.n_kv_heads, m.head_dim, m.mlp_d_ff) == (64, 8, 128, 25600)
    assert m.sliding_window is None and not m.tie_embeddings
    assert m.n_params == 32_762_106_880  # 32.8B
    embeddings = 2 * 151_936 * 5120
    assert (m.n_params - embeddings) / 1e9 == pytest.approx(31.2, abs=0.05)
    # K and V: 64 layers x 8 heads x 128 dims x 2 bytes.
    assert m.kv_bytes_per_token == 2 * 64 * 8 * 128 * 2
    assert "model_type qwen3" in m.source


def test_qwen3_sliding_window_refused(tmp_path: Path) -> None:
    cfg = json.loads((HF / "qwen3-32b.json").read_text())
    cfg.update(use_sliding_window=True, sliding_window=4096)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(TwinError, match="use_sliding_window"):
        from_hf_config(tmp_path)


def test_nemotron_fixture_matches_preset_bytes() -> None:
    m = ModelSpec.from_hf_config(HF / "nemotron-h-8b-base.json")
    p = get_model("nemotron-h-8b")
    assert m.name == "nvidia/Nemotron-H-8B-Base-8K"
    assert m.ssm_checkpoint_bytes == p.ssm_checkpoint_bytes == 52_297_728
    assert m.kv_bytes_per_token == p.kv_bytes_per_token == 16_384
    assert m.prefill_flops(4096, 1000) == p.prefill_flops(4096, 1000)


def test_hf_details() -> None:
    mistral = from_hf_config(HF / "mistral-7b-v0.1.json")
    assert mistral.sliding_window == 4096 and mistral.n_kv_heads == 8
    codestral = from_hf_config(HF / "mamba-codestral-7b.json", name="codestral")
    assert codestral.name == "codestral" and codestral.ssm_groups == 8
    assert codestral.n_params / 1e9 == pytest.approx(7.29, rel=0.01)
    assert from_hf_config(HF / "mamba2-2.7b.json").vocab_size == 50288  # padded to 16


def test_hf_folder_and_mamba_ssm_hybrid(tmp_path: Path) -> None:
    cfg = {
        "d_model": 256,
        "n_layer": 8,
        "d_intermediate": 512,
        "vocab_size": 1000,
        "ssm_cfg": {"layer": "Mamba2", "d_state": 64},
        "attn_layer_idx": [3, 7],
        "attn_cfg": {"num_heads": 8, "num_heads_kv": 2},
        "pad_vocab_size_multiple": 8,
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m = from_hf_config(tmp_path)
    assert (m.n_attention_layers, m.n_ssm_layers, m.n_mlp_layers) == (2, 6, 8)
    assert (m.n_kv_heads, m.head_dim, m.ssm_d_state, m.vocab_size) == (2, 32, 64, 1000)
    assert m.name == tmp_path.name


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"model_type": "gpt2"}, "unsupported model_type 'gpt2'"),
        ({"hidden_size": None}, "missing key 'hidden_size'"),
        ({"ssm_state_size": "big"}, "'ssm_state_size' must be an integer"),
        ({"hybrid_override_pattern": "M-X*"}, "'hybrid_override_pattern'.*'X'"),
        ({"n_groups": 0}, "'n_groups' must be at least 1"),
    ],
)
def test_hf_errors_name_file_and_key(tmp_path: Path, edit: dict[str, object], message: str) -> None:
    data = json.loads((HF / "nemotron-h-8b-base.json").read_text())
    data.update(edit)
    data = {k: v for k, v in data.items() if v is not None}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(TwinError, match=message) as err:
        from_hf_config(path)
    assert str(path) in str(err.value)


def test_hf_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(TwinError, match="no such file"):
        from_hf_config(tmp_path / "absent.json")
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(TwinError, match="not a readable JSON"):
        from_hf_config(tmp_path / "x.json")
    (tmp_path / "y.json").write_text("[1, 2]")
    with pytest.raises(TwinError, match="JSON object"):
        from_hf_config(tmp_path / "y.json")
