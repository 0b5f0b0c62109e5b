"""The price of a speculative-decoding iteration (``twin.engine.speculative``).

Each decode step of a request (one *iteration* of the engine) runs

- the **draft**: ``num_speculative_tokens`` sequential forward passes of the draft
  (a smaller model, an EAGLE head, the model's own MTP layers; none for n-gram
  lookup), the first over the ``k + 1`` positions the last verification left (vLLM's
  padded drafter batch, SGLang's padded draft extend), each later one over one token a
  request (``topk`` with SGLang's tree drafts), every pass priced by the cost model
  as a step of the draft's :class:`~twin.model.ModelSpec`;
- the **verification**: the target over ``verify_tokens`` tokens a request (``k + 1``
  for a chain, ``speculative_num_draft_tokens`` for a tree), priced by the cost model
  as a small prefill (an extend) after the request's context;

and emits ``1 + accepted`` tokens. **Accounting: expected values.** The twin keeps the
engine's one-token-a-step bookkeeping and times each token step at the iteration's
price over the expected acceptance length ``tau = 1 + E[accepted]``: a request with
``L`` tokens to go decodes in ``L`` token steps of ``iteration / tau`` seconds, so its
completion time, its TPOT, the KV it grows (one token a token step) and the keys
attention reads (one more a token step) are the real ones in expectation, and the run
stays deterministic without drawing acceptances. A step that also carries prefill
chunks is one iteration of the mixed batch less the part of a pure decode iteration
that the decoders' ``tau - 1`` further tokens would have cost (``(1 - 1/tau)`` of it):
the decoders' busy time stays exact, a prefill in a mixed step ends up to that much
early. What this leaves out: the spread of accepted lengths (a request's tokens come in
bursts, so the ITL distribution is narrower than a real engine's; its mean is right),
the fc / eh_proj matrices of EAGLE-3 / MTP heads in the price (their weights are
counted), and drafting for a request in the step its prefill ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from twin.engine.config import EngineConfig

from twin.costmodel.kernel_layout import DEFAULT_LAYOUT, KernelLayout
from twin.engine.cost import Chunk, Durations, RankStep, WrappingPricer, affine_fit
from twin.engine.speculative import Speculation
from twin.engine.speculative_methods import METHODS
from twin.model import ModelSpec


class SpeculativePricer(WrappingPricer):
    """``inner`` (the target's :class:`~twin.engine.cost.StepPricer`) with drafting and
    verification, a token step at ``1 / tau`` of an iteration (module docstring)."""

    def __init__(
        self,
        inner: Any,
        draft: Any | None,
        spec: Speculation,
        draft_host_s: float = 0.0,
        loop_host: bool = False,
    ) -> None:
        super().__init__(inner)
        self.draft = draft
        self.spec = spec
        self.tau = spec.acceptance_length
        # Host time of each draft pass (vLLM 0.19.0's V1 runner launches each one apart).
        self.draft_host_s = float(draft_host_s) if spec.draft_host else 0.0
        # Host time of the forwards an iteration runs beside the verification's, exposed
        # when the engine does not overlap scheduling with the GPU (SGLang 0.5.10.post1).
        self.forward_host_s = float(draft_host_s) * spec.forward_host
        # The whole iteration's host time, fixed and per request (Speculation.loop_host_s),
        # where ``loop_host`` (the run's engine times price none of their own).
        self.loop_host = (spec.loop_host_s, spec.loop_seq_host_s) if loop_host else (0.0, 0.0)
        self._affine: dict[int, tuple[float, float] | None] = {}
        self._fixed: dict[int, tuple[float, float] | None] = {}

    @property
    def provenance(self) -> str:
        return str(getattr(self.inner, "provenance", ""))

    def tokens_per_iteration(self) -> float:
        return float(self.tau)

    def _verify(self, batch: int, context: int) -> list[Chunk]:
        """Each decoder's verification: ``verify_tokens`` new tokens after its context
        (the batch's context sum spread evenly, as the cost model's decode spread)."""
        base, extra = divmod(context, batch)
        v = self.spec.verify_tokens
        return [(v, base + 1)] * extra + [(v, base)] * (batch - extra)

    @staticmethod
    def _forward(pricer: Any, steps: Sequence[RankStep], decode: bool = False) -> float:
        """Seconds of one forward whose ranks run ``steps``: a plain pricer's step (one
        rank), or the synchronised step of attention-DP ranks
        (``twin.engine.dp_pricing.DPStepPricer.sync_time``): every forward of an
        iteration, the verification and each draft pass, gathers all ranks' tokens in its
        MoE/MLP layers, so the ranks run each one in lockstep (an idle rank an idle batch:
        SGLang 0.5.10.post1 ``EAGLEWorker`` runs its draft and verify forwards under the
        scheduler's ``prepare_mlp_sync_batch``; TensorRT-LLM's MTP worker runs inside the
        attention-DP model forward).

        ``decode``: the forward is the verification of an iteration that decodes only, so
        the ranks exchange its tokens as a decode batch's, not an extend's
        (``DPStepPricer.comm_time``). SGLang 0.5.9: ``managers/scheduler_dp_attn_mixin.py``
        ``prepare_mlp_sync_batch`` sets ``is_extend_in_batch`` from the scheduler batch's
        ``forward_mode.is_extend()``, and a speculative decode batch is DECODE there (the
        worker switches it to TARGET_VERIFY after), so ``ForwardBatch`` takes
        ``DpPaddingMode.get_dp_padding_mode(False, ...)`` (``layers/dp_attention.py``:
        MAX_LEN when the ranks are even), and the TARGET_VERIFY CUDA graph is captured in
        ``get_default_mode_in_cuda_graph`` (MAX_LEN) with DeepEP's decode mode
        (``model_executor/cuda_graph_runner.py``, ``capture(is_extend_in_batch=False)``).
        TensorRT-LLM's MTP verify is a generation step (generation requests carrying their
        draft tokens, ``_torch/speculative/mtp.py``), gathered as any generation step. The
        draft extend keeps the extend's exchange (SGLang captures its CUDA graph with
        DeepEP's extend mode, ``eagle_draft_extend_cuda_graph_runner.py``)."""
        if len(steps) == 1:
            return float(pricer.step_time(*steps[0]))
        if decode:
            return float(pricer.sync_time(steps, extend=False))
        return float(pricer.sync_time(steps))

    def _drafting(self, steps: Sequence[RankStep], later: bool = True) -> float:
        """Seconds of the draft passes: the first over each rank's prefill chunks and
        ``k + 1`` positions a decoder, the others (``later``) over ``topk`` tokens a
        decoder; each pass's host time (the ranks' schedulers run side by side)."""
        draft = self.draft
        spec = self.spec
        k = spec.num_speculative_tokens
        decoding = any(batch for _, batch, _ in steps)
        passes = k if decoding else 1
        host = self.draft_host_s * passes
        if self.forward_host_s:
            # A prefill-only iteration runs one forward beside the target's (the draft
            # extend over the prompt); a decode iteration the draft and the draft extend.
            host += self.forward_host_s if decoding else self.forward_host_s / spec.forward_host
        fixed, each = self.loop_host
        if fixed or each:
            # Each rank's loop over its own requests (the ranks' schedulers side by side).
            host += fixed + each * max(len(prefills) + batch for prefills, batch, _ in steps)
        if draft is None:
            return host
        w = spec.extend_tokens or k + 1
        first: list[RankStep] = []
        for prefills, batch, context in steps:
            chunks = list(prefills)
            if batch:
                base, extra = divmod(context, batch)
                chunks += [(w, base + 1)] * extra + [(w, base)] * (batch - extra)
            first.append((chunks, 0, 0))
        seconds = self._forward(draft, first) + host
        if later and decoding and k > 1:
            rows = [
                ((), batch * spec.topk, self._later_keys(context)) for _, batch, context in steps
            ]
            seconds += (k - 1) * self._forward(draft, rows)
        return seconds

    def _later_keys(self, context: int) -> int:
        """Keys the later draft passes' attention reads. A chain: each request's context.
        A tree (topk > 1): SGLang's FlashAttention-3 backend (its default on Hopper for
        Llama, ``is_fa3_default_architecture``) runs a draft decode as cascade attention,
        the prefix once for the topk queries of a request and each branch's own few tokens
        apart (``flashattention_backend.py``, 0.5.10.post1 and 0.5.23: "we enable cascade
        attention when top_k > 1"): the prefix once (the branch parts, at most
        ``speculative_num_steps`` keys a branch, are left out)."""
        return context if self.spec.topk > 1 else context * self.spec.topk

    def _iteration(self, steps: Sequence[RankStep]) -> float:
        """One iteration: the target over each rank's prefill chunks and verifications,
        and the draft passes."""
        verify: list[RankStep] = []
        for prefills, batch, context in steps:
            chunks = list(prefills)
            if batch:
                chunks += self._verify(batch, context)
            verify.append((chunks, 0, 0))
        decode = not any(prefills for prefills, _, _ in steps)
        return self._forward(self.inner, verify, decode) + self._drafting(steps)

    def step_time(self, prefills: Sequence[Chunk], decode_batch: int, decode_context: int) -> float:
        return self.sync_time([(prefills, decode_batch, decode_context)])

    def sync_time(self, steps: Sequence[RankStep]) -> float:
        """A token step of ranks running ``steps`` (one rank: :meth:`step_time`): an
        iteration over ``tau`` where they only decode, a mixed iteration less the part of
        a pure decode iteration that the decoders' further tokens would have cost."""
        if not any(batch for _, batch, _ in steps):
            return self._iteration([(prefills, 0, 0) for prefills, _, _ in steps])
        decode = self._iteration([((), batch, context) for _, batch, context in steps])
        if not any(prefills for prefills, _, _ in steps):
            return decode / self.tau
        mixed = self._iteration(steps)
        return mixed - (1.0 - 1.0 / self.tau) * decode

    def decode_affine(self, batch: int) -> tuple[float, float] | None:
        if batch not in self._affine:
            self._affine[batch] = affine_fit(lambda x: self.step_time((), batch, x), batch)
        return self._affine[batch]

    def _fixed_part(self, batch: int) -> tuple[float, float] | None:
        """The affine fit of a decode iteration's parts other than the later draft passes
        (the verification, the first draft pass, the host times), if affine."""
        if batch not in self._fixed:

            def price(context: int) -> float:
                verify = float(self.inner.step_time(self._verify(batch, context), 0, 0))
                return verify + self._drafting([((), batch, context)], later=False)

            self._fixed[batch] = affine_fit(price, batch)
        return self._fixed[batch]

    def decode_run(self, batch: int, context: int, steps: int) -> Durations:
        """A decode run's token steps: the affine parts in closed form, the later draft
        passes through the draft's own ``decode_run`` (its compiled or remembered
        prices); step by step where the parts are not affine."""
        fit = self._fixed_part(batch)
        if fit is None:
            return super().decode_run(batch, context, steps)
        seconds = fit[0] + fit[1] * (context + batch * np.arange(steps, dtype=np.float64))
        spec, draft = self.spec, self.draft
        if draft is not None and spec.num_speculative_tokens > 1:
            rows = batch * spec.topk
            if spec.topk == 1:
                later = np.asarray(draft.decode_run(rows, context, steps), np.float64)
            else:
                # A tree's rows read the prefix once (_later_keys), which grows a token a
                # request each token step, not a token a row.
                steps_keys = context + batch * np.arange(steps, dtype=np.int64)
                fit = draft.decode_affine(rows)
                if fit is not None:
                    later = fit[0] + fit[1] * steps_keys.astype(np.float64)
                else:
                    later = np.array([float(draft.step_time((), rows, int(c))) for c in steps_keys])
            seconds = seconds + (spec.num_speculative_tokens - 1) * later
        return seconds / self.tau


def speculative_pricer(
    inner: Any,
    model: ModelSpec,
    profile: Any,
    config: EngineConfig,
    kernel_layout: KernelLayout = DEFAULT_LAYOUT,
) -> SpeculativePricer:
    """``inner`` with the run's speculative decoding (``config.mode.speculative``): the
    draft priced by the cost model on the same GPU at its tensor parallelism; under
    attention DP (``config.cluster.dp_attention``) by the ranks' synchronised pricer, as the target
    (``twin.engine.dp_pricing.dp_pricer``). The draft's kernels are laid out as the
    target's ``kernel_layout`` where the draft is a layer of the target's own stack
    (``Method.target_layout``: MTP), else as the default (an EAGLE head, a draft model)."""
    from twin.engine.cost import make_pricer

    c = config.cluster
    spec = Speculation.from_dict(config.mode.speculative)
    draft_spec = spec.draft_spec(model)
    draft: Any = None
    layout = kernel_layout if METHODS[spec.method].target_layout else DEFAULT_LAYOUT
    if draft_spec is not None:
        tp = spec.draft_tp or c.tp
        ep = c.ep if tp == c.tp and draft_spec.n_moe_layers else 1
        if c.dp_attention > 1:
            from twin.engine.dp_pricing import dp_pricer

            dp = c.dp_attention
            moe_a2a = c.moe_a2a if draft_spec.n_moe_layers else ""
            draft = dp_pricer(
                draft_spec, profile, tp, ep, dp, 0.0, 0.0, moe_a2a, spec.absorbed_extend, layout
            )
        else:
            draft = make_pricer(draft_spec, profile, tp, ep, spec.absorbed_extend, layout)
    h = config.host_time
    loop_host = not (h.step_host_s or h.seq_host_s)
    return SpeculativePricer(inner, draft, spec, h.step_host_s, loop_host)


__all__ = [
    "SpeculativePricer",
    "speculative_pricer",
]
