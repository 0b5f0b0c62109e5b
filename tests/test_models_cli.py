"""``twin models list`` and ``twin models show``."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import twin
from twin.errors import TwinError
from twin.presets import PRESETS, get_model

HF = Path(__file__).parent / "data" / "hf_configs"
runner = CliRunner()


def _app() -> tuple[typer.Typer, list[str]]:
    """The whole ``twin`` CLI; or the models sub-app alone while a sibling sub-app is unfinished."""
    try:
        from twin.cli import app

        return app, ["models"]
    except ImportError:
        # twin/cli/__init__.py imports every sub-app; load ours by path so that this
        # module is tested on its own.
        path = Path(twin.__file__).parent / "cli" / "models.py"
        spec = importlib.util.spec_from_file_location("_twin_cli_models_under_test", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.app, []


APP, PREFIX = _app()


def invoke(*args: str) -> Any:
    # A wide terminal so that rich does not elide table cells.
    return runner.invoke(APP, [*PREFIX, *args], env={"COLUMNS": "250"})


def test_list_table_shows_every_preset() -> None:
    result = invoke("list")
    assert result.exit_code == 0, result.output
    for name in PRESETS:
        assert name in result.output
    assert "4/24/28" in result.output  # marconi's layer mix
    assert "4/28/16(16)" in result.output  # jamba's MoE layers in brackets
    assert "26.79 MB" in result.output  # marconi's checkpoint


def test_list_json() -> None:
    result = invoke("list", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["name"] for r in rows] == list(PRESETS)
    marconi = next(r for r in rows if r["name"] == "marconi-hybrid-7b")
    assert marconi["kv_bytes_per_token"] == 65_536
    assert marconi["ssm_checkpoint_bytes"] == 26_787_840
    assert marconi["kind"] == "hybrid"


def test_show_table() -> None:
    result = invoke("show", "marconi-hybrid-7b")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "marconi-hybrid-7b (hybrid)" in out
    assert "26,787,840" in out and "65,536" in out
    for length in ("1024", "8192", "32768"):
        assert length in out


def test_show_names_what_is_priced_beyond_the_layer_shapes() -> None:
    """GLM-5's sparse-attention indexer and MiniMax's q/k norms over all heads (each priced
    by the cost model) are shown; a model without them shows neither."""
    glm, minimax, llama = (
        invoke("show", m).output for m in ("glm-5", "minimax-m2.5", "llama-3-8b")
    )
    assert "sparse-attention indexer" in glm and "32 heads x 128" in glm
    assert "q/k norms over all heads" in minimax and "indexer" not in minimax
    assert "indexer" not in llama and "q/k norms" not in llama


def test_show_json_is_consistent_with_the_model() -> None:
    result = invoke("show", "nemotron-h-8b", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    m = get_model("nemotron-h-8b")
    assert data["model"]["ssm_checkpoint_bytes"] == m.ssm_checkpoint_bytes
    assert data["model"]["weight_bytes"] == m.weight_bytes
    per_token = data["prefill_flops_per_token"]
    assert set(per_token) == {"1024", "8192", "32768"}
    f = m.prefill_flops(8192)
    assert per_token["8192"]["total"] == pytest.approx(f.total / 8192)
    assert per_token["8192"]["attention"] == pytest.approx(f["attention"] / 8192)
    # Attention per token grows with the prompt; the rest does not.
    assert per_token["32768"]["attention"] > per_token["1024"]["attention"]
    assert per_token["32768"]["mlp"] == pytest.approx(per_token["1024"]["mlp"])


def test_show_hf_config() -> None:
    result = invoke("show", "--config", str(HF / "nemotron-h-8b-base.json"), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["model"]["name"] == "nvidia/Nemotron-H-8B-Base-8K"
    assert data["model"]["ssm_checkpoint_bytes"] == get_model("nemotron-h-8b").ssm_checkpoint_bytes


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("show", "no-such-model"), "unknown model 'no-such-model'"),
        (("show",), "exactly one"),
        (("show", "tiny-ssm", "--config", "x.json"), "exactly one"),
        (("show", "--config", "/nonexistent/config.json"), "no such file"),
    ],
)
def test_show_errors_are_twin_errors(args: tuple[str, ...], message: str) -> None:
    result = invoke(*args)
    assert result.exit_code != 0
    assert isinstance(result.exception, TwinError)
    assert message in str(result.exception)


@pytest.mark.parametrize("command", ["list", "show"])
def test_help_shows_an_example(command: str) -> None:
    result = invoke(command, "--help")
    assert result.exit_code == 0, result.output
    assert "Example" in result.output
    assert f"twin models {command}" in result.output


def test_show_with_model_set_overrides_fields() -> None:
    result = invoke(
        "show",
        "marconi-hybrid-7b",
        "--model-set",
        "n_ssm_layers=32",
        "--model-set",
        "ssm_d_state=16",
        "--json",
    )
    assert result.exit_code == 0, result.output
    model = json.loads(result.output)["model"]
    assert model["name"] == "marconi-hybrid-7b[n_ssm_layers=32,ssm_d_state=16]"
    assert model["n_ssm_layers"] == 32 and model["ssm_d_state"] == 16
    # The paper's accounting: d_model x N state plus the conv state, per layer.
    assert model["ssm_checkpoint_bytes"] == 32 * (4096 * 16 * 2 + (2 * 4096 + 2 * 16) * 4 * 2)
    result = invoke("show", "marconi-hybrid-7b", "--model-set", "ssm_d_state=x")
    assert result.exit_code != 0
    assert "--model-set 'ssm_d_state=x': ssm_d_state takes a int" in str(result.exception)


def test_show_and_cost_take_a_config_json_path() -> None:
    """Issue 18: `twin models show PATH` (and `twin cost --model PATH`) read a HF config."""
    config = Path(__file__).parent / "data" / "hf_configs" / "llama-3-8b.json"
    result = invoke("show", str(config), "--json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)["model"]
    assert shown["n_attention_layers"] == 32 and shown["d_model"] == 4096
    assert shown["n_kv_heads"] == 8  # Llama-3-8B's GQA, from the file rather than a preset

    from twin.cli.cost import cost

    app = typer.Typer()
    app.command("cost")(cost)
    app.command("noop")(lambda: None)
    res = runner.invoke(app, ["cost", "--model", str(config), "--gpu", "h100", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["model"] == "meta-llama/Meta-Llama-3-8B"
