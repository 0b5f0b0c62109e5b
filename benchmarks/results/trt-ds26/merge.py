"""Merge a rescore's rows by id into session 25's predictions (the rows not rescored keep
their s25 values: their plans are unchanged) and print each group's MAPE before / after.

    python benchmarks/results/trt-ds26/merge.py AFTER.csv OUT.csv
"""

import sys

import pandas as pd

S25 = "benchmarks/results/silicon-sample1500-s25/predictions.csv"
GROUPS = [
    "DeepSeek-R1|h200_sxm|trtllm|fp8",
    "DeepSeek-R1|b200_sxm|trtllm|fp8",
    "DeepSeek-V3|b200_sxm|trtllm|fp8",
    "DeepSeek-V3|h200_sxm|trtllm|fp8",
]


def _mape(rows: pd.DataFrame, column: str) -> float:
    return float(rows[column].astype(float).mean())


def main() -> None:
    before = pd.read_csv(S25, dtype=str, keep_default_na=False)
    after = pd.read_csv(sys.argv[1], dtype=str, keep_default_na=False).set_index("id")
    merged = before.set_index("id")
    cols = [c for c in after.columns if c in merged.columns and c.startswith("twin_")]
    merged.loc[after.index, cols] = after[cols]
    merged = merged.reset_index()
    merged.to_csv(sys.argv[2], index=False)
    for split in ("fit", "held_out"):
        for g in GROUPS:
            b = before[(before.group == g) & (before.split == split)]
            a = merged[(merged.group == g) & (merged.split == split)]
            if not len(b):
                continue
            moved = a.id.isin(after.index).sum()
            print(
                f"{split:8} {g:34} {len(b):3} rows ({moved} rescored): TTFT "
                f"{_mape(b, 'twin_ttft_ape'):.1f} -> {_mape(a, 'twin_ttft_ape'):.1f}, TPOT "
                f"{_mape(b, 'twin_tpot_ape'):.1f} -> {_mape(a, 'twin_tpot_ape'):.1f}"
            )


if __name__ == "__main__":
    main()
