"""The reference executor: real prefills of a real hybrid model over a real state cache.

Requests are served in arrival order, first come first served, one at a time
on one device (the twin's single replica with ``max_running=1``). Each
request goes through the request protocol of the policy's own cache
(``twin.cache.HeldCache.request_cache``, as the engine's replica does: the
radix tree's ``RequestCache``, or the compiled live cache's for ``marconi`` and
``marconi-twin``), and the tensor store follows the cache's nodes after each
step (:mod:`twin.reference.store`): it is
admitted (clock, lookup, pin, checkpoint positions), the prompt's uncached
tokens are prefilled (the SSM states are materialised at the positions
inside the prompt), those checkpoints are inserted, then the output tokens
are run teacher-forced so that the state after the last one can be
inserted, and the hit is released.

Only the prefill is timed (synchronised, after warm-up, the median of
``repeats`` runs from the same cached state); the output pass builds the
states the next turn needs and takes no server time: the executor is a
prefill server, and the twin is run the same way (decode steps cost 0 s).
TTFT follows exactly from arrivals and measured service times:
``start = max(arrival, previous end)``, ``TTFT = start + service - arrival``.

A hit covering the whole prompt still computes the last prompt token (the
engine does the same: its logits give the first output token). The cache
holds the state after that token, not before, so its logits cannot be
reproduced exactly; it is timed as a one-token prefill and flagged
(``MeasuredRequest.exact``), and the cache keeps the exact states.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from twin.cache import PrefixCache
from twin.errors import TwinError
from twin.model import ModelSpec
from twin.policies import get_policy
from twin.policies.compiled.live import LiveCache
from twin.policies.structures import build_structure, choose_structure
from twin.reference.fits import EXECUTOR_DTYPE, check_fits, free_memory
from twin.reference.model import KV_PLAN, HybridLM, Prefill, SeqState
from twin.reference.ops import synchronize
from twin.reference.store import Pending, TensorStore
from twin.workloads.reader import Request, Workload

# The structures whose nodes the tensor store follows (twin.policies.structures).
MIRRORED = ("radix", "compiled-radix")


@dataclass(frozen=True)
class ExecutorConfig:
    """How the reference executor runs (the cache and policy exactly as the twin's)."""

    device: str = "cpu"  # "cpu" or "cuda"
    policy: str = "marconi"  # policies.get_policy name (vanilla, sglang+, marconi)
    policy_options: dict[str, Any] = field(default_factory=dict)
    cache_bytes: int = 0  # prefix-cache capacity, bytes, accounted as the twin's PrefixCache
    seed: int = 0  # weights seed
    repeats: int = 3  # each prefill is timed this many times; the median is kept
    warmup: int = 2  # untimed warm-up prefills before the run
    threads: int = 1  # CPU threads while timing (the CPU profile was measured on one)


@dataclass(frozen=True)
class MeasuredRequest:
    """One request as the executor served it (seconds of wall-clock device time)."""

    row: int
    session_id: int
    turn: int
    arrival_s: float
    start_s: float  # max(arrival, the previous request's end): FCFS on one device
    input_tokens: int
    hit_tokens: int
    service_s: float  # measured prefill, median of the repeats
    exact: bool = True  # False: a whole-prompt hit (see the module docstring)

    @property
    def queue_s(self) -> float:
        return self.start_s - self.arrival_s

    @property
    def ttft_s(self) -> float:
        return self.start_s + self.service_s - self.arrival_s


@dataclass
class ReferenceRun:
    """Everything one executor run measured."""

    records: list[MeasuredRequest]  # arrival (= row) order
    device_name: str
    dtype: str
    implementations: dict[str, str]
    wall_s: float
    cache_stats: dict[str, Any] = field(default_factory=dict)

    @property
    def token_hit_rate(self) -> float:
        inputs = sum(r.input_tokens for r in self.records)
        return sum(r.hit_tokens for r in self.records) / inputs if inputs else 0.0

    @property
    def request_hit_rate(self) -> float:
        n = len(self.records)
        return sum(1 for r in self.records if r.hit_tokens > 0) / n if n else 0.0


@dataclass
class Served:
    """One request's outcome inside the executor (the tests read the logits)."""

    hit: int
    service_s: float
    logits: torch.Tensor
    exact: bool


def model_dtype(device: str) -> torch.dtype:
    """The dtype ``twin calibrate`` times on the device: bf16 on a GPU, fp32 on the CPU."""
    return getattr(torch, EXECUTOR_DTYPE[device])


class ReferenceExecutor:
    """One device, one model, one real prefix cache driven by the twin's policy."""

    def __init__(
        self, model: ModelSpec, config: ExecutorConfig, dtype: torch.dtype | None = None
    ) -> None:
        if config.device not in ("cpu", "cuda"):
            raise TwinError(f"--device {config.device!r}: expected cpu or cuda")
        if config.device == "cuda" and not torch.cuda.is_available():
            raise TwinError("--device cuda: PyTorch sees no CUDA GPU on this machine")
        if config.repeats < 1:
            raise TwinError(f"--repeats must be at least 1 (got {config.repeats})")
        self.spec, self.config = model, config
        self.device = config.device
        dtype = dtype or model_dtype(self.device)
        check_fits(
            model, self.device, free_memory(self.device, torch), str(dtype).removeprefix("torch.")
        )
        self.lm = HybridLM(model, self.device, dtype, config.seed)
        # The policy's own cache: the radix tree, or (``marconi``, ``marconi-twin``) the
        # compiled live cache; the store follows either's nodes.
        self.policy = get_policy(config.policy, **config.policy_options)
        # The plain radix tree or the live cache (the structure itself: the store follows
        # its nodes, so no fast stand-in).
        structure = choose_structure(self.policy, model)
        if structure in MIRRORED:
            cache = build_structure(structure, model, config.cache_bytes, self.policy)
            assert isinstance(cache, PrefixCache | LiveCache), structure
            self.cache: PrefixCache | LiveCache = cache
        else:
            raise TwinError(
                f"policy {config.policy!r} runs on its own cache structure, which "
                "the reference executor does not mirror; use vanilla, sglang+ or "
                "marconi"
            )
        windows = [
            model.sliding_window if part == "swa" else None
            for kind in self.lm.plan
            for part in kind.split("+")
            if part in KV_PLAN
        ]
        self.store = TensorStore(windows, model.n_ssm_layers > 0)
        self.requests = self.cache.request_cache()

    # ------------------------------------------------------------------ one request
    def serve(self, prompt: np.ndarray, output: np.ndarray) -> Served:
        """Admit, prefill (timed), insert and release one request, as the engine does."""
        n = len(prompt)
        full = np.concatenate((prompt, output))
        adm = self.requests.admit(prompt, full)
        self.store.sync(self.cache)
        hit = adm.hit
        has_ssm = self.spec.n_ssm_layers > 0
        early, late = adm.at_prefill, adm.at_completion

        start = hit.length if hit.length < n else n - 1
        past = self.store.gather(hit.node, upto=start) if hit.node is not None else None
        stops = [p - start for p in early if p > start]
        result, seconds = self._timed(self._ids(prompt[start:]), past, stops)
        # A whole-prompt hit on SSM layers resumed from the state after the last
        # token, not before it: its logits are not exact, its cached state is.
        exact = hit.length < n or not has_ssm
        if exact:
            kv, states = result.kv, {start + s: v for s, v in result.ssm_at.items()}
            end_state = SeqState(kv=result.kv, ssm=result.ssm_end)
        else:
            end_state = self.store.gather(hit.node, upto=n)
            kv, states = end_state.kv, {n: end_state.ssm}
        if early:
            with self._pending(full, kv, states):
                self.requests.insert_at_prefill_end(adm)
        if late:
            with self._pending(full, *self._run_output(full, n, late, end_state, kv, states)):
                self.requests.insert_at_completion(adm)
        self.requests.release(adm)
        self.store.sync(self.cache)
        return Served(hit.length, seconds, result.logits, exact)

    @contextlib.contextmanager
    def _pending(self, full: np.ndarray, kv: Any, states: dict[int, Any]) -> Iterator[None]:
        """The tensors of the states an insert is about to cache: the store takes them
        from here as it follows the insert's nodes."""
        self.store.pending = Pending(kv, states, full)
        try:
            yield
            self.store.sync(self.cache)
        finally:
            self.store.pending = None

    def _run_output(
        self,
        full: np.ndarray,
        n: int,
        late: list[int],
        end: SeqState,
        kv: Any,
        states: dict[int, Any],
    ) -> tuple[Any, dict[int, Any]]:
        """Run the output tokens (untimed, teacher-forced): the KV and states of input + output."""
        states = dict(states)
        states.setdefault(n, end.ssm)
        if max(late) > n:
            out = self.lm.forward(
                self._ids(full[n : max(late)]), end, [p - n for p in late if p > n]
            )
            kv = out.kv
            states.update({n + s: v for s, v in out.ssm_at.items()})
            states[max(late)] = out.ssm_end
        return kv, states

    # ------------------------------------------------------------------ timing
    def _ids(self, tokens: np.ndarray) -> torch.Tensor:
        """Token ids folded into the vocabulary (fresh output ids are negative)."""
        ids = np.mod(tokens.astype(np.int64), self.spec.vocab_size)
        return torch.from_numpy(ids).to(self.device)

    def _timed(
        self, ids: torch.Tensor, past: SeqState | None, stops: list[int]
    ) -> tuple[Prefill, float]:
        times, result = [], None
        for _ in range(self.config.repeats):
            synchronize(self.device)
            t0 = time.perf_counter()
            out = self.lm.forward(ids, past, stops)
            synchronize(self.device)
            times.append(time.perf_counter() - t0)
            result = result or out
        assert result is not None
        return result, statistics.median(times)

    def warm_up(self, lengths: Sequence[int]) -> None:
        """Untimed prefills of random tokens (first-call allocation, kernel compilation)."""
        gen = torch.Generator().manual_seed(12345)
        for n in lengths:
            ids = torch.randint(0, self.spec.vocab_size, (max(int(n), 1),), generator=gen)
            first = self.lm.forward(ids.to(self.device), None, [max(int(n) // 2, 1)])
            state = SeqState(kv=first.kv, ssm=first.ssm_end)
            self.lm.forward(ids[:8].to(self.device), state, [4])
        synchronize(self.device)


def device_name(device: str) -> str:
    """The device's name, for the report."""
    if device == "cuda":
        return torch.cuda.get_device_name(0)
    from twin.torch_ops.host import cpu_name

    return cpu_name()


def run_reference(
    workload: Workload,
    model: ModelSpec,
    config: ExecutorConfig,
    progress: Callable[[float], None] | None = None,
) -> ReferenceRun:
    """Serve every request of ``workload`` (open loop, row order) and measure each prefill."""
    threads = torch.get_num_threads()
    if config.device == "cpu":
        torch.set_num_threads(config.threads)
    try:
        ex = ReferenceExecutor(model, config)
        t_start = time.perf_counter()
        if config.warmup:
            ex.warm_up([64 * (i + 1) for i in range(config.warmup)])
        records: list[MeasuredRequest] = []
        free_at = 0.0
        total = max(workload.num_rows, 1)
        for i, req in enumerate(workload.requests()):
            arrival = _arrival(workload, req)
            served = ex.serve(req.prompt, req.output)
            start = max(arrival, free_at)
            free_at = start + served.service_s
            records.append(
                MeasuredRequest(
                    row=req.row,
                    session_id=req.session_id,
                    turn=req.turn,
                    arrival_s=arrival,
                    start_s=start,
                    input_tokens=len(req.prompt),
                    hit_tokens=served.hit,
                    service_s=served.service_s,
                    exact=served.exact,
                )
            )
            if progress is not None:
                progress((i + 1) / total)
        wall = time.perf_counter() - t_start
        cache = ex.cache
        stats = {
            "evictions": cache.evictions,
            "checkpoints_admitted": cache.checkpoints_admitted,
            "checkpoints_hit": cache.checkpoints_hit,
            "peak_bytes": cache.peak_bytes,
            "tensor_bytes_held": ex.store.tensor_bytes(),
            "accounted_bytes_held": cache.used_bytes,
            **ex.policy.stats(),
        }
        return ReferenceRun(
            records,
            device_name(config.device),
            str(ex.lm.dtype).removeprefix("torch."),
            dict(ex.lm.ops.notes),
            wall,
            stats,
        )
    finally:
        torch.set_num_threads(threads)


def _arrival(workload: Workload, req: Request) -> float:
    if req.arrival_s is None:
        raise TwinError(
            f"{workload.path}: row {req.row}, column arrival_s: the reference "
            "executor needs every arrival time (open loop); twin validate "
            "writes them for closed-loop workloads"
        )
    return float(req.arrival_s)
