"""``CostModel``: a model shape + a device profile -> seconds of serving steps.

A step is what the engine runs in one iteration: prefill chunks (each with its
cached context) and decode tokens (each with its context), batched as vLLM and
SGLang batch them: every GEMM and element-wise pass runs once over all the
step's tokens, attention and the Mamba2 scan run once for the prefill chunks and
once for the decode tokens, with the chunks' features summed (one launch each).
Per layer kind:

- attention: fused add+RMSNorm, QKV GEMM, RoPE, attention (prefill and decode),
  output GEMM;
- SSM (Mamba2): fused add+RMSNorm, in_proj GEMM, causal conv1d (prefill) or its
  state update (decode), chunked scan (prefill) or state update (decode), gated
  RMSNorm, out_proj GEMM;
- MLP: fused add+RMSNorm, up (gate+up) GEMM, activation, down GEMM;
- sliding-window attention (``swa``): as attention, over the window's keys only;
- Mamba-1: fused add+RMSNorm, in_proj, x_proj and dt_proj GEMMs, causal conv1d,
  the selective scan (fp32 on CUDA cores, see ``twin.costmodel.mixer_kernels``) or its
  state update, gating, out_proj GEMM;
- Gated DeltaNet (``gdn``): fused add+RMSNorm, in_proj GEMM (q, k, v, z, beta, decay),
  causal conv1d, the chunked delta rule or its recurrent update, gated RMSNorm,
  out_proj GEMM;
- MoE: fused add+RMSNorm, router GEMM, the routed experts over ``T x top_k`` token
  rows and the expected number of distinct experts hit (the served routing rule,
  ``twin.costmodel.routing.routing_for``: a skewed, Zipf expert popularity): the
  profile's fused-MoE fit of the experts' format where it has one (``moe``,
  ``moe_fp8``, ...: NVIDIA's ``moe_perf`` tables, activation and combine inside),
  else one grouped GEMM each way, activation, weighted combine; the shared expert as
  dense GEMMs; with expert parallelism (``ep``) the rows and experts of the rank the
  routing rule names (the served rule's: the step's busiest), no all-to-all (attention
  is tensor-parallel, so every rank holds every token and the layer's all-reduce
  combines; an all-to-all comes with attention-DP, not yet);
- head: embedding gather, final RMSNorm, LM head GEMM for one row per sequence
  (a prefill chunk is charged its logits row as if it ended its prompt).

Tensor parallelism (Megatron style) divides heads, SSM heads and FFN widths by
``tp`` (KV heads and SSM groups are replicated when fewer than ``tp``) and adds
one all-reduce of the step's hidden states per layer, priced as a ring:
``latency + 2 (tp-1)/tp x bytes / interconnect bandwidth``. Not priced:
scheduler and sampling CPU time, CUDA-graph replay savings, communication
overlap. Kernel formulas, features and latencies come from ``twin.costmodel.formulas``,
``features`` and ``latency``; the per-GPU widths from ``shard_shapes``, the step's sums
from ``step_features``, the dense layers', the MoE layers', the collectives' and the
mixers' prices from ``dense_pricing``, ``moe_pricing``, ``collective_pricing`` and
``mixer_pricing``, copies between tiers from ``copy_pricing``; the engine's hot paths
(decode runs, steps of one prefill chunk) also as compiled code, ``compiled``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import cast

import numpy as np

from twin.costmodel import features as ft
from twin.costmodel import formulas as fm
from twin.costmodel import latency as lat
from twin.costmodel.breakdown import StepCost
from twin.costmodel.collective_pricing import CollectivePricing
from twin.costmodel.copy_pricing import TIERS, CopyPricing
from twin.costmodel.decode_pricing import (
    AffineKeys,
    DecodeHeads,
    affine_in_keys,
    decode_steps,
    with_host,
)
from twin.costmodel.dense_pricing import DensePricing
from twin.costmodel.kernel_layout import DEFAULT_LAYOUT, KernelLayout
from twin.costmodel.mixer_pricing import MixerPricing
from twin.costmodel.mla_pricing import MlaPricing
from twin.costmodel.moe_pricing import MoePricing
from twin.costmodel.precision_kernels import priced_precision, provenance_label
from twin.costmodel.profile import Profile
from twin.costmodel.step_features import StepFeatures, aggregate_spread, aggregate_step
from twin.errors import TwinError
from twin.hardware import GPUS
from twin.mixers import UNPRICED_KINDS
from twin.model import ModelSpec
from twin.parallel import Layout, check_layout

# Tokens (cached + new) and context sums the compiled mixed step's int64 sums hold exactly
# (``twin.costmodel.compiled``): larger ones are priced in Python.
MAX_TOKENS = 1 << 30
_DENSE_CACHE_MAX = 1 << 16  # distinct token counts whose dense-layer cost is remembered
# Decode runs of at least this many steps are priced as arrays (``decode_steps_s``): below
# it a tight Python loop is faster (measured on this project's 2-core machine: about 35 us
# a numpy call and 0.2 us a step, against 0.5 us a step in the loop).
_ARRAY_STEPS = 128


class CostModel(DensePricing, MoePricing, CollectivePricing, MixerPricing, MlaPricing, CopyPricing):
    """Prices prefills, batch steps and state copies of ``model`` on ``profile``'s device."""

    def __init__(
        self,
        model: ModelSpec,
        profile: Profile,
        tp: int = 1,
        ep: int = 1,
        absorbed_extend: int = 0,
        kernel_layout: KernelLayout = DEFAULT_LAYOUT,
    ) -> None:
        if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
            raise TwinError(f"tp must be a positive integer (got {tp!r})")
        # Expert parallelism (twin.parallel): the routed experts over ``ep`` of the ``tp``
        # GPUs, each split ``tp / ep`` ways; refused in one line naming --ep.
        self.ep = ep
        if ep != 1:
            check_layout(model, Layout(tp, ep))
        unpriced = sorted(k for k in model.mixer_counts if k in UNPRICED_KINDS)
        if unpriced:
            # Their bytes and FLOPs are known (twin.mixers); their kernels are not fitted yet.
            raise TwinError(
                f"model {model.name!r}: {', '.join(unpriced)} layers have no kernel prices yet "
                "(the MLA tables are issue 34's next step); twin models show describes the model"
            )
        missing = [k for k in fm.KERNELS if k not in profile.kernels]
        if missing:
            raise TwinError(
                f"profile {profile.gpu!r} lacks kernel(s) {', '.join(missing)}; "
                "re-run twin calibrate"
            )
        if tp > 1 and not profile.peaks.get("interconnect_bw"):
            raise TwinError(
                f"profile {profile.gpu!r} has no interconnect bandwidth, so it "
                "cannot price tensor parallelism: use --tp 1"
            )
        self.model, self.profile, self.tp = model, profile, tp
        spec = GPUS.get(profile.gpu)
        self.sms = spec.sm_count if spec is not None else None
        # How the engine build lays out the model's kernels (twin.costmodel.kernel_layout).
        self.kernel_layout = kernel_layout
        # Prefill chunks of at most this many new tokens run MLA's absorbed form (the
        # engines' verification under speculative decoding: ``step_features.
        # split_absorbed``); only where MLA is the model's one mixer kind, so no other
        # mixer reads those chunks as prefill (the MLA models of the measured set).
        mla_only = set(k for k, n in model.mixer_counts.items() if n) == {"mla"}
        self.absorbed_extend = absorbed_extend if mla_only else 0
        # The fits the model's precision takes (twin.costmodel.precision_kernels): each
        # family's profile key, bf16 ones unless an fp8 KV cache has its own attention.
        self.priced = priced_precision(model, profile)
        self.kernel_keys = {name: self.priced.keys.get(name, name) for name in fm.KERNELS}
        self._k = {
            name: lat.compile_fast(key, profile.kernels[key].params, profile.peaks)
            for name, key in self.kernel_keys.items()
        }
        self._setup_linear_kernels()
        # The attention decode kernel over a run of steps (``decode_steps_s``).
        decode = self.kernel_keys["attn_decode"]
        # Its launch rule, read from the fit's provenance as the fit reader read it
        # (``features.decode_launch_rule``: the timed kernel's grid, or TensorRT-LLM Hopper's
        # XQA / masked-MHA choice).
        source = profile.kernels[decode].provenance or {}
        self.decode_rule = ft.decode_launch_rule(
            decode,
            str(source.get("framework", "")),
            str(source.get("device", "")),
            str(source.get("kernel_source", "")),
        )
        self._attn_decode_many = lat.compile_many(
            decode, profile.kernels[decode].params, profile.peaks
        )
        self._attn_decode_affine = lat.compile_affine(
            decode, profile.kernels[decode].params, profile.peaks
        )
        self._attn_decode_constants = lat.kernel_constants(
            decode, profile.kernels[decode].params, profile.peaks
        )
        # Per decode batch size: the attention decode features' coefficients in the keys.
        self._decode_keys_affine: dict[int, AffineKeys] = {}
        self._setup_shapes()
        self._setup_rope()
        self._setup_allreduce()
        self._setup_moe()
        # The decode conv update: its own fit where the profile has one (NVIDIA's tables
        # time causal_conv1d_update apart), else the prompt conv's model with no
        # per-CTA terms (its coefficients zeroed: the update's own feature, the waves of
        # its CTAs, is passed in their place).
        name = "conv1d_update" if "conv1d_update" in profile.kernels else "conv1d"
        params = profile.kernels[name].params
        if name == "conv1d":
            params = {**params, **{f"c_{x}": 0.0 for x in fm.get_formula("conv1d").extras}}
        self._conv_update = lat.compile_fast(name, params, profile.peaks)
        self._conv_update_constants = lat.kernel_constants(name, params, profile.peaks)
        self._setup_mixer_kernels()
        self._setup_mla()
        self._dense_cache: dict[int, float] = {}
        # ``compile_steps``: the compiled mixed step and its tables, once asked for.
        self._step_kernel: Callable[..., float] | None = None
        self._step_tables: tuple[np.ndarray, np.ndarray] = (
            np.zeros((0, len(lat.KernelConstants._fields))),
            np.zeros(0),
        )
        # Per decode batch size: ``_decode_shape``'s parts (``decode_steps_s``).
        self._decode_shapes: dict[int, tuple[float, float, int | None, list[float], float]] = {}
        self._setup_overhead()
        self.prefill_s = lru_cache(maxsize=1 << 16)(self._prefill_s)

    # ------------------------------------------------------------ public API
    @property
    def provenance(self) -> str:
        """Where the prices come from, for every output that shows a prediction: the
        profile's label, or for a quantised model the fits its precision takes; for a
        fused-MoE fit with a per-shape term, whether this shape and layout is one the
        tables measured (``twin.costmodel.series_term``)."""
        label = provenance_label(self.model, self.profile)
        if self.moe_key and self._moe_ep != self.ep:  # twin.costmodel.moe_layout
            layout = "TP" if self._moe_ep == 1 else "EP"
            label = f"{label}; MoE experts: priced at the {layout} layout of the same GPUs"
        fit = self.profile.kernels[self.moe_key] if self.moe_key else None
        if fit is None or fit.series is None:
            return label
        if self._moe_series is not None:
            return f"{label}; MoE shape: measured (its per-shape term)"
        return f"{label}; MoE shape: not measured (the formula alone)"

    def prefill(self, n_new: int, n_cached: int = 0, breakdown: bool = False) -> float | StepCost:
        """Seconds of one prefill of ``n_new`` tokens after ``n_cached`` cached ones."""
        _check_count("n_new", n_new)
        _check_count("n_cached", n_cached)
        if n_new == 0:
            return StepCost() if breakdown else 0.0
        if breakdown:
            return self.step(((n_new, n_cached),), (), breakdown=True)
        return self.prefill_s(n_new, n_cached)

    def decode(self, contexts: Sequence[int], breakdown: bool = False) -> float | StepCost:
        """Seconds of one decode step: one new token per sequence of these contexts."""
        return self.step((), contexts, breakdown=breakdown)

    def step(
        self,
        prefills: Sequence[tuple[int, int]] = (),
        decodes: Sequence[int] = (),
        breakdown: bool = False,
    ) -> float | StepCost:
        """Seconds of one batch step.

        ``prefills``: ``(n_new, n_cached)`` per prefill chunk; ``decodes``: the
        context (tokens before the new one) of each decoding sequence.
        ``breakdown=True`` returns a ``StepCost`` split by layer kind and kernel.
        """
        feats = self._aggregate(prefills, decodes)
        if breakdown:
            cost = StepCost()
            self._price(feats, cost)
            return cost
        return self._seconds(feats)

    def step_spread(self, prefills: Sequence[tuple[int, int]], batch: int, context: int) -> float:
        """``step(prefills, decodes)`` for ``batch`` decodes whose contexts sum to
        ``context``, spread evenly (the engine's decode summary), in O(1) of the batch."""
        compiled = self._step_kernel
        if compiled is not None and len(prefills) <= 1:
            n, cached = prefills[0] if prefills else (0, 0)
            tokens = n + batch
            # Valid counts the int64 sums hold exactly (else Python: its errors, big ints).
            if (
                tokens
                and (n > 0 or not prefills)
                and 0 <= cached < MAX_TOKENS - n
                and batch >= 0
                and 0 <= context < MAX_TOKENS
            ):
                dense = self._dense_cache.get(tokens)
                if dense is None:
                    dense = self._dense_s(tokens)
                return compiled(*self._step_tables, n, cached, batch, context, dense)
        return self._seconds(aggregate_spread(prefills, batch, context, *self._shape_args()))

    def step_spread_cost(
        self, prefills: Sequence[tuple[int, int]], batch: int, context: int
    ) -> StepCost:
        """:meth:`step_spread`'s step split by layer kind and kernel (its ``total_s`` is
        the same seconds); the attention-DP replica prices its ranks' parts from it."""
        cost = StepCost()
        self._price(aggregate_spread(prefills, batch, context, *self._shape_args()), cost)
        return cost

    def allreduce_time(self, tokens: int) -> float:
        """Seconds of one all-reduce of ``tokens`` hidden states over the ``tp`` GPUs (the
        profile's fitted all-reduce at that GPU count, else the ring on its peaks)."""
        return self._allreduce(tokens)

    def gather_time(self, nbytes: float) -> float:
        """Seconds of one all-gather of a buffer of ``nbytes`` (all the ranks' rows) over
        the ``tp`` GPUs: the profile's NCCL ``allgather_<tp>gpu`` fit, else the all-reduce
        (fitted, else the ring on its peaks) at a ring's traffic, ``(tp - 1) / tp`` of the
        buffer a GPU, half what an all-reduce of it moves."""
        return self._gather_bytes("allgather", nbytes)

    def scatter_time(self, nbytes: float) -> float:
        """Seconds of one reduce-scatter of a buffer of ``nbytes``: as :meth:`gather_time`,
        on the ``reducescatter_<tp>gpu`` fit."""
        return self._gather_bytes("reducescatter", nbytes)

    def head_s(self, tokens: int, sequences: int) -> float:
        """Seconds the head (embedding gather, final norm, LM head) takes of a step of
        ``tokens`` tokens and ``sequences`` sequences, with its host time where host time
        adds by layer kind (a pipeline's stages but the last run no head:
        ``twin.engine.pipeline``)."""
        if not tokens:
            return 0.0
        host = self.host_by_kind.get("head", 0.0) if self.host_mode == "add" else 0.0
        return self._head(tokens, sequences, None) + host

    def compile_steps(self) -> bool:
        """Price :meth:`step_spread` of at most one prefill chunk by compiled code
        (``twin.costmodel.compiled``, the same prices to the bit) where this model has
        it; numba loads here (the engine's pricer asks, a one-off CLI call need not).
        ``False`` (numba not loaded) where no compiled path serves this model: a host mode
        other than add or max."""
        if self.host_mode not in ("add", "max"):
            return False
        from twin.costmodel import compiled  # numba loads here

        # The compiled step has no absorbed extends (it serves no MLA model either).
        tables = None if self.absorbed_extend else compiled.pack_step(self)
        if tables is not None:
            self._step_tables = tables
            self._step_kernel = compiled.step_seconds
        return True

    def _seconds(self, feats: StepFeatures) -> float:
        """Seconds of a step of these features (``step`` without the breakdown)."""
        tokens = feats.tokens
        if not tokens:
            return 0.0
        dense = self._dense_cache.get(tokens)
        if dense is None:
            dense = self._dense_s(tokens)
        mixing = self._mixing(feats, None)
        kernels = dense + mixing + self._head(tokens, feats.sequences, None)
        return with_host(kernels, self.host_s, self.host_mode != "add")

    def _dense_s(self, tokens: int) -> float:
        """``_dense(tokens)``, remembered (decode steps repeat token counts)."""
        dense = self._dense(tokens, None)
        if len(self._dense_cache) < _DENSE_CACHE_MAX:
            self._dense_cache[tokens] = dense
        return dense

    def decode_steps_s(self, batch: int, contexts: Sequence[int]) -> list[float]:
        """Seconds of pure-decode steps of ``batch`` sequences, one per context sum in ``contexts``.

        Equals ``step((), decodes)`` for any ``decodes`` of ``batch`` contexts
        summing to that value, to the bit (the engine's decode runs, issue 16):
        without sliding-window layers only the full-attention decode kernel
        reads the context sum, so it alone is priced per step and the rest of
        the step once. A window needs every sequence's context:
        each step is then priced in full, from an even spread of the sum.
        """
        if batch <= 0:
            raise TwinError(f"a decode step needs at least one sequence (got {batch})")
        if not self._decode_by_parts:
            return [self._even_decode_s(batch, c) for c in contexts]
        dense, before, attn_layers, after, head = self._decode_parts(batch)
        if attn_layers is None:
            step = with_host(dense + before + head, self.host_s, self.host_mode != "add")
            return [step] * len(contexts)
        if len(contexts) < _ARRAY_STEPS:
            # Few steps: numpy's fixed cost per call outweighs its per-step saving. The
            # attention decode kernel's features are affine in the keys read (the context
            # sum plus one key per sequence), so its prices come from one tight loop.
            coeffs = self._keys_affine(batch)
            if isinstance(contexts, range):
                counts: Sequence[int] = range(
                    contexts.start + batch, contexts.stop + batch, contexts.step
                )
            else:
                counts = [c + batch for c in contexts]
            kernel_s = self._attn_decode_affine(*coeffs, counts)
            return decode_steps(
                dense, before, attn_layers, after, head, kernel_s, self.host_s, self.host_mode
            )
        # Every step at once, as arrays: the same operations in the same order as
        # ``_sum_parts`` and ``with_host`` per element (``compile_many``: the same pow).
        if isinstance(contexts, range):
            keys = np.arange(contexts.start, contexts.stop, contexts.step, dtype=np.int64)
        else:
            keys = np.asarray(contexts, np.int64)
        keys += batch  # one key per sequence: ``_aggregate``'s decode keys
        totals = before + attn_layers * self._attn_decode_many(
            *ft.attn_decode_sums(batch, keys, *self._attn_heads())
        )
        for term in after:
            totals = totals + term
        steps = dense + totals + head
        if self.host_mode == "add":
            steps = steps + self.host_s
        else:
            steps = np.where(self.host_s > steps, self.host_s, steps)
        return cast(list[float], steps.tolist())

    def decode_run_constants(self, batch: int) -> np.ndarray | None:
        """What ``compiled.fill_ends`` needs to price pure-decode steps of ``batch``
        sequences as ``decode_steps_s`` does (``compiled.pack_decode``); ``None`` where a
        step is priced in full (a sliding window, a host mode other than add or max) or
        costs the same at every context (no full attention)."""
        if batch <= 0 or not self._decode_by_parts:
            return None
        dense, before, attn_layers, after, head = self._decode_parts(batch)
        if attn_layers is None:
            return None
        from twin.costmodel import compiled  # numba loads here

        return compiled.pack_decode(
            (dense, before, attn_layers, after, head),
            self.host_s,
            self.host_mode == "max",
            self._keys_affine(batch),
            self._attn_decode_constants,
        )

    @property
    def _decode_by_parts(self) -> bool:
        """Whether a pure-decode step is its context-free parts plus the attention decode
        kernel (``decode_steps_s``): no window, no MLA, and host time added or a floor."""
        windowed = self.kinds.get("swa") or self.model.sliding_window is not None
        # MLA's decode kernels read the context too (``mla_pricing``): such a step is priced
        # in full, from an even spread of the context sum.
        return not windowed and not self.kinds.get("mla") and self.host_mode in ("add", "max")

    def _decode_parts(self, batch: int) -> tuple[float, float, int | None, list[float], float]:
        """``_decode_shape(batch)``, remembered."""
        shape = self._decode_shapes.get(batch)
        if shape is None:
            shape = self._decode_shape(batch)
            if len(self._decode_shapes) < _DENSE_CACHE_MAX:
                self._decode_shapes[batch] = shape
        return shape

    def _keys_affine(self, batch: int) -> AffineKeys:
        """``affine_in_keys`` for ``batch`` decodes, remembered."""
        coeffs = self._decode_keys_affine.get(batch)
        if coeffs is None:
            coeffs = self._decode_keys_affine[batch] = affine_in_keys(batch, self._attn_heads())
        return coeffs

    def _attn_heads(self) -> DecodeHeads:
        """``features.attn_decode_sums``' arguments after the batch and the keys: the
        rank's heads, KV heads, head dim, element and K/V element bytes, the SMs, the
        decode fit's launch rule."""
        h = (self.heads, self.kv_heads, self.head_dim, self.elem_bytes, self.kv_elem_bytes)
        return (*h, self.sms, self.decode_rule)

    def _decode_shape(self, batch: int) -> tuple[float, float, int | None, list[float], float]:
        """What a pure-decode step of ``batch`` sequences costs besides the context sum.

        ``(dense, mixer seconds summed before the full-attention part, its layers,
        each later part's seconds, head)``: the full-attention decode kernel is
        the one part that reads the context sum (``_aggregate``: the sum plus one
        key per sequence); the others and the order of the sum stay as ``step``
        has them, so prices are identical. Without full attention the mixers' sum
        is ``before`` and the layers ``None``.
        """
        feats = self._aggregate((), [0] * batch)
        dense, head = self._dense(batch, None), self._head(batch, batch, None)
        parts = self._mixing_parts(feats)
        at = next((i for i, (kind, _, _) in enumerate(parts) if kind == "attention"), None)
        if at is None:
            return dense, self._sum_parts(parts, None), None, [], head
        kinds = self.kinds
        before = self._sum_parts(parts[:at], None)  # starts at 0.0, as ``_sum_parts``
        after = [kinds[kind] * s for kind, _, s in parts[at + 1 :]]
        return dense, before, kinds["attention"], after, head

    def _even_decode_s(self, batch: int, context: int) -> float:
        return self.step_spread((), batch, context)

    # ------------------------------------------------------------ pricing

    def _aggregate(
        self, prefills: Sequence[tuple[int, int]], decodes: Sequence[int]
    ) -> StepFeatures:
        """The step's features (``twin.costmodel.step_features``)."""
        return aggregate_step(prefills, decodes, *self._shape_args())

    def _shape_args(self) -> tuple[Mapping[str, int], int, int, int, int, int]:
        """What ``step_features`` needs of the model: mixer counts, window, chunk lengths,
        the absorbed extends' length, the DSA top-k where a layout prices its capped keys
        (``KernelLayout.nsa_sparse_module``, ``nsa_decode_module``; else 0)."""
        kinds, layout = self.kinds, self.kernel_layout
        capped = layout.nsa_sparse_module or layout.nsa_decode_module
        topk = self.model.index_topk if capped else 0
        return (
            kinds,
            self.model.sliding_window or 0,
            self.chunk_size if kinds.get("mamba2") else 1,
            self.model.gdn_chunk_size,
            self.absorbed_extend,
            topk or 0,
        )

    def _price(self, f: StepFeatures, cost: StepCost) -> None:
        if f.tokens == 0:
            return
        kernels = self._dense(f.tokens, cost) + self._mixing(f, cost)
        kernels += self._head(f.tokens, f.sequences, cost)
        if self.host_mode == "add":
            for kind, s in self.host_by_kind.items():
                cost.add(kind, "host_overhead", s)
        elif self.host_s > kernels:  # "max": the host's issue time is the step's floor
            cost.add("head", "host_overhead", self.host_s - kernels)

    # ------------------------------------------------------------ host overhead
    def _setup_overhead(self) -> None:
        """Per-step host time from the profile's ``layer_overhead`` (calibration.overhead)."""
        entry = self.profile.layer_overhead or {"mode": "add", "seconds": {}}
        m, secs = self.model, entry["seconds"]
        layers = {
            "attention": m.n_attention_layers,
            "ssm": m.n_ssm_layers,
            "mlp": m.n_mlp_layers,
            "moe": m.n_moe_layers,
            "head": 1,
        }
        self.host_by_kind = {k: layers[k] * float(secs[k]) for k in secs if layers.get(k)}
        self.host_s = sum(self.host_by_kind.values())
        self.host_mode = str(entry["mode"])

    def _prefill_s(self, n_new: int, n_cached: int) -> float:
        return float(cast(float, self.step(((n_new, n_cached),), ())))


def _check_count(label: str, v: object) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise TwinError(f"{label} must be a non-negative integer (got {v!r})")


__all__ = ["TIERS", "CostModel"]
