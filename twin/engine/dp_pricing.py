"""The price of a step of attention-DP ranks in lockstep (``twin.engine.dp_attention``).

**The price of a synchronised step** (:meth:`DPStepPricer.sync_time`): the slowest
rank's attention side (everything but the FFN/MoE layers, priced by the cost model
at the attention TP ``tp / D`` on that rank's own chunks and decodes), plus the FFN
and MoE layers priced once on all ranks' tokens together at ``tp`` (and ``ep``),
their own all-reduce replaced by the gather/scatter SGLang runs
(``layers/dp_attention.py`` and ``layers/communicator.py``, 0.5.4): with a prefill
in any rank the tokens are summed (``DpPaddingMode.SUM_LEN``: an all-reduce of the
summed tokens gathers them, the MLP's all-reduce and ``dp_scatter`` return them),
else the mode with less traffic, padding every rank to the longest
(``MAX_LEN``, when ``2 x sum > D x max``: an all-gather and a reduce-scatter of
``D x max`` rows, the bytes of one all-reduce of them). Each all-reduce is the
profile's fitted all-reduce at ``tp`` GPUs, else the ring on its link
(``CostModel.allreduce_time``). vLLM's default ``VLLM_ALL2ALL_BACKEND``,
``allgather_reducescatter`` (``vllm/envs.py``, 0.11.0), moves the same bytes.
The host time per step (the mode's ``step_host_s`` and ``seq_host_s``) is the
busiest rank's: the ranks' schedulers run side by side.

With DeepEP (SGLang's ``--moe-a2a-backend deepep``, vLLM's ``--all2all-backend
deepep_high_throughput`` / ``deepep_low_latency``: ``EngineConfig.moe_a2a``) the MoE layers
exchange tokens by DeepEP's dispatch and combine instead, priced from the profile's
all-to-all fits on the busiest rank's tokens (``twin.costmodel.a2a.A2APrice``); the dense
layers keep the gather/scatter. TensorRT-LLM runs an all-gather and a reduce-scatter of all
ranks' tokens in the MoE layers and no exchange in the dense ones
(``KernelLayout.moe_gather_scatter``, ``twin.costmodel.gather_scatter``).

Not modelled: DeepEP across nodes (the fits are one node's), MoE load imbalance between
ranks, overlap of communication with compute. With speculative decoding every forward of an
iteration (the verification, each draft pass) is a synchronised step of its own
(``twin.engine.speculative_pricing.SpeculativePricer.sync_time``), the draft priced by this
module's pricer too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from twin.costmodel.kernel_layout import DEFAULT_LAYOUT, KernelLayout
from twin.engine.cost import Chunk, PricerBase, RankStep, StepPricer, affine_fit
from twin.model import ModelSpec

IDLE: RankStep = ((), 0, 0)


@runtime_checkable
class SyncPricer(StepPricer, Protocol):
    """What prices a replica's synchronised steps: :class:`DPStepPricer`, or speculative
    decoding's iterations over it (``twin.engine.speculative_pricing.SpeculativePricer``)."""

    def sync_time(self, steps: Sequence[RankStep]) -> float: ...


# Breakdown kinds of the layers that run on all ranks' tokens (the rest is the attention side).
FFN_KINDS = ("mlp", "moe")


class DPStepPricer(PricerBase):
    """Prices a synchronised step of ``dp`` attention ranks (module docstring).

    ``attention`` is the cost model at the attention TP (``tp / dp`` GPUs), ``ffn`` at
    the replica's ``tp`` and ``ep``; both are ``twin.costmodel.CostModel`` (or anything
    with ``step_spread_cost`` and ``allreduce_time``). As a plain :class:`StepPricer` it
    prices one rank's step alone (the others idle).
    """

    def __init__(
        self,
        attention: Any,
        ffn: Any,
        dp: int,
        ffn_layers: int,
        step_host_s: float = 0.0,
        seq_host_s: float = 0.0,
        a2a: Any = None,
        moe_layers: int = 0,
        gather_scatter: Any = None,
        dense_on_rank: bool = False,
    ) -> None:
        self.attention, self.ffn, self.dp = attention, ffn, dp
        self.ffn_layers = ffn_layers
        # The dense MLP layers and the shared experts on each rank's own tokens at the
        # attention TP (``KernelLayout.dense_ffn_on_rank``): in :meth:`attention_time`,
        # out of :meth:`ffn_time`, and the dense layers exchange nothing (comm_time).
        self.dense_on_rank = dense_on_rank
        self.shared_layers = moe_layers if dense_on_rank else 0
        # The layer kinds whose FFN runs on every rank's tokens together.
        self._exchanged_kinds: tuple[str, ...] = ("moe",) if dense_on_rank else FFN_KINDS
        dense_layers = ffn_layers - moe_layers
        # DeepEP's dispatch + combine of the MoE layers (``twin.costmodel.a2a.A2APrice``),
        # in place of their gather/scatter; None: every FFN layer gathers (comm_time).
        self.a2a, self.moe_layers = a2a, moe_layers if a2a is not None else 0
        # Else the engine's all-gather + reduce-scatter of the MoE layers, the dense layers
        # on their own ranks (``twin.costmodel.gather_scatter.GatherScatterPrice``).
        self.gather_scatter = gather_scatter if a2a is None else None
        self.gathering_layers = moe_layers if self.gather_scatter is not None else 0
        # The layers SGLang's gather/scatter exchanges: the rest (comm_time).
        self.gathered_layers = ffn_layers - self.moe_layers - (dense_layers if dense_on_rank else 0)
        self.step_host_s, self.seq_host_s = step_host_s, seq_host_s
        self._ffn_cache: dict[int, float] = {}
        self._attn_ffn_cache: dict[int, float] = {}
        self._affine: dict[int, tuple[float, float] | None] = {}

    @property
    def provenance(self) -> str:
        base = str(getattr(self.ffn, "provenance", ""))
        return f"{base}; {self.a2a.provenance}" if self.moe_layers else base

    def attention_time(self, step: RankStep) -> float:
        """Seconds of a rank's attention side: its step at the attention TP but the FFN
        and MoE layers (which depend on the token count alone). A pure-decode step is
        ``a + b x context`` per batch size where the cost model's price is affine in the
        context (``twin.engine.cost.affine_fit``, as the plain pricer's decode runs)."""
        prefills, batch, context = step
        tokens = sum(c for c, _ in prefills) + batch
        if not tokens:
            return 0.0
        spread = self.attention.step_spread
        if prefills:
            total = float(spread(prefills, batch, context))
        else:
            if batch not in self._affine:
                self._affine[batch] = affine_fit(lambda x: float(spread((), batch, x)), batch)
            fit = self._affine[batch]
            total = float(spread((), batch, context)) if fit is None else fit[0] + fit[1] * context
        return total - self._attention_ffn(tokens)

    def _attention_ffn(self, tokens: int) -> float:
        """The share of a step of ``tokens`` tokens at the attention TP that the ranks
        run together (subtracted from its price: :meth:`attention_time`): the FFN and MoE
        layers, less those a rank runs on its own tokens (``dense_on_rank``)."""
        got = self._attn_ffn_cache.get(tokens)
        if got is None:
            cost = self.attention.step_spread_cost((), tokens, 0)
            got = float(
                sum(sum(cost.items.get(kind, {}).values()) for kind in self._exchanged_kinds)
            )
            if self.shared_layers:
                got -= self.shared_layers * self.attention.shared_expert_s(tokens)
            self._attn_ffn_cache[tokens] = got
        return got

    def ffn_time(self, tokens: int) -> float:
        """Seconds of the FFN and MoE layers on ``tokens`` tokens at ``tp`` (and ``ep``),
        without their all-reduce (the gather/scatter replaces it: :meth:`comm_time`)."""
        got = self._ffn_cache.get(tokens)
        if got is None:
            cost = self.ffn.step_spread_cost((), tokens, 0)  # the FFN sees rows only
            got = sum(
                s
                for kind in self._exchanged_kinds
                for kernel, s in cost.items.get(kind, {}).items()
                if kernel != "allreduce"
            )
            if self.shared_layers:  # on the ranks' own tokens: attention_time's
                got -= self.shared_layers * self.ffn.shared_expert_s(tokens)
            self._ffn_cache[tokens] = got
        return got

    def comm_time(self, tokens: Sequence[int], extend: bool) -> float:
        """Seconds of the gather/scatter of every FFN layer for ranks with these token
        counts (SGLang's ``DpPaddingMode``, module docstring), or of the MoE layers'
        all-gather + reduce-scatter where the engine runs those (``gather_scatter``)."""
        total, most = sum(tokens), max(tokens)
        if not total:
            return 0.0
        if self.gather_scatter is not None:  # the MoE layers' only: dense layers stay put
            return float(self.gathering_layers * self.gather_scatter.seconds(total))
        ar = self.ffn.allreduce_time
        if not extend and 2 * total > most * self.dp:  # MAX_LEN
            per_layer = ar(most * self.dp)
        else:  # SUM_LEN: gather by all-reduce, then the layer's own all-reduce
            per_layer = 2 * ar(total)
        gathered = self.gathered_layers
        if not self.moe_layers:
            return float(gathered * per_layer)
        # DeepEP: every rank sends its own tokens; the layer waits for the busiest rank.
        return float(gathered * per_layer + self.moe_layers * self.a2a.seconds(most, extend))

    def sync_time(self, steps: Sequence[RankStep], extend: bool | None = None) -> float:
        """Seconds of one synchronised step whose ranks run ``steps`` (idle ranks:
        :data:`IDLE`): the slowest attention side + the FFN on the sum + the
        gather/scatter + the busiest rank's host time. ``extend``: whether the ranks
        exchange tokens as an extend batch (:meth:`comm_time`); None: where any rank
        runs chunks (speculative decoding's verifications are chunks of a decode batch:
        ``twin.engine.speculative_pricing.SpeculativePricer``)."""
        tokens = [sum(c for c, _ in p) + b for p, b, _ in steps]
        total = sum(tokens)
        if not total:
            return 0.0
        seqs = max(len(p) + b for p, b, _ in steps)
        if extend is None:
            extend = any(p for p, _, _ in steps)
        return (
            max(self.attention_time(s) for s in steps)
            + self.ffn_time(total)
            + self.comm_time(tokens, extend)
            + self.step_host_s
            + self.seq_host_s * seqs
        )

    # ------------------------------------------------ StepPricer: one rank alone
    def step_time(self, prefills: Sequence[Chunk], decode_batch: int, decode_context: int) -> float:
        step: RankStep = (prefills, decode_batch, decode_context)
        return self.sync_time([step] + [IDLE] * (self.dp - 1))

    def checkpoint_copy_time(self) -> float:
        # A rank's recurrent-state checkpoint copy on its attention-TP GPUs, as the plain
        # pricer prices it (``CostModelPricer``: ``CostModel.checkpoint_copy_s(1)``).
        return float(self.attention.checkpoint_copy_s(1))


def dp_pricer(
    model: ModelSpec,
    profile: Any,
    tp: int,
    ep: int,
    dp: int,
    step_host_s: float,
    seq_host_s: float,
    moe_a2a: str = "",
    absorbed_extend: int = 0,
    kernel_layout: KernelLayout = DEFAULT_LAYOUT,
) -> DPStepPricer:
    """The synchronised step pricer of a replica of ``tp`` GPUs, ``ep`` expert ranks and
    ``dp`` attention ranks on ``profile``; ``moe_a2a`` ``"deepep"``: the MoE layers'
    dispatch and combine from the profile's DeepEP fits (``twin.costmodel.a2a``;
    ``deepep_ht`` / ``deepep_ll`` one mode for every step); ``absorbed_extend``: the
    ranks' prefill chunks of at most that many tokens priced as MLA's absorbed extends
    (speculative decoding's verification, ``twin.engine.cost.make_pricer``);
    ``kernel_layout``: the engine build's (``twin.costmodel.kernel_layout``)."""
    from twin.costmodel import CostModel
    from twin.parallel import Layout, check_layout

    check_layout(model, Layout(tp, ep, dp))
    attention = CostModel(
        model, profile, tp // dp, absorbed_extend=absorbed_extend, kernel_layout=kernel_layout
    )
    attention.compile_steps()  # its compiled mixed step where the model has one
    ffn = CostModel(model, profile, tp, ep=ep, kernel_layout=kernel_layout)
    layers = model.n_mlp_layers + model.n_moe_layers
    a2a = None
    if moe_a2a:
        from twin.costmodel.a2a import A2APrice

        a2a = A2APrice(model, profile, ep, moe_a2a)
    gather_scatter = None
    if kernel_layout.moe_gather_scatter:
        from twin.costmodel.gather_scatter import GatherScatterPrice

        gather_scatter = GatherScatterPrice(model, ffn)
    return DPStepPricer(
        attention,
        ffn,
        dp,
        layers,
        step_host_s,
        seq_host_s,
        a2a,
        model.n_moe_layers,
        gather_scatter,
        kernel_layout.dense_ffn_on_rank,
    )


__all__ = [
    "DPStepPricer",
    "SyncPricer",
    "dp_pricer",
]
