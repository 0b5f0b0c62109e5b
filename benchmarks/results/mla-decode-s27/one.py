import sys,time,json; sys.path.insert(0,'/tmp/mla-decode')
from harness import families
from twin.calibration.fit import fit_kernel
out=[]
for n,k,ok,p,f in families(sys.argv[2].split(',')):
    if sys.argv[3] not in k: continue
    t=time.time(); new=fit_kernel(k,ok,p.peaks)
    r=dict(profile=n,family=k,shipped_median=f.heldout_median_rel_err,shipped_p90=f.heldout_p90_rel_err,refit_median=new.heldout_median_rel_err,refit_p90=new.heldout_p90_rel_err,n_shapes=new.n_shapes,n_heldout=new.n_heldout,params=new.params)
    print(json.dumps(r),flush=True); out.append(r)
json.dump(out,open(sys.argv[1],'w'),indent=1)
