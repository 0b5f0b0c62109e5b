"""Importers of public trace formats, found by name through one registry.

The CLI calls ``get_importer(fmt)()`` and writes ``rows(path)`` through a
``WorkloadWriter``; add a format by subclassing ``Importer`` and listing it here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twin.errors import lookup
from twin.exports import Registry, lazy_exports

if TYPE_CHECKING:
    from twin.workloads.importers.base import Importer
    from twin.workloads.importers.marconi import MarconiImporter
    from twin.workloads.importers.mooncake import MooncakeImporter

if not TYPE_CHECKING:
    __getattr__ = lazy_exports(__name__)  # the names above on first use

# Each format by its ``name`` (alphabetical: the order a help and an error list them), imported
# when looked up (a help lists the formats without numpy).
IMPORTERS: Registry[type[Importer]] = Registry(
    {
        "marconi": "twin.workloads.importers.marconi:MarconiImporter",
        "mooncake": "twin.workloads.importers.mooncake:MooncakeImporter",
    }
)


def get_importer(fmt: str) -> type[Importer]:
    """The importer class registered as ``fmt``; a ``TwinError`` listing the valid ones if none."""
    return lookup(IMPORTERS, fmt, "trace format", "valid formats")


__all__ = ["IMPORTERS", "Importer", "MarconiImporter", "MooncakeImporter", "get_importer"]
