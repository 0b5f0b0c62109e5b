"""GPU prices for ``twin plan``: on-demand US dollars per GPU-hour, with where each comes from.

The default table ships as ``twin/reports/prices.toml`` (one provider's public rate
card, each price with its source and the date it was read); ``--prices FILE``
replaces it with the user's own table in the same format. A table is checked
whole before any work: every GPU must be one :data:`twin.hardware.GPUS` knows,
every price a positive finite number, and each error is one line naming the
file and the key.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twin.errors import TwinError
from twin.hardware import GPUS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 (pyproject: tomli there)
    import tomli as tomllib

DEFAULT_PRICES = Path(__file__).with_name("prices.toml")
# The fields a GPU's table may hold (a GPU may also be a bare number: its price).
PRICE_FIELDS = ("usd_per_gpu_hour", "source", "date")


@dataclass(frozen=True)
class GpuPrice:
    """One GPU's on-demand price and where it comes from."""

    gpu: str
    usd_per_gpu_hour: float
    source: str = ""
    date: str = ""


@dataclass(frozen=True)
class PriceTable:
    """The prices a plan costs its candidates with, and which file they came from."""

    path: str
    default: bool  # the shipped table (not --prices)
    prices: dict[str, GpuPrice] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """How a report names the table."""
        return f"default prices, {self.path}" if self.default else f"--prices {self.path}"

    def price(self, gpu: str) -> GpuPrice:
        """``gpu``'s price; a one-line error when the table has none."""
        found = self.prices.get(gpu)
        if found is None:
            have = ", ".join(sorted(self.prices)) or "none"
            raise TwinError(
                f"{self.label}: no price for {gpu!r} (priced: {have}); give a table that "
                f"has it with --prices FILE ([gpus.{gpu}] usd_per_gpu_hour = ...)"
            )
        return found

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "default": self.default,
            "usd_per_gpu_hour": {
                g: {"usd_per_gpu_hour": p.usd_per_gpu_hour, "source": p.source, "date": p.date}
                for g, p in sorted(self.prices.items())
            },
        }


def _number(where: str, value: Any) -> float:
    # bool is an int in Python; `h100 = true` is a typo, not a price of 1.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TwinError(f"{where}: expected a price in US dollars per GPU-hour, got {value!r}")
    price = float(value)
    if not (math.isfinite(price) and price > 0):
        raise TwinError(f"{where}: the price must be a positive finite number (got {value!r})")
    return price


def _gpu_price(file: Path, gpu: str, entry: Any) -> GpuPrice:
    where = f"{file}: gpus.{gpu}"
    if gpu not in GPUS:
        raise TwinError(f"{where}: unknown GPU {gpu!r}; known: {', '.join(GPUS)}")
    if not isinstance(entry, dict):
        return GpuPrice(gpu, _number(where, entry))
    unknown = sorted(set(entry) - set(PRICE_FIELDS))
    if unknown:
        raise TwinError(f"{where}.{unknown[0]}: unknown field; expected {', '.join(PRICE_FIELDS)}")
    if "usd_per_gpu_hour" not in entry:
        raise TwinError(f"{where}: no usd_per_gpu_hour (US dollars per GPU-hour)")
    text = {}
    for name in ("source", "date"):
        value = entry.get(name, "")
        if not isinstance(value, str):
            # A TOML date (date = 2026-08-26, unquoted) is kept as its text.
            value = str(value)
        text[name] = value
    return GpuPrice(gpu, _number(f"{where}.usd_per_gpu_hour", entry["usd_per_gpu_hour"]), **text)


def load_prices(path: str | Path | None = None) -> PriceTable:
    """The price table at ``path`` (``--prices``), or the shipped default; checked whole."""
    file = DEFAULT_PRICES if path is None else Path(path)
    flag = "" if path is None else "--prices "
    if not file.is_file():
        raise TwinError(f"{flag}{file}: no such price file")
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise TwinError(f"{flag}{file}: not UTF-8 text (expected a TOML price table)") from None
    except tomllib.TOMLDecodeError as err:
        raise TwinError(f"{flag}{file}: not valid TOML ({err})") from None
    extra = sorted(set(data) - {"gpus"})
    if extra:
        raise TwinError(f"{file}: {extra[0]}: unknown key; a price table has one table, [gpus]")
    gpus = data.get("gpus")
    if not isinstance(gpus, dict) or not gpus:
        raise TwinError(
            f"{file}: no [gpus] table of prices (e.g. [gpus.h100] usd_per_gpu_hour = 3.2)"
        )
    prices = {gpu: _gpu_price(file, gpu, entry) for gpu, entry in gpus.items()}
    # The shipped table is named as it sits in the project, not by this machine's path.
    return PriceTable(
        "twin/reports/prices.toml" if path is None else str(file), path is None, prices
    )
