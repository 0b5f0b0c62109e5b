"""The ``sglang`` engine mode: SGLang's radix caches, HiCache and admission, and its flags.

Each flag function maps one of SGLang's own flag names (or environment
variables, lowercased) onto :class:`~twin.engine.config.EngineConfig` fields or
``sglang`` policy options; :data:`SGLANG` is the mode, registered in
:mod:`twin.engine.modes`. Its speculative decoding flags are
:mod:`twin.engine.sglang_speculation`'s.
"""

from __future__ import annotations

from typing import Any

from twin.cache.requests import WRITE_POLICIES
from twin.costmodel.table_release import release_at_least
from twin.engine.admission import DEFAULTS as ADMISSION
from twin.engine.kernel_layouts_sglang import sglang_kernel_layout
from twin.engine.memory_rules import (
    SGLANG_0_5_23,
    sglang_mem_fraction_static,
    sglang_piecewise_off,
)
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
    _scheduler_option,
)
from twin.engine.releases import Release, release_of
from twin.engine.sglang_speculation import SGLANG_ALGORITHMS, SPECULATIVE_FLAGS, sglang_speculation
from twin.errors import TwinError
from twin.hardware import MIB
from twin.model import ModelSpec

# State slots a running request holds per strategy: its live state plus the tracking
# slots SGLang allocates at admission (mem_cache/allocation_sizing.py
# get_mamba_tracking_slots, 0.5.23: extra_buffer 2 with the overlap scheduler, SGLang's
# default; extra_buffer_lazy 1; no_buffer 0; 0.5.10.post1 memory_pool.py:
# mamba_ping_pong_track_buffer_size 2 without speculative decoding). Lazy's second
# ping-pong slot is transient (managers/schedule_batch.py 0.5.23,
# mamba_lazy_prealloc_at_boundary): taken for the one decode step at a
# mamba_track_interval boundary and freed after its forward, so a lazy request holds 2.
STATE_SLOTS = {"no_buffer": 1, "extra_buffer": 3, "extra_buffer_lazy": 2}


def _sglang_strategy(name: str) -> Apply:
    """``mamba_radix_cache_strategy`` (0.5.23) or ``mamba_scheduler_strategy`` (0.5.10.post1)."""

    def apply(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
        release = release_of(out)
        strategy = _choice(name, value, release.choice(name, ("auto", "no_buffer", "extra_buffer")))
        out["mamba_strategy"] = strategy

    return apply


def _resolve_strategy(model: ModelSpec, out: dict[str, Any]) -> None:
    """The strategy's state slots (``_sglang_options``, after every flag).

    ``auto``: 0.5.10.post1 ``server_args.py`` resolves it to ``no_buffer``; 0.5.23
    ``arg_groups/overrides.py`` ``_mamba_radix_cache_resolution`` to ``extra_buffer`` when
    the overlap scheduler is on (its default; the twin has no flag to turn it off) and the
    architecture supports it (``_MAMBA_EXTRA_BUFFER_ARCHS``: Qwen3-Next/3.5, Nemotron-H,
    Falcon-H1, Granite-4.0-H, Kimi-Linear, ... every hybrid family the twin models).
    """
    release = release_of(out)
    strategy = out.pop("mamba_strategy", release.default("mamba_strategy", "no_buffer"))
    if strategy == "auto":
        strategy = release.default("auto_strategy", "no_buffer")
    if model.n_ssm_layers and STATE_SLOTS[strategy] != 1:
        out["state_slots"] = STATE_SLOTS[strategy]


def _sglang_track_interval(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    # server_args.py / arg_groups/fields/exec_.py --mamba-track-interval (256): where
    # extra_buffer tracks a state during decode (seq_len % interval == 0). The twin keeps
    # a state after the last token (sglang+'s admission), so only SGLang's default is
    # accepted: another value would move the cached states, which is not modelled yet.
    interval = _int("mamba_track_interval", value)
    if interval != 256 and model.n_ssm_layers:
        raise TwinError(
            f"--set mamba_track_interval={value}: where SGLang tracks decode states is not "
            "modelled yet (only its default, 256)"
        )


def _sglang_int8(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    # arg_groups/fields/exec_.py --enable-int8-mamba-checkpoint (0.5.23): radix-cached
    # mamba states stored in int8, "~2x cached-prefix capacity at fixed memory": the
    # twin halves a cached state's bytes (running requests' slots keep their dtype).
    if _bool("enable_int8_mamba_checkpoint", value):
        out["int8_checkpoint"] = True


def _sglang_radix(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    if _bool("disable_radix_cache", value):
        out["policy"] = "vanilla"
        # schedule_policy.py add_one_req (0.5.5, 0.5.9): the twin's requests ignore EOS
        # (exact outputs), so the adder is add_one_req_ignore_eos (twin.engine.sglang_batching).
        out.setdefault("scheduler_options", {})["radix_cache_disabled"] = True


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
    # SGLang --radix-eviction-policy: the radix cache's leaf order, ``sglang``'s
    # ``eviction`` option (twin/policies/sglang_plus.py). 0.5.10.post1: RadixCache builds
    # lru, lfu, fifo, mru, filo, priority, slru (mem_cache/radix_cache.py; its CLI lists
    # lru, lfu, slru, the Engine API takes all), and MambaRadixCache (hybrids) keeps
    # plain LRU lists, so on a hybrid the flag is accepted and changes nothing. 0.5.23:
    # lru, lfu, slru, priority, tlru (arg_groups/choices.py), and the hybrid tree is
    # UnifiedRadixCache, which orders its full component by the policy: not modelled.
    from twin.policies.eviction_orders import SGLANG_ORDERS

    release = release_of(out)
    choices = release.choice("radix_eviction_policy", SGLANG_ORDERS)
    if value in SGLANG_ORDERS and value not in choices:
        raise TwinError(
            f"--set radix_eviction_policy={value}: not a choice of SGLang {release.version} "
            f"({', '.join(choices)}); --engine sglang==0.5.10.post1 has it"
        )
    if value == "tlru":
        # evict_policy.py TLRUStrategy needs --radix-eviction-policy-config threshold >
        # next_prompt_estimate (arg_groups/kv_cache_hook.py) and per-branch tail counts.
        raise TwinError(
            "--set radix_eviction_policy=tlru: T-LRU (tail-optimized LRU) is not modelled yet"
        )
    choice = _choice("radix_eviction_policy", value, choices)
    if model.n_ssm_layers and choice != "lru" and release.default("hybrid_eviction", "") == "on":
        raise TwinError(
            f"--set radix_eviction_policy={value}: SGLang {release.version}'s UnifiedRadixCache "
            "orders a hybrid tree by it; the twin's hybrid cache has LRU lists only (not "
            "modelled yet)"
        )
    if not model.n_ssm_layers and choice != "lru":
        out["radix_eviction"] = choice


def _sglang_options(model: ModelSpec, out: dict[str, Any]) -> dict[str, Any]:
    _resolve_strategy(model, out)
    sglang_speculation(model, out)
    int8 = out.pop("int8_checkpoint", False)
    if int8 and out.get("hicache"):
        # arg_groups/mamba_hook.py handle_int8_mamba_checkpoint refuses the pair.
        raise TwinError(
            "--set enable_int8_mamba_checkpoint: SGLang refuses it with "
            "enable_hierarchical_cache (the host path is not int8-aware)"
        )
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
        strategy = "mamba_radix_cache_strategy"
        if strategy not in release_of(out).flags:
            strategy = "mamba_scheduler_strategy"
        raise TwinError(f"--set page_size: SGLang needs {strategy}=extra_buffer for page_size > 1")
    if int8 and model.n_ssm_layers:
        options["int8_checkpoint"] = True
    return {**options, "eviction": eviction} if eviction else options


def _sglang_ratio(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    # server_args.py --mamba-full-memory-ratio (default 0.9): the mamba pool's bytes
    # over the full-attention KV pool's (model_runner: mamba = rest * r / (1 + r)).
    out["mamba_full_memory_ratio"] = _float("mamba_full_memory_ratio", value, 0.0, 1e3)


def _sglang_page(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    out["page_size"] = _int("page_size", value)


# --nsa-prefill-backend (0.5.9 / 0.5.10.post1 ``server_args.py`` NSA_CHOICES): the
# DeepSeek-sparse-attention prefill kernel. Read by the kernel layout only
# (``twin.engine.run_pricing.kernel_layout_of`` ->
# ``kernel_layouts_sglang.with_nsa_prefill_backend``:
# GLM-5's forced sparse MLA on Blackwell); the others are refused (no measured module).
# SGLang's default over an fp8 cache on Blackwell, ``flashmla_auto``, runs
# ``flashmla_sparse`` without a cached prefix (``nsa_backend.py`` ``set_nsa_prefill_impl``).
SGLANG_NSA_PREFILL_BACKENDS = ("flashmla_auto", "trtllm", "flashmla_sparse")


def _sglang_nsa_prefill(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    _choice("nsa_prefill_backend", value, SGLANG_NSA_PREFILL_BACKENDS)


def _sglang_schedule(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    # lpm: longest cached prefix first (python/sglang/srt/managers/schedule_policy.py,
    # SchedulePolicy.calc_priority); the other cache-aware orders (dfs-weight) and the
    # cache-agnostic lof/random are not modelled.
    out["schedule_policy"] = _choice("schedule_policy", value, SCHEDULE_POLICIES)


def _sglang_a2a(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    # server_args.py --moe-a2a-backend (default none: the MoE layers gather under DP
    # attention); deepep: DeepEP's dispatch and combine, deepep_mode auto (normal with an
    # extend in the batch, else low_latency: layers/moe/utils.py DeepEPMode.resolve),
    # priced under --dp-attention from the profile's a2a fits (twin.costmodel.a2a).
    choice = _choice("moe_a2a_backend", value, ("none", "deepep"))
    out["moe_a2a"] = "" if choice == "none" else choice


def _sglang_mixed_chunk(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    # server_args.py --enable-mixed-chunk (default off): the running decodes ride in each
    # prefill batch, their tokens off its budgets (twin.engine.sglang_batching
    # SGLangMixedBatching, 0.5.6.post2 schedule_policy.py PrefillAdder); off: SGLang's
    # prefill batches ahead of decodes.
    out["scheduler"] = "sglang-mixed" if _bool("enable_mixed_chunk", value) else "sglang"


def _sglang_disaggregation(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    # --disaggregation-mode {null, prefill, decode} (0.5.10.post1 server_args.py, 0.5.23
    # arg_groups/fields/disagg.py): one server's role. A twin run is the whole
    # deployment, its servers' roles given by --prefill-workers/--decode-workers
    # (twin.engine.disagg); null says aggregated, and conflicts with them.
    mode = _choice("disaggregation_mode", value, ("null", "prefill", "decode"))
    if mode != "null":
        raise TwinError(
            f"--set disaggregation_mode={mode}: the role of one SGLang server; a twin run "
            "simulates the whole deployment: give --prefill-workers P --decode-workers D "
            "(its prefill servers run --disaggregation-mode prefill, its decode servers "
            "decode)"
        )
    out["prefill_workers"] = 0


# SGLang's running-request cap when --max-running-requests is not given: min(KV tokens //
# 2, the request pool), the pool min(max(KV tokens / context_len x 512, 2048), 4096) slots
# (0.5.6.post2 ``managers/tp_worker.py`` and ``model_executor/model_runner.py``
# ``init_memory_pool``; 0.5.23 ``model_executor/pool_configurator.py``
# ``_resolve_max_running_requests_per_worker``). The twin sets the pool's floor: exact
# while the KV pool holds at most 4 x context_len tokens, and below SGLang's cap (up to
# 4,096) only for replicas that would run more than 2,048 sequences at once.
SGLANG_MAX_RUNNING = 2048


def sglang_gpu_defaults(
    gpu_bytes: float,
    tp: int,
    given: dict[str, Any],
    gpu: str = "",
    model: ModelSpec | None = None,
) -> dict[str, Any]:
    """SGLang's step budget by the GPU's memory, where ``chunked_prefill_size`` is not given,
    its running-request cap (:data:`SGLANG_MAX_RUNNING`), and its ``mem_fraction_static``
    where not given.

    ``python/sglang/srt/server_args.py`` (``ServerArgs.__post_init__`` in 0.5.1.post1,
    ``_handle_gpu_memory_settings`` in 0.5.8.post1 and 0.5.14): ``chunked_prefill_size``
    is 2,048 below 35 GiB of GPU memory, 4,096 below 60 GiB (0.5.8.post1 on), 8,192
    below 160 GiB and 16,384 above (B200); 0.5.23 (``arg_groups/memory_hook.py``
    ``_handle_gpu_memory_settings``) gives 4,096 from 20 GiB on.

    ``mem_fraction_static``: SGLang's own rule of the release run
    (:func:`twin.engine.memory_rules.sglang_mem_fraction_static`), from the GPU's memory
    as the driver reports it (``get_device_memory_capacity``, MiB), tp, the chunk, the
    CUDA-graph batch sizes, attention DP, the draft and the model's attention (MLA).
    An H100 at tp 1 gets 0.830 under 0.5.10.post1 (13,904 MiB reserved: 512 + 12,288
    for an 8,192-token chunk + 512 for 256 graph sizes + 128 for tp + 464 for 58
    piecewise graphs). The twin's flat 0.9 before it was 8% more memory a GPU
    (docs/decisions.md, "Issue 31, step: the engines' memory rules").
    """
    mem = gpu_bytes / MIB  # get_device_memory_capacity: MiB
    release = given.get("engine_release") or ""  # none: the older release's rules
    if mem < 20 * 1024 or (mem < 35 * 1024 and not release_at_least(release, SGLANG_0_5_23)):
        chunk = 2048
    elif mem < 35 * 1024:
        chunk = 4096  # 0.5.23 arg_groups/memory_hook.py: 4,096 from 20 GiB (A10, 4090, 5090)
    elif mem < 60 * 1024:
        chunk = 4096
    elif mem < 160 * 1024:
        chunk = 8192
    else:
        chunk = 16384
    out: dict[str, Any] = {} if "max_batched_tokens" in given else {"max_batched_tokens": chunk}
    if "max_running" not in given:
        out["max_running"] = SGLANG_MAX_RUNNING
    if "memory_utilization" not in given:
        spec = (given.get("speculative") or {}).get("method", "")
        out["memory_utilization"] = sglang_mem_fraction_static(
            gpu_bytes,
            tp,
            release,
            chunk=given.get("max_batched_tokens", chunk),
            max_running=given.get("max_running"),
            dp_attention=given.get("dp_attention", 1),
            speculative=SGLANG_ALGORITHMS.get(spec, spec.upper()),
            mla=bool(model is not None and model.mixer_counts.get("mla")),
            piecewise_off=model is not None and sglang_piecewise_off(model.name, release),
            hicache="host_cache_ratio" in given,
        )
    return out


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


def _admission_flags() -> dict[str, Flag]:
    """SGLang's new_token_ratio knobs: the server flag and its environment variables."""
    helps = {
        "schedule_conservativeness": "scales the new_token_ratio (server flag)",
        "sglang_init_new_token_ratio": "new_token_ratio at start and after no decode (env)",
        "sglang_min_new_token_ratio_factor": "floor of the ratio, x its start (env)",
        "sglang_new_token_ratio_decay_steps": "decode steps from start to floor (env)",
        "sglang_retract_decode_steps": "steps a retraction leaves room for (env)",
        "sglang_clip_max_new_tokens_estimation": "max_new_tokens clip in the estimate (env)",
    }
    return {
        name: Flag(
            help,
            _sglang_admission(name, "int" if isinstance(ADMISSION[name], int) else "float"),
            f"{ADMISSION[name]:g}",
        )
        for name, help in helps.items()
    }


_SGLANG_COMMON = (
    "mamba_track_interval",
    "disable_radix_cache",
    "enable_hierarchical_cache",
    "hicache_ratio",
    "hicache_write_policy",
    "radix_eviction_policy",
    "schedule_policy",
    "moe_a2a_backend",
    "mamba_full_memory_ratio",
    "page_size",
    "enable_mixed_chunk",
    "max_prefill_tokens",
    "scheduler_recv_interval",
    "schedule_conservativeness",
    "sglang_init_new_token_ratio",
    "sglang_min_new_token_ratio_factor",
    "sglang_new_token_ratio_decay_steps",
    "sglang_retract_decode_steps",
    "sglang_clip_max_new_tokens_estimation",
    "max_running_requests",
    "chunked_prefill_size",
    "mem_fraction_static",
    "speculative_algorithm",
    "speculative_draft_model_path",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "sglang_simulate_acc_len",
    "speculative_acceptance",
    "disaggregation_mode",
    "nsa_prefill_backend",
)

# The releases modelled, newest first, read from the releases on PyPI (0.5.23's wheel,
# 0.5.10.post1's sdist): python/sglang/srt/server_args.py (0.5.10.post1),
# sglang/srt/arg_groups/ (0.5.23: fields/exec_.py, choices.py, overrides.py, mamba_hook.py,
# memory_hook.py) and mem_cache/ (radix_cache.py, evict_policy.py, allocation_sizing.py).
SGLANG_RELEASES = (
    Release(
        version="0.5.23",
        source="sglang 0.5.23: srt/arg_groups/fields/exec_.py, choices.py, overrides.py, "
        "memory_hook.py; srt/mem_cache/allocation_sizing.py, evict_policy.py",
        flags=(
            "mamba_radix_cache_strategy",
            "enable_int8_mamba_checkpoint",
            *_SGLANG_COMMON,
        ),
        # --mamba-scheduler-strategy appears nowhere in 0.5.23's package (no alias).
        renamed={
            "mamba_scheduler_strategy": "renamed it mamba_radix_cache_strategy (give --set "
            "mamba_radix_cache_strategy=...)",
        },
        choices={
            "mamba_radix_cache_strategy": (
                "auto",
                "no_buffer",
                "extra_buffer",
                "extra_buffer_lazy",
            ),
            "radix_eviction_policy": ("lru", "lfu", "slru", "priority", "tlru"),
        },
        defaults={
            "mamba_strategy": "auto",
            "auto_strategy": "extra_buffer",
            "hybrid_eviction": "on",
            # speculative/eagle_worker_v2.py _draft_extend_for_decode: the draft extend
            # "fills the whole tree width (num_draft_tokens) per req, not num_steps + 1";
            # the overlap scheduler stays on with speculation (speculative_hook.py: spec v2,
            # non-overlap only when asked).
            "spec_extend": "draft_tokens",
            "spec_overlap": "on",
        },
        notes="mamba_radix_cache_strategy (auto: extra_buffer on hybrids), "
        "enable_int8_mamba_checkpoint, eviction lru|lfu|slru|priority|tlru, "
        "chunked_prefill_size 4096 from 20 GiB",
    ),
    Release(
        version="0.5.10.post1",
        source="sglang 0.5.10.post1: python/sglang/srt/server_args.py, "
        "srt/mem_cache/radix_cache.py, memory_pool.py",
        flags=("mamba_scheduler_strategy", *_SGLANG_COMMON),
        choices={
            "mamba_scheduler_strategy": ("auto", "no_buffer", "extra_buffer"),
            "radix_eviction_policy": ("lru", "lfu", "fifo", "mru", "filo", "priority", "slru"),
        },
        defaults={
            "mamba_strategy": "auto",
            "auto_strategy": "no_buffer",
            # speculative/eagle_worker.py forward_draft_extend_after_decode:
            # num_tokens_per_req = speculative_num_steps + 1. server_args.py: with EAGLE
            # speculation and SGLANG_ENABLE_SPEC_V2 off (environ.py: EnvBool(False); spec v2
            # refuses topk > 1) "Overlap scheduler is disabled".
            "spec_extend": "steps",
            "spec_overlap": "off",
        },
        notes="NVIDIA's measured SGLang runs (0.5.1 to 0.5.10.post1); "
        "mamba_scheduler_strategy (auto: no_buffer), MambaRadixCache (LRU only on hybrids)",
    ),
)

SGLANG = EngineMode(
    name="sglang",
    display="SGLang",
    kernels="sglang",
    policy="sglang",
    preemption="retract",
    models="SGLang with its radix cache for hybrid models (MambaRadixCache)",
    flags={
        "mamba_radix_cache_strategy": Flag(
            "auto (extra_buffer on hybrids), no_buffer, extra_buffer (3 states a "
            "request), extra_buffer_lazy (2)",
            _sglang_strategy("mamba_radix_cache_strategy"),
            "auto",
        ),
        "mamba_scheduler_strategy": Flag(
            "auto (no_buffer), no_buffer or extra_buffer (3 states a request)",
            _sglang_strategy("mamba_scheduler_strategy"),
            "auto",
        ),
        "mamba_track_interval": Flag(
            "decode tokens between tracked states (256 only)", _sglang_track_interval, "256"
        ),
        "enable_int8_mamba_checkpoint": Flag(
            "cached states in int8: half their bytes", _sglang_int8, "false"
        ),
        "disable_radix_cache": Flag("no prefix cache", _sglang_radix, "false"),
        "disaggregation_mode": Flag(
            "null (aggregated); a P/D deployment is --prefill-workers/--decode-workers",
            _sglang_disaggregation,
            "null",
        ),
        "enable_hierarchical_cache": Flag(
            "HiCache: a host-memory tier (ratio 2)", _sglang_hicache, "false"
        ),
        "hicache_ratio": Flag("host tier / device pool", _sglang_hicache_ratio, "2"),
        "hicache_write_policy": Flag(
            "write_through, write_through_selective or write_back",
            _sglang_write_policy,
            "write_through",
        ),
        "radix_eviction_policy": Flag(
            "lru, lfu, slru, priority (tlru refused; 0.5.10.post1: fifo, mru, filo)",
            _sglang_eviction,
            "lru",
        ),
        "schedule_policy": Flag("fcfs or lpm", _sglang_schedule, "fcfs"),
        "nsa_prefill_backend": Flag(
            "flashmla_auto, trtllm or flashmla_sparse: GLM-5's forced sparse-MLA "
            "prefill kernel on Blackwell",
            _sglang_nsa_prefill,
            "flashmla_auto",
        ),
        "moe_a2a_backend": Flag(
            "none (MoE layers gather under --dp-attention) or deepep (DeepEP's "
            "dispatch/combine, priced from the profile's a2a fits)",
            _sglang_a2a,
            "none",
        ),
        "mamba_full_memory_ratio": Flag("state pool / KV pool (hybrids)", _sglang_ratio, "0.9"),
        "page_size": Flag("tokens a page (hybrids: extra_buffer)", _sglang_page, "1"),
        "enable_mixed_chunk": Flag(
            "prefill chunks mixed into decode steps (false: prefill batches first)",
            _sglang_mixed_chunk,
            "false",
        ),
        # server_args.py --max-prefill-tokens (16384): a prefill batch's input budget.
        "max_prefill_tokens": Flag(
            "a prefill batch's input budget", _scheduler_option("max_prefill_tokens"), "16384"
        ),
        # server_args.py --scheduler-recv-interval (1): new requests polled once every N
        # decode iterations (managers/scheduler_recv_skipper.py, 0.5.10.post1; 0.5.23
        # scheduler_components/recv_skipper.py): twin.engine.batching.
        "scheduler_recv_interval": Flag(
            "decode iterations between polls for new requests",
            _scheduler_option("scheduler_recv_interval"),
            "1",
        ),
        **_admission_flags(),
        **_batching_flags(
            "max_running_requests",
            "chunked_prefill_size",
            "mem_fraction_static",
            budget_default="8192 (by GPU memory)",
            memory_default="SGLang's rule (0.830 on an H100 at tp 1)",
            running_default="2048",
        ),
        **SPECULATIVE_FLAGS,
    },
    options=_sglang_options,
    admission=dict(ADMISSION),
    scheduler="sglang",
    gpu_defaults=sglang_gpu_defaults,
    kernel_layout=sglang_kernel_layout,
    releases=SGLANG_RELEASES,
)
