"""Each group's fit TTFT / TPOT MAPE split into the points each block of rows adds
(sum(ape) / rows of the group), by release, MTP, layout and the client's warm-up (rows
measured before InferenceMAX's benchmark_lib.sh warm-up, d053ae24e 2026-01-21: cold).

    python benchmarks/results/trt-ds26/breakdown.py PREDICTIONS.csv [--split fit]
"""

import sys

import pandas as pd

import twin.validate.silicon as sil
from twin.validate.silicon import default_csv

GROUPS = [
    "DeepSeek-R1|h200_sxm|trtllm|fp8",
    "DeepSeek-R1|b200_sxm|trtllm|fp8",
    "DeepSeek-V3|b200_sxm|trtllm|fp8",
]
WARMUP_DAY = "2026-01-21"


def main() -> None:
    path = sys.argv[1]
    split = sys.argv[3] if len(sys.argv) > 3 else "fit"  # [--split SPLIT]
    d = pd.read_csv(path, dtype=str, keep_default_na=False)
    s = pd.read_csv(default_csv(), dtype=str, keep_default_na=False).set_index("id")
    d = d[d.group.isin(GROUPS) & (d.split == split)].copy()
    src = d.id.map(s.silicon_data_source)
    d["measured"] = src.str.extract(r"measured=([0-9-]+)", expand=False)
    d["warm"] = (d.measured >= WARMUP_DAY).map({True: "warm", False: "cold"})
    d["ep"] = d.id.map(s.moe_ep_size)
    d["adp"] = d.id.map(s.attention_dp_size).replace("", "1")
    d["layout"] = "ep" + d.ep + "/adp" + d.adp
    rows = {r.id: r for r in sil.read_rows(default_csv()) if r.id in set(d.id)}
    d["moe"] = d.id.map(lambda i: sil.inferencemax_trtllm_moe_backend(rows[i]) or "-")
    d["mtp"] = d.deployment.str.contains("speculative=mtp").map({True: "mtp", False: "plain"})
    for c in ("twin_ttft_ape", "twin_tpot_ape", "silicon_ttft_ms", "twin_ttft_ms"):
        d[c] = d[c].astype(float)
    d["rt"] = d.twin_ttft_ms / d.silicon_ttft_ms
    d["rp"] = d.twin_tpot_ms.astype(float) / d.silicon_tpot_ms.astype(float)
    for g, rows in d.groupby("group"):
        n = len(rows)
        print(
            f"\n{g}: {n} rows, TTFT {rows.twin_ttft_ape.mean():.1f} "
            f"TPOT {rows.twin_tpot_ape.mean():.1f} (signed TTFT "
            f"{(rows.rt - 1).mean() * 100:+.1f}, TPOT {(rows.rp - 1).mean() * 100:+.1f})"
        )
        for keys in (["backend_version", "mtp", "warm"], ["moe"], ["layout"], ["concurrency"]):
            b = rows.groupby(keys).agg(
                n=("id", "size"),
                ttft_pts=("twin_ttft_ape", lambda x, n=n: x.sum() / n),
                tpot_pts=("twin_tpot_ape", lambda x, n=n: x.sum() / n),
                ttft_ratio=("rt", "median"),
                tpot_ratio=("rp", "median"),
            )
            print(b.round(2).to_string())


if __name__ == "__main__":
    main()
