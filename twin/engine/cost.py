"""What the engine needs from a cost model: the seconds of one batch step, and of a state copy.

The engine depends on the tiny :class:`StepPricer` protocol, not on the
calibrated cost model itself, so that tests can plug in constant or linear
pricers whose queueing behaviour is known in closed form, and so that the
scheduler never sees kernels or profiles (Vidur's separation of the execution
time predictor from the scheduler).

A step is priced from its prefill chunks, each ``(new tokens, cached context
before the chunk)``, and its decode batch summarised by ``(sequences, total
context)``. The decode summary is exact for every cost model whose decode
work is additive over sequences (attention decode reads each sequence's keys;
SSM and MLP layers cost the same per sequence), and it lets the engine price a
step in O(1) however many sequences decode: it keeps the batch's context sum
incrementally instead of walking the batch every step. (With a sliding
window, keys per sequence are capped, so handing the cost model the sum
spread evenly over the batch approximates its layers' keys, from above:
capping is concave; ``gemma-3-4b``'s local layers are the shipped case.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Protocol, cast, runtime_checkable

import numpy as np

from twin.costmodel.kernel_layout import DEFAULT_LAYOUT, KernelLayout
from twin.mixers import RECURRENT_KINDS
from twin.model import ModelSpec

# The cost model's breakdown labels of recurrent layers: Mamba-2 is "ssm", the others
# their own kind (Mamba-1, GDN).
_RECURRENT_LABELS = ("ssm", *sorted(RECURRENT_KINDS))

Chunk = tuple[int, int]  # (new tokens, cached context before them)
Durations = Sequence[float] | np.ndarray  # seconds of each step of a decode run
# A rank's step as a pricer sees it: (prefill chunks, decoding sequences, their context
# sum); one replica's, or each attention-DP rank's (twin.engine.dp_attention).
RankStep = tuple[Sequence[Chunk], int, int]
# ``fill(ends, first, n)``: writes the ends of a decode run's steps ``first`` to
# ``first + n - 1`` (seconds from the run's start) into ``ends``, summing on from
# ``ends[first - 1]`` (``StepPricer.decode_run``'s durations summed left to right).
EndsFiller = Callable[[np.ndarray, int, int], None]


@runtime_checkable
class StepPricer(Protocol):
    """Seconds of the work a replica does; see the module docstring."""

    def step_time(self, prefills: Sequence[Chunk], decode_batch: int, decode_context: int) -> float:
        """Seconds of ``prefills`` + ``decode_batch`` decodes over ``decode_context`` keys."""
        ...

    def decode_run(self, batch: int, context: int, steps: int) -> Durations:
        """Durations of ``steps`` pure-decode steps; step i sees ``context + i * batch`` keys
        (a list or a numpy array)."""
        ...

    def decode_affine(self, batch: int) -> tuple[float, float] | None:
        """``(a, b)`` if a pure-decode step of ``batch`` sequences costs ``a + b x context``.

        Lets the engine time a whole decode run in closed form; ``None`` when
        the price is not affine in the context (the engine then uses
        :meth:`decode_run`).
        """
        ...

    def checkpoint_copy_time(self) -> float:
        """Seconds to copy one SSM checkpoint (every SSM layer's state) on the device."""
        ...

    def tokens_per_iteration(self) -> float:
        """Token steps one engine iteration of a decoding request spans: the expected
        acceptance length under speculative decoding (a token step lasts ``1 / tau`` of an
        iteration, ``twin.engine.speculative``), else 1."""
        ...

    def hit_work_time(self, recompute: int, host_tokens: int, host_states: int = 0) -> float:
        """Seconds a hit adds before its prefill: the recurrent layers over ``recompute``
        tokens (a non-prefix hit, ``twin.cache.Hit``), and loading ``host_tokens``
        tokens' KV and ``host_states`` recurrent states from host memory (prompt
        modules kept there, or the host tier's hits)."""
        ...

    def write_back_time(self, tokens: int, states: int) -> float:
        """Seconds to copy ``tokens`` tokens' KV and ``states`` recurrent states from the
        device to host memory (the host tier's write-back, which evictions wait for)."""
        ...


class PricerBase:
    """Implements :meth:`decode_run` by pricing each step; subclasses give ``step_time``."""

    def step_time(self, prefills: Sequence[Chunk], decode_batch: int, decode_context: int) -> float:
        raise NotImplementedError

    def decode_run(self, batch: int, context: int, steps: int) -> Durations:
        return np.fromiter(
            (self.step_time((), batch, context + i * batch) for i in range(steps)),
            np.float64,
            steps,
        )

    def decode_affine(self, batch: int) -> tuple[float, float] | None:
        return None

    def decode_ends(self, batch: int, context: int) -> EndsFiller | None:
        """Optional (the engine asks for it by name): a compiled way to time a decode run
        of ``batch`` sequences whose first step sees ``context`` keys, equal to summing
        :meth:`decode_run`'s durations; ``None``: the engine sums ``decode_run``'s."""
        return None

    def checkpoint_copy_time(self) -> float:
        return 0.0

    def tokens_per_iteration(self) -> float:
        return 1.0

    def hit_work_time(self, recompute: int, host_tokens: int, host_states: int = 0) -> float:
        return 0.0

    def write_back_time(self, tokens: int, states: int) -> float:
        return 0.0


class WrappingPricer(PricerBase):
    """A pricer around ``inner`` that changes what a step costs and nothing else: the
    cache side's prices (checkpoint copies, a hit's own work, write-backs) are
    ``inner``'s. The engine's pricer layers (host time, speculation, attention-DP ranks)
    are these."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def checkpoint_copy_time(self) -> float:
        return float(self.inner.checkpoint_copy_time())

    def tokens_per_iteration(self) -> float:
        return float(self.inner.tokens_per_iteration())

    def hit_work_time(self, recompute: int, host_tokens: int, host_states: int = 0) -> float:
        return float(self.inner.hit_work_time(recompute, host_tokens, host_states))

    def write_back_time(self, tokens: int, states: int) -> float:
        return float(self.inner.write_back_time(tokens, states))


# Per-sequence contexts at which a batch size's decode price is checked to be
# affine in the context sum (up to 128K tokens a sequence), and the tolerance.
_PROBE_CONTEXTS = (0, 128, 1024, 8192, 32768, 131072)
# Decode step prices remembered across runs (about 100 bytes each) before starting afresh.
_STEPS_REMEMBERED = 1 << 17
_AFFINE_RTOL = 1e-6


class CostModelPricer(PricerBase):
    """Adapter over the calibrated :class:`twin.costmodel.CostModel` of one replica.

    Steps with prefill chunks are priced exactly by ``CostModel.step``. A pure
    decode step depends on the context sum only through the attention decode
    kernel, which is memory-bound: for each batch size the price is fitted as
    ``a + b x context`` from the cost model itself and checked at six contexts
    (0 to 128K tokens a sequence) to agree within 1e-6 relative (in practice
    1e-9); a batch size that fails the check (a sliding window, a kernel near
    its compute/memory crossover) is priced exactly step by step. With the fit
    the engine times a fast-forwarded decode run in closed form instead of
    calling the cost model once per step (about 7 us a call, and a request at
    low load decodes over tens of steps). A batch size that fails it is timed by
    compiled code (:meth:`decode_ends`: ``twin.costmodel.compiled``, about
    50 ns a step), the same prices as ``CostModel.decode_steps_s`` to the bit.
    """

    def __init__(self, cost_model: Any) -> None:
        self.cost_model = cost_model
        self._affine: dict[int, tuple[float, float] | None] = {}
        # Per batch size, ``compiled.fill_ends``' constants (``None``: affine, or no
        # compiled path); a cost model without them is timed through ``decode_run``.
        self._constants: Callable[[int], np.ndarray | None] | None = None
        self._run_constants: dict[int, np.ndarray | None] = {}
        # Non-affine batch sizes timed through ``decode_run`` (no compiled path): batch ->
        # {context sum: seconds of that decode step}.
        self._steps: dict[int, dict[int, float]] = {}
        self._remembered = 0
        # Steps with a prefill chunk (about one a request) and decode runs compiled where
        # the cost model can: numba loads (the kernels from their disk cache) with the
        # pricer, not in the middle of a run, and not for a model no compiled path serves.
        compile_steps = getattr(cost_model, "compile_steps", None)
        if compile_steps is not None and compile_steps():
            from twin.costmodel.compiled import fill_ends

            self._fill_ends = fill_ends
            self._constants = getattr(cost_model, "decode_run_constants", None)
        self._copy_s = float(cost_model.checkpoint_copy_s(1))
        # ``CostModel.step_spread`` prices the spread without building it (other cost
        # models: ``step`` over the spread).
        self._spread = getattr(cost_model, "step_spread", None)

    @property
    def provenance(self) -> str:
        return str(self.cost_model.provenance)

    def step_time(self, prefills: Sequence[Chunk], decode_batch: int, decode_context: int) -> float:
        if not prefills and decode_batch:
            fit = self._fit(decode_batch)
            if fit is not None:
                return fit[0] + fit[1] * decode_context
        return self._exact(prefills, decode_batch, decode_context)

    def decode_run(self, batch: int, context: int, steps: int) -> Durations:
        fit = self._fit(batch)
        if fit is None:
            # Not affine (a sliding window; a measured p-norm attention kernel where the
            # compiled ``decode_ends`` is not used): the context's part per step,
            # remembered: a run cut short by an arrival that cannot be admitted yet is
            # planned again over the same steps (most steps priced, on the chat benchmark).
            contexts = range(context, context + steps * batch, batch)
            memo = self._steps.get(batch)
            if memo is None:
                memo = self._steps[batch] = {}
            known = list(map(memo.get, contexts))
            if None not in known:
                return cast(list[float], known)
            missing = [c for c, p in zip(contexts, known, strict=True) if p is None]
            if len(missing) == steps:
                prices: list[float] = self.cost_model.decode_steps_s(batch, contexts)
            else:
                fresh = iter(self.cost_model.decode_steps_s(batch, missing))
                prices = [next(fresh) if p is None else p for p in known]
            self._remembered += len(missing)
            if self._remembered > _STEPS_REMEMBERED:  # flat memory on long runs
                self._steps.clear()
                self._remembered = len(missing)
                memo = self._steps[batch] = {}
            memo.update(zip(contexts, prices, strict=True))
            return prices
        return fit[0] + fit[1] * (context + batch * np.arange(steps, dtype=np.float64))

    def decode_ends(self, batch: int, context: int) -> EndsFiller | None:
        """``compiled.fill_ends`` (``decode_steps_s``'s prices summed, compiled) for a
        batch size that is not affine in the context, where the cost model has it."""
        known = self._run_constants
        if batch not in known:
            ask = self._constants
            known[batch] = ask(batch) if ask is not None and self._fit(batch) is None else None
        c = known[batch]
        if c is None:
            return None
        # The first step reads the context plus one key per sequence.
        return partial(self._fill_ends, c, context + batch, batch)

    def decode_affine(self, batch: int) -> tuple[float, float] | None:
        return self._fit(batch)

    def checkpoint_copy_time(self) -> float:
        return self._copy_s

    def hit_work_time(self, recompute: int, host_tokens: int, host_states: int = 0) -> float:
        """Recurrent layers' share of a prefill of ``recompute`` tokens (the cost model's own
        breakdown by layer kind) plus the host-to-device copies of ``host_tokens`` tokens'
        KV and ``host_states`` states: the cost model's copy kernels (fitted, else the
        GpuSpec host link's datasheet bandwidth), one launch per layer."""
        cm = self.cost_model
        seconds = 0.0
        if recompute:
            by_kind = cm.prefill(recompute, 0, breakdown=True).by_kind
            # Mamba2 layers are priced as "ssm", Mamba-1 and GDN under their own names.
            seconds += sum(by_kind.get(k, 0.0) for k in _RECURRENT_LABELS)
        if host_tokens:
            seconds += cm.kv_transfer_s(host_tokens, "host", "device")
        if host_states:
            seconds += cm.checkpoint_copy_s(host_states, "host", "device")
        return float(seconds)

    def write_back_time(self, tokens: int, states: int) -> float:
        cm = self.cost_model
        seconds = cm.kv_transfer_s(tokens, "device", "host") if tokens else 0.0
        if states:
            seconds += cm.checkpoint_copy_s(states, "device", "host")
        return float(seconds)

    def _exact(self, prefills: Sequence[Chunk], batch: int, context: int) -> float:
        # Spread the context sum over the batch: exact, decode features are sums.
        spread = self._spread
        if spread is not None:
            return float(spread(prefills, batch, context))
        base, extra = divmod(context, batch) if batch else (0, 0)
        decodes = [base + 1] * extra + [base] * (batch - extra)
        return float(self.cost_model.step(list(prefills), decodes))

    def _fit(self, batch: int) -> tuple[float, float] | None:
        if batch in self._affine:
            return self._affine[batch]
        fit = affine_fit(lambda x: self._exact((), batch, x), batch)
        self._affine[batch] = fit
        return fit


def affine_fit(price: Callable[[int], float], batch: int) -> tuple[float, float] | None:
    """``(a, b)`` when ``price(context sum)`` of a pure-decode step of ``batch`` sequences is
    ``a + b x context`` at the probe contexts (0 to 128K keys a sequence) within
    ``_AFFINE_RTOL``; ``None`` otherwise. Every pricer's decode fit (``decode_affine``)."""
    xs = [c * batch for c in _PROBE_CONTEXTS]
    ts = [price(x) for x in xs]
    slope = (ts[-1] - ts[0]) / (xs[-1] - xs[0])
    if any(abs(ts[0] + slope * x - t) > _AFFINE_RTOL * t for x, t in zip(xs, ts, strict=True)):
        return None
    return ts[0], slope


def make_pricer(
    model: ModelSpec,
    profile: Any,
    tp: int,
    ep: int = 1,
    absorbed_extend: int = 0,
    kernel_layout: KernelLayout = DEFAULT_LAYOUT,
) -> CostModelPricer:
    """The calibrated cost model of ``model`` on ``profile`` with tensor parallelism ``tp``
    and ``ep`` expert-parallel ranks among them; prefill chunks of at most
    ``absorbed_extend`` tokens priced as MLA's absorbed extends (speculative decoding's
    verification, ``twin.costmodel.step_features.split_absorbed``); its kernels laid out
    as ``kernel_layout`` (the engine build's: ``twin.costmodel.kernel_layout``)."""
    from twin.costmodel import CostModel

    cost = CostModel(
        model, profile, tp, ep=ep, absorbed_extend=absorbed_extend, kernel_layout=kernel_layout
    )
    return CostModelPricer(cost)
