"""The engine's configuration: small frozen groups by concern (the cluster's shape,
memory, the cache policy, scheduling, arrivals, the engine mode, host time, the
disaggregated pools) held whole by :class:`EngineConfig`, every field saying what it
means; the checks every configuration passes, and its summary's keys. Its builder from
what a user names is ``twin.engine.config_build.build_config``, the names typed in
``twin.engine.settings``."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from twin.cache.requests import WRITE_POLICIES
from twin.costmodel.a2a import A2APrice
from twin.engine.fabric import KV_LINKS
from twin.engine.mode_base import PREEMPTIONS, SCHEDULE_POLICIES
from twin.engine.router import DEFAULT_ROUTER
from twin.errors import TwinError
from twin.limits import MAX_REPLICAS, MAX_TP
from twin.memory.footprint import allocator_for

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from twin.engine.settings import EngineSettings

AUTO = "auto"  # --cache-gb auto: the shared KV pool


def _opt(default: Any, help: str) -> Any:
    return field(default=default, metadata={"help": help})


class PipelineConflict(TwinError):
    """``--pp`` with something the pipelined replica does not model (``conflict``: what,
    e.g. ``--dp-attention``); ``twin plan`` skips such a candidate and counts why."""

    def __init__(self, message: str, conflict: str) -> None:
        super().__init__(message)
        self.conflict = conflict


@dataclass(frozen=True)
class ClusterConfig:
    """The cluster's shape: how many replicas, each one's parallelism, the router."""

    replicas: int = _opt(1, "model instances, each on `tp` GPUs with its own prefix cache")
    tp: int = _opt(1, "tensor-parallel degree: GPUs per replica")
    ep: int = _opt(
        1,
        "expert-parallel ranks among the `tp` GPUs: the routed experts dealt out `ep` ways, "
        "each split `tp / ep` ways (twin.parallel.Layout)",
    )
    dp_attention: int = _opt(
        1,
        "attention data-parallel ranks among the `tp` GPUs: each rank its own scheduler, "
        "batch and KV share, attention over `tp / dp_attention` GPUs, the FFN/MoE over "
        "all `tp` (twin.engine.dp_attention)",
    )
    moe_a2a: str = _opt(
        "",
        "the MoE layers' token exchange under --dp-attention: '' the gather/scatter; "
        "'deepep' DeepEP's dispatch and combine from the profile's fits, high-throughput "
        "with an extend in the step, else low-latency (twin.costmodel.a2a); 'deepep_ht', "
        "'deepep_ll' one mode for every step",
    )
    pp: int = _opt(
        1,
        "pipeline-parallel stages: the replica's layers split over `pp` groups of `tp` GPUs, "
        "micro-batches in flight through them (twin.engine.pipeline)",
    )
    router: str = _opt(DEFAULT_ROUTER, "router name (twin.engine.router.ROUTERS)")


@dataclass(frozen=True)
class MemoryConfig:
    """Where KV and states live: the GPU's memory, the cache or shared pool, a host tier."""

    cache_bytes: int = _opt(0, "prefix-cache capacity per replica, bytes (KV + SSM states)")
    gpu_memory_bytes: float | None = _opt(
        None,
        "device memory per GPU as the driver reports it (twin.hardware), bytes; None: "
        "running requests are bounded by max_running only",
    )
    memory_utilization: float = _opt(
        0.9, "fraction of HBM the server may use (weights + cache + running requests)"
    )
    shared_pool: bool = _opt(
        False,
        "one KV pool after weights shared by running requests and the cache "
        "(--cache-gb auto); False: a dedicated cache of cache_bytes (the Marconi paper)",
    )
    kv_allocator: str = _opt(
        "auto",
        "shared pool: how running requests' KV is paged: bytes (exact), paged "
        "(PagedAttention's one-size pages), jenga (per-kind small pages); auto: the "
        "policy's (jenga for -p jenga), else bytes (twin.memory.footprint)",
    )
    state_slots: int = _opt(1, "recurrent states a running request holds (SGLang extra_buffer: 3)")
    host_cache_ratio: float = _opt(
        0.0,
        "host-memory tier per replica, as a multiple of its GPU cache (the shared pool, "
        "or cache_bytes); 0: none (SGLang --hicache-ratio)",
    )
    host_cache_bytes: int = _opt(0, "host-memory tier per replica, bytes (vLLM CPU offload)")
    host_write_policy: str = _opt(
        "write_through",
        "how the host tier is filled: write_through (every insert), "
        "write_through_selective (a prefix's second insert) or write_back (GPU evictions, "
        "priced); SGLang --hicache-write-policy",
    )


@dataclass(frozen=True)
class CacheConfig:
    """The prefix cache's admission and eviction policy (twin.policies)."""

    policy: str = _opt("marconi", "prefix-cache policy name (policies.get_policy)")
    policy_options: dict[str, Any] = field(
        default_factory=dict, metadata={"help": "options passed to policies.get_policy"}
    )


@dataclass(frozen=True)
class SchedulerConfig:
    """How a replica forms its batches: the budgets, order, preemption, admission."""

    max_batched_tokens: int = _opt(8192, "token budget per step: decodes + prefill chunks")
    max_running: int = _opt(256, "most sequences in a replica's running batch")
    scheduler: str = _opt(
        "continuous",
        "batch formation (twin.engine.scheduler.SCHEDULERS): continuous (mixed steps, "
        "chunked prefill), sglang (SGLang's prefill batches ahead of decodes), sglang-mixed "
        "(its prefill batches with the decodes in them, --enable-mixed-chunk), trtllm "
        "(TensorRT-LLM's whole-context in-flight batching); the engine mode sets it",
    )
    scheduler_options: dict[str, Any] = field(
        default_factory=dict,
        metadata={"help": "the scheduler's own settings (an engine mode's flags set them)"},
    )
    schedule_policy: str = _opt(
        "fcfs",
        "admission order: fcfs, or lpm (SGLang: longest cached prefix first, fcfs past "
        "128 waiting)",
    )
    preemption: str = _opt(
        "recompute",
        "when the shared pool runs out: recompute (vLLM: the youngest running request) "
        "or retract (SGLang: decode requests, fewest output tokens first)",
    )
    new_token_ratio: dict[str, float] = field(
        default_factory=dict,
        metadata={
            "help": "shared pool: SGLang's new_token_ratio admission control with these "
            "settings (twin.engine.admission.DEFAULTS; the sglang mode sets them); "
            "empty: admission by memory alone"
        },
    )


@dataclass(frozen=True)
class ArrivalConfig:
    """How requests arrive and which of them the summary counts."""

    session_rate: float | None = _opt(
        None, "Poisson session arrivals per second; None: the workload's own arrival times"
    )
    request_rate: float | None = _opt(
        None, "open-loop requests per second: scales the file's open-loop arrival times"
    )
    concurrency: int | None = _opt(
        None,
        "closed-loop clients (vllm bench serve --max-concurrency): each runs the file's "
        "sessions one after another, every turn sent when the previous one completes (plus "
        "its think time); None: the workload's (or --session-rate's) arrival times",
    )
    burstiness: float = _opt(
        1.0,
        "session starts at --session-rate: 1 Poisson; else gamma gaps of this shape "
        "(vllm bench serve --burstiness: below 1 burstier, above 1 more regular)",
    )
    seed: int = _opt(0, "seed of the session-arrival stream")
    warmup_s: float = _opt(0.0, "requests arriving before this are left out of the summary")
    until_s: float | None = _opt(None, "no request arrives after this simulated time")
    samples: int = _opt(200, "target number of cache-occupancy samples over the run")


@dataclass(frozen=True)
class EngineModeConfig:
    """The serving engine modelled: its mode, release, kernel tables, flags, speculation."""

    engine: str = _opt("paper", "engine mode (twin.engine.modes.ENGINE_MODES)")
    engine_release: str = _opt(
        "", "the engine's release whose rules, defaults and flag names ran (twin.engine.releases)"
    )
    kernel_tables: str = _opt(
        "",
        "the engine release whose kernel tables price the steps (a measured run's own "
        "release, or the one --engine NAME==VERSION picks: twin.costmodel.table_release); "
        "empty: each kernel family's newest table",
    )
    engine_build: str = _opt(
        "",
        "the engine build whose kernel layout prices the steps (a measured run's release or "
        "nightly image tag: twin.costmodel.kernel_layout, the engine mode's rule); empty: "
        "the kernel tables' release, else the engine's release",
    )
    engine_flags: dict[str, str] = field(
        default_factory=dict, metadata={"help": "the engine flags given with --set"}
    )
    speculative: dict[str, Any] = field(
        default_factory=dict,
        metadata={
            "help": "speculative decoding (twin.engine.speculative.Speculation: method, "
            "speculative tokens, verified tokens, acceptance length, draft); empty: none "
            "(the engine modes' speculative flags set it)"
        },
    )


@dataclass(frozen=True)
class HostTimeConfig:
    """The engine's host time outside the kernels (twin.engine.host_time)."""

    frontend_s: float = _opt(
        0.0,
        "seconds the serving front end (API server: HTTP, tokenisation, hand-off to the "
        "engine) spends on each request before the engine queues it, one request at a "
        "time per replica; counted in TTFT. 0: none (the engine sees requests as sent)",
    )
    frontend_batch: int = _opt(
        1,
        "requests the front end takes in one pass of frontend_s: those sent while a pass "
        "waits for its turn (or at its start) share it, up to this many; 1: one request at "
        "a time; 0: any number, the front end a latency (vLLM's tokeniser thread batches "
        "up to 32: twin.engine.cluster.Cluster._through_front)",
    )
    frontend_token_s: float = _opt(
        0.0,
        "seconds the serving front end spends on each prompt token of a request, its "
        "history included (the API server tokenising the prompt text), added to frontend_s "
        "for that request; served "
        "as frontend_s is, one request at a time (frontend_batch 1) or as a latency "
        "(frontend_batch 0); not with passes (frontend_batch above 1). 0: none",
    )
    stream_token_s: float = _opt(
        0.0,
        "seconds the serving path's response side (one process: the engine's per-token "
        "outputs streamed back to the client) spends on each output token, one token at a "
        "time per replica; a token reaches the client when it has been handled, so a "
        "backlog delays first tokens and completions (twin.engine.batching). 0: none",
    )
    step_host_s: float = _opt(
        0.0,
        "the engine's host time per step (scheduling, input preparation, launch, "
        "sampling, output processing) added to the kernels' price, seconds "
        "(twin.engine.host_time)",
    )
    seq_host_s: float = _opt(
        0.0, "the engine's host time per step for each request the step carries, seconds"
    )
    eager_prefill_s: float = _opt(
        0.0,
        "the host time of one forward pass run without a CUDA graph, seconds: added to "
        "a step that prefills (twin.engine.host_time.EagerPrefillPricer; decode steps "
        "replay graphs; under attention DP once a synchronised step where any rank "
        "prefills, as TensorRT-LLM: twin.engine.dp_attention.DPReplica). 0: the kernels' "
        "price alone",
    )
    eager_graph_tokens: int = _opt(
        0,
        "the largest step, prompt and decode tokens, the engine replays a captured graph "
        "for: a step that prefills pays eager_prefill_s only above it (vLLM's "
        "max_cudagraph_capture_size). 0: every step that prefills pays it",
    )
    eager_overlap: bool = _opt(
        False,
        "the eager forward's host time runs under its kernels: a step that prefills "
        "lasts max(kernels, eager_prefill_s) instead of their sum (vLLM's compiled "
        "model without a graph: twin.engine.host_time.EagerPrefillPricer)",
    )
    eager_decode_s: float = _opt(
        0.0,
        "host time added to an eager step (one that pays eager_prefill_s) that also "
        "decodes, seconds: the launches of the decode path a mixed batch runs beside its "
        "prompts (vLLM's MLA: twin.engine.host_time.EagerPrefillPricer). 0: none",
    )
    cold_prefix_stall_s: float = _opt(
        0.0,
        "seconds a fresh server's loop stalls, once, the first time a step extends a prompt "
        "after tokens already in its KV cache (a prompt's chunk after its first, or a "
        "prefix hit): the first use of the attention kernels that read a prefix, in a "
        "server no warm-up request reached (twin.engine.batching.ContinuousBatching."
        "_cold_stall). 0: a warm server",
    )


@dataclass(frozen=True)
class DisaggConfig:
    """Disaggregated prefill and decode (issue 36; twin.engine.disagg); 0 workers: aggregated."""

    prefill_workers: int = _opt(
        0, "prefill pool: replicas of `tp` GPUs that prefill and sample the first token"
    )
    decode_workers: int = _opt(0, "decode pool: replicas of `tp` GPUs that decode")
    kv_link: str = _opt(
        "ib",
        "the link the KV crosses from prefill to decode: ib (a 400 Gb/s NIC per GPU) "
        "or nvlink (both pools in one node)",
    )
    # The decode pool's own hardware (twin.engine.disagg.WorkerPool); at their defaults
    # it is the prefill pool's: the run's GPU, tp and ep.
    decode_gpu: str = _opt("", "decode pool: the GPU (a shipped profile); '': the run's")
    decode_tp: int = _opt(0, "decode pool: GPUs per decode worker; 0: the run's tp")
    decode_ep: int = _opt(
        0, "decode pool: expert-parallel ranks per decode worker; 0: the run's ep"
    )
    decode_dp_attention: int = _opt(
        0, "decode pool: attention data-parallel ranks per decode worker; 0: the run's"
    )
    decode_prefix_cache: bool = _opt(
        False,
        "decode pool: each decode worker keeps a prefix cache and is sent only the prompt "
        "tokens it does not hold (twin.engine.disagg.DecodeReplica)",
    )
    shared_kv_tier_bytes: int = _opt(
        0,
        "a KV store all the prefill workers share (Mooncake-store-like), bytes; 0: none "
        "(twin.engine.disagg.SharedKvTier)",
    )
    # Each pool's own engine flags (`--prefill-set`, `--decode-set`: the engine's flag
    # names, as `--set`), over the flags both pools share (`--set`). The run's own
    # `engine_flags` and settings are the prefill pool's; the decode pool's configuration
    # is built from `--set` and these (twin.engine.run._decode_pool).
    prefill_engine_flags: dict[str, str] = field(
        default_factory=dict,
        metadata={"help": "prefill pool: its own engine flags (--prefill-set), over --set"},
    )
    decode_engine_flags: dict[str, str] = field(
        default_factory=dict,
        metadata={"help": "decode pool: its own engine flags (--decode-set), over --set"},
    )


# The groups by the attribute that holds each on EngineConfig.
GROUPS: dict[str, type] = {
    "cluster": ClusterConfig,
    "memory": MemoryConfig,
    "cache": CacheConfig,
    "scheduling": SchedulerConfig,
    "arrivals": ArrivalConfig,
    "mode": EngineModeConfig,
    "host_time": HostTimeConfig,
    "disagg": DisaggConfig,
}
# Each flat field name (what a user names: build_config's keywords, the summary's keys)
# and the group that holds it.
GROUP_OF: dict[str, str] = {
    f.name: attr for attr, cls in GROUPS.items() for f in dataclasses.fields(cls)
}
# The summary's `config` keys in their order (the order of the flat configuration before
# issue 33 nested it: summaries stay byte-identical).
SUMMARY_ORDER = (
    "replicas",
    "tp",
    "ep",
    "dp_attention",
    "moe_a2a",
    "pp",
    "cache_bytes",
    "policy",
    "policy_options",
    "router",
    "max_batched_tokens",
    "max_running",
    "gpu_memory_bytes",
    "memory_utilization",
    "session_rate",
    "request_rate",
    "seed",
    "warmup_s",
    "until_s",
    "burstiness",
    "concurrency",
    "samples",
    "shared_pool",
    "engine",
    "engine_release",
    "kernel_tables",
    "engine_build",
    "engine_flags",
    "preemption",
    "state_slots",
    "schedule_policy",
    "host_cache_ratio",
    "host_cache_bytes",
    "host_write_policy",
    "new_token_ratio",
    "frontend_s",
    "frontend_batch",
    "frontend_token_s",
    "stream_token_s",
    "step_host_s",
    "seq_host_s",
    "eager_prefill_s",
    "eager_graph_tokens",
    "eager_overlap",
    "eager_decode_s",
    "cold_prefix_stall_s",
    "scheduler",
    "scheduler_options",
    "kv_allocator",
    "speculative",
    "prefill_workers",
    "decode_workers",
    "kv_link",
    "decode_gpu",
    "decode_tp",
    "decode_ep",
    "decode_dp_attention",
    "decode_prefix_cache",
    "shared_kv_tier_bytes",
    "prefill_engine_flags",
    "decode_engine_flags",
)
assert sorted(SUMMARY_ORDER) == sorted(GROUP_OF)
# The keys every summary writes: the paper's world's, the flat configuration's before the
# engine modes (summaries from before those are reproduced byte for byte).
PAPER_KEYS = (
    "replicas",
    "tp",
    "ep",
    "cache_bytes",
    "policy",
    "policy_options",
    "router",
    "max_batched_tokens",
    "max_running",
    "gpu_memory_bytes",
    "memory_utilization",
    "session_rate",
    "request_rate",
    "seed",
    "warmup_s",
    "until_s",
    "samples",
)


@dataclass(frozen=True)
class EngineConfig:
    """How the simulated cluster is built and driven (everything but the model and cost),
    one group a concern; passed whole, each part of the engine reads the groups it needs.
    Built from flat field names by ``twin.engine.config_build.build_config``."""

    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    scheduling: SchedulerConfig = field(default_factory=SchedulerConfig)
    arrivals: ArrivalConfig = field(default_factory=ArrivalConfig)
    mode: EngineModeConfig = field(default_factory=EngineModeConfig)
    host_time: HostTimeConfig = field(default_factory=HostTimeConfig)
    disagg: DisaggConfig = field(default_factory=DisaggConfig)

    @classmethod
    def of(cls, **fields: Unpack[EngineSettings]) -> EngineConfig:
        """A configuration from flat field names (each group's own), every other field at
        its default: no default that depends on the GPU or engine is applied (that is
        ``twin.engine.config_build.build_config``'s)."""
        unknown = sorted(set(fields) - set(GROUP_OF))
        if unknown:
            raise TypeError(f"EngineConfig has no field {', '.join(unknown)}")
        parts: dict[str, dict[str, Any]] = {attr: {} for attr in GROUPS}
        for name, value in fields.items():
            parts[GROUP_OF[name]][name] = value
        return cls(**{attr: GROUPS[attr](**parts[attr]) for attr in GROUPS})

    def get(self, name: str) -> Any:
        """A field by its flat name (``"tp"``, ``"policy"``)."""
        return getattr(getattr(self, GROUP_OF[name]), name)

    def __post_init__(self) -> None:
        def need(ok: bool, name: str, what: str) -> None:
            if not ok:
                raise TwinError(f"--{name.replace('_', '-')}: {what} (got {self.get(name)!r})")

        c, m, s, a, h = self.cluster, self.memory, self.scheduling, self.arrivals, self.host_time
        need(1 <= c.replicas <= MAX_REPLICAS, "replicas", f"must be 1 to {MAX_REPLICAS:,}")
        need(1 <= c.tp <= MAX_TP, "tp", f"must be 1 to {MAX_TP:,}")
        need(c.ep >= 1 and c.tp % c.ep == 0, "ep", f"must divide --tp {c.tp}")
        if c.dp_attention != 1:
            self._check_dp_attention()
        need(
            c.moe_a2a in ("", *A2APrice.BACKENDS),
            "moe_a2a",
            "'' (the gather/scatter), deepep, deepep_ht or deepep_ll",
        )
        if c.moe_a2a and c.dp_attention == 1:
            raise TwinError(
                f"DeepEP's all-to-all ({c.moe_a2a}: SGLang's --set moe_a2a_backend, vLLM's "
                "--set all2all_backend): priced under --dp-attention only (give --dp-attention D)"
            )
        if c.pp != 1:
            self._check_pipeline()
        need(m.cache_bytes >= 0, "cache_bytes", "must be >= 0")
        need(s.max_batched_tokens >= 1, "max_batched_tokens", "must be at least 1")
        need(s.max_running >= 1, "max_running", "must be at least 1")
        # Every running sequence decodes one token per step, so the budget must
        # hold a full batch of decodes (vLLM requires the same).
        need(
            s.max_running <= s.max_batched_tokens,
            "max_running",
            f"must not exceed --max-batched-tokens ({s.max_batched_tokens})",
        )
        need(0 < m.memory_utilization <= 1, "memory_utilization", "must be in (0, 1]")
        for name in ("session_rate", "request_rate", "gpu_memory_bytes"):
            v = self.get(name)
            need(v is None or (math.isfinite(v) and v > 0), name, "must be a positive number")
        need(math.isfinite(a.warmup_s) and a.warmup_s >= 0, "warmup_s", "must be >= 0")
        need(
            a.until_s is None or (math.isfinite(a.until_s) and a.until_s > 0),
            "until_s",
            "must be a positive number",
        )
        need(
            a.until_s is None or a.warmup_s < a.until_s,
            "warmup_s",
            f"must end before the arrivals do (--until-s {a.until_s})",
        )
        need(a.samples >= 2, "samples", "must be at least 2")
        for name in (
            "frontend_s",
            "frontend_token_s",
            "stream_token_s",
            "step_host_s",
            "seq_host_s",
            "eager_prefill_s",
            "eager_decode_s",
        ):
            v = self.get(name)
            need(math.isfinite(v) and v >= 0, name, "must be >= 0")
        need(
            not h.eager_prefill_s or c.pp == 1,
            "eager_prefill_s",
            "is not modelled with pipeline stages",
        )
        for name in ("eager_graph_tokens", "eager_overlap", "eager_decode_s"):
            # the ranks' loop adds eager_prefill_s in series, without these
            need(
                not self.get(name) or c.dp_attention == 1,
                name,
                "is not modelled with attention data parallelism",
            )
        need(
            isinstance(h.frontend_batch, int)
            and not isinstance(h.frontend_batch, bool)
            and h.frontend_batch >= 0,
            "frontend_batch",
            "must be a whole number >= 0",
        )
        need(
            not h.frontend_token_s or h.frontend_batch <= 1,
            "frontend_token_s",
            f"needs --frontend-batch 1 (one request at a time) or 0 (a latency), not "
            f"{h.frontend_batch}: a front end in passes is not modelled with a time per "
            "prompt token (the vllm engine mode sets --frontend-batch 32 unless given)",
        )
        need(h.eager_graph_tokens >= 0, "eager_graph_tokens", "must be >= 0")
        need(isinstance(h.eager_overlap, bool), "eager_overlap", "must be true or false")
        cold = h.cold_prefix_stall_s
        need(
            isinstance(cold, (int, float))
            and not isinstance(cold, bool)
            and math.isfinite(cold)
            and cold >= 0,
            "cold_prefix_stall_s",
            "must be a number of seconds >= 0",
        )
        one_loop = c.dp_attention == 1 and c.pp == 1 and not self.disagg.prefill_workers
        for name in ("stream_token_s", "cold_prefix_stall_s"):  # the replica's own step loop
            need(
                not self.get(name) or one_loop,
                name,
                "is modelled on an aggregated replica without attention data parallelism or "
                "pipeline stages",
            )
        need(a.concurrency is None or a.concurrency >= 1, "concurrency", "must be >= 1")
        need(
            math.isfinite(a.burstiness) and a.burstiness > 0,
            "burstiness",
            "must be a positive number",
        )
        need(
            a.burstiness == 1.0 or a.session_rate is not None,
            "burstiness",
            "shapes the --session-rate stream: give --session-rate",
        )
        for name in ("session_rate", "request_rate"):
            if a.concurrency is not None and self.get(name) is not None:
                raise TwinError(
                    f"--concurrency: closed-loop clients set the arrivals; --"
                    f"{name.replace('_', '-')} cannot be given with it"
                )
        need(
            s.preemption in PREEMPTIONS,
            "preemption",
            "must be recompute or retract",
        )
        need(m.state_slots >= 1, "state_slots", "must be at least 1")
        need(s.schedule_policy in SCHEDULE_POLICIES, "schedule_policy", "must be fcfs or lpm")
        need(
            math.isfinite(m.host_cache_ratio) and m.host_cache_ratio >= 0,
            "host_cache_ratio",
            "must be >= 0",
        )
        need(m.host_cache_bytes >= 0, "host_cache_bytes", "must be >= 0")
        need(
            m.host_write_policy in WRITE_POLICIES,
            "host_write_policy",
            f"must be one of {', '.join(WRITE_POLICIES)}",
        )
        allocator_for(m.kv_allocator, self.cache.policy)  # a clear error for an unknown name
        from twin.engine.scheduler import get_scheduler  # late: the registry imports the engine

        get_scheduler(s.scheduler)  # a clear error for an unknown name
        need(
            m.shared_pool or m.kv_allocator == AUTO,
            "kv_allocator",
            "pages the shared pool only: use it with --cache-gb auto",
        )

        self._check_disaggregated()
        if self.mode.speculative:
            self._check_speculative()

    def _check_dp_attention(self) -> None:
        """``--dp-attention``: a layout ``twin.parallel.Layout`` takes, and only with what
        the attention-DP replica models (``twin.engine.dp_attention``)."""
        from twin.parallel import Layout

        c = self.cluster
        Layout(c.tp, c.ep, c.dp_attention)  # one line naming --dp-attention
        if self.memory.host_cache_bytes or self.memory.host_cache_ratio:
            raise TwinError(f"--dp-attention {c.dp_attention}: not modelled with a host cache tier")

    def _check_pipeline(self) -> None:
        """``--pp``: stages of ``tp`` GPUs within the bounds, and only with what the
        pipelined replica models (``twin.engine.pipeline``); each refusal one line."""
        c, m, d = self.cluster, self.memory, self.disagg
        p = c.pp
        if not (isinstance(p, int) and p >= 1 and c.tp * p <= MAX_TP):
            raise TwinError(f"--pp: must be 1 to {MAX_TP // c.tp:,} at --tp {c.tp} (got {p!r})")
        for flag, unset in (
            ("--dp-attention", c.dp_attention == 1),
            ("speculative decoding", not self.mode.speculative),
            ("disaggregated pools", not (d.prefill_workers or d.decode_workers)),
            ("a host cache tier", not (m.host_cache_bytes or m.host_cache_ratio)),
            # Each lane would keep its own admission stamps over the one shared queue
            # (twin.engine.trtllm_batching, twin.engine.pipeline): not modelled.
            (
                "TensorRT-LLM's overlap scheduler",
                not self.scheduling.scheduler_options.get("overlap_scheduler"),
            ),
        ):
            if not unset:
                raise PipelineConflict(f"--pp {p}: not modelled with {flag} yet", flag)

    def _check_speculative(self) -> None:
        """Speculative decoding's settings (a Speculation) and the draft's parallelism."""
        from twin.engine.speculative import Speculation

        c = self.cluster
        draft_tp = Speculation.from_dict(self.mode.speculative).draft_tp
        if draft_tp not in (0, 1, c.tp):
            raise TwinError(
                f"speculative draft tensor parallelism {draft_tp}: must be 1 or the "
                f"target's --tp {c.tp} (vLLM's draft_tensor_parallel_size)"
            )
        if draft_tp == 1 != c.tp and c.dp_attention > 1:
            # The draft's forwards join the ranks' synchronised steps at the target's
            # layout (SGLang's EAGLE worker runs under the target's DP attention).
            raise TwinError(
                f"speculative draft tensor parallelism 1 with --dp-attention "
                f"{c.dp_attention}: not modelled (the draft runs at the target's --tp)"
            )

    def _check_disaggregated(self) -> None:
        """The disaggregated layout's flags (issue 36), each refusal one line."""
        c, x = self.cluster, self.disagg
        p, d = x.prefill_workers, x.decode_workers
        pool = [
            POOL_FLAG_OPTIONS.get(name, f"--{name.replace('_', '-')}")
            for name in (
                "decode_gpu",
                "decode_tp",
                "decode_ep",
                "decode_dp_attention",
                "decode_prefix_cache",
                "prefill_engine_flags",
                "decode_engine_flags",
            )
            if self.get(name)
        ]
        if pool and not (p or d):
            raise TwinError(
                f"{pool[0]}: only a disaggregated run has a decode pool; give "
                "--prefill-workers and --decode-workers"
            )
        if (p or d) and self.scheduling.scheduler_options.get("overlap_scheduler"):
            # The pools run their own loops (twin.engine.disagg); the overlap scheduler's
            # admission lag is modelled on an aggregated replica only (trtllm_batching).
            raise TwinError(
                "--set overlap_scheduler: not modelled with disaggregated pools "
                "(--prefill-workers/--decode-workers); drop one of them"
            )
        store = x.shared_kv_tier_bytes
        if store < 0:
            raise TwinError(f"--shared-kv-tier: must be >= 0 (got {store})")
        if store and not (p or d):
            raise TwinError(
                "--shared-kv-tier: a store the pools of a disaggregated run share; give "
                "--prefill-workers and --decode-workers"
            )
        if store and c.dp_attention > 1:
            raise TwinError("--shared-kv-tier: not modelled with attention DP in the prefill pool")
        if store and (self.memory.host_cache_bytes or self.memory.host_cache_ratio):
            raise TwinError(
                "--shared-kv-tier: not modelled with a host cache tier per replica "
                "(--set hicache_ratio/kv_offloading_size); give one of them"
            )
        d_tp = x.decode_tp or c.tp
        if not 0 <= x.decode_tp <= MAX_TP:
            raise TwinError(f"--decode-tp: must be 1 to {MAX_TP:,} (got {x.decode_tp})")
        if x.decode_ep < 0 or d_tp % (x.decode_ep or c.ep):
            raise TwinError(
                f"--decode-ep: must divide the decode pool's tp {d_tp} (got {x.decode_ep or c.ep})"
            )
        d_dp = x.decode_dp_attention or c.dp_attention
        if x.decode_dp_attention < 0 or d_tp % d_dp:
            raise TwinError(
                f"--decode-dp-attention: must divide the decode pool's tp {d_tp} (got {d_dp})"
            )
        if x.kv_link not in KV_LINKS:
            raise TwinError(f"--kv-link: must be {' or '.join(KV_LINKS)} (got {x.kv_link!r})")
        if not p and not d:
            if x.kv_link != "ib":
                raise TwinError(
                    f"--kv-link {x.kv_link}: only a disaggregated run moves KV between "
                    "workers; give --prefill-workers and --decode-workers"
                )
            return
        if p < 1 or d < 1:
            raise TwinError(
                "--prefill-workers and --decode-workers: give both, each at least 1 "
                f"(got {p} and {d})"
            )
        if c.replicas != p + d:
            raise TwinError(
                f"--replicas {c.replicas}: a disaggregated run has --prefill-workers + "
                f"--decode-workers = {p + d} replicas; leave --replicas out"
            )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready flat copy (the summary records the exact configuration), its keys
        in :data:`SUMMARY_ORDER`.

        The engine-mode fields are left out at their defaults (the paper's world),
        so summaries from before they existed are reproduced byte for byte.
        """
        parts = {attr: dataclasses.asdict(getattr(self, attr)) for attr in GROUPS}
        out = {name: parts[GROUP_OF[name]][name] for name in SUMMARY_ORDER}
        for name in _OMITTED_AT_DEFAULT:
            if out[name] == _DEFAULTS[name]:
                del out[name]
        if not self.disagg.prefill_workers:
            del out["kv_link"]  # aggregated: no link
        return out


# Every key but the paper's world's (and the link, which a disaggregated run always
# writes) is left out at its default.
_OMITTED_AT_DEFAULT = tuple(n for n in SUMMARY_ORDER if n not in PAPER_KEYS and n != "kv_link")
# Each pool's own engine flags: the config field and its command-line option (the one
# table for the refusals here and twin.engine.run.pool_engine_flags).
POOL_FLAG_OPTIONS = {
    "prefill_engine_flags": "--prefill-set",
    "decode_engine_flags": "--decode-set",
}
_DEFAULTS: dict[str, Any] = {name: EngineConfig().get(name) for name in _OMITTED_AT_DEFAULT}
