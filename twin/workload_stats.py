"""Workload statistics for ``twin workload info``, including the prefix-cache ceiling."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from twin.cache.radix import RadixTree
from twin.workloads.reader import Workload

PERCENTILES = (5, 50, 95, 99)


def distribution(values: np.ndarray) -> dict[str, float | None]:
    """Mean, min, max and the P5/P50/P95/P99 of ``values`` (all None when empty)."""
    if values.size == 0:
        return {"mean": None, "min": None, **{f"p{p}": None for p in PERCENTILES}, "max": None}
    pct = np.percentile(values, PERCENTILES)
    return {
        "mean": float(values.mean()),
        "min": float(values.min()),
        **{f"p{p}": float(v) for p, v in zip(PERCENTILES, pct, strict=True)},
        "max": float(values.max()),
    }


def summarize(workload: Workload, on_request: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """Describe ``workload`` in one pass over its requests.

    The ceiling replays the requests in row order against an unbounded,
    token-granular prefix cache (lookup, then insert prompt + output): no
    policy of any capacity can hit more tokens than this.
    """
    n = workload.num_rows
    prompt_len = np.zeros(n, np.int64)
    new_len = np.zeros(n, np.int64)
    hit_len = np.zeros(n, np.int64)
    tree = RadixTree()
    for req in workload.requests():
        prompt_len[req.row] = len(req.prompt)
        new_len[req.row] = req.new_tokens
        hit_len[req.row] = tree.match(req.prompt).length
        tree.insert(req.full)
        on_request()

    idx = workload.index
    output_len = idx["output_len"]
    _, turns = np.unique(idx["session_id"], return_counts=True)
    arrivals = idx["arrival_s"]
    known = arrivals[~np.isnan(arrivals)]
    session_starts = arrivals[(idx["turn"] == 0) & ~np.isnan(arrivals)]
    span = float(known.max() - known.min()) if known.size else 0.0
    total_prompt = int(prompt_len.sum())
    return {
        "file": str(workload.path),
        "producer": workload.metadata,
        "sessions": workload.num_sessions,
        "requests": n,
        "closed_loop_requests": int(np.isnan(arrivals).sum()),
        "tokens": {
            "prompt_total": total_prompt,
            "stored_input_total": int(new_len.sum()),
            "output_total": int(output_len.sum()),
        },
        "prompt_tokens": distribution(prompt_len),
        "output_tokens": distribution(output_len),
        "turns_per_session": distribution(turns),
        "think_s": distribution(idx["think_s"][~np.isnan(idx["think_s"])]),
        "arrivals": {
            "first_s": float(known.min()) if known.size else None,
            "last_s": float(known.max()) if known.size else None,
            "span_s": span,
            # n arrivals over a span hold n - 1 gaps.
            "session_rate_per_s": (len(session_starts) - 1) / span if span > 0 else None,
            # Only an all-open-loop file has a request rate of its own; closed-loop
            # turns arrive when the simulated server answers.
            "request_rate_per_s": (
                (len(known) - 1) / span if span > 0 and len(known) == n else None
            ),
        },
        "infinite_cache": {
            "hit_tokens": int(hit_len.sum()),
            "token_hit_rate": float(hit_len.sum() / total_prompt) if total_prompt else 0.0,
            "request_hit_rate": float((hit_len > 0).mean()) if n else 0.0,
            "tree_nodes": tree.num_nodes,
            "unique_tokens": tree.num_tokens,
        },
    }
