"""The serving engine's host time per step, added to the kernels' price: :class:`HostTimePricer`.

A real engine step costs more than its kernels: the scheduler's pass over the batch,
preparing the step's inputs (block tables, positions), launching the forward (a CUDA
graph replay for a decode), sampling, and turning the step's tokens into outputs for
each running request (detokenisation, stream chunks) where the engine's own loop does it.
(A separate process that streams the outputs to the client delays the client, not the
next step: ``stream_token_s``, ``twin.engine.batching.ContinuousBatching._streamed``.)
The kernel tables the profiles are
fitted to time kernels alone, and the profiles' own ``layer_overhead`` (per layer kind)
is empty on every shipped GPU profile. This module adds, per engine step,

    ``step_host_s + seq_host_s x sequences in the step``

(a fixed part, and a part per request the step carries: one per decoding sequence and
per prefill chunk), added to the step's price, as vLLM V1's synchronous loop runs its
scheduler and output processing between forward passes. With asynchronous scheduling
(``overlap``: vLLM's ``--async-scheduling``, its default from 0.14.0,
``twin.engine.modes_vllm``) the host prepares the next step while the GPU runs this one,
so a step lasts ``max(kernels, host time)``: the host time shows only where it is longer
than the forward (vLLM 0.18.0 ``vllm/v1/engine/core.py``
``EngineCore.step_with_batch_queue``: the next batch is scheduled and its forward launched
before the previous one's outputs are waited for; ``vllm/config/vllm.py`` turns
``async_scheduling`` on by default). Where the part per request comes from, in the
releases of the measured B200 vLLM rows (0.15.1, 0.17.0, 0.19.0 wheels read): the engine
core's scheduler walks every running request each step (``vllm/v1/core/sched/scheduler.py``
``Scheduler.schedule``, ``while req_index < len(self.running)``) and again over the step's
outputs (``Scheduler.update_from_output``, whose comment calls that loop "a performance
bottleneck" at 1K requests), and the GPU worker updates each scheduled request's state
before it builds the step's inputs (``vllm/v1/worker/gpu_model_runner.py``
``GPUModelRunner._update_states``). The batch queue holds two batches under async
scheduling, else one (``v1/executor/multiproc_executor.py`` and ``uniproc_executor.py``
``max_concurrent_batches``), so that work runs one step ahead of the GPU and hides only up
to the GPU step: ``max(kernels, host time)``. The API server's output processing
(``vllm/v1/engine/output_processor.py`` ``OutputProcessor.process_outputs``: a detokeniser
update per request and step) runs in another process and is not in this sum. B200 has no
fitted part per request (docs/decisions.md, helper ``vllm-host``: the least error is none).
The two numbers are engine
times per (engine, GPU), fitted on the fit split of NVIDIA's measured serving runs
(:mod:`twin.engine.engine_times`); they belong in a profile's host-time field once the
profiles are regenerated per engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from twin.engine.cost import Chunk, Durations, EndsFiller, WrappingPricer


class HostTimePricer(WrappingPricer):
    """``inner`` (a :class:`~twin.engine.cost.StepPricer`) with the host time per step added."""

    def __init__(
        self, inner: Any, step_host_s: float, seq_host_s: float, overlap: bool = False
    ) -> None:
        super().__init__(inner)
        self.step_host_s = float(step_host_s)
        self.seq_host_s = float(seq_host_s)
        # Asynchronous scheduling: the host time overlaps the forward (module docstring).
        self.overlap = bool(overlap)

    def host_s(self, sequences: int) -> float:
        """Host seconds of a step carrying ``sequences`` requests."""
        return self.step_host_s + self.seq_host_s * sequences

    @property
    def provenance(self) -> str:
        return str(getattr(self.inner, "provenance", ""))

    def step_time(self, prefills: Sequence[Chunk], decode_batch: int, decode_context: int) -> float:
        kernels = float(self.inner.step_time(prefills, decode_batch, decode_context))
        host = self.host_s(len(prefills) + decode_batch)
        return max(kernels, host) if self.overlap else kernels + host

    def decode_run(self, batch: int, context: int, steps: int) -> Durations:
        kernels = np.asarray(self.inner.decode_run(batch, context, steps), np.float64)
        if self.overlap:
            return np.maximum(kernels, self.host_s(batch))
        return kernels + self.host_s(batch)

    def decode_affine(self, batch: int) -> tuple[float, float] | None:
        fit = self.inner.decode_affine(batch)
        if fit is None:
            return None
        if self.overlap:
            # ``a + b x context`` from context 0 up: the forward is the longer one at
            # every context when ``a`` is (b >= 0), else the step is not affine.
            return (fit[0], fit[1]) if fit[1] >= 0 and fit[0] >= self.host_s(batch) else None
        return (fit[0] + self.host_s(batch), fit[1])

    def decode_ends(self, batch: int, context: int) -> EndsFiller | None:
        """The inner pricer's compiled step ends, each moved by the host time of the
        steps up to it (the filler sums on from ``ends[first - 1]``, already moved).
        Overlapped: the inner ends unchanged where the run's first step (its least
        context, so its shortest forward) already outlasts the host time, else none
        (the engine sums :meth:`decode_run`'s)."""
        ask = getattr(self.inner, "decode_ends", None)
        fill = ask(batch, context) if ask is not None else None
        if fill is None:
            return None
        host = self.host_s(batch)
        if self.overlap:
            first = float(np.asarray(self.inner.decode_run(batch, context, 1))[0])
            return fill if first >= host else None

        def moved(ends: np.ndarray, first: int, n: int) -> None:
            fill(ends, first, n)
            ends[first : first + n] += host * np.arange(1, n + 1, dtype=np.float64)

        return moved


class EagerPrefillPricer(WrappingPricer):
    """``inner`` with ``floor_s`` of host time added to a step that prefills: the host time
    of one forward pass run without a CUDA graph.

    An engine replays CUDA graphs for its decode batches, so their host work is one
    launch; a batch with prompt tokens runs eagerly where the engine captures no graph
    for it, and its host (Python) issues every layer's kernels one by one. A step that
    prefills lasts ``kernels + floor_s``: the host's issuing is not hidden behind the
    kernels. Measured, not derived (docs/decisions.md, "Issue 31, step: InferenceMAX's
    Qwen3.5 servers, and the eager prefill's host time in series"): at 4 clients SGLang's
    TTFT rises from 1k- to 8k-token prompts by about the kernels' increase, where a floor
    the kernels fill (``max(kernels, floor_s)``, this class before) would leave it flat,
    and the decodes those 8k prefills stall (TPOT) say the same; the SGLang source read
    (0.5.9) shows no per-layer host synchronisation that would explain it. Decode steps
    (graph replays) keep ``inner``'s price. Which engines and releases run prefills
    eagerly: ``twin.validate.silicon.eager_prefill.eager_prefill_s`` (SGLang before piecewise
    prefill graphs became its default; TensorRT-LLM's context steps in every release;
    vLLM's steps above its largest captured graph).

    ``graph_tokens`` > 0: the engine replays a (piecewise) graph for every step of at most
    that many tokens, prompt and decode tokens together, so only a larger step that
    prefills pays ``floor_s`` (vLLM 0.19.0 ``v1/cudagraph_dispatcher.py``
    ``CudagraphDispatcher.dispatch``: ``CUDAGraphMode.NONE`` for ``num_tokens >
    max_cudagraph_capture_size``). 0: every step that prefills pays it.

    ``overlap``: the host's issuing runs under the kernels, a step that prefills lasts
    ``max(kernels, floor_s)``. InferenceMAX's B200 Llama-3.1-70B vLLM rows, whose every
    prompt step runs eagerly (``twin.validate.silicon.inferencemax_vllm.
    inferencemax_vllm_decode_only_graphs``), fit it where the sum over-prices their one-GPU
    steps (docs/decisions.md, "Issue 31, step: B200 vLLM's decode-only graphs", helper
    ``vllm-dense`` session 26); SGLang's rows refuted it (the series form above).

    ``decode_s``: added to ``floor_s`` where the eager step also carries decode tokens: the
    launches of the decode path the engine runs beside the prompts' in a mixed batch (vLLM's
    MLA: ``twin.validate.silicon.eager_prefill.VLLM_MLA_DECODE_LAUNCHES``).
    """

    def __init__(
        self,
        inner: Any,
        floor_s: float,
        graph_tokens: int = 0,
        overlap: bool = False,
        decode_s: float = 0.0,
    ) -> None:
        super().__init__(inner)
        self.floor_s = float(floor_s)
        self.graph_tokens = int(graph_tokens)
        self.overlap = bool(overlap)
        self.decode_s = float(decode_s)

    @property
    def provenance(self) -> str:
        return str(getattr(self.inner, "provenance", ""))

    def step_time(self, prefills: Sequence[Chunk], decode_batch: int, decode_context: int) -> float:
        kernels = float(self.inner.step_time(prefills, decode_batch, decode_context))
        if not prefills:
            return kernels
        if self.graph_tokens and sum(c[0] for c in prefills) + decode_batch <= self.graph_tokens:
            return kernels  # a captured graph's size: replayed
        host = self.floor_s + (self.decode_s if decode_batch else 0.0)
        return max(kernels, host) if self.overlap else kernels + host

    def decode_run(self, batch: int, context: int, steps: int) -> Durations:
        return np.asarray(self.inner.decode_run(batch, context, steps), np.float64)

    def decode_affine(self, batch: int) -> tuple[float, float] | None:
        fit = self.inner.decode_affine(batch)
        return None if fit is None else (float(fit[0]), float(fit[1]))

    def decode_ends(self, batch: int, context: int) -> EndsFiller | None:
        ask = getattr(self.inner, "decode_ends", None)
        return ask(batch, context) if ask is not None else None
