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
- MoE: fused add+RMSNorm, router GEMM, the routed experts as one grouped GEMM
  each way over ``T x top_k`` token rows and the expected number of distinct
  experts hit (uniform routing), activation, weighted combine;
- head: embedding gather, final RMSNorm, LM head GEMM for one row per sequence
  (a prefill chunk is charged its logits row as if it ended its prompt).

Tensor parallelism (Megatron style) divides heads, SSM heads and FFN widths by
``tp`` (KV heads and SSM groups are replicated when fewer than ``tp``) and adds
one all-reduce of the step's hidden states per layer, priced as a ring:
``latency + 2 (tp-1)/tp x bytes / interconnect bandwidth``. Not priced:
scheduler and sampling CPU time, CUDA-graph replay savings, communication
overlap. Kernel formulas, features and latencies come from ``twin.costmodel.formulas``,
``features`` and ``latency``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import NamedTuple, cast

from twin import mixers as mx
from twin.costmodel import features as ft
from twin.costmodel import formulas as fm
from twin.costmodel import latency as lat
from twin.costmodel import mixer_kernels as mk
from twin.costmodel.breakdown import StepCost
from twin.costmodel.profile import Profile
from twin.errors import TwinError
from twin.model import ModelSpec, keys_upto

TIERS = ("device", "host")
_COPY_KERNEL = {
    ("device", "device"): "copy_d2d",
    ("host", "device"): "copy_h2d",
    ("device", "host"): "copy_d2h",
}
_DENSE_CACHE_MAX = 1 << 16  # distinct token counts whose dense-layer cost is remembered
# Breakdown label of each mixer kind: Mamba2 keeps the ``ssm`` label it always had.
LABEL = {"attention": "attention", "swa": "swa", "mamba2": "ssm", "mamba1": "mamba1", "gdn": "gdn"}


class StepFeatures(NamedTuple):
    """Sums over one step's sequences that price every kernel of the step."""

    tokens: int  # new tokens: prefill chunks' plus one per decode
    sequences: int  # prefill chunks + decoding sequences (one LM-head row each)
    prefill_tokens: int
    prefill_chunks: int
    prefill_keys: int  # query-key pairs of the prefill chunks (causal, windowed)
    prefill_kv_rows: int  # K/V rows the prefill chunks read
    scan_chunks: int  # Mamba2 scan chunks over the prefill chunks (each padded)
    decodes: int
    decode_keys: int  # keys the decode queries read, summed
    swa_prefill_keys: int = 0  # the same three for sliding-window layers
    swa_prefill_kv_rows: int = 0
    swa_decode_keys: int = 0
    gdn_chunks: int = 0  # GDN chunks over the prefill chunks (each padded)


def _split(total: int, tp: int, what: str, model: str) -> int:
    if total % tp:
        raise TwinError(f"--tp {tp} does not divide {what} ({total}) of model {model!r}")
    return total // tp


class CostModel:
    """Prices prefills, batch steps and state copies of ``model`` on ``profile``'s device."""

    def __init__(self, model: ModelSpec, profile: Profile, tp: int = 1) -> None:
        if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
            raise TwinError(f"tp must be a positive integer (got {tp!r})")
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
        self._k = {
            name: lat.compile_fast(name, profile.kernels[name].params, profile.peaks)
            for name in fm.KERNELS
        }
        self._setup_shapes()
        # The decode conv update: its own fit where the profile has one (NVIDIA's tables
        # time causal_conv1d_update apart), else the prompt conv's model with no
        # per-sequence term.
        update = profile.kernels.get("conv1d_update")
        self._conv_update = (
            lat.compile_fast("conv1d_update", update.params, profile.peaks)
            if update is not None
            else self._k["conv1d"]
        )
        self._setup_mixer_kernels()
        self._dense_cache: dict[int, float] = {}
        self._setup_overhead()
        self.prefill_s = lru_cache(maxsize=1 << 16)(self._prefill_s)

    # ------------------------------------------------------------ public API
    @property
    def provenance(self) -> str:
        """The profile's provenance label, for every output that shows a prediction."""
        return self.profile.provenance_label

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
        tokens = feats.tokens
        if not tokens:
            return 0.0
        dense = self._dense_cache.get(tokens)
        if dense is None:
            dense = self._dense(tokens, None)
            if len(self._dense_cache) < _DENSE_CACHE_MAX:
                self._dense_cache[tokens] = dense
        mixing = self._mixing(feats, None)
        return self._with_host(dense + mixing + self._head(tokens, feats.sequences, None))

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
        windowed = self.kinds.get("swa") or self.model.sliding_window is not None
        if windowed or self.host_mode not in ("add", "max"):
            return [self._even_decode_s(batch, c) for c in contexts]
        feats = self._aggregate((), [0] * batch)
        dense, head = self._dense(batch, None), self._head(batch, batch, None)
        parts = self._mixing_parts(feats)
        # The full-attention decode kernel is the one part that reads the context
        # sum (``_aggregate``: the sum plus one key per sequence); the others and
        # the order of the sum stay as ``step`` has them, so prices are identical.
        at = [i for i, (kind, _, _) in enumerate(parts) if kind == "attention"]
        kernel, sums = self._k["attn_decode"], ft.attn_decode_sums
        heads = (self.heads, self.kv_heads, self.head_dim, self.elem_bytes) if at else ()
        out = []
        for c in contexts:
            if at:
                parts[at[0]] = ("attention", "attn_decode", kernel(*sums(batch, c + batch, *heads)))
            out.append(self._with_host(dense + self._sum_parts(parts, None) + head))
        return out

    def _even_decode_s(self, batch: int, context: int) -> float:
        base, extra = divmod(context, batch)
        return float(cast(float, self.step((), [base + 1] * extra + [base] * (batch - extra))))

    def copy_s(
        self, nbytes: float, src: str = "device", dst: str = "device", launches: int = 1
    ) -> float:
        """Seconds to move ``nbytes`` (the whole replica's) between tiers.

        Each of the ``tp`` GPUs moves its shard over its own link, in ``launches``
        copies (one per layer, say).
        """
        kernel = _COPY_KERNEL.get((src, dst))
        if kernel is None:
            raise TwinError(
                f"no copy from {src!r} to {dst!r}; tiers are {', '.join(TIERS)} "
                "and host-to-host is not priced"
            )
        if nbytes <= 0:
            return 0.0
        per_launch = nbytes / self.tp / launches
        flops, moved, _ = ft.copy_features(per_launch, kernel)
        return launches * self._k[kernel](flops, moved)

    def checkpoint_copy_s(
        self, n_checkpoints: int = 1, src: str = "device", dst: str = "device"
    ) -> float:
        """Seconds to copy ``n`` SSM checkpoints (every SSM layer's state), one launch a layer."""
        m = self.model
        return self.copy_s(
            n_checkpoints * m.ssm_checkpoint_bytes, src, dst, launches=max(m.n_ssm_layers, 1)
        )

    def kv_transfer_s(self, n_tokens: int, src: str, dst: str) -> float:
        """Seconds to move the KV of ``n_tokens`` between tiers, one launch per attention layer."""
        m = self.model
        return self.copy_s(
            n_tokens * m.kv_bytes_per_token, src, dst, launches=max(m.n_attention_layers, 1)
        )

    # ------------------------------------------------------------ shapes
    def _setup_shapes(self) -> None:
        """Per-GPU widths after tensor-parallel splitting (Megatron style)."""
        m, tp = self.model, self.tp
        self.kinds = kinds = m.mixer_counts
        self.elem_bytes = m.dtype_bytes
        self.d_model = m.d_model
        if m.n_attention_layers:
            self.heads = _split(m.n_heads, tp, "the attention heads", m.name)
            # KV heads below tp are replicated (vLLM), never split further.
            self.kv_heads = m.n_kv_heads // tp if m.n_kv_heads >= tp else 1
            self.head_dim = m.head_dim
            q_heads = self.heads * (2 if m.attn_output_gate else 1)  # query (+ gate)
            self.qkv_width = (q_heads + 2 * self.kv_heads) * self.head_dim
        if kinds.get("mamba1"):
            self.m1_inner = _split(m.d_inner, tp, "d_inner", m.name)
            self.m1_rank, self.m1_state = mx.mamba1_dt_rank(m), m.ssm_d_state
        if kinds.get("gdn"):
            self.gdn_v = _split(m.gdn_v_heads, tp, "the GDN value heads", m.name)
            self.gdn_k = m.gdn_k_heads // tp if m.gdn_k_heads >= tp else 1
            self.gdn_key_w = self.gdn_k * m.gdn_head_k_dim
            self.gdn_val_w = self.gdn_v * m.gdn_head_v_dim
            self.gdn_conv = 2 * self.gdn_key_w + self.gdn_val_w
        if kinds.get("mamba2"):
            self.ssm_heads = _split(m.n_ssm_heads, tp, "the SSM heads", m.name)
            self.ssm_head_dim = m.ssm_head_dim
            self.d_inner = _split(m.d_inner, tp, "d_inner", m.name)
            self.ssm_groups = m.ssm_groups // tp if m.ssm_groups % tp == 0 else m.ssm_groups
            self.ssm_d_state, self.chunk_size = m.ssm_d_state, m.ssm_chunk_size
            self.conv_channels = self.d_inner + 2 * self.ssm_groups * self.ssm_d_state
            self.in_proj_width = (
                2 * self.d_inner + 2 * self.ssm_groups * self.ssm_d_state + self.ssm_heads
            )
        if m.n_mlp_layers:
            self.mlp_width = _split(m.mlp_d_ff, tp, "the MLP width", m.name)
        if m.n_moe_layers:
            self.expert_width = _split(m.moe_d_ff, tp, "the expert width", m.name)
            self.shared_width = _split(m.moe_shared_d_ff, tp, "the shared-expert width", m.name)
        self.up_mats = 2 if m.mlp_gated else 1
        self.vocab = -(-m.vocab_size // tp)
        self._setup_allreduce()

    def _setup_allreduce(self) -> None:
        """A fitted all-reduce for this GPU count if the profile has one, else a ring on peaks."""
        tp, peaks = self.tp, self.profile.peaks
        fit = self.profile.kernels.get(fm.allreduce_kernel(tp)) if tp > 1 else None
        self._allreduce_fit: Callable[..., float] | None
        if fit is not None:
            self._allreduce_fit = lat.compile_fast(fm.allreduce_kernel(tp), fit.params, peaks)
            return
        self._allreduce_fit = None
        self.allreduce_latency_s = float(peaks.get("allreduce_latency_s", 0.0))
        bw = float(peaks["interconnect_bw"]) if tp > 1 else 1.0
        self.allreduce_s_per_byte = 1.0 / bw

    # ------------------------------------------------------------ pricing
    def _aggregate(
        self, prefills: Sequence[tuple[int, int]], decodes: Sequence[int]
    ) -> StepFeatures:
        """The step's features: every kernel's FLOPs and bytes are functions of these sums."""
        kinds, window = self.kinds, self.model.sliding_window or 0
        full, swa = "attention" in kinds, "swa" in kinds
        p_tok = p_keys = p_kv = chunks = s_keys = s_kv = g_chunks = 0
        chunk = self.chunk_size if kinds.get("mamba2") else 1
        g_chunk = self.model.gdn_chunk_size
        for n, c in prefills:
            if n <= 0 or c < 0:
                raise TwinError(
                    f"a prefill chunk needs n_new >= 1 and n_cached >= 0 (got {(n, c)})"
                )
            p_tok += n
            if full:
                p_keys += keys_upto(c + n, None) - keys_upto(c, None)
                p_kv += c + n
            if swa:
                s_keys += keys_upto(c + n, window) - keys_upto(c, window)
                s_kv += min(c + n, window + n)
            chunks += -(-n // chunk)
            g_chunks += -(-n // g_chunk)
        n_dec = len(decodes)
        if n_dec and min(decodes) < 0:
            raise TwinError("a decode context must be >= 0")
        d_keys = sum(decodes) + n_dec if full else 0
        s_dec = sum(min(c + 1, window) for c in decodes) if swa else 0
        return StepFeatures(
            tokens=p_tok + n_dec,
            sequences=len(prefills) + n_dec,
            prefill_tokens=p_tok,
            prefill_chunks=len(prefills),
            prefill_keys=p_keys,
            prefill_kv_rows=p_kv,
            scan_chunks=chunks,
            decodes=n_dec,
            decode_keys=d_keys,
            swa_prefill_keys=s_keys,
            swa_prefill_kv_rows=s_kv,
            swa_decode_keys=s_dec,
            gdn_chunks=g_chunks,
        )

    def _allreduce(self, tokens: int) -> float:
        """One all-reduce of the step's hidden states across the ``tp`` GPUs."""
        if self.tp == 1:
            return 0.0
        nbytes = tokens * self.d_model * self.elem_bytes
        flops, ring_bytes, _ = ft.allreduce_features(nbytes, self.tp)
        if self._allreduce_fit is not None:
            return self._allreduce_fit(flops, ring_bytes)
        return self.allreduce_latency_s + ring_bytes * self.allreduce_s_per_byte

    def _gemm(self, rows: float, k: float, n: float) -> float:
        return self._k["gemm"](*ft.gemm_sums(rows, k, n, self.elem_bytes))

    def _dense(self, t: int, cost: StepCost | None) -> float:
        """Everything that depends only on the step's token count: GEMMs, norms, all-reduces."""
        m, elem, e, d = self.model, self._k["elementwise"], self.elem_bytes, self.d_model
        norm = elem(0.0, e * (4.0 * t * d + d))  # fused residual add + RMSNorm
        ar = self._allreduce(t)
        total = 0.0

        def put(kind: str, layers: int, parts: tuple[tuple[str, float], ...]) -> float:
            if cost is not None:
                for kernel, s in parts:
                    cost.add(kind, kernel, layers * s)
            return layers * sum(s for _, s in parts)

        kinds = self.kinds
        if m.n_attention_layers:
            qkv = self._gemm(t, d, self.qkv_width)
            o = self._gemm(t, self.heads * self.head_dim, d)
            rope = elem(0.0, e * (2.0 * t * (self.heads + self.kv_heads) * self.head_dim))
            for kind in ("attention", "swa"):
                if kinds.get(kind):
                    total += put(
                        LABEL[kind],
                        kinds[kind],
                        (("elementwise", norm + rope), ("gemm", qkv + o), ("allreduce", ar)),
                    )
        if kinds.get("mamba2"):
            g_in = self._gemm(t, d, self.in_proj_width)
            g_out = self._gemm(t, self.d_inner, d)
            gated = elem(0.0, e * (3.0 * t * self.d_inner + self.d_inner))
            total += put(
                "ssm",
                kinds["mamba2"],
                (("elementwise", norm + gated), ("gemm", g_in + g_out), ("allreduce", ar)),
            )
        if kinds.get("mamba1"):
            di, r, big_n = self.m1_inner, self.m1_rank, self.m1_state
            # in_proj, x_proj (dt, B, C), dt_proj, out_proj (mamba_simple.py's four GEMMs).
            gemms = self._gemm(t, d, 2 * di) + self._gemm(t, di, r + 2 * big_n)
            gemms += self._gemm(t, r, di) + self._gemm(t, di, d)
            gated = elem(0.0, e * 3.0 * t * di)  # y * silu(z)
            total += put(
                "mamba1",
                kinds["mamba1"],
                (("elementwise", norm + gated), ("gemm", gemms), ("allreduce", ar)),
            )
        if kinds.get("gdn"):
            width = 2 * self.gdn_key_w + 2 * self.gdn_val_w + 2 * self.gdn_v
            gemms = self._gemm(t, d, width) + self._gemm(t, self.gdn_val_w, d)
            gated = elem(0.0, e * (3.0 * t * self.gdn_val_w + m.gdn_head_v_dim))
            total += put(
                "gdn",
                kinds["gdn"],
                (("elementwise", norm + gated), ("gemm", gemms), ("allreduce", ar)),
            )
        if m.n_mlp_layers:
            up = self._gemm(t, d, self.up_mats * self.mlp_width)
            down = self._gemm(t, self.mlp_width, d)
            act = elem(0.0, e * ((self.up_mats + 1.0) * t * self.mlp_width))
            total += put(
                "mlp",
                m.n_mlp_layers,
                (("elementwise", norm + act), ("gemm", up + down), ("allreduce", ar)),
            )
        if m.n_moe_layers:
            total += put("moe", m.n_moe_layers, self._moe(t, norm, ar))
        return total

    def _moe(self, t: int, norm: float, ar: float) -> tuple[tuple[str, float], ...]:
        m, k, e, d = self.model, self._k, self.elem_bytes, self.d_model
        n_exp, top = m.moe_n_experts, m.moe_top_k
        rows = t * top
        # Expected distinct experts hit by `rows` uniform draws; each streams its weights.
        active = n_exp * (1.0 - (1.0 - 1.0 / n_exp) ** rows) if n_exp > 1 else 1.0
        wide = self.up_mats * self.expert_width
        up = k["gemm"](
            2.0 * rows * d * wide,
            e * (rows * d + active * d * wide + rows * wide),
            active * d * wide,
        )
        down = k["gemm"](
            2.0 * rows * self.expert_width * d,
            e * (rows * self.expert_width + active * self.expert_width * d + rows * d),
            active * self.expert_width * d,
        )
        router = self._gemm(t, d, n_exp)
        act = k["elementwise"](0.0, e * ((self.up_mats + 1.0) * rows * self.expert_width))
        if self.shared_width:  # the shared expert: a dense MLP over every token
            sw = self.shared_width
            up += self._gemm(t, d, self.up_mats * sw) + self._gemm(t, sw, d)
            act += k["elementwise"](0.0, e * ((self.up_mats + 1.0) * t * sw))
        combine = k["elementwise"](0.0, e * ((top + 1.0) * t * d))
        return (
            ("elementwise", norm + act + combine),
            ("gemm", router + up + down),
            ("allreduce", ar),
        )

    def _mixing(self, f: StepFeatures, cost: StepCost | None) -> float:
        """Attention and SSM kernels, which depend on each sequence's context and length."""
        return self._sum_parts(self._mixing_parts(f), cost)

    def _sum_parts(self, parts: list[tuple[str, str, float]], cost: StepCost | None) -> float:
        """Seconds of the mixer ``parts`` (kind, kernel, seconds per layer) over their layers."""
        kinds = self.kinds
        total = 0.0
        for kind, kernel, s in parts:
            layers = kinds[kind]
            total += layers * s
            if cost is not None:
                cost.add(LABEL[kind], kernel, layers * s)
        return total

    def _mixing_parts(self, f: StepFeatures) -> list[tuple[str, str, float]]:
        """Each mixer kernel of the step: (kind, kernel, seconds per layer), in pricing order."""
        m, k, e = self.model, self._k, self.elem_bytes
        kinds = self.kinds
        parts: list[tuple[str, str, float]] = []  # (mixer kind, kernel, seconds per layer)
        if m.n_attention_layers:
            heads = (self.heads, self.kv_heads, self.head_dim, e)
            groups = (
                ("attention", f.prefill_keys, f.prefill_kv_rows, f.decode_keys),
                ("swa", f.swa_prefill_keys, f.swa_prefill_kv_rows, f.swa_decode_keys),
            )
            for kind, keys, kv_rows, dec_keys in groups:
                if not kinds.get(kind):
                    continue
                if f.prefill_chunks:
                    feats = ft.attn_prefill_sums(
                        f.prefill_tokens, keys, kv_rows, f.prefill_chunks, *heads
                    )
                    parts.append((kind, "attn_prefill", k["attn_prefill"](*feats)))
                if f.decodes:
                    feats = ft.attn_decode_sums(f.decodes, dec_keys, *heads)
                    parts.append((kind, "attn_decode", k["attn_decode"](*feats)))
        if kinds.get("mamba2"):
            ssm = (self.ssm_heads, self.ssm_head_dim, self.ssm_d_state, self.ssm_groups)
            conv = ("mamba2", f, self.conv_channels, m.ssm_conv_kernel)
            if f.prefill_chunks:
                scan = ft.ssm_scan_sums(f.prefill_tokens, f.scan_chunks, *ssm, self.chunk_size, e)
                parts.append(("mamba2", "ssm_scan", k["ssm_scan"](*scan)))
                parts.append(self._conv(*conv, decode=False))
            if f.decodes:
                sf, sb, _ = ft.ssm_step_features(f.decodes, *ssm, e, m.state_dtype_bytes)
                parts.append(("mamba2", "ssm_step", k["ssm_step"](sf, sb)))
                parts.append(self._conv(*conv, decode=True))
        if kinds.get("mamba1"):
            o, conv = self._opt, ("mamba1", f, self.m1_inner, m.ssm_conv_kernel)
            if f.prefill_chunks:
                sums = mk.mamba1_scan_sums(f.prefill_tokens, self.m1_inner, self.m1_state, e)
                parts.append(("mamba1", "mamba1_scan", o["mamba1_scan"](*sums)))
                parts.append(self._conv(*conv, decode=False))
            if f.decodes:
                step = mk.mamba1_step_features(
                    f.decodes, self.m1_inner, self.m1_state, e, m.state_dtype_bytes
                )
                parts.append(("mamba1", "mamba1_step", o["mamba1_step"](*step)))
                parts.append(self._conv(*conv, decode=True))
        if kinds.get("gdn"):
            o, conv = self._opt, ("gdn", f, self.gdn_conv, m.gdn_conv_kernel)
            dims = (self.gdn_v, self.gdn_k, m.gdn_head_k_dim, m.gdn_head_v_dim)
            if f.prefill_chunks:
                sums = mk.gdn_chunk_sums(f.prefill_tokens, f.gdn_chunks, *dims, m.gdn_chunk_size, e)
                parts.append(("gdn", "gdn_chunk", o["gdn_chunk"](*sums)))
                parts.append(self._conv(*conv, decode=False))
            if f.decodes:
                step = mk.gdn_step_features(f.decodes, *dims, e, m.state_dtype_bytes)
                parts.append(("gdn", "gdn_step", o["gdn_step"](*step)))
                parts.append(self._conv(*conv, decode=True))
        return parts

    def _conv(
        self, kind: str, f: StepFeatures, width: int, taps: int, decode: bool
    ) -> tuple[str, str, float]:
        """The causal conv1d of a recurrent mixer: over the step's prompts, or its
        decode update."""
        e = self.elem_bytes
        if decode:
            cf, cb, _ = ft.conv1d_features(f.decodes, 1, width, taps, e, with_state=True)
            return (kind, "conv1d", self._conv_update(cf, cb))
        # Features of one sequence holding all the step's prompt tokens; the
        # per-sequence term counts every chunk.
        cf, cb, _ = ft.conv1d_features(1, f.prefill_tokens, width, taps, e)
        return (kind, "conv1d", self._k["conv1d"](cf, cb, f.prefill_chunks * width))

    def _setup_mixer_kernels(self) -> None:
        """Compile the Mamba-1 / GDN kernels this model uses: the profile's fit, else the
        datasheet fallback (``fallback_kernels`` names those)."""
        peaks = {**self.profile.peaks, "fp32_flops": mk.fp32_peak(self.profile)}
        used = {
            "mamba1": ("mamba1_scan", "mamba1_step"),
            "gdn": ("gdn_chunk", "gdn_step"),
        }
        self._opt: dict[str, Callable[..., float]] = {}
        self.fallback_kernels: list[str] = []
        for kind, names in used.items():
            if not self.kinds.get(kind):
                continue
            for name in names:
                fit = self.profile.kernels.get(name)
                if fit is None:
                    self.fallback_kernels.append(name)
                params = fit.params if fit is not None else mk.FALLBACK[name]
                self._opt[name] = lat.compile_fast(name, params, peaks)

    def _head(self, t: int, seqs: int, cost: StepCost | None) -> float:
        """Embedding gather, final norm and the LM head (one row per sequence)."""
        elem, e, d = self._k["elementwise"], self.elem_bytes, self.d_model
        embed = elem(0.0, e * 2.0 * t * d)
        norm = elem(0.0, e * (2.0 * t * d + d))
        lm = self._gemm(seqs, d, self.vocab) if seqs else 0.0
        if cost is not None:
            cost.add("head", "elementwise", embed + norm)
            cost.add("head", "gemm", lm)
        return embed + norm + lm

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

    def _with_host(self, kernels: float) -> float:
        if self.host_mode == "add":
            return kernels + self.host_s
        return max(kernels, self.host_s)

    def _prefill_s(self, n_new: int, n_cached: int) -> float:
        return float(cast(float, self.step(((n_new, n_cached),), ())))


def _check_count(label: str, v: object) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise TwinError(f"{label} must be a non-negative integer (got {v!r})")


__all__ = ["TIERS", "CostModel"]
