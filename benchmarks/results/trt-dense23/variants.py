"""Diagnosis only (helper trt-dense, session 23): rerun silicon rows by id under several
deployment variants in one process, one CSV line per (row, variant).

    PYTHONPATH=. python benchmarks/results/trt-dense23/variants.py ROWS.csv OUT.csv \\
        base "frontend_s=0.02" "eager_us=10;frontend_s=0.02" "client_gap=0.02"

A variant is ``base`` or ``;``-separated ``KEY=VALUE`` entries: a ``build_run`` keyword
changed as ``silicon_rows.py --deployment`` changes it; ``eager_us`` plans the rows again
with ``TRTLLM_EAGER_LAUNCH_S["h100"]`` at that many microseconds; ``client_gap`` (seconds)
makes every closed-loop client wait that long after a request completes before it sends
the next (the response path and the client's turnaround, outside TTFT): a patch of
``Cluster._client`` in this process, which no scoring rule has.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/
from silicon_rows import changed

import twin.validate.silicon as sil
from twin.engine import cluster
from twin.validate.silicon import eager_prefill
from twin.validate.silicon.predict import predict

GAP = [0.0]
HEADER = ["id", "variant", "isl", "osl", "c", "tp", "silicon_ttft_ms", "silicon_tpot_ms"]
HEADER += ["twin_ttft_ms", "twin_tpot_ms"]


def _client(self: Any, starts: Iterator[tuple[Any, float]]) -> Generator[Any, Any, None]:
    env, until = self.env, self.config.arrivals.until_s
    for n, (first, _) in enumerate(starts):
        if n and GAP[0]:
            yield env.timeout(GAP[0])
        if until is not None and env.now > until:
            self.source.drop(first.session_id)
            break
        self._active += 1
        yield from self._session(first, env.now)


def main(rows_csv: str, out_csv: str, variants: list[str]) -> None:
    cluster.Cluster._client = _client  # type: ignore[method-assign]
    with open(rows_csv, newline="") as f:
        given = {r["id"]: r for r in csv.DictReader(f)}
    rows = [r for r in sil.read_rows(sil.default_csv()) if r.id in given]
    base, _ = sil.plan_rows(rows, sil.default_configs(), "benchmark")
    kept = eager_prefill.TRTLLM_EAGER_LAUNCH_S["h100"]
    with open(out_csv, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(HEADER)
        for v in variants:
            entries = dict(kv.split("=", 1) for kv in v.split(";")) if v != "base" else {}
            GAP[0] = float(entries.pop("client_gap", 0.0))
            plans = base
            if "eager_us" in entries:
                eager_prefill.TRTLLM_EAGER_LAUNCH_S["h100"] = float(entries.pop("eager_us")) * 1e-6
                plans, _ = sil.plan_rows(rows, sil.default_configs(), "benchmark")
                eager_prefill.TRTLLM_EAGER_LAUNCH_S["h100"] = kept
            for p in plans:
                r = predict(changed(p, list(entries.items())))
                s = given[p.row.id]
                measured = (s["silicon_ttft_ms"], s["silicon_tpot_ms"])
                twin = (r.get("twin_ttft_ms"), r.get("twin_tpot_ms"))
                row = p.row
                out.writerow([row.id, v, row.isl, row.osl, p.concurrency, p.tp, *measured, *twin])
            print(f"{v} done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
