"""Issue 31, helper minimax-b200 (session 27): TTFT / TPOT MAPE and signed median TTFT per
group, BEFORE.csv -> AFTER.csv on the ids of AFTER (a diagnosis).

    python benchmarks/results/minimax-b200-s27/cmp.py BEFORE.csv AFTER.csv
"""

import sys

import pandas as pd


def mape(x: pd.DataFrame, k: str) -> float:
    return round(float((x[f"twin_{k}_ms"] / x[f"silicon_{k}_ms"] - 1).abs().mean() * 100), 1)


def signed(x: pd.DataFrame) -> float:
    return round(float((x.twin_ttft_ms / x.silicon_ttft_ms - 1).median() * 100), 1)


def main() -> None:
    a = pd.read_csv(sys.argv[1]).set_index("id")
    b = pd.read_csv(sys.argv[2]).set_index("id")
    b = b[b.index.isin(a.index)]
    a = a.loc[b.index]
    print("all", len(b), mape(a, "ttft"), mape(a, "tpot"), "->", mape(b, "ttft"), mape(b, "tpot"))
    for g in sorted(b.group.unique()):
        x, y = a[a.group == g], b[b.group == g]
        print(
            f"{g:40s} {len(y):3d} TTFT {mape(x, 'ttft'):5} -> {mape(y, 'ttft'):5}"
            f"  TPOT {mape(x, 'tpot'):5} -> {mape(y, 'tpot'):5}"
            f"  signed TTFT med {signed(x)} -> {signed(y)}"
        )


if __name__ == "__main__":
    main()
