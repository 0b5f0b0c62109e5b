"""A Hugging Face ``config.json`` read key by key (:class:`ConfigKeys`), and the attention
heads every parser reads alike (:func:`heads`): the base of ``twin.hf_config`` and its
per-family parsers (``twin.hf_hybrids``, ``twin.hf_moe``), which import it, not each
other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from twin.errors import TwinError
from twin.limits import MAX_CONFIG_INT, MAX_LAYERS

_MISSING = object()


class ConfigKeys:
    """A config dict that names the file and key in every error, and reads each value as
    the type transformers' configuration class declares for it (its ``@strict`` fields):
    integers as integers within a physical range, switches as true/false, lists as lists.
    ``prefix`` names a nested object (``ssm_cfg.``)."""

    def __init__(self, data: dict[str, Any], path: Path, prefix: str = "") -> None:
        self.data, self.path, self.prefix = data, path, prefix

    def req(self, key: str) -> Any:
        if key not in self.data or self.data[key] is None:
            raise TwinError(f"{self.path}: missing key {self.prefix + key!r}")
        return self.data[key]

    def opt(self, key: str, default: Any) -> Any:
        value = self.data.get(key, _MISSING)
        return default if value is _MISSING or value is None else value

    def integer(
        self, key: str, default: Any = _MISSING, low: int = 0, high: int = MAX_CONFIG_INT
    ) -> int:
        """An integer in [low, high]: no size, count or index in a config is negative, and
        none is near 2^24 (``MAX_CONFIG_INT``); ``low=1`` for what is divided by or sized."""
        value = self.req(key) if default is _MISSING else self.opt(key, default)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.fail(key, f"must be an integer (got {value!r})")
        if value < low:
            raise self.fail(key, f"must be at least {low} (got {value})")
        if value > high:
            raise self.fail(key, f"must be at most {high:,} (got {value:,})")
        return value

    def pos(self, key: str, default: Any = _MISSING) -> int:
        """A positive integer: a width, a head count, a period (each divides or sizes)."""
        return self.integer(key, default, low=1)

    def layers(self, key: str = "num_hidden_layers") -> int:
        """The layer count, bounded (``MAX_LAYERS``) before any per-layer list is built."""
        return self.integer(key, low=1, high=MAX_LAYERS)

    def flag(self, key: str, default: bool) -> bool:
        value = self.opt(key, default)
        if not isinstance(value, bool):
            raise self.fail(key, f"must be true or false (got {value!r})")
        return value

    def text(self, key: str, default: Any = _MISSING) -> str:
        value = self.req(key) if default is _MISSING else self.opt(key, default)
        if not isinstance(value, str):
            raise self.fail(key, f"must be a string (got {value!r})")
        return value

    def window(self, key: str = "sliding_window") -> int | None:
        """A sliding window in tokens, or null (none)."""
        return None if self.opt(key, None) is None else self.pos(key)

    def auto_or_pos(self, key: str) -> int | None:
        """``"auto"`` (None: derived) or a positive integer."""
        return None if self.opt(key, "auto") == "auto" else self.pos(key)

    def indices(self, key: str, n: int) -> list[int]:
        """A list of distinct layer indices in [0, n)."""
        value = self.opt(key, [])
        bad = not isinstance(value, list) or any(
            not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < n for i in value
        )
        if bad or len(set(value)) != len(value):
            raise self.fail(key, f"must be a list of distinct layer indices 0 to {n - 1}")
        return list(value)

    def kinds(self, key: str, allowed: dict[str, str], n: int | None = None) -> list[str]:
        """A list of layer-type names, each one of ``allowed`` (mapped to its value), ``n``
        of them when given (transformers' ``validate_layer_type``: as many as layers)."""
        value = self.req(key)
        if not isinstance(value, list) or (n is not None and len(value) != n):
            count = f"{n} " if n is not None else ""
            raise self.fail(key, f"must be a list of {count}layer types")
        bad = sorted({repr(x) if not isinstance(x, str) else x for x in value} - set(allowed))
        if bad:
            raise self.fail(key, f"has unknown layer types {bad} (expected {', '.join(allowed)})")
        return [allowed[x] for x in value]

    def obj(self, key: str) -> ConfigKeys:
        """A nested JSON object (absent: empty), its keys named ``key.name`` in errors."""
        value = self.opt(key, {})
        if not isinstance(value, dict):
            raise self.fail(key, f"must be a JSON object (got {value!r})")
        return ConfigKeys(value, self.path, f"{self.prefix}{key}.")

    def divides(self, key: str, divisor: int, total: int, what: str) -> None:
        """``total`` (named ``what``) splits evenly over ``divisor`` (``key``'s value)."""
        if total % divisor:
            raise self.fail(key, f"({divisor}) must divide {what} ({total})")

    def fail(self, key: str, why: str) -> TwinError:
        return TwinError(f"{self.path}: key {self.prefix + key!r} {why}")


def heads(cfg: ConfigKeys, head_dim_keys: tuple[str, ...] = ("head_dim",)) -> dict[str, Any]:
    """Heads, kv heads (default: MHA) and head dim (default: hidden / heads).

    As transformers' ``LlamaConfig.validate_architecture`` (5.24): without an explicit head
    dim, the heads must divide the hidden size (the twin would otherwise floor it); the kv
    heads must divide the heads (grouped-query attention shares each kv head evenly).
    """
    d, n_heads = cfg.pos("hidden_size"), cfg.pos("num_attention_heads")
    head_dim = next((cfg.pos(k) for k in head_dim_keys if cfg.opt(k, None) is not None), None)
    if head_dim is None:
        cfg.divides("num_attention_heads", n_heads, d, "hidden_size")
    kv = cfg.pos("num_key_value_heads", n_heads)
    cfg.divides("num_key_value_heads", kv, n_heads, "num_attention_heads")
    return dict(
        n_heads=n_heads,
        n_kv_heads=kv,
        head_dim=head_dim if head_dim is not None else d // n_heads,
    )
