"""Diagnosis only (helper vllm-host): benchmarks/silicon_rows.py with the vLLM nightly rows
run under async scheduling (``sets`` async_scheduling=true), as vLLM's own default is from
0.14.0; the twin reads no nightly's release and keeps it off. Same arguments as silicon_rows."""

import dataclasses
import sys

import silicon_rows

_changed = silicon_rows.changed


def changed(plan, changes):
    plan = _changed(plan, changes)
    if not plan.row.backend_version.startswith("nightly"):
        return plan
    deployment = dict(plan.deployment)
    sets = dict(deployment.get("sets") or {})
    sets["async_scheduling"] = "true"
    deployment["sets"] = sets
    return dataclasses.replace(plan, deployment=deployment)


silicon_rows.changed = changed
sys.exit(silicon_rows.main())
