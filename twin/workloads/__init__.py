"""Workloads: the request schema, parquet I/O, generators and trace importers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from twin.exports import lazy_exports

if TYPE_CHECKING:
    from twin.workloads.reader import Request, Workload
    from twin.workloads.schema import WorkloadRow
    from twin.workloads.writer import WorkloadWriter

if not TYPE_CHECKING:
    __getattr__ = lazy_exports(__name__)  # the names above on first use

__all__ = ["Request", "Workload", "WorkloadRow", "WorkloadWriter"]
