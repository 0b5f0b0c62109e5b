"""The authors' own code on the twin's traces: the optional artifact column.

When ``$TWIN_MARCONI_ARTIFACT`` names a checkout of github.com/ruipeterpan/marconi,
chosen replay points are also run by the artifact's caches, driven as its
``policy_exploration.py`` (``run_trace_with_config``) drives them: for each
request in replay order, ``match_prefix(input)`` then ``insert(input + output,
state_at_leaf=session, state_at_branchoff=session)``; the token hit rate is
``get_cache_stats()[1]``. Policies map as that script maps them: vLLM+ is
``radix_cache_vllm.RadixCache`` with ``block_size=32``; SGLang+ and Marconi are
``radix_cache_hybrid.RadixCache`` with ``evict_policy_version`` 1 and 2
(``eff_weight=0``, alpha tuned by its bootstrap window, multiplier 5).

Each run is its own Python process (the artifact's top-level modules are named
``utils`` and ``config_tuner``, and it raises the recursion limit), with the
checkout first on ``sys.path``. The artifact imports ``transformers`` without
using it in the cache classes; where it is not installed, an empty stand-in
module is registered so the caches still load.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from twin.errors import TwinError

ENV = "TWIN_MARCONI_ARTIFACT"
# The artifact's tree size is a walk over the whole tree; its peak is sampled after
# every PEAK_EVERY-th insert (a lower bound of the true peak).
PEAK_EVERY = 8
# policy -> (module, constructor keyword arguments), after policy_exploration.py.
POLICIES: dict[str, tuple[str, dict[str, Any]]] = {
    "vllm+": ("radix_cache_vllm", {"evict_policy_version": 1, "block_size": 32}),
    "sglang+": ("radix_cache_hybrid", {"evict_policy_version": 1}),
    "marconi": ("radix_cache_hybrid", {"evict_policy_version": 2, "bootstrap_multiplier": 5}),
}

_DRIVER = """
import importlib, json, sys, types
checkout, workload, module, kwargs = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
PEAK_EVERY = int(sys.argv[5])
try:
    import transformers  # noqa: F401
except ImportError:
    stub = types.ModuleType("transformers")
    stub.AutoTokenizer = stub.AutoModelForCausalLM = None
    sys.modules["transformers"] = stub
from twin.workloads.reader import Workload
sys.path.insert(0, checkout)
sys.setrecursionlimit(100000)
tree = importlib.import_module(module).RadixCache(use_logical_ts=True, eff_weight=0.0, **kwargs)
peak = 0
for i, req in enumerate(Workload.open(workload).requests()):
    prompt = [int(t) for t in req.prompt]
    tree.match_prefix(prompt)
    tree.insert(token_ids=prompt + [int(t) for t in req.output],
                state_at_leaf=req.session_id, state_at_branchoff=req.session_id)
    if i % PEAK_EVERY == 0:  # a full-tree walk: sampled, not after every insert
        peak = max(peak, tree.get_tree_size())
stats = tree.get_cache_stats(verbose=False)
print(json.dumps({"token_hit_rate": stats[1], "request_hit_rate": stats[0], "peak_bytes": peak}))
"""


def checkout() -> Path | None:
    """The artifact checkout named by ``$TWIN_MARCONI_ARTIFACT``, or None when unset."""
    value = os.environ.get(ENV)
    if not value:
        return None
    path = Path(value)
    if not (path / "radix_cache_hybrid.py").is_file():
        raise TwinError(
            f"${ENV}={value}: not a checkout of the Marconi artifact (no radix_cache_hybrid.py)"
        )
    return path


def describe(repo: Path) -> str:
    """``PATH at commit C`` (or ``PATH`` when it is not a git checkout), for the report."""
    done = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    commit = done.stdout.strip() if done.returncode == 0 else ""
    return (
        f"{repo} at commit {commit}" if commit else f"{repo} (not a git checkout: commit unknown)"
    )


def run_artifact(
    repo: str, workload: str, policy: str, capacity_bytes: int, model: dict[str, int]
) -> dict[str, Any]:
    """One replay by the artifact's code; ``model`` holds its layer counts, ``d`` and ``n``."""
    module, kwargs = POLICIES[policy]
    args = {**kwargs, **model, "capacity_bytes": capacity_bytes}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path.cwd()), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-c", _DRIVER, repo, workload, module, json.dumps(args), str(PEAK_EVERY)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        raise TwinError(f"${ENV}: the artifact failed on {workload} ({policy}): {tail[0]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))
