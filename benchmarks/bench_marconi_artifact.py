"""Benchmark: the twin's replay next to the Marconi artifact's, on the same trace, in one run.

    MARCONI_ARTIFACT=/path/to/marconi python benchmarks/bench_marconi_artifact.py
        [--chat-sessions 120] [--fraction 0.1] [--results PATH]

``MARCONI_ARTIFACT`` names a checkout of github.com/ruipeterpan/marconi (its
``radix_cache_hybrid.RadixCache``); without it the benchmark says so and
writes nothing. Both replay ``bench_replay.py``'s chat trace through a cache
of ``--fraction`` of the trace's unbounded footprint with Marconi's default
rules (the artifact's ``evict_policy_version=2``, logical clock, bootstrap
multiplier 5, as ``policy_exploration.run_trace_with_config`` drives it: a
``match_prefix`` of the input, then an ``insert`` of input + output), the
twin with ``marconi``. Reported: prompt tokens per wall second of each, the
ratio, both token hit rates (the twin follows the artifact's rules, so
they should agree) and, per alpha of the grid, the FLOPs each saved over the
bootstrap window's last 500 requests (the artifact's from its
``config_tuner.tune_config`` replays, read as they complete; the twin's from
``marconi``'s bootstrap record). The artifact's alpha grid search runs in a process pool
over every core (``config_tuner.NUM_CPUS``), so its wall time is the fair
measure; the twin's is one process. Results: ``benchmarks/results/marconi_artifact.json``.

The artifact imports ``transformers`` without using it in the cache; a stub
module stands in when it is not installed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "marconi_artifact.json"
MODEL = "marconi-hybrid-7b"  # the artifact's default model (NVIDIA's 7B hybrid)


def artifact_cache(checkout: Path) -> Any:
    if "transformers" not in sys.modules:
        try:
            import transformers  # noqa: F401
        except ImportError:
            stub = types.ModuleType("transformers")
            stub.AutoTokenizer = stub.AutoModelForCausalLM = None  # type: ignore[attr-defined]
            sys.modules["transformers"] = stub
    sys.path.insert(0, str(checkout))
    from radix_cache_hybrid import RadixCache

    return RadixCache


def spy_on_tuning(grid: dict[str, int]) -> None:
    """Record each alpha's window FLOPs as ``tune_config`` collects its replays.

    ``tune_config`` ranks alphas by ``get_cache_stats(last_n=tuning_interval)``'s
    three FLOP terms; the same sum is taken here from each finished replay.
    """
    import config_tuner

    completed = config_tuner.as_completed

    def as_completed(futures: Any) -> Any:
        for future in completed(futures):
            tree = future.result()
            stats = tree.get_cache_stats(verbose=False, last_n=tree.tuning_interval)
            grid[str(float(tree.eff_weight))] = int(sum(stats[2:]))
            yield future

    config_tuner.as_completed = as_completed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chat-sessions", type=int, default=120)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fraction", type=float, default=0.1, help="cache / unbounded footprint")
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    checkout = os.environ.get("MARCONI_ARTIFACT")
    if not checkout or not (Path(checkout) / "radix_cache_hybrid.py").is_file():
        print("skipped: set MARCONI_ARTIFACT to a checkout of github.com/ruipeterpan/marconi")
        return
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_replay import make_chat

    from twin.atomic import write_text_atomic
    from twin.presets import get_model
    from twin.replay import Trace, replay
    from twin.workload_stats import summarize
    from twin.workloads.reader import Workload

    model = get_model(MODEL)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "chat.parquet"
        make_chat(path, args.chat_sessions, args.seed)
        tree = summarize(Workload.open(path))["infinite_cache"]  # as bench_replay sizes caches
        footprint = (
            tree["unique_tokens"] * model.kv_bytes_per_token
            + tree["tree_nodes"] * model.ssm_checkpoint_bytes
        )
        trace = Trace.load(path)
    capacity = int(args.fraction * footprint)
    requests = [
        (full[:n].tolist(), full[n:].tolist())
        for full, n in zip(trace.fulls, trace.prompt_lens, strict=True)
    ]

    radix_cache = artifact_cache(Path(checkout))
    artifact_grid: dict[str, int] = {}
    spy_on_tuning(artifact_grid)
    cache = radix_cache(
        capacity_bytes=capacity,
        evict_policy_version=2,
        eff_weight=0,
        use_logical_ts=True,
        num_ssm_layers=model.n_ssm_layers,
        num_attn_layers=model.n_attention_layers,
        num_mlp_layers=model.n_mlp_layers,
        d=model.d_model,
        n=model.ssm_d_state,
        bootstrap_multiplier=5,
    )
    start = time.perf_counter()
    for session, (prompt, output) in enumerate(requests):
        cache.match_prefix(prompt)
        cache.insert(token_ids=prompt + output, state_at_leaf=session, state_at_branchoff=session)
    artifact_s = time.perf_counter() - start
    artifact_hit = cache.get_cache_stats(verbose=False)[1]

    start = time.perf_counter()
    ours = replay(trace, model, capacity, "marconi")
    twin_s = time.perf_counter() - start

    tokens = trace.prompt_tokens
    twin_grid = ours.details.get("bootstrap", {}).get("grid", {})
    grid = {
        alpha: {"artifact": artifact_grid.get(alpha), "twin": twin_grid.get(alpha)}
        for alpha in sorted(set(artifact_grid) | set(twin_grid), key=float)
    }
    results = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "trace": {
            "sessions": args.chat_sessions,
            "requests": len(requests),
            "prompt_tokens": tokens,
        },
        "capacity_bytes": capacity,
        "artifact": {
            "wall_s": round(artifact_s, 3),
            "mtokens_per_s": tokens / artifact_s / 1e6,
            "token_hit_rate": artifact_hit,
        },
        "twin": {
            "wall_s": round(twin_s, 3),
            "mtokens_per_s": tokens / twin_s / 1e6,
            "token_hit_rate": ours.token_hit_rate,
            "alpha": ours.alpha,
        },
        "twin_over_artifact_speed": artifact_s / twin_s,
        "window_flops_saved_by_alpha": grid,
    }
    print(
        f"artifact {artifact_s:.2f} s ({tokens / artifact_s / 1e6:.2f}M tok/s, hit "
        f"{artifact_hit:.2%}); twin {twin_s:.2f} s ({tokens / twin_s / 1e6:.2f}M tok/s, hit "
        f"{ours.token_hit_rate:.2%}); twin {artifact_s / twin_s:.1f}x faster"
    )
    for alpha, both in grid.items():
        a, t = both["artifact"], both["twin"]
        print(
            f"  alpha {alpha}: window FLOPs saved artifact "
            + (f"{a / 1e12:.2f}e12" if a is not None else "-")
            + " twin "
            + (f"{t / 1e12:.2f}e12" if t is not None else "-")
        )
    write_text_atomic(args.results, json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.results}")


if __name__ == "__main__":
    main()
