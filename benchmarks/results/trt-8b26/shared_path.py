"""Diagnosis only (helper trt-8b, session 26): score rows with the serving front end's
per-request time (``frontend_s``) and the response path's per-token time
(``stream_token_s``) spent by ONE server per replica (the worker process's event loop
that both submits requests and streams their tokens), not two. Patches
``Cluster._through_front`` in this process before ``silicon_rows.main`` forks its jobs.

    PYTHONPATH=. python benchmarks/results/trt-8b26/shared_path.py ROWS.csv --split fit \\
        --out DIR --jobs 2 --deployment frontend_s=0.02 --deployment stream_token_s=6e-05
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import silicon_rows

from twin.engine import cluster as cl


def _through_shared(self, req, replica):  # type: ignore[no-untyped-def]
    if replica is None:
        replica = self._route(req)
    env = self.env
    sched = replica.scheduler
    sent = env.now
    if getattr(sched, "stream_token_s", 0.0):
        done = max(sent, sched._stream_free) + self.config.host_time.frontend_s
        sched._stream_free = done
    else:
        free = self._front
        done = max(sent, free[replica.index]) + self.config.host_time.frontend_s
        free[replica.index] = done
    yield env.timeout(done - sent)
    return self._submit(req, replica, sent)


cl.Cluster._through_front = _through_shared  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(silicon_rows.main())
