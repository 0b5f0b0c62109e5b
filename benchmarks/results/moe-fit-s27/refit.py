"""Refit every shipped fused-MoE family with this branch's features (the working set a
table's replays keep in L2, ``features.moe_features``) through ``twin calibrate``'s own
``aic_import.fit_family``, and record before (the shipped fit) and after, held out on the
same seeded quarter rule (helper moe-fit, session 27; needs aiconfigurator-core).

Run from the repository root, two shards side by side (misses first, then by size):
``PYTHONPATH=. python benchmarks/results/moe-fit-s27/refit.py 0 2`` and ``... 1 2``;
then ``python benchmarks/results/moe-fit-s27/table.py``. Writes ``fit-<shard>.json``
here; a family already in one of them is skipped (the run resumes).
"""

import glob
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from kernel_targets import fitted  # noqa: E402

from twin.calibration import aic_tables as at  # noqa: E402
from twin.calibration.aic_import import fit_family  # noqa: E402
from twin.costmodel.formulas import MOE_VARIANTS  # noqa: E402


def main() -> None:
    shard, nshard = int(sys.argv[1]), int(sys.argv[2])
    outp = HERE / f"fit-{shard}.json"
    done: dict = {}
    for f in glob.glob(str(HERE / "fit-*.json")):
        done.update(json.loads(Path(f).read_text()))
    out = json.loads(outp.read_text()) if outp.exists() else {}
    res = json.loads((HERE.parent / "moe-kernels.json").read_text())["rows"]
    miss = {(r["profile"], r["family"]) for r in res if not r["meets_target"]}
    size = {(r["profile"], r["family"]): r["n_shapes"] for r in res}
    shipped = {(n, k): (p, f) for n, p, k, f in fitted(MOE_VARIANTS)}
    items = sorted(shipped, key=lambda it: (it not in miss, size.get(it, 0), it))
    items = [it for i, it in enumerate(items) if i % nshard == shard]
    for name, kernel in items:
        if f"{name}:{kernel}" in done:
            continue
        prof, fit0 = shipped[(name, kernel)]
        gpu, engine = name.rsplit("-", 1)
        system = at.system_dir(gpu)
        fams = at.moe_rows(system, engine) + at.mxfp8_activation_rows(system, engine)
        fam = next((f for f in fams if f.kernel == kernel), None)
        if fam is None:
            print("no rows", name, kernel, flush=True)
            continue
        t = time.time()
        fit = fit_family(fam, prof.peaks, "x")
        assert fit is not None and fit.series is not None
        s0 = fit0.series
        out[f"{name}:{kernel}"] = {
            "n": fit.n_shapes,
            "n_flagged": fit.n_flagged,
            "n_res": sum(1 for r in fam.rows if r["l2_bytes"] > 0),
            "old": (fit0.heldout_median_rel_err, fit0.heldout_p90_rel_err),
            "old_n": fit0.n_shapes,
            "old_formula": None
            if s0 is None
            else (s0.formula_heldout_median_rel_err, s0.formula_heldout_p90_rel_err),
            "new": (fit.heldout_median_rel_err, fit.heldout_p90_rel_err),
            "new_formula": (
                fit.series.formula_heldout_median_rel_err,
                fit.series.formula_heldout_p90_rel_err,
            ),
            "params": fit.params,
        }
        print(name, kernel, out[f"{name}:{kernel}"]["new"], f"{time.time() - t:.0f}s", flush=True)
        outp.write_text(json.dumps(out))


if __name__ == "__main__":
    main()
