"""The ``sglang`` engine mode: SGLang's radix caches, HiCache and admission, and its flags.

Each flag function maps one of SGLang's own flag names (or environment
variables, lowercased) onto :class:`~twin.engine.config.EngineConfig` fields or
``sglang`` policy options; :data:`SGLANG` is the mode, registered in
:mod:`twin.engine.modes`.
"""

from __future__ import annotations

from typing import Any

from twin.cache.requests import WRITE_POLICIES
from twin.engine.admission import DEFAULTS as ADMISSION
from twin.engine.mode_base import (
    SCHEDULE_POLICIES,
    Apply,
    EngineMode,
    Flag,
    _batching_flags,
    _bool,
    _choice,
    _float,
    _int,
)
from twin.errors import TwinError
from twin.model import ModelSpec


def _sglang_strategy(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    # extra_buffer keeps 3 recurrent states per running request (the live one and
    # two ping-pong buffers for the next checkpoint) and skips the copies;
    # no_buffer keeps one (SGLang server_args.py --mamba-scheduler-strategy).
    strategy = _choice("mamba_scheduler_strategy", value, ("no_buffer", "extra_buffer"))
    out["state_slots"] = 3 if strategy == "extra_buffer" else 1


def _sglang_radix(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    if _bool("disable_radix_cache", value):
        out["policy"] = "vanilla"


def _sglang_hicache(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    out["hicache"] = _bool("enable_hierarchical_cache", value)


def _sglang_hicache_ratio(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    # SGLang requires a host pool larger than the device pool (ratio > 1).
    out["hicache_ratio"] = _float("hicache_ratio", value, 1.0, 1e3)


def _sglang_host_tier(out: dict[str, Any]) -> None:
    """HiCache's host tier from the two flags (``_sglang_options``, after every flag).

    SGLang builds ``HiRadixCache`` only under ``--enable-hierarchical-cache``
    (``scheduler.py``), its host pool ``hicache_ratio`` x the device pool
    (``server_args.py``, default 2.0); without it the ratio and the write policy
    are read by nothing, so the twin refuses them alone rather than ignore them.
    """
    enabled, ratio = out.pop("hicache", False), out.pop("hicache_ratio", None)
    host_flags = {"hicache_ratio": ratio, "hicache_write_policy": out.get("host_write_policy")}
    for name, value in host_flags.items():
        if value is not None and not enabled:
            raise TwinError(
                f"--set {name}: SGLang reads it only with the host tier on; "
                "add --set enable_hierarchical_cache=true"
            )
    if enabled:
        out["host_cache_ratio"] = 2.0 if ratio is None else ratio


def _sglang_write_policy(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    # SGLang --hicache-write-policy (server_args.py); the rules: twin.cache.requests.
    out["host_write_policy"] = _choice("hicache_write_policy", value, WRITE_POLICIES)


def _sglang_eviction(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    # SGLang --radix-eviction-policy (server_args.py; the orders of
    # mem_cache/evict_policy.py): the radix cache's leaf order, ``sglang``'s
    # ``eviction`` option (policies/sglang_plus.py). Only RadixCache reads it:
    # MambaRadixCache (hybrid models) keeps plain LRU lists, so for a model with
    # recurrent layers the flag is accepted and, as in SGLang, changes nothing.
    from policies.sglang_plus import EVICTION_KEYS

    choice = _choice("radix_eviction_policy", value, tuple(EVICTION_KEYS))
    if not model.n_ssm_layers and choice != "lru":
        out["radix_eviction"] = choice


def _sglang_options(model: ModelSpec, out: dict[str, Any]) -> dict[str, Any]:
    _sglang_host_tier(out)
    eviction = out.pop("radix_eviction", None)
    options: dict[str, Any] = {
        k: out.pop(k) for k in ("mamba_full_memory_ratio", "page_size") if k in out
    }
    if out["policy"] != "sglang":
        return {}
    if options.get("page_size", 1) > 1 and not model.n_ssm_layers:
        # RadixCache's paged matching is not modelled: refused, not approximated.
        raise TwinError("--set page_size: only 1 is modelled for a model without recurrent layers")
    if options.get("page_size", 1) > 1 and out.get("state_slots", 1) == 1:
        # MambaRadixCache v1 (no_buffer) asserts page_size == 1 (mamba_radix_cache.py __init__).
        raise TwinError(
            "--set page_size: SGLang needs mamba_scheduler_strategy=extra_buffer for page_size > 1"
        )
    return {**options, "eviction": eviction} if eviction else options


def _sglang_ratio(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    # server_args.py --mamba-full-memory-ratio (default 0.9): the mamba pool's bytes
    # over the full-attention KV pool's (model_runner: mamba = rest * r / (1 + r)).
    out["mamba_full_memory_ratio"] = _float("mamba_full_memory_ratio", value, 0.0, 1e3)


def _sglang_page(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    out["page_size"] = _int("page_size", value)


def _sglang_schedule(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    # lpm: longest cached prefix first (python/sglang/srt/managers/schedule_policy.py,
    # SchedulePolicy.calc_priority); the other cache-aware orders (dfs-weight) and the
    # cache-agnostic lof/random are not modelled.
    out["schedule_policy"] = _choice("schedule_policy", value, SCHEDULE_POLICIES)


def _sglang_admission(name: str, kind: str) -> Apply:
    """A flag that sets one of SGLang's new_token_ratio settings (twin.engine.admission)."""

    def apply(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
        if kind == "int":
            v: float = _int(name, value, 0 if name == "sglang_retract_decode_steps" else 1)
        elif name == "schedule_conservativeness" and value.strip() in ("0", "0.0"):
            v = 0.0  # SGLang asserts only >= 0 (scheduler.py): 0 reserves nothing
        else:
            v = _float(name, value, 0.0, 1e3)
        out.setdefault("new_token_ratio", {})[name] = v

    return apply


def _admission_flags() -> list[tuple[str, Flag]]:
    """SGLang's new_token_ratio knobs: the server flag and its environment variables."""
    helps = {
        "schedule_conservativeness": "scales the new_token_ratio (server flag)",
        "sglang_init_new_token_ratio": "new_token_ratio at start and after no decode (env)",
        "sglang_min_new_token_ratio_factor": "floor of the ratio, x its start (env)",
        "sglang_new_token_ratio_decay_steps": "decode steps from start to floor (env)",
        "sglang_retract_decode_steps": "steps a retraction leaves room for (env)",
        "sglang_clip_max_new_tokens_estimation": "max_new_tokens clip in the estimate (env)",
    }
    return [
        (
            name,
            Flag(
                help,
                _sglang_admission(name, "int" if isinstance(ADMISSION[name], int) else "float"),
                f"{ADMISSION[name]:g}",
            ),
        )
        for name, help in helps.items()
    ]


SGLANG = EngineMode(
    name="sglang",
    display="SGLang",
    kernels="sglang",
    policy="sglang",
    preemption="retract",
    models="SGLang with its radix cache for hybrid models (MambaRadixCache)",
    flags=dict(
        [
            (
                "mamba_scheduler_strategy",
                Flag(
                    "no_buffer or extra_buffer (3 states a request)", _sglang_strategy, "no_buffer"
                ),
            ),
            ("disable_radix_cache", Flag("no prefix cache", _sglang_radix, "false")),
            (
                "enable_hierarchical_cache",
                Flag("HiCache: a host-memory tier (ratio 2)", _sglang_hicache, "false"),
            ),
            ("hicache_ratio", Flag("host tier / device pool", _sglang_hicache_ratio, "2")),
            (
                "hicache_write_policy",
                Flag(
                    "write_through, write_through_selective or write_back",
                    _sglang_write_policy,
                    "write_through",
                ),
            ),
            (
                "radix_eviction_policy",
                Flag("lru, lfu, fifo, mru, filo, priority, slru", _sglang_eviction, "lru"),
            ),
            ("schedule_policy", Flag("fcfs or lpm", _sglang_schedule, "fcfs")),
            (
                "mamba_full_memory_ratio",
                Flag("state pool / KV pool (hybrids)", _sglang_ratio, "0.9"),
            ),
            ("page_size", Flag("tokens a page (hybrids: extra_buffer)", _sglang_page, "1")),
            *_admission_flags(),
            *_batching_flags("max_running_requests", "chunked_prefill_size", "mem_fraction_static"),
        ]
    ),
    options=_sglang_options,
    admission=dict(ADMISSION),
)
