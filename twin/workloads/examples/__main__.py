"""Rebuild the shipped example workloads: ``python -m twin.workloads.examples``."""

from twin.workloads.examples import build_all

for path in build_all():
    print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")
