"""A command's ``--help`` imports only what it shows (issue 33): no numpy, no engine loop.

The packages' re-exports resolve on first use (``twin.exports.lazy_exports``) and the
registries found by name list their names without importing their classes
(``twin.exports.Registry``); these tests check both still name what they mean.
"""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import pytest

from twin.exports import Registry, exported

# Every command and sub-app command whose help the tests read.
HELPS = [
    ["simulate"],
    ["replay"],
    ["calibrate"],
    ["cost"],
    ["validate"],
    ["reproduce"],
    ["plan"],
    ["models", "show"],
    ["workload", "generate"],
    ["workload", "import"],
    ["workload", "info"],
    ["report", "capacity"],
]
HEAVY = ("numpy", "pyarrow", "twin.engine.batching", "twin.engine.run", "twin.metrics")


@pytest.mark.parametrize("argv", HELPS, ids=" ".join)
def test_help_imports_no_numpy_nor_the_engine(argv: list[str]) -> None:
    code = (
        "import contextlib, io, sys\n"
        "from twin.cli.main import run\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        f"    assert run({[*argv, '--help']!r}) == 0\n"
        "assert 'Usage' in out.getvalue()\n"
        f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == []


LAZY_PACKAGES = [
    "twin.cache",
    "twin.costmodel",
    "twin.engine",
    "twin.policies",
    "twin.validate",
    "twin.workloads",
    "twin.workloads.generators",
    "twin.workloads.importers",
]


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_lazy_exports_are_the_modules_own(package: str) -> None:
    loaded = importlib.import_module(package)
    table = exported(package)
    assert table, f"{package}: no TYPE_CHECKING re-exports read"
    # A name that is also a submodule's would be the submodule once anything imports it.
    assert not set(table) & {m.name for m in pkgutil.iter_modules(loaded.__path__)}
    assert set(table) <= set(loaded.__all__)
    for name, (module, attribute) in table.items():
        assert getattr(loaded, name) is getattr(importlib.import_module(module), attribute)
    with pytest.raises(AttributeError):
        loaded.NOT_EXPORTED  # noqa: B018 (the lookup is the test)


def _registries() -> dict[str, Registry]:
    from twin.policies import POLICIES
    from twin.reports.reproduce import PAPERS
    from twin.workloads.generators import GENERATORS
    from twin.workloads.importers import IMPORTERS

    return {
        "policies": POLICIES,
        "generators": GENERATORS,
        "importers": IMPORTERS,
        "papers": PAPERS,
    }


@pytest.mark.parametrize("registry", ["policies", "generators", "importers", "papers"])
def test_registry_entries_resolve_to_their_names(registry: str) -> None:
    # The table (name -> "module:Class") and the classes agree: each entry imports and
    # carries the name it is found by.
    table = _registries()[registry]
    assert len(table) == len(table.table) > 0
    for name in table:
        assert table[name].name == name
    assert "no-such-name" not in table
    with pytest.raises(KeyError):
        table["no-such-name"]
