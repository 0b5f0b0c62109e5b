"""Importers of public trace formats, found by name through one registry.

The CLI calls ``get_importer(fmt)()`` and writes ``rows(path)`` through a
``WorkloadWriter``; add a format by subclassing ``Importer`` and listing it here.
"""

from __future__ import annotations

from twin.errors import TwinError
from twin.workloads.importers.base import Importer
from twin.workloads.importers.marconi import MarconiImporter
from twin.workloads.importers.mooncake import MooncakeImporter

IMPORTERS: dict[str, type[Importer]] = {
    cls.name: cls for cls in (MooncakeImporter, MarconiImporter)
}


def get_importer(fmt: str) -> type[Importer]:
    """The importer class registered as ``fmt``; a ``TwinError`` listing the valid ones if none."""
    try:
        return IMPORTERS[fmt]
    except KeyError:
        raise TwinError(
            f"unknown trace format {fmt!r}; valid formats: {', '.join(sorted(IMPORTERS))}"
        ) from None


__all__ = ["IMPORTERS", "Importer", "MarconiImporter", "MooncakeImporter", "get_importer"]
