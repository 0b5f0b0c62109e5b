"""Scratch: refit the mla_decode families from NVIDIA's tables, compare with shipped."""
import sys, os, glob, pickle, time
import numpy as np
sys.path.insert(0, 'benchmarks')
from kernel_targets import fitted
from twin.calibration import aic_tables as at
from twin.calibration.aic_import import split_impossible
from twin.calibration.aic_mla import kernel_rows
from twin.calibration.fit import fit_kernel, predict_rows, split_holdout

def families(only=None):
    cache = {}
    for name, prof, kernel, fit in fitted(('mla_decode', 'mla_decode_fp8kv')):
        if only and name not in only: continue
        gpu, engine = name.rsplit('-', 1)
        if name not in cache:
            cache[name] = {f.kernel: f for f in kernel_rows(at.system_dir(gpu), engine)}
        fam = cache[name].get(kernel)
        if fam is None: print('no rows', name, kernel); continue
        ok, _ = split_impossible(kernel, fam.rows, prof.peaks)
        yield name, kernel, ok, prof, fit

if __name__ == '__main__':
    only = sys.argv[2:] or None
    out = []
    for name, kernel, ok, prof, fit in families(only):
        t = time.time()
        new = fit_kernel(kernel, ok, prof.peaks)
        print(f"{name:22s} {kernel:18s} n={len(ok)}/{fit.n_shapes} shipped {fit.heldout_median_rel_err:.3f}/{fit.heldout_p90_rel_err:.3f} refit {new.heldout_median_rel_err:.3f}/{new.heldout_p90_rel_err:.3f} {time.time()-t:.0f}s", flush=True)
        out.append((name, kernel, ok, prof.peaks, fit.params, new.params, fit.heldout_median_rel_err, fit.heldout_p90_rel_err, new.heldout_median_rel_err, new.heldout_p90_rel_err, fit.provenance))
    pickle.dump(out, open(sys.argv[1], 'wb'))
