"""Fit (issue 31, helper mtp-host, session 26): the TPOT MAPE of SGLang's -mtp fit rows over
the spec-v1 loop host time (fixed seconds, seconds per running request) at the shared
acceptance 0.76, estimated from ONE scored run with the loop host at 0 (as
``benchmarks/results/qwen-moe/fit_loop_host.py``, acceptance fixed); with QWEN_MAX, only
points whose Qwen3.5 estimate is at most that.

    python benchmarks/results/mtp-host/fit_loop_host_grid.py LOOP0_PREDICTIONS.csv [QWEN_MAX]
"""

import sys

import numpy as np
import pandas as pd


def tau(a: float, k: int) -> float:
    return 1 + sum(a ** (i + 1) for i in range(k))


def main() -> None:
    d = pd.read_csv(sys.argv[1])
    qwen_max = float(sys.argv[2]) if len(sys.argv) > 2 else np.inf
    d = d[d.twin_tpot_ms.notna()]
    t = np.array([tau(0.76, 2 if g.startswith("DeepSeek") else 3) for g in d.group])
    running = d.twin_peak_running.astype(float).to_numpy()
    iteration = d.twin_tpot_ms.to_numpy() * t
    measured = d.silicon_tpot_ms.to_numpy()
    qwen = d.group.str.startswith("Qwen").to_numpy()
    grid = []
    for fixed in np.arange(0, 6.01, 0.25):
        for each in np.arange(0, 0.401, 0.01):
            ape = np.abs((iteration + fixed + each * running) / t - measured) / measured * 100
            if ape[qwen].mean() <= qwen_max:
                grid.append((ape.mean(), ape[qwen].mean(), ape[~qwen].mean(), fixed, each * 1e3))
    grid.sort()
    print("TPOT MAPE all / Qwen3.5 / DeepSeek, fixed ms, per running request us")
    for row in grid[:8]:
        print(" ".join(f"{x:.2f}" for x in row))


if __name__ == "__main__":
    main()
