"""Splice one refit's families into a shipped profile, every other byte kept.

``twin calibrate --keep-fits SHIPPED --refit PREFIX`` also fits families the shipped file
lacks (at session 26: ``allreduce_nccl_*`` on the TensorRT-LLM profiles); this takes from
its output only the families ``PREFIX`` covers (``kernels`` and ``table_releases``) and the
provenance ``added`` entry of the refit, named for those families alone.

    python benchmarks/results/kernels/splice.py SHIPPED.json REGENERATED.json PREFIX
"""

import json
import sys
from pathlib import Path


def covers(key: str, prefix: str) -> bool:
    return key == prefix or key.startswith(f"{prefix}_")


def main() -> None:
    shipped_path, regen_path, prefix = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    shipped = json.loads(shipped_path.read_text())
    regen = json.loads(regen_path.read_text())
    for section in ("kernels", "table_releases"):
        old, new = shipped.get(section, {}), regen.get(section, {})
        for key in [k for k in old if covers(k, prefix)]:
            if key not in new:
                raise SystemExit(f"{regen_path}: {section}.{key} missing")
        for key in new:
            if covers(key, prefix):
                old[key] = new[key]
    entry = regen["provenance"]["added"][-1]
    assert entry.get("refit") == [prefix], entry
    families = [f for f in entry["families"] if covers(f, prefix)]
    shipped["provenance"].setdefault("added", []).append({**entry, "families": families})
    shipped_path.write_text(json.dumps(shipped, indent=2) + "\n")


if __name__ == "__main__":
    main()
