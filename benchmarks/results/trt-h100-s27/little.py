"""Little's law on the three H100 TensorRT-LLM 1.0.0rc3 files of ``silicon_sample.csv``
(helper trt-h100, session 27; a diagnosis, not a scoring rule).

Fit rows by the issue's hash split; R = c x D / (TTFT + D) with D = (OSL - 1) x measured
TPOT (the requests the server was effectively running), Q and X the request and output-token
rates. Also the KV a GUARANTEED_NO_EVICT reservation needs (c x (ISL + OSL) x the bf16 cache's
bytes a token) against the twin's pool in session 26's predictions, and the rows whose twin
request rate reaches the 20 ms front end's 50/s.

    PYTHONPATH=. python benchmarks/results/trt-h100-s27/little.py
"""

from __future__ import annotations

import hashlib

import pandas as pd

import twin.validate.silicon as sil

PRED = "benchmarks/results/silicon-sample1500-s26/predictions.csv"
# bf16 KV bytes a token over all ranks: layers x KV heads x head dim x (K, V) x 2 bytes.
KV_BYTES = {
    "Llama-3.1-8B-Instruct": 32 * 8 * 128 * 2 * 2,
    "Qwen3-32B": 64 * 8 * 128 * 2 * 2,
    "Qwen3-235B-A22B-FP8": 94 * 4 * 128 * 2 * 2,
}
KV_HEADS = {"Llama-3.1-8B-Instruct": 8, "Qwen3-32B": 8, "Qwen3-235B-A22B-FP8": 4}


def rows() -> pd.DataFrame:
    d = pd.read_csv(sil.default_csv())
    d = d[(d.system == "h100_sxm") & (d.backend == "trtllm") & (d.backend_version == "1.0.0rc3")]
    d = d.copy()
    d["split"] = [
        "fit" if int(hashlib.sha256(i.encode()).hexdigest()[0], 16) < 8 else "held" for i in d.id
    ]
    d["model"] = d.model_path.str.split("/").str[-1]
    d["c"], d["tp"] = d.batch_size, d.tp_size
    d["D"] = (d.osl - 1) * d.silicon_tpot_ms
    d["R"] = d.c * d.D / (d.silicon_ttft_ms + d.D)
    d["Q"] = d.c / (d.silicon_ttft_ms + d.D) * 1e3
    d["X"] = d.Q * d.osl
    d["Rc"] = d.R / d.c
    return d


def main() -> None:
    pd.set_option("display.width", 250)
    f = rows()
    f = f[f.split == "fit"]
    print("== fit rows: median R / c (and rows) by model x clients")
    print(f.pivot_table(index="model", columns="c", values="Rc", aggfunc="median").round(2))
    print(f.pivot_table(index="model", columns="c", values="Rc", aggfunc="size"))
    print("max Q", f.groupby("model").Q.max().round(1).to_dict())
    print("max X", f.groupby("model").X.max().round(0).to_dict())
    llama = f[f.model.str.startswith("Llama")]
    for name, part in (("TP 4-8", llama[llama.tp >= 4]), ("TP 1-2", llama[llama.tp <= 2])):
        print(f"== Llama {name}: median R / c by ISL x clients")
        print(part.pivot_table(index="isl", columns="c", values="Rc", aggfunc="median").round(2))
    p = pd.read_csv(PRED)
    p = p[p.group.str.contains(r"h100_sxm\|trtllm") & (p.backend_version == "1.0.0rc3")].copy()
    p["model"] = p.group.str.split("|").str[0]
    pool = p.groupby(["model", "tp"]).twin_pool_gb.median()
    f = f.copy()
    replicas = [max(1.0, r.tp / KV_HEADS[r.model]) for r in f.itertuples()]
    f["need_gb"] = f.c * (f.isl + f.osl) * f.model.map(KV_BYTES) * replicas / 1e9
    f["pool_gb"] = [pool.get((r.model, int(r.tp))) for r in f.itertuples()]
    f["share"] = f.need_gb / f.pool_gb
    f["bind_gb"] = f.R * (f.isl + f.osl) * f.model.map(KV_BYTES) / 1e9
    print("== GUARANTEED_NO_EVICT: the whole reservation's share of the twin's pool, max by model")
    print(f.groupby("model").share.max().round(3))
    cols = ["model", "tp", "isl", "osl", "c", "need_gb", "pool_gb", "share", "R"]
    print(f.sort_values("share", ascending=False).groupby("model").head(2)[cols].round(2))
    print("== Llama 128 clients: the pool that would bind at the measured R (GB)")
    g = llama[llama.c == 128].merge(f[["id", "bind_gb", "pool_gb"]], on="id")
    print(g.sort_values(["tp", "isl"])[["tp", "isl", "osl", "R", "bind_gb", "pool_gb"]].round(1))
    p["Qt"] = p.concurrency / (p.twin_ttft_ms + (p.osl - 1) * p.twin_tpot_ms) * 1e3
    p["Qm"] = p.concurrency / (p.silicon_ttft_ms + (p.osl - 1) * p.silicon_tpot_ms) * 1e3
    print("== sample rows whose twin request rate is >= 45/s (the 20 ms front end: 50/s)")
    cols = ["model", "split", "tp", "isl", "osl", "concurrency", "Qt", "Qm", "twin_peak_running"]
    cols += ["silicon_ttft_ms", "twin_ttft_ms", "silicon_tpot_ms", "twin_tpot_ms"]
    print(p[p.Qt > 45][cols].round(1).to_string())


if __name__ == "__main__":
    main()
