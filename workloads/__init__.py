"""Workloads: the request schema, parquet I/O, generators and trace importers."""

from workloads.reader import Request, Workload
from workloads.schema import WorkloadRow
from workloads.writer import WorkloadWriter

__all__ = ["Request", "Workload", "WorkloadRow", "WorkloadWriter"]
