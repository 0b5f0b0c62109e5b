"""The kernel tables' expert-parallel rows against their TP rows (issue 34): the tie.

Run: ``python benchmarks/bench_moe_ep_tie.py [GPU ...]`` (needs ``aiconfigurator-core``;
default b200 h200 b300). Writes ``benchmarks/results/moe-ep-tie.json``.

On the same GPUs a rank at EP k (MoE TP 1) and a rank at MoE TP k (EP 1) move the same
bytes and FLOPs under a balanced gate: the EP rank runs ``1 / k`` of the reached experts
at full width, the TP rank every reached expert at ``1 / k`` width. So in a table of
balanced rows their ratio should be about 1. NVIDIA's collectors time DeepSeek's
group-limited top-k (8 groups, top 4) on logits with one hot expert a group, and the tied
groups put more than ``1 / k`` of the rows on the timed rank
(``twin.costmodel.moe_layout``). This prints, per table (GPU, engine, the newest release
with such rows), fused-MoE kernel source, expert format and shape, the median over token
counts of EP k / TP k for k = 2, 4, 8, with the shape's model kind: group-limited
(DeepSeek's 7168 x 2048 x 256 top 8) or plain top-k. The group-limited shapes should stand out.
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path
from statistics import median
from typing import Any

from twin.calibration import aic_tables as at
from twin.errors import TwinError

RESULTS = Path(__file__).parent / "results" / "moe-ep-tie.json"
GPUS = ("b200", "h200", "b300")
# DeepSeek-V3/R1's routed experts (n_group 8, topk_group 4); every other shape in the
# tables is of a plain top-k model (Kimi-K2.5, GLM-5, Qwen3, MiniMax, gpt-oss: n_group 1).
GROUP_LIMITED = {(7168, 2048, 256, 8)}
WAYS = (2, 4, 8)


def table_ratios(table: Path) -> list[dict[str, Any]]:
    """Per kernel source, format and shape of ``table``'s balanced rows: the median over
    token counts of EP k / TP k latency, for each k both layouts timed."""
    lat: dict[tuple, dict[tuple[int, int, int], float]] = collections.defaultdict(dict)
    for r in at._read(table):
        if r.get("distribution") != "balanced" or "nongated" in str(r.get("kernel_source")):
            continue
        shape = tuple(int(r[c]) for c in ("hidden_size", "inter_size", "num_experts", "topk"))
        key = (str(r.get("kernel_source")), str(r.get("moe_dtype")), shape)
        layout = (int(r["moe_tp_size"]), int(r["moe_ep_size"]), int(r["num_tokens"]))
        lat[key][layout] = float(r["latency"])
    out = []
    for (source, dtype, shape), rows in sorted(lat.items()):
        ratios = {}
        for k in WAYS:
            pairs = _pairs_complete(rows, k)
            if pairs:
                ratios[f"ep{k}_over_tp{k}"] = round(median(pairs), 3)
        if ratios:
            kind = "group-limited" if shape in GROUP_LIMITED else "plain top-k"
            out.append({"source": source, "dtype": dtype, "shape": shape, "kind": kind, **ratios})
    return out


def _pairs_complete(rows: dict[tuple[int, int, int], float], k: int) -> list[float]:
    """EP k / TP k at every token count both layouts timed."""
    return [
        v / rows[(k, 1, t)]
        for (tp, ep, t), v in rows.items()
        if (tp, ep) == (1, k) and (k, 1, t) in rows
    ]


def main(gpus: list[str]) -> None:
    report: dict[str, Any] = {}
    for gpu in gpus:
        system = at.system_dir(gpu)
        for engine in at.ENGINES:
            # The newest release whose table has EP and TP series of some shape.
            found = (
                (v.name, table_ratios(v / "moe_perf.parquet"))
                for v in at._versions(system / "moe" / engine, "moe_perf.parquet")
            )
            release, rows = next(((n, r) for n, r in found if r), ("", []))
            if not rows:
                continue
            report[f"{gpu}/{engine}/{release}"] = rows
            by_kind: dict[str, list[float]] = collections.defaultdict(list)
            for r in rows:
                by_kind[r["kind"]] += [v for k, v in r.items() if k.startswith("ep")]
            summary = ", ".join(
                f"{kind} median {median(v):.2f} ({len(v)} series)" for kind, v in by_kind.items()
            )
            print(f"{gpu} {engine} {release}: EP k / TP k: {summary}")
            for r in rows:
                if r["kind"] == "group-limited":
                    ks = {k: v for k, v in r.items() if k.startswith("ep")}
                    print(f"    {r['source']} {r['dtype']} {r['shape']}: {ks}")
    RESULTS.write_text(json.dumps(report, indent=1, default=list) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    try:
        main(sys.argv[1:] or list(GPUS))
    except TwinError as err:  # an unknown GPU: one line, exit 2
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
