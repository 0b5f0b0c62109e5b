"""Diagnosis only (issue 31, step ttft22): rescore rows as ``benchmarks/silicon_rows.py``
does, but with the closed-loop clients' first requests spread evenly over one request's
decode (client k of c starts at k / c x OSL x TPOT_GUESS seconds, TPOT_GUESS 0.03 by
default), so the loop starts staggered instead of every client at once (lock step).

    PYTHONPATH=. python benchmarks/results/ttft22/stagger_start.py ROWS.csv --split fit \
        --out DIR --jobs 1

``--jobs 1`` only: the patch lives in this process. No rule of the twin; not for scoring.
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Generator, Iterator
from typing import Any

import twin.engine.cluster as cluster

TPOT_GUESS = float(os.environ.get("TPOT_GUESS", "0.03"))
_client = cluster.Cluster._client


def staggered_client(
    self: cluster.Cluster, starts: Iterator[tuple[Any, float]]
) -> Generator[Any, Any, None]:
    """Client k of c waits k / c of one request's decode before its first request."""
    k = getattr(self, "_stagger_k", 0)
    self._stagger_k = k + 1  # type: ignore[attr-defined]
    c = self.config.arrivals.concurrency or 1
    first, start = next(starts)
    yield self.env.timeout(first.output_len * TPOT_GUESS * k / c)

    def again() -> Iterator[tuple[Any, float]]:
        yield first, start
        yield from starts

    yield from _client(self, again())


if __name__ == "__main__":
    cluster.Cluster._client = staggered_client  # type: ignore[method-assign]
    sys.path.insert(0, "benchmarks")
    sys.argv = ["silicon_rows.py", *sys.argv[1:]]
    runpy.run_path("benchmarks/silicon_rows.py", run_name="__main__")
