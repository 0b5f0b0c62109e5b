"""Engine modes: a named bundle of what a serving engine does, with the engine's own flag names.

``--engine NAME`` picks one mode from :data:`ENGINE_MODES`. A mode names

- its **kernel source** (:mod:`twin.costmodel.kernel_sources`: whose measured
  kernels price the steps; ``--engine`` kept this meaning, a mode only adds to it),
- its **cache policy** and the options it derives from the model,
- its **preemption** when the shared KV pool runs out (``recompute`` or ``retract``),
- the **recurrent-state slots** a running request holds,
- its **flags**: ``--set name=value`` with the engine's own flag names, each
  mapped onto an :class:`~twin.engine.config.EngineConfig` field or a policy option.

The memory mode is not part of the bundle: ``--cache-gb auto`` is the shared
pool every engine has; ``--cache-gb G`` is the Marconi paper's dedicated cache
(``paper``, the default mode, is that paper's world: Marconi's policy, any
``--policy``). Adding a mode is one entry here; the engine only reads the
configuration it produces.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from twin.engine.admission import DEFAULTS as ADMISSION
from twin.errors import TwinError
from twin.model import ModelSpec

# The preemption rules and schedule orders the engine runs (EngineConfig checks them).
PREEMPTIONS = ("recompute", "retract")
SCHEDULE_POLICIES = ("fcfs", "lpm")

Apply = Callable[[str, ModelSpec, dict[str, Any]], None]


@dataclass(frozen=True)
class Flag:
    """One engine flag: its help and how its value changes the run's settings."""

    help: str
    apply: Apply
    default: str


def _int(name: str, value: str, low: int = 1) -> int:
    try:
        v = int(value)
    except ValueError:
        raise TwinError(f"--set {name}={value}: expected an integer") from None
    if v < low:
        raise TwinError(f"--set {name}={value}: must be at least {low}")
    return v


def _float(name: str, value: str, low: float, high: float) -> float:
    try:
        v = float(value)
    except ValueError:
        raise TwinError(f"--set {name}={value}: expected a number") from None
    if not (math.isfinite(v) and low < v <= high):
        raise TwinError(f"--set {name}={value}: must be in ({low:g}, {high:g}]")
    return v


def _bool(name: str, value: str) -> bool:
    low = value.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise TwinError(f"--set {name}={value}: expected true or false")


def _choice(name: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise TwinError(f"--set {name}={value}: expected one of {', '.join(choices)}")
    return value


def _field(name: str, target: str, kind: str, help: str, default: str) -> tuple[str, Flag]:
    """A flag that sets one EngineConfig field."""

    def apply(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
        out[target] = _int(name, value) if kind == "int" else _float(name, value, 0.0, 1.0)

    return name, Flag(help, apply, default)


def _batching_flags(running: str, budget: str, memory: str) -> list[tuple[str, Flag]]:
    """An engine's names for the running cap, the step's token budget and its memory share."""
    return [
        _field(running, "max_running", "int", "most running requests", "256"),
        _field(
            budget, "max_batched_tokens", "int", "token budget per step (chunked prefill)", "8192"
        ),
        _field(memory, "memory_utilization", "float", "share of HBM for weights + KV pool", "0.9"),
    ]


def vllm_block_size(model: ModelSpec, block_size: int = 16) -> int:
    """The attention block vLLM uses for a hybrid model: one attention page >= one state page.

    vLLM ``vllm/platforms/interface.py`` ``Platform._align_hybrid_block_size``:
    ``attn_page_size_1_token`` is one attention layer's K+V of one token,
    ``mamba_page_size`` one recurrent layer's state (conv + SSM); the block is
    ``align * cdiv(mamba_page, align * attn_page_1)`` with ``align`` the larger
    of the kernel's block alignment (16, FlashAttention's
    ``get_supported_kernel_block_sizes``) and ``--block-size``, never smaller
    than ``--block-size``. With several recurrent kinds every state page is
    padded to one page size (``mamba_page_size_padded``), so the block must hold
    the largest: the page is the largest kind's state. Both pages come from the
    model's own byte methods.
    """
    if not (model.n_attention_layers and model.n_ssm_layers):
        return block_size
    attn_page_1 = model.kv_bytes_per_token // model.n_attention_layers
    mamba_page = largest_state_page(model)
    align = max(16, block_size)
    return max(block_size, align * -(-mamba_page // (align * attn_page_1)))


def largest_state_page(model: ModelSpec) -> int:
    """One layer's recurrent + conv state of the model's largest recurrent kind, bytes."""
    from twin.mixers import RECURRENT_KINDS

    return max(
        model.state_bytes_of(kind) // n
        for kind, n in model.mixer_counts.items()
        if kind in RECURRENT_KINDS and n
    )


@dataclass(frozen=True)
class EngineMode:
    """A serving engine's bundle of choices (module docstring)."""

    name: str
    display: str
    kernels: str | None  # kernel source (None: the default lookup, own profiles first)
    policy: str  # the cache policy it runs
    preemption: str  # "recompute" (youngest running) or "retract" (decode requests)
    models: str  # which real system this mode models (README, --help)
    flags: dict[str, Flag] = field(default_factory=dict)
    options: Callable[[ModelSpec, dict[str, Any]], dict[str, Any]] = lambda m, s: {}
    # SGLang's new_token_ratio admission settings (twin.engine.admission); None: none.
    admission: dict[str, float] | None = None

    def settings(self, model: ModelSpec, sets: dict[str, str]) -> dict[str, Any]:
        """EngineConfig fields for this mode with ``sets`` (``--set name=value``) applied."""
        sets = {k.lstrip("-").replace("-", "_"): v for k, v in sets.items()}
        unknown = sorted(set(sets) - set(self.flags))
        if unknown and not self.flags:
            raise TwinError(
                f"--set {unknown[0]}: engine {self.name!r} takes no flags; "
                "name the engine the flags are for (--engine vllm or --engine sglang)"
            )
        if unknown:
            valid = ", ".join(self.flags)
            raise TwinError(
                f"--set {unknown[0]}: engine {self.name!r} has no such flag (its flags: {valid})"
            )
        out: dict[str, Any] = {"policy": self.policy, "preemption": self.preemption}
        for name, flag in self.flags.items():
            if name in sets:
                flag.apply(sets[name], model, out)
        out["policy_options"] = {**self.options(model, out), **out.get("policy_options", {})}
        if self.admission is not None:
            out["new_token_ratio"] = {**self.admission, **out.pop("new_token_ratio", {})}
        if self.name != "paper":
            out["engine"] = self.name
            if sets:
                out["engine_flags"] = dict(sorted(sets.items()))
        return out


# ---------------------------------------------------------------------- vLLM
def _vllm_block(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    block = _int("block_size", value)
    # vllm/config/cache.py CacheConfig.block_size takes any positive int, but the
    # attention backend must accept it: FlashAttention (vLLM's CUDA default)
    # declares get_supported_kernel_block_sizes() == [MultipleOf(16)], and a user
    # block size it does not support is refused at start-up
    # (vllm/v1/worker/utils.py select_common_block_size).
    if block % 16:
        raise TwinError(
            f"--set block_size={value}: vLLM's CUDA attention kernels (FlashAttention) "
            "need a multiple of 16 tokens"
        )
    out["vllm_block_size"] = block


def _vllm_retention(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    # vllm/config/cache.py CacheConfig.prefix_cache_retention_interval: None (dense),
    # 0 (semantic checkpoints only, vLLM's default) or N >= 0 tokens; the multiple-of-
    # the-block check needs the hybrid block, so it runs in _vllm_options.
    if value.strip().lower() == "none":
        out["vllm_retention"] = None
    else:
        out["vllm_retention"] = _int("prefix_cache_retention_interval", value, low=0)


def _vllm_fine_grained(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    # vllm/config/cache.py CacheConfig.enable_mamba_fine_grained_prefix_cache: a junction
    # checkpoint "where an EAGLE/MTP sibling was observed to resume"; it takes effect
    # only with EAGLE on the Mamba group and prefix_match_unit < the Mamba block.
    if _bool("enable_mamba_fine_grained_prefix_cache", value):
        raise TwinError(
            f"--set enable_mamba_fine_grained_prefix_cache={value}: vLLM applies it only with "
            "EAGLE/MTP speculative decoding, which the twin does not model"
        )


def _vllm_prefix_caching(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    if not _bool("enable_prefix_caching", value):
        out["policy"] = "vanilla"


def _vllm_mamba_mode(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    # "none" keeps no recurrent state for reuse: a hybrid model gets no prefix hits
    # (vLLM disables prefix caching for it); "align" is the hybrid prefix cache.
    if _choice("mamba_cache_mode", value, ("align", "none")) == "none" and model.n_ssm_layers:
        out["policy"] = "vanilla"


def _vllm_offload(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    # vLLM's native CPU offloading (--kv-offloading-size GB, --kv-offloading-backend native).
    out["host_cache_bytes"] = int(_float("kv_offloading_size", value, 0.0, 1e6) * 1e9)


def _vllm_options(model: ModelSpec, out: dict[str, Any]) -> dict[str, Any]:
    block = out.pop("vllm_block_size", 16)
    retention = out.pop("vllm_retention", VLLM_RETENTION_DEFAULT)
    if out["policy"] != "vllm+":
        return {}
    size = vllm_block_size(model, block)
    if retention is None or not model.n_ssm_layers:
        # Dense (a state on every block), or nothing to retain: retention thins
        # recurrent states only (sliding-window KV is not modelled by the pool).
        return {"block_size": size}
    if retention % size:
        # kv_cache_coordinator.py _validate_prefix_cache_retention_interval.
        raise TwinError(
            f"--set prefix_cache_retention_interval={retention}: must be 0, none or a "
            f"multiple of the block size ({size} tokens for {model.name})"
        )
    return {"block_size": size, "retention_interval": retention}


# vllm/config/cache.py CacheConfig.prefix_cache_retention_interval: Field(default=0).
VLLM_RETENTION_DEFAULT = 0


VLLM = EngineMode(
    name="vllm",
    display="vLLM",
    kernels="vllm",
    policy="vllm+",
    preemption="recompute",
    models="vLLM V1 with --enable-prefix-caching and --mamba-cache-mode align",
    flags=dict(
        [
            (
                "block_size",
                Flag(
                    "attention block, a multiple of 16 (hybrids raise it to one state page)",
                    _vllm_block,
                    "16",
                ),
            ),
            ("enable_prefix_caching", Flag("cache prefixes", _vllm_prefix_caching, "true")),
            (
                "prefix_cache_retention_interval",
                Flag(
                    "recurrent states kept: 0 junctions + replay boundary, N also every N "
                    "tokens, none every block",
                    _vllm_retention,
                    "0",
                ),
            ),
            (
                "enable_mamba_fine_grained_prefix_cache",
                Flag("needs EAGLE/MTP: refused", _vllm_fine_grained, "false"),
            ),
            ("kv_offloading_size", Flag("CPU offload tier, GB", _vllm_offload, "0")),
            (
                "mamba_cache_mode",
                Flag("align (hybrid prefix caching) or none", _vllm_mamba_mode, "align"),
            ),
            *_batching_flags("max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization"),
        ]
    ),
    options=_vllm_options,
)


# ---------------------------------------------------------------------- SGLang
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
    (``server_args.py``, default 2.0); without it the ratio is read by nothing,
    so the twin refuses the ratio alone rather than ignore it.
    """
    enabled, ratio = out.pop("hicache", False), out.pop("hicache_ratio", None)
    if ratio is not None and not enabled:
        raise TwinError(
            "--set hicache_ratio: SGLang reads it only with the host tier on; "
            "add --set enable_hierarchical_cache=true"
        )
    if enabled:
        out["host_cache_ratio"] = 2.0 if ratio is None else ratio


def _sglang_write_policy(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    # Only write-through is modelled (every cached page also goes to host memory,
    # its copy overlapped and not priced). SGLang's write_through_selective (backed
    # up at the second hit) and write_back (backed up when evicted, the eviction
    # waiting for the copy: hiradix_cache.py) are refused, not approximated.
    if value in ("write_back", "write_through_selective"):
        raise TwinError(
            f"--set hicache_write_policy={value}: not modelled yet (only write_through)"
        )
    _choice("hicache_write_policy", value, ("write_through",))


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
                Flag("write_through", _sglang_write_policy, "write_through"),
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

PAPER = EngineMode(
    name="paper",
    display="Marconi paper",
    kernels=None,
    policy="marconi",
    preemption="recompute",
    models="the Marconi paper's world: any --policy; --cache-gb G is its dedicated cache",
)

TRTLLM = EngineMode(
    name="trtllm",
    display="TensorRT-LLM kernels",
    kernels="trtllm",
    policy="marconi",
    preemption="recompute",
    models="the paper's world priced with TensorRT-LLM's kernels (its own cache not modelled)",
)

ENGINE_MODES: dict[str, EngineMode] = {m.name: m for m in (PAPER, VLLM, SGLANG, TRTLLM)}
DEFAULT_MODE = "paper"


def get_mode(name: str | None) -> EngineMode:
    """The engine mode called ``name`` (``None``: the default); a one-line error otherwise."""
    try:
        return ENGINE_MODES[(name or DEFAULT_MODE).lower()]
    except KeyError:
        raise TwinError(f"--engine {name!r}: expected one of {', '.join(ENGINE_MODES)}") from None


__all__ = [
    "DEFAULT_MODE",
    "ENGINE_MODES",
    "PREEMPTIONS",
    "SCHEDULE_POLICIES",
    "EngineMode",
    "Flag",
    "get_mode",
    "largest_state_page",
    "vllm_block_size",
]
