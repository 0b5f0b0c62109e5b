"""A model's layer pattern: parse the per-layer tokens, count them, print them compactly.

A token names one layer: ``MIXER[+MIXER][/FFN]`` (``gdn/moe``, ``attention+mamba2/mlp``
for a parallel hybrid layer such as Falcon-H1's) or an FFN-only layer (``mlp``, as in
Nemotron-H's ``-``). Mixer and FFN kinds are those of :mod:`twin.mixers`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from twin.errors import TwinError
from twin.mixers import FFN_KINDS, KV_KINDS, MIXER_KINDS, RECURRENT_KINDS, SHORT

if TYPE_CHECKING:
    from twin.model import ModelSpec


def layer_parts(token: str) -> tuple[tuple[str, ...], str]:
    """``(mixer kinds, ffn kind)`` of one token; ffn is ``none`` when absent."""
    head, _, ffn = token.partition("/")
    if not ffn and head in FFN_KINDS:
        return (), head
    return tuple(head.split("+")), ffn or "none"


def parse_layers(name: str, layers: Sequence[str] | str) -> tuple[tuple[str, ...], dict[str, int]]:
    """Validate ``layers`` (a list, or one comma-separated string) and count its layers."""
    if isinstance(layers, str):
        layers = [t.strip() for t in layers.split(",")]
    if not isinstance(layers, Sequence) or not layers:
        raise TwinError(f"model {name!r}: field 'layers' must be a non-empty list of layer tokens")
    counts = {"n_attention_layers": 0, "n_ssm_layers": 0, "n_mlp_layers": 0, "n_moe_layers": 0}
    out = []
    for i, token in enumerate(layers):
        if not isinstance(token, str):
            raise TwinError(f"model {name!r}: layers[{i}] must be a string (got {token!r})")
        token = token.strip()
        mixers, ffn = layer_parts(token)
        bad = [k for k in mixers if k not in MIXER_KINDS]
        if bad or ffn not in FFN_KINDS or len(set(mixers)) != len(mixers) or not (mixers or ffn):
            raise TwinError(
                f"model {name!r}: layers[{i}] = {token!r} is not MIXER[+MIXER][/FFN] or FFN "
                f"(mixers: {', '.join(MIXER_KINDS)}; ffn: mlp, moe)"
            )
        counts["n_attention_layers"] += any(k in KV_KINDS for k in mixers)
        counts["n_ssm_layers"] += any(k in RECURRENT_KINDS for k in mixers)
        counts["n_mlp_layers"] += ffn == "mlp"
        counts["n_moe_layers"] += ffn == "moe"
        out.append(token)
    return tuple(out), counts


def _short(token: str, drop_ffn: bool) -> str:
    mixers, ffn = layer_parts(token)
    mix = "+".join(SHORT[k] for k in mixers)
    if not mixers:
        return ffn
    return mix if drop_ffn or ffn == "none" else f"{mix}/{ffn}"


def _runs(tokens: Sequence[str]) -> list[str]:
    out: list[tuple[int, str]] = []
    for t in tokens:
        if out and out[-1][1] == t:
            out[-1] = (out[-1][0] + 1, t)
        else:
            out.append((1, t))
    return [f"{n} {t}" for n, t in out]


def describe(m: ModelSpec) -> str:
    """Compact pattern: ``(3 gdn, 1 attn) x 12``, with ``; ffn moe`` when every layer's
    FFN is the same; counts only (``4 attn, 24 mamba2; 28 mlp``) for a counts-based spec."""
    if m.layers is None:
        mix = ", ".join(f"{n} {SHORT[k]}" for k, n in m.mixer_counts.items())
        ffn = ", ".join(
            f"{n} {k}" for k, n in (("mlp", m.n_mlp_layers), ("moe", m.n_moe_layers)) if n
        )
        return f"{mix}; {ffn}" if ffn else mix
    ffns = {layer_parts(t)[1] for t in m.layers if layer_parts(t)[0]}
    has_ffn_only = any(not layer_parts(t)[0] for t in m.layers)
    uniform = len(ffns) == 1 and not has_ffn_only
    tokens = [_short(t, uniform) for t in m.layers]
    if has_ffn_only:  # Nemotron-H style: show a mixer and the FFN-only layer after it as one
        merged: list[str] = []
        for t in tokens:
            if merged and t in FFN_KINDS and "/" not in merged[-1] and merged[-1] not in FFN_KINDS:
                merged[-1] += f"/{t}"
            else:
                merged.append(t)
        tokens = merged
    body = _periodic(tokens)
    if uniform and ffns != {"none"}:
        body += f"; ffn {ffns.pop()}"
    return body


def _periodic(tokens: list[str]) -> str:
    """``(runs) x reps[, tail runs]`` for the shortest period repeated at least twice."""
    n = len(tokens)
    for p in range(1, n // 2 + 1):
        if all(tokens[i] == tokens[i % p] for i in range(n)):
            if p == 1:
                return f"{n} {tokens[0]}"
            reps, tail = divmod(n, p)
            text = f"({', '.join(_runs(tokens[:p]))}) x {reps}"
            return text + (", " + ", ".join(_runs(tokens[n - tail :])) if tail else "")
    return ", ".join(_runs(tokens))


def repeat(unit: Sequence[str], times: int, tail: Sequence[str] = ()) -> tuple[str, ...]:
    """``unit`` repeated ``times`` then ``tail``: how presets write their patterns."""
    return tuple(unit) * times + tuple(tail)
