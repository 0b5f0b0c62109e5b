# The vLLM eager grid (bench_eager_prefill.py's fit rows and rule) for one GPU, this tree.
import sys, json, dataclasses, statistics
from multiprocessing import Pool
sys.path.insert(0, "benchmarks")
from bench_eager_prefill import _sample
import twin.validate.silicon as sil
from twin.validate.silicon.predict import predict
gpu, grid = sys.argv[1], [float(x) for x in sys.argv[2].split(",")]
plans = [p for p in _sample(48, 128, "vllm", "eager") if p.row.split == sil.FIT and p.gpu == gpu]
def one(args):
    i, us = args
    plan = plans[i]
    launches = sil.eager_launches(plan.model, "vllm")
    dep = {k: v for k, v in plan.deployment.items() if k != "eager_prefill_s"}
    if us > 0: dep["eager_prefill_s"] = us * 1e-6 * launches
    got = predict(dataclasses.replace(plan, deployment=dep))
    return (plan.row.id, us, got.get("twin_ttft_ms"), got.get("twin_tpot_ms"), plan.row.ttft_ms, plan.row.tpot_ms, sil.harness_of(plan.row).name)
if __name__ == "__main__":
    with Pool(2) as pool:
        res = pool.map(one, [(i, us) for i in range(len(plans)) for us in grid])
    json.dump(res, open(sys.argv[3], "w"), indent=1)
    for us in grid:
        r = [x for x in res if x[1] == us]
        t = statistics.fmean(abs(a - m) / m * 100 for _, _, a, _, m, _, _ in r)
        p = statistics.fmean(abs(a - m) / m * 100 for _, _, _, a, _, m, _ in r)
        print(f"{gpu} {us:5.0f} us  rows {len(r)}  TTFT {t:5.1f}  TPOT {p:5.1f}  sum {t+p:5.1f}")
