"""Fuzzing Hugging Face config.json files (issue 32): every shipped test config with one to
three keys set to a zero, a negative, a huge or a fractional number, a value of the wrong
JSON type, a deep nest, or removed, and its per-layer lists shortened or lengthened.

Whatever goes in, ``from_hf_config`` returns a model or raises one ``TwinError`` line
naming the file and the key; an accepted model has as many layers as the file says and
finite sizes. ``twin models show --config`` gives the same through the CLI.
The fast test draws a few hundred cases; ``-m slow`` thousands.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fuzz_inputs import outcome

from twin.errors import TwinError
from twin.hf_config import from_hf_config
from twin.limits import MAX_LAYERS

HF = Path(__file__).parent / "data" / "hf_configs"
CONFIGS = {p.stem: json.loads(p.read_text()) for p in sorted(HF.glob("*.json"))}
_HC = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
FAST = settings(max_examples=400, derandomize=True, deadline=None, suppress_health_check=_HC)
SLOW = settings(max_examples=4000, deadline=None, suppress_health_check=_HC)

_VALUES: list[Any] = [
    0,
    -1,
    1,
    3,
    2**31,
    10**7,
    10**30,
    1.5,
    math.inf,
    "8",
    "auto",
    True,
    False,
    None,
    [],
    {},
    [1, 2],
    ["mamba"],
    "M*",
    "",
    json.loads("[" * 70 + "]" * 70),
]
# Objects whose keys are drawn too (a wrapper's text model, mamba_ssm's sub-configs).
_NESTED = ("text_config", "ssm_cfg", "attn_cfg")


def _keys(data: dict[str, Any]) -> list[tuple[str, ...]]:
    keys: list[tuple[str, ...]] = [(k,) for k in data]
    for outer in _NESTED:
        if isinstance(data.get(outer), dict):
            keys += [(outer, k) for k in data[outer]]
    return keys


@st.composite
def bad_config(draw: Any) -> tuple[str, dict[str, Any]]:
    name = draw(st.sampled_from(sorted(CONFIGS)))
    data = json.loads(json.dumps(CONFIGS[name]))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_keys(data)))
        node = data if len(path) == 1 else data[path[0]]
        if not isinstance(node, dict):
            continue
        key, old = path[-1], node.get(path[-1])
        how = draw(st.sampled_from(["value", "value", "drop", "resize"]))
        if how == "drop":
            node.pop(key, None)
        elif how == "resize" and isinstance(old, list | str) and old:
            # A per-layer list or pattern one shorter, one longer, or halved.
            cut = draw(st.sampled_from([len(old) - 1, len(old) + 1, len(old) // 2]))
            node[key] = old[:cut] if cut <= len(old) else old + old[:1]
        else:
            node[key] = draw(st.sampled_from(_VALUES))
    return name, data


def _declared_layers(data: dict[str, Any]) -> int | None:
    text = data.get("text_config") if isinstance(data.get("text_config"), dict) else data
    n = text.get("num_hidden_layers", text.get("n_layer"))
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def _check(name: str, data: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data, default=str))
    try:
        spec = from_hf_config(path)
    except TwinError as err:
        text = str(err)
        assert "\n" not in text and text.startswith(str(path)), text
        return
    except Exception as err:  # an escape is the bug this test hunts
        raise AssertionError(f"{name} {data}: {type(err).__name__}: {err}") from err
    declared = _declared_layers(data)
    if spec.layers is not None and declared is not None:
        assert len(spec.layers) == declared, (name, declared, spec.pattern)
    assert spec.layers is None or 0 < len(spec.layers) <= MAX_LAYERS
    # Sizes are Python integers (no overflow); one too large for any GPU is refused by the
    # memory budget when a run starts, in one line.
    for size in (spec.weight_bytes, spec.kv_bytes_per_token, spec.prefill_flops(64).total):
        assert math.isfinite(size) and size >= 0, (name, size)
    assert spec.weight_bytes > 0


@FAST
@given(case=bad_config())
def test_fuzz_configs(case: tuple[str, dict[str, Any]], tmp_path: Path) -> None:
    _check(*case, tmp_path)


@pytest.mark.slow
@SLOW
@given(case=bad_config())
def test_fuzz_configs_long(case: tuple[str, dict[str, Any]], tmp_path: Path) -> None:
    _check(*case, tmp_path)


@settings(max_examples=40, derandomize=True, deadline=None, suppress_health_check=_HC)
@given(case=bad_config())
def test_fuzz_configs_through_the_cli(case, capsys, tmp_path: Path) -> None:
    name, data = case
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data, default=str))
    outcome(capsys, ["models", "show", "--config", str(path)])


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_shipped_config_reads(name: str) -> None:
    """The fuzzer's seeds are valid: each reads, with as many layers as it declares."""
    spec = from_hf_config(HF / f"{name}.json")
    declared = _declared_layers(CONFIGS[name])
    if spec.layers is not None and declared is not None:
        assert len(spec.layers) == declared
