"""Diagnosis / fit (issue 31, helper qwen-moe, session 26): the TPOT MAPE of SGLang's -mtp
fit rows over (acceptance a, loop host fixed seconds, loop host seconds per running
request), estimated from ONE scored run of those rows with the loop host at 0 and the
acceptance at ``A0``: each row's iteration = twin TPOT x tau(A0); the estimate is
``(iteration + fixed + each x peak running) / tau(a)``, tau(a) = 1 + a + ... + a^k (k = 2
DeepSeek, 3 Qwen3.5; the per-position rates of ``inferencemax_mtp_acceptance``).

    python benchmarks/results/qwen-moe/fit_loop_host.py PREDICTIONS.csv 0.76 [0.76,0.70]
"""

import sys

import numpy as np
import pandas as pd


def tau(a: float, k: int) -> float:
    return 1 + sum(a ** (i + 1) for i in range(k))


def main() -> None:
    d = pd.read_csv(sys.argv[1])
    a0 = float(sys.argv[2])
    accs = [float(x) for x in sys.argv[3].split(",")] if len(sys.argv) > 3 else None
    d = d[d.twin_tpot_ms.notna()]
    steps = np.where(d.group.str.startswith("DeepSeek"), 2, 3)
    running = d.twin_peak_running.astype(float).to_numpy()
    iteration = d.twin_tpot_ms.to_numpy() * np.array([tau(a0, k) for k in steps])
    measured = d.silicon_tpot_ms.to_numpy()
    qwen = d.group.str.startswith("Qwen").to_numpy()
    grid = []
    for a in accs or np.round(np.arange(0.60, 0.92, 0.02), 2):
        t = np.array([tau(a, k) for k in steps])
        for fixed in np.arange(0, 6.01, 0.25):
            for each in np.arange(0, 0.601, 0.02):
                ape = np.abs((iteration + fixed + each * running) / t - measured) / measured * 100
                grid.append((ape.mean(), ape[qwen].mean(), ape[~qwen].mean(), a, fixed, each * 1e3))
    grid.sort()
    print("TPOT MAPE all / Qwen3.5 / DeepSeek, acceptance, fixed ms, per running request us")
    for row in grid[:8]:
        print(" ".join(f"{x:.2f}" for x in row))


if __name__ == "__main__":
    main()
