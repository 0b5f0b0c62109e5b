"""Scratch: refit mla_decode families with candidate features; fit split only, held-out reported."""
import sys, pickle, dataclasses, time
import numpy as np
from twin.costmodel import formulas as fm
from twin.calibration.fit import fit_kernel
variant = sys.argv[2]
TILE = int(sys.argv[3]) if len(sys.argv) > 3 else 64
only = sys.argv[4].split(',') if len(sys.argv) > 4 else None
d = pickle.load(open(sys.argv[1], 'rb'))
def add(rows):
    out = []
    for r in rows:
        s = r['shape']; b, k, h = s['b'], s['c'] + 1, s['h']
        r = dict(r)
        r['tile_keys'] = float(b * k * -(-h // TILE))
        out.append(r)
    return out
res = []
for name, kernel, ok, peaks, sp, _, *rest, prov in d:
    if only and not any(o in name for o in only): continue
    f0 = fm.FORMULAS[fm.family(kernel)]
    fam = fm.family(kernel)
    if variant == 'tile_keys':
        fm.FORMULAS[fam] = dataclasses.replace(f0, extras=(*f0.extras, 'tile_keys'))
    t = time.time()
    new = fit_kernel(kernel, add(ok), peaks)
    fm.FORMULAS[fam] = f0
    print(f"{name:22s} {kernel:18s} {new.heldout_median_rel_err:.3f}/{new.heldout_p90_rel_err:.3f} {time.time()-t:.0f}s", flush=True)
    res.append((name, kernel, new.heldout_median_rel_err, new.heldout_p90_rel_err, new.params))
pickle.dump(res, open(f'/tmp/mla-decode/res-{variant}-{TILE}.pkl', 'wb'))
