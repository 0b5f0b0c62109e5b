"""Expert parallelism, attention data parallelism and pipeline parallelism as axes of
``twin plan``.

A replica's parallel layout is ``twin.parallel.Layout(tp, ep, dp)``: ``tp`` GPUs, the
routed experts dealt out to ``ep`` ranks among them (``--ep``), the attention run by
``dp`` data-parallel ranks among them (``--dp-attention``). Both divide ``tp``: they
split the same GPUs differently and add none, so a candidate's GPUs per replica stay
``tp`` (times a disaggregated layout's workers) whatever its ``ep`` and ``dp``.

The plan searches the product of ``--tp``, ``--ep`` and ``--dp-attention`` values,
keeping the layouts the model can take: a layout ``twin.parallel.Layout`` and
``twin.parallel.check_layout`` accept (the checks ``twin simulate`` and ``twin cost``
apply: ``--ep`` and ``--dp-attention`` dividing ``--tp``, experts dividing by ``--ep``, a
model with MoE layers for ``--ep`` above 1, heads dividing by the attention TP). The plain
layouts (``ep = dp = 1``) are always kept, as before these axes: a ``tp`` the model's
heads do not divide stays a candidate that *cannot run*, listed with its reason.
What else a layout needs (attention DP is refused with disaggregated pools) is the engine
configuration's own check, in the plan's checks before simulation.

``auto`` enumerates, per ``tp``, the degrees the engines offer as one switch: 1 and
``tp``. vLLM's ``--enable-expert-parallel`` makes the experts' group the whole TP x DP
group (``FusedMoEParallelConfig.make``, ``vllm/model_executor/layers/fused_moe/config.py``,
0.11.0: ``ep_size = tp_size * dp_size`` when ``use_ep``); TensorRT-LLM's
``enable_attention_dp`` runs one attention rank per GPU (``dp = tp``, ``llmapi/llm_args.py``);
SGLang's ``--enable-dp-attention`` is documented with ``--dp`` equal to ``--tp``. Both
only for a model with MoE layers (the engines offer attention DP for MoE models, where the
gathered FFN is the experts; a dense model keeps 1). Other degrees are given explicitly
(``--ep 1,2,4,8``).

**Pipeline parallelism** (``--pp``) is the one degree that *adds* GPUs: a replica is
``pp`` stages of ``tp`` GPUs (``Layout(tp, ep, dp, pp)``), so a candidate's GPUs per
replica are ``tp x pp`` (times a disaggregated layout's workers), and so is its cost.
Every ``--pp`` value is tried with every layout above (a model with fewer layers than
stages is left out with a note, ``check_layout``'s line). ``auto`` is 1 and 2: one stage,
or the replica over two groups of ``tp`` GPUs (vLLM's documented multi-node recipe is
``tp`` within a node and ``pp`` the number of nodes; more stages are given explicitly).
What the pipelined replica does not model (attention DP, speculative decoding,
disaggregated pools, a host cache tier: ``EngineConfig._check_pipeline``) is the engine
configuration's own refusal (``twin.engine.config.PipelineConflict``); the plan skips
such a candidate and counts it by what conflicts. The bound's step price of a pipelined
replica is its slowest stage's (:class:`PipelineBoundPricer`: a pipeline finishes at most
one micro-batch per slowest-stage time), and a lone decode step crosses every stage.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from twin.errors import TwinError
from twin.limits import MAX_TP
from twin.model import ModelSpec
from twin.parallel import Layout, check_layout

AUTO = "auto"
# The flags as the plan and twin simulate spell them.
EP_FLAG, DP_FLAG, PP_FLAG = "--ep", "--dp-attention", "--pp"
# --pp auto: one stage, or two (see the module).
AUTO_PP = (1, 2)


def parse_degrees(values: Sequence[int | str], flag: str) -> tuple[int, ...] | None:
    """``values`` as whole numbers from 1 to ``MAX_TP``, once each, in order; None for
    ``auto`` (given alone). One line naming ``flag`` otherwise."""
    texts = [str(v).strip().lower() for v in values]
    if texts == [AUTO]:
        return None
    if not texts:
        raise TwinError(f"{flag}: give at least one degree, e.g. 1,8, or auto")
    out = []
    for value, text in zip(values, texts, strict=True):
        if text == AUTO:
            raise TwinError(f"{flag}: auto stands alone (got {', '.join(map(str, values))})")
        try:
            n = int(text)
        except ValueError:
            n = 0
        if isinstance(value, bool) or not 1 <= n <= MAX_TP or str(n) != text:
            raise TwinError(
                f"{flag} {value!r}: each must be a whole number from 1 to {MAX_TP}, or auto"
            )
        out.append(n)
    return tuple(dict.fromkeys(out))


def _auto(model: ModelSpec, tp: int) -> tuple[int, ...]:
    """The degrees ``auto`` tries at ``tp``: 1 and ``tp`` for a MoE model (see the module)."""
    return (1, tp) if model.n_moe_layers and tp > 1 else (1,)


def parallel_layouts(
    model: ModelSpec,
    tps: Sequence[int],
    eps: Sequence[int] | None,
    dps: Sequence[int] | None,
    pps: Sequence[int] | None = (1,),
) -> tuple[list[Layout], list[str]]:
    """The replica layouts to plan, tp-major in the order given (``None``: ``auto``), and a
    note per combination left out because the model cannot take it. Each ``pps`` value
    (pipeline stages) is tried with every tp/ep/dp layout kept, pp-minor.

    A degree given explicitly that no ``tp`` can take is one ``TwinError`` line naming
    its flag (the first reason), before any work."""
    kept: list[Layout] = []
    dropped: list[str] = []
    used: dict[tuple[str, int], str | None] = {}  # (flag, degree) -> None once taken
    for tp in tps:
        for ep in _auto(model, tp) if eps is None else eps:
            for dp in _auto(model, tp) if dps is None else dps:
                if ep == dp == 1:
                    kept.append(Layout(tp))
                    continue
                try:
                    layout = Layout(tp, ep, dp)
                    check_layout(model, layout)
                except TwinError as err:
                    dropped.append(f"tp {tp} ep {ep} attention DP {dp}: {err}")
                    for flag, n, given in ((EP_FLAG, ep, eps), (DP_FLAG, dp, dps)):
                        if n > 1 and given is not None:
                            used.setdefault((flag, n), str(err))
                    continue
                kept.append(layout)
                for flag, n in ((EP_FLAG, ep), (DP_FLAG, dp)):
                    used[(flag, n)] = None
    staged: list[Layout] = []
    for layout in dict.fromkeys(kept):
        for pp in AUTO_PP if pps is None else pps:
            if pp == 1:
                staged.append(layout)
                continue
            try:
                piped = Layout(layout.tp, layout.ep, layout.dp, pp)
                check_layout(model, piped)
            except TwinError as err:
                dropped.append(f"{describe(Layout(layout.tp, layout.ep, layout.dp, pp))}: {err}")
                if pps is not None:
                    used.setdefault((PP_FLAG, pp), str(err))
                continue
            staged.append(piped)
            used[(PP_FLAG, pp)] = None
    for (flag, n), why in used.items():
        if why is not None:
            shown = ",".join(map(str, tps))
            raise TwinError(f"{flag} {n}: no layout of --tp {shown} can take it ({why})")
    return staged, dropped


def describe(layout: Layout) -> str:
    """``tp 4 ep 8 attention DP 1``-style words for a layout (pp only above 1)."""
    return f"tp {layout.tp} ep {layout.ep} attention DP {layout.dp}" + (
        f" pp {layout.pp}" if layout.pp > 1 else ""
    )


def layout_settings(layout: Layout) -> tuple[tuple[str, int], ...]:
    """The engine settings of ``layout`` (``tp``; ``ep``, ``dp_attention`` and ``pp`` only
    above 1, so a plain layout's settings, and its sweep keys, are what they were)."""
    return (
        ("tp", layout.tp),
        *((("ep", layout.ep),) if layout.ep > 1 else ()),
        *((("dp_attention", layout.dp),) if layout.dp > 1 else ()),
        *((("pp", layout.pp),) if layout.pp > 1 else ()),
    )


def layout_flags(layout: Layout) -> list[str]:
    """``twin simulate``'s flags for ``layout`` beyond ``--tp``."""
    return [
        *([EP_FLAG, str(layout.ep)] if layout.ep > 1 else []),
        *([DP_FLAG, str(layout.dp)] if layout.dp > 1 else []),
        *([PP_FLAG, str(layout.pp)] if layout.pp > 1 else []),
    ]


class PipelineBoundPricer:
    """A pipelined replica's step prices for the bound: ``step_time`` is the slowest
    stage's time for the micro-batch (``PipelinePricer.stage_times``; the stages overlap,
    so the replica finishes at most one micro-batch per slowest-stage time: a lower
    bound on its time per token), ``lone_step_time`` one decode step through every stage
    and send (the token gap of a request decoding alone)."""

    def __init__(self, pipeline: Any) -> None:
        self.pipeline = pipeline

    def step_time(self, prefills: Sequence[Any], decode_batch: int, decode_context: int) -> float:
        return max(self.pipeline.stage_times(prefills, decode_batch, decode_context))

    def lone_step_time(self) -> float:
        return float(self.pipeline.step_time([], 1, 1))


def lone_decode_s(pricer: Any) -> float:
    """Seconds of one decode step of one request alone under ``pricer`` (a bound
    pricer of :func:`bound_pricer`)."""
    if isinstance(pricer, PipelineBoundPricer):
        return pricer.lone_step_time()
    return float(pricer.step_time([], 1, 1))


def bound_pricer(model: ModelSpec, profile: Any, layout: Layout, engine: str = "") -> Any:
    """The step prices the plan's analytic bound reads for ``layout``: the cost model at
    ``tp`` and ``ep`` (without host times, as the bound always read it), with attention
    DP the synchronised pricer of its ranks (``twin.engine.dp_pricing.dp_pricer``), with
    pipeline stages the slowest stage's (:class:`PipelineBoundPricer`, the stages split
    as engine mode ``engine`` splits them)."""
    if layout.pp > 1:
        from twin.engine.pipeline import pipeline_pricer

        return PipelineBoundPricer(
            pipeline_pricer(model, profile, layout.tp, layout.ep, layout.pp, engine=engine)
        )
    if layout.dp > 1:
        from twin.engine.dp_pricing import dp_pricer

        return dp_pricer(model, profile, layout.tp, layout.ep, layout.dp, 0.0, 0.0)
    from twin.engine import make_pricer

    return make_pricer(model, profile, layout.tp, layout.ep)


__all__ = [
    "AUTO",
    "AUTO_PP",
    "DP_FLAG",
    "EP_FLAG",
    "PP_FLAG",
    "PipelineBoundPricer",
    "bound_pricer",
    "describe",
    "layout_flags",
    "layout_settings",
    "lone_decode_s",
    "parallel_layouts",
    "parse_degrees",
]
