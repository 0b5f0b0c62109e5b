"""Issue 31 (helper ``trt-ds``, session 25): does a first response held to the
``stream_interval``-th MTP iteration explain the 1.1.0rc2.post2 -mtp rows' extra TTFT?

Measured rows only (no twin): each -mtp row against the plain row of the same release,
system, precision, lengths, clients and tp (``../trt-mtp/plain-vs-mtp-measured.csv``,
session 21). A first response at ``py_decoding_iter == stream_interval`` (10 in every
script) instead of 1 would add 9 MTP iterations; an iteration is the -mtp row's TPOT x
2.78 (the accepted tokens per iteration the twin plans for 3 drafts, ``mtp:3@2.78``). The
second table: the fit rows' median twin / measured TTFT and TPOT (s24 predictions) by
release, MTP and whether the InferenceMAX client warmed the server up (``--num-warmups``,
from SemiAnalysisAI/InferenceX d053ae24e, 2026-01-21), plain rows, no attention DP, <= 64
clients.

    PYTHONPATH=. python benchmarks/results/trt-ds25/mtp_gate_test.py
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from twin.validate.silicon.harness import measured_on
from twin.validate.silicon.inferencemax_trtllm import inferencemax_mtp_drafts
from twin.validate.silicon.rows import read_rows

HERE = Path(__file__).parent
PAIRS = HERE.parent / "trt-mtp" / "plain-vs-mtp-measured.csv"
S24 = HERE.parents[1] / "results" / "silicon-sample1500-s24" / "predictions.csv"
ITERATIONS_HELD = 9  # stream_interval 10 less the first iteration
TOKENS_PER_ITERATION = 2.78
WARM_UP_FROM = "2026-01-21"


def gate_table() -> pd.DataFrame:
    d = pd.read_csv(PAIRS)
    d = d[d.mtp_release == "1.1.0rc2.post2"].copy()
    d["gate_ms"] = ITERATIONS_HELD * TOKENS_PER_ITERATION * d.mtp_tpot_ms
    d["measured_over_gate"] = d.mtp_minus_plain_ttft_ms / d.gate_ms
    cols = ["system", "precision", "isl", "osl", "concurrency", "tp"]
    cols += ["plain_ttft_ms", "mtp_ttft_ms", "mtp_minus_plain_ttft_ms", "gate_ms"]
    return d[[*cols, "measured_over_gate"]].round(2)


def warm_table(predictions: Path = S24) -> pd.DataFrame:
    rows = {r.id: r for r in read_rows()}
    d = pd.read_csv(predictions, dtype=str, keep_default_na=False)
    d = d[d.group.str.contains("DeepSeek") & (d.backend == "trtllm") & (d.split == "fit")]
    d = d[(d.twin_error == "") & d.id.isin(rows)].copy()
    d["mtp"] = [inferencemax_mtp_drafts(rows[i]) is not None for i in d.id]
    d["warm"] = [(measured_on(rows[i]) or "") >= WARM_UP_FROM for i in d.id]
    d["dp"] = [(rows[i].attention_dp or 1) > 1 for i in d.id]
    d["ttft"] = d.twin_ttft_ms.astype(float) / d.silicon_ttft_ms.astype(float)
    d["tpot"] = d.twin_tpot_ms.astype(float) / d.silicon_tpot_ms.astype(float)
    d = d[~d.dp & (d.concurrency.astype(int) <= 64)]
    keys = ["system", "precision", "backend_version", "mtp", "warm"]
    return (
        d.groupby(keys)
        .agg(rows=("ttft", "size"), ttft_median=("ttft", "median"), tpot_median=("tpot", "median"))
        .round(2)
        .reset_index()
    )


def main() -> None:
    gate = gate_table()
    gate.to_csv(HERE / "mtp-gate-test.csv", index=False)
    print(gate.to_string(index=False))
    by = gate.groupby("system").measured_over_gate.median().round(2)
    print("median measured / 9-iteration gate:", by.to_dict())
    warm = warm_table()
    warm.to_csv(HERE / "fit-ratio-by-warm-up.csv", index=False)
    print(warm.to_string(index=False))


if __name__ == "__main__":
    main()
