"""Workloads: the request schema, parquet I/O, generators and trace importers."""

from twin.workloads.reader import Request, Workload
from twin.workloads.schema import WorkloadRow
from twin.workloads.writer import WorkloadWriter

__all__ = ["Request", "Workload", "WorkloadRow", "WorkloadWriter"]
