"""Every module and subpackage of ``twin`` sits in a layer of the import contract.

``lint-imports`` checks only what the contract names: a new module left out of it could
import anything. This keeps the contract whole (docs/architecture.md).
"""

from __future__ import annotations

import pkgutil
import sys
from pathlib import Path

import twin

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def _layered() -> set[str]:
    config = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "layers"]
    names: set[str] = set()
    for layer in contract["layers"]:
        names.update(part.strip() for part in layer.replace("|", ":").split(":"))
    return names


def test_every_top_level_module_is_in_a_layer() -> None:
    modules = {f"twin.{m.name}" for m in pkgutil.iter_modules(twin.__path__)}
    missing = sorted(modules - _layered())
    assert not missing, f"add these to [tool.importlinter] layers in pyproject.toml: {missing}"


def test_the_contract_names_only_real_modules() -> None:
    modules = {f"twin.{m.name}" for m in pkgutil.iter_modules(twin.__path__)}
    assert _layered() <= modules
