"""Hugging Face config import of the measured set's large MoE models (``twin.hf_moe``):
each imported shape is its preset's (``twin.preset_measured``, read from the same
configs), and the layer rules and refusals are the configuration classes'."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from twin.errors import TwinError
from twin.hf_config import from_hf_config
from twin.presets import get_model

HF = Path(__file__).parent / "data" / "hf_configs"
# What the import leaves to the caller (the checkpoint's quantisation) or names itself.
NOT_SHAPE = {"name", "source", "precision", "moe_precision", "kv_dtype"}


def _shape(m: object) -> dict[str, object]:
    return {k: v for k, v in dataclasses.asdict(m).items() if k not in NOT_SHAPE}  # type: ignore[call-overload]


@pytest.mark.parametrize(
    "name", ["deepseek-v3", "kimi-k2.5", "glm-5", "minimax-m2.5", "qwen3-235b-a22b"]
)
def test_an_imported_config_is_its_preset_s_shape(name: str) -> None:
    imported = from_hf_config(HF / f"{name}.json")
    preset = get_model(name)
    assert _shape(imported) == _shape(preset)
    assert imported.kv_bytes_per_token == preset.kv_bytes_per_token


def test_deepseek_v3_layers_by_hand() -> None:
    m = from_hf_config(HF / "deepseek-v3.json")
    # 3 dense MLA layers, then 58 MLA + MoE; the latent: 512 + 64 values a layer.
    assert m.layers[:4] == ("mla/mlp",) * 3 + ("mla/moe",)
    assert (m.n_moe_layers, m.n_mlp_layers, m.mtp_layers) == (58, 3, 1)
    assert m.kv_bytes_per_token == 61 * (512 + 64) * 2
    assert m.moe_shared_d_ff == 2048


def _write(tmp_path: Path, name: str, **changes: object) -> Path:
    data = json.loads((HF / f"{name}.json").read_text())
    data.update(changes)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return path


def test_the_moe_layer_rules(tmp_path: Path) -> None:
    # DeepSeek: MoE from first_k_dense_replace on where the index is a multiple of
    # moe_layer_freq (layers 4 and 6 of 8 at 3 dense, every 2nd).
    m = from_hf_config(_write(tmp_path, "deepseek-v3", moe_layer_freq=2, num_hidden_layers=8))
    assert m.layers == ("mla/mlp",) * 4 + ("mla/moe", "mla/mlp") * 2
    # A null q_lora_rank: one query projection.
    assert from_hf_config(_write(tmp_path, "deepseek-v3", q_lora_rank=None)).q_lora_rank == 0
    # Qwen3-MoE: mlp_only_layers are dense, and only every decoder_sparse_step-th is MoE.
    q = from_hf_config(
        _write(
            tmp_path,
            "qwen3-235b-a22b",
            num_hidden_layers=4,
            decoder_sparse_step=2,
            mlp_only_layers=[3],
        )
    )
    assert q.layers == ("attention/mlp", "attention/moe", "attention/mlp", "attention/mlp")
    assert q.mlp_d_ff == 12288


@pytest.mark.parametrize(
    ("name", "changes", "message"),
    [
        ("deepseek-v3", {"kv_lora_rank": None}, "missing key 'kv_lora_rank'"),
        ("qwen3-235b-a22b", {"mlp_only_layers": [94]}, "mlp_only_layers' must be a list"),
        ("qwen3-235b-a22b", {"use_sliding_window": True}, "use_sliding_window' true is not"),
        ("minimax-m2.5", {"num_local_experts": 0}, "num_local_experts"),
    ],
)
def test_bad_configs_are_refused_in_one_line(
    tmp_path: Path, name: str, changes: dict[str, object], message: str
) -> None:
    with pytest.raises(TwinError, match=message):
        from_hf_config(_write(tmp_path, name, **changes))


def test_qwen3_5_mtp_modules_are_read(tmp_path: Path) -> None:
    """Qwen3.5's ``mtp_num_hidden_layers`` (its checkpoints carry one MTP module, which
    SGLang's and vLLM's MTP speculative decoding drafts with); none where absent."""
    data = json.loads((HF / "qwen3.5-35b-a3b.json").read_text())
    assert from_hf_config(HF / "qwen3.5-35b-a3b.json").mtp_layers == 0
    data["text_config"]["mtp_num_hidden_layers"] = 1
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    m = from_hf_config(path)
    assert m.mtp_layers == 1 and m.mtp_params > 0
    assert m.n_params == from_hf_config(HF / "qwen3.5-35b-a3b.json").n_params  # counted apart
