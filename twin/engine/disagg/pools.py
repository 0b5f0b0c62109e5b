"""Each pool's hardware (:class:`WorkerPool`) and the per-pool options of a run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from twin.engine.config import EngineConfig
from twin.engine.cost import StepPricer
from twin.engine.settings import NamedSettings
from twin.errors import TwinError


@dataclass(frozen=True)
class WorkerPool:
    """A pool's hardware: its workers' configuration (tp, ep, HBM, and the engine's
    defaults on that GPU, as its own servers would resolve them), step prices and memory
    budget. The prefill pool's is the run's; the decode pool's too unless
    ``--decode-gpu/--decode-tp/--decode-ep`` (or the prefill pool's), or either pool's
    own engine flags (``--prefill-set/--decode-set``), set it apart."""

    config: EngineConfig
    pricer: StepPricer
    budget: float
    gpu: str | None
    profile: str = ""  # the step prices' provenance label (summaries of mixed pools)


# Per-pool options of a disaggregated run (twin.engine.build_run): each defaults to the
# run's --gpu/--tp/--ep; the prefill pool's become the run's, the decode pool's the
# config's decode_gpu/decode_tp/decode_ep (left out where they equal the prefill pool's).
POOL_OPTIONS = (
    "prefill_gpu",
    "decode_gpu",
    "prefill_tp",
    "decode_tp",
    "prefill_ep",
    "decode_ep",
    "prefill_dp_attention",
    "decode_dp_attention",
)


class RunSettings(NamedSettings, total=False):
    """``twin.engine.build_run``'s settings: an :class:`EngineConfig`'s names (the engine
    mode is its own argument), and the prefill pool's (:data:`POOL_OPTIONS`; the decode
    pool's are the config's)."""

    prefill_gpu: str | None
    prefill_tp: int | None
    prefill_ep: int | None
    prefill_dp_attention: int | None


def split_pools(
    gpu: str | None, profile: object, settings: dict[str, Any]
) -> tuple[str | None, str | None, dict[str, Any]]:
    """(the prefill pool's GPU, the decode pool's GPU, the settings) from the run's
    ``gpu`` and ``settings`` holding :data:`POOL_OPTIONS`; refused in one line where no
    pools are given or a profile file is."""
    out = {k: v for k, v in settings.items() if k not in POOL_OPTIONS}
    given = {k: settings[k] for k in POOL_OPTIONS if settings.get(k) not in (None, 0, "")}
    if not given:
        return gpu, gpu, out
    flag = f"--{next(iter(given)).replace('_', '-')}"
    if not (settings.get("prefill_workers") or settings.get("decode_workers")):
        raise TwinError(
            f"{flag}: only a disaggregated run has pools; give --prefill-workers and "
            "--decode-workers"
        )
    if profile is not None and ("prefill_gpu" in given or "decode_gpu" in given):
        raise TwinError(
            f"{flag}: a pool's GPU names a shipped profile; --profile gives both pools "
            "theirs (leave one of them out)"
        )
    for name in ("tp", "ep", "dp_attention"):  # the prefill pool's are the run's
        run = int(settings.get(name) or 1)
        prefill = int(given.get(f"prefill_{name}", run))
        decode = int(given.get(f"decode_{name}", run))
        out[name] = prefill
        if decode != prefill:
            out[f"decode_{name}"] = decode
    return given.get("prefill_gpu", gpu), given.get("decode_gpu", gpu), out
