"""Named model shapes: the registry, Hugging Face configs and ``--model-set`` overrides.

The shapes themselves, each citing its source, are in ``twin.preset_specs`` (public
models), ``twin.preset_test_shapes`` (tiny test shapes) and ``twin.preset_measured``
(the models of NVIDIA's measured end-to-end set, issue 34).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from twin.errors import TwinError, lookup
from twin.mixers import UNPRICED_KINDS
from twin.model import ModelSpec
from twin.precision import is_default
from twin.preset_measured import MEASURED_SPECS
from twin.preset_specs import PUBLIC_SPECS
from twin.preset_test_shapes import TINY_SPECS

PRESETS: dict[str, ModelSpec] = {m.name: m for m in (*PUBLIC_SPECS, *TINY_SPECS, *MEASURED_SPECS)}
# The model a run simulates when none is named (`twin simulate`'s default, twin.engine.run's).
DEFAULT_MODEL = "marconi-hybrid-7b"
# The presets every shipped profile prices: no mixer kind waiting for kernels, and the
# default precision (a quantised preset, e.g. gpt-oss-120b's mxfp4 experts, needs a
# profile with its GEMM fit; twin.costmodel.precision_kernels says which).
PRICED_PRESETS: list[str] = [
    name
    for name, m in PRESETS.items()
    if not UNPRICED_KINDS.intersection(m.mixer_counts) and is_default(m)
]


def get_model(name: str) -> ModelSpec:
    """The preset called ``name``; a ``TwinError`` listing the valid names otherwise."""
    return lookup(PRESETS, name, "model", "valid names")


def resolve_model(name: str, overrides: Sequence[str] = ()) -> ModelSpec:
    """A preset name, or the path of a Hugging Face ``config.json``, with ``--model-set`` fields.

    ``overrides`` are ``KEY=VALUE`` strings (see :func:`override_model`).
    """
    path = Path(name)
    if path.suffix == ".json" and path.is_file():
        spec = ModelSpec.from_hf_config(path)
    else:
        spec = get_model(name)
    return override_model(spec, overrides)


_FLAG = "--model-set"
_FIXED = ("name", "source")  # what a --model-set may not change


def override_model(spec: ModelSpec, overrides: Sequence[str]) -> ModelSpec:
    """``spec`` with fields replaced from ``KEY=VALUE`` strings (the ``--model-set`` flag).

    E.g. ``n_ssm_layers=32``, ``ssm_d_state=16``, ``ssm_state_channels=4096``:
    the paper's layer-mix and state-size sweeps (Marconi sec. 5.3) without
    writing a config. The result is named ``base[k=v,...]`` so every output
    says which shape ran; the model's own checks apply to the new values.
    """
    if not overrides:
        return spec
    hints = typing.get_type_hints(ModelSpec)
    fields = [f.name for f in dataclasses.fields(ModelSpec) if f.name not in _FIXED]
    changes: dict[str, Any] = {}
    for pair in overrides:
        key, sep, text = (part.strip() for part in pair.partition("="))
        if not sep or not key:
            raise TwinError(f"{_FLAG} {pair!r}: expected FIELD=VALUE, e.g. {_FLAG} n_ssm_layers=32")
        if key not in fields:
            raise TwinError(
                f"{_FLAG} {pair!r}: unknown model field {key!r}; valid: {', '.join(fields)}"
            )
        changes[key] = _field_value(key, text, hints[key], pair)
    counts = ("n_attention_layers", "n_ssm_layers", "n_mlp_layers", "n_moe_layers")
    if "layers" in changes:  # a new pattern: its counts come from it
        changes.update({c: 0 for c in counts if c not in changes})
    elif spec.layers is not None and any(c in changes for c in counts):
        key = next(c for c in counts if c in changes)
        raise TwinError(
            f"{_FLAG} {key}: model {spec.name!r} has a layer pattern ({spec.pattern}); "
            f"change it with {_FLAG} layers=KIND/FFN,KIND/FFN,..."
        )
    label = ",".join(f"{k}={text}" for k, text in (p.split("=", 1) for p in overrides))
    return dataclasses.replace(spec, name=f"{spec.name}[{label.replace(' ', '')}]", **changes)


def _field_value(key: str, text: str, hint: object, pair: str) -> object:
    """``text`` as the type of ModelSpec field ``key``; a TwinError naming the flag otherwise."""
    args = typing.get_args(hint)
    if text.lower() == "none" and type(None) in args:
        return None
    if key == "layers":  # comma-separated layer tokens
        return tuple(t.strip() for t in text.split(","))
    kind = next((a for a in args if a is not type(None)), hint) if args else hint
    try:
        if kind is bool:
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError(text)
            return text.lower() in ("true", "1")
        if kind is int:
            return int(text)
        if kind is float:
            return float(text)
    except ValueError:
        name = getattr(kind, "__name__", str(kind))
        raise TwinError(f"{_FLAG} {pair!r}: {key} takes a {name}, not {text!r}") from None
    return text
