"""A real hybrid language model built from a ``ModelSpec``: every mixer and FFN kind.

Random weights from a fixed seed: the executor measures time and checks that
prefix reuse is exact, neither of which needs trained weights. The layers are
those the cost model prices (``twin/costmodel/model.py``), in pre-norm
residual blocks:

- attention: RMSNorm, QKV projection, RoPE, causal SDPA over cached + new
  keys (GQA), output projection;
- Mamba2: RMSNorm, in_proj -> (z, xBC, dt), causal depthwise conv1d over xBC
  continuing from the conv state, SiLU, the chunked SSD scan continuing from
  the SSM state, gated RMSNorm (y * silu(z)), out_proj;
- Mamba-1 and Gated DeltaNet: :mod:`twin.reference.recurrent`; sliding-window
  attention: the attention layer over the last ``sliding_window`` keys;
- MLP: RMSNorm, gate+up projection, SiLU(gate) * up, down projection;
- MoE: RMSNorm, top-k routed experts (each an MLP) plus an optional gated shared
  expert, :mod:`twin.reference.moe`;
- head: embedding, final RMSNorm, LM head for the last token only.

A spec with a ``layers`` pattern is built layer by layer as written. A
counts-based spec has its attention layers spread evenly among the SSM layers
(as Jamba and the Marconi hybrid interleave them) and its FFNs spread evenly
after the mixers, the MoE ones evenly among them. When a spec's ``state_channels`` is below
``d_inner`` (``marconi-hybrid-7b`` follows the paper's accounting of d_model x
N state elements a layer) only the first ``state_channels`` channels go
through the scan and the rest take the D skip alone, so the real state is
exactly the size the cache accounts for.

A prefill may stop the scan at given positions ("stops") to materialise the
SSM state there (a checkpoint at a branch point inside the prompt, Marconi
sec. 4.1): every other kernel still runs once over all the new tokens; only
the scan is split into segments, each starting from the previous one's state.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from twin.errors import TwinError
from twin.layer_pattern import layer_parts
from twin.model import ModelSpec
from twin.reference import moe, recurrent
from twin.reference.ops import Ops

ROPE_THETA = 10000.0  # Llama's RoPE base (Touvron et al. 2023)
EPS = 1e-6

# One layer's SSM checkpoint: (recurrent state (1, h, p, n) fp32, conv state (1, c, k - 1)).
SsmState = tuple[torch.Tensor, torch.Tensor]
Kv = tuple[torch.Tensor, torch.Tensor]  # (k, v), each (1, kv heads, tokens, head dim)


@dataclass
class SeqState:
    """What a sequence's next tokens need: every attention layer's KV, every SSM layer's state."""

    kv: list[Kv] = field(default_factory=list)
    ssm: list[SsmState] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return int(self.kv[0][0].shape[2]) if self.kv else 0


@dataclass
class Prefill:
    """A forward pass over new tokens: last-token logits, the KV of every token so far,
    the SSM states at the end and at each requested stop (relative to the new tokens)."""

    logits: torch.Tensor
    kv: list[Kv]
    ssm_end: list[SsmState]
    ssm_at: dict[int, list[SsmState]]


# The plan's name of each mixer kind (Mamba2 keeps the executor's ``ssm``).
PLAN_KIND = {
    "attention": "attention",
    "swa": "swa",
    "mamba2": "ssm",
    "mamba1": "mamba1",
    "gdn": "gdn",
}
KV_PLAN = ("attention", "swa")  # plan kinds holding KV; the others hold a state
FFN_PLAN = ("mlp", "moe")
RecurrentMixer = Callable[..., tuple[torch.Tensor, SsmState, list[SsmState]]]


def layer_plan(model: ModelSpec) -> list[str]:
    """Layer kinds in order: the model's layer pattern if it has one (a parallel layer is
    ``attention+ssm``), else mixers with attention spread evenly and FFNs (MoE spread
    evenly among them) after mixers."""
    plan: list[str] = []
    if model.layers is not None:
        for token in model.layers:
            kinds, ffn = layer_parts(token)
            if kinds:
                plan.append("+".join(PLAN_KIND[k] for k in kinds))
            if ffn != "none":
                plan.append(ffn)
        return plan
    n_attn, n_ssm = model.n_attention_layers, model.n_ssm_layers
    n_ffn, n_moe = model.n_mlp_layers + model.n_moe_layers, model.n_moe_layers
    mixers = n_attn + n_ssm
    attn_at, moe_at = _spread(n_attn, mixers), _spread(n_moe, n_ffn)
    attn = "swa" if model.sliding_window is not None else "attention"  # as mixer_counts says
    ffns = iter(["moe" if j in moe_at else "mlp" for j in range(n_ffn)])
    for i in range(mixers):
        plan.append(attn if i in attn_at else "ssm")
        plan.extend(itertools.islice(ffns, (i + 1) * n_ffn // mixers - i * n_ffn // mixers))
    return plan


def _spread(k: int, n: int) -> set[int]:
    """``k`` positions spread evenly over ``n`` slots (the middle of each n/k stretch)."""
    return {(2 * i + 1) * n // (2 * k) for i in range(k)} if k else set()


def check_supported(model: ModelSpec) -> None:
    """A ``TwinError`` for shapes the reference model does not implement."""
    if model.mixer_counts.get("mla"):
        raise TwinError(f"model {model.name!r}: the reference model has no mla layers")
    if model.mixer_counts.get("mamba2") and model.state_channels > model.d_inner:
        raise TwinError(
            f"model {model.name!r}: ssm_state_channels ({model.state_channels}) "
            f"exceeds d_inner ({model.d_inner})"
        )


class HybridLM:
    """The model's weights and its forward pass (inference only, batch of one)."""

    def __init__(self, model: ModelSpec, device: str, dtype: torch.dtype, seed: int = 0) -> None:
        check_supported(model)
        self.spec, self.device, self.dtype = model, device, dtype
        self.ops = Ops(device)
        self.plan = layer_plan(model)
        self._gen = torch.Generator(device=device).manual_seed(seed)
        depth_scale = 1.0 / math.sqrt(2.0 * len(self.plan))  # GPT-2's residual init
        m, d = model, model.d_model
        self.embed = self._randn(m.vocab_size, d)
        self.final_norm = torch.ones(d, device=device, dtype=dtype)
        self.lm_head = self._linear(m.vocab_size, d)
        self.layers: list[dict[str, Any]] = []
        for kind in self.plan:
            w: dict[str, Any] = {"norm": torch.ones(d, device=device, dtype=dtype)}
            parts = kind.split("+")
            if len(parts) == 1:
                w.update(self._weights(kind, depth_scale))
            else:  # a parallel hybrid layer: each mixer its own weights
                w.update({part: self._weights(part, depth_scale) for part in parts})
            self.layers.append(w)
        if m.n_attention_layers:
            inv = 1.0 / ROPE_THETA ** (
                torch.arange(0, m.head_dim, 2, device=device, dtype=torch.float32) / m.head_dim
            )
            self._inv_freq = inv

    # ------------------------------------------------------------------ weights
    def _randn(self, *shape: int, dtype: torch.dtype | None = None) -> torch.Tensor:
        return torch.randn(
            *shape, generator=self._gen, device=self.device, dtype=dtype or self.dtype
        )

    def _linear(self, out_features: int, in_features: int) -> torch.Tensor:
        return self._randn(out_features, in_features) / math.sqrt(in_features)

    def _uniform(self, n: int, lo: float, hi: float) -> torch.Tensor:
        u = torch.rand(n, generator=self._gen, device=self.device, dtype=torch.float32)
        return lo + (hi - lo) * u

    def _weights(self, kind: str, depth_scale: float) -> dict[str, torch.Tensor]:
        m, d = self.spec, self.spec.d_model
        if kind in KV_PLAN:
            q_heads = m.n_heads * (2 if m.attn_output_gate else 1)  # query (+ output gate)
            return {
                "qkv": self._linear((q_heads + 2 * m.n_kv_heads) * m.head_dim, d),
                "o": self._linear(d, m.n_heads * m.head_dim) * depth_scale,
            }
        if kind == "mlp":
            return {
                "up": self._linear((2 if m.mlp_gated else 1) * m.mlp_d_ff, d),
                "down": self._linear(d, m.mlp_d_ff) * depth_scale,
            }
        if kind == "moe":
            return moe.moe_weights(self, depth_scale)
        if kind == "mamba1":
            return recurrent.mamba1_weights(self, depth_scale)
        if kind == "gdn":
            return recurrent.gdn_weights(self, depth_scale)
        return self._mamba_weights(depth_scale)

    def _mamba_weights(self, depth_scale: float) -> dict[str, torch.Tensor]:
        """Mamba2's initialisation (Dao & Gu 2024): A in [-16, -1], dt in [1e-3, 0.1]."""
        m = self.spec
        h, gn, conv_c = m.n_ssm_heads, m.ssm_groups * m.ssm_d_state, m.conv_channels
        dt = torch.exp(self._uniform(h, math.log(1e-3), math.log(0.1)))
        return {
            "in_proj": self._linear(2 * m.d_inner + 2 * gn + h, m.d_model),
            "conv_w": self._randn(conv_c, m.ssm_conv_kernel) / math.sqrt(m.ssm_conv_kernel),
            "conv_b": self._randn(conv_c) * 0.1,
            "A": -self._uniform(h, 1.0, 16.0),
            "D": torch.ones(h, device=self.device, dtype=torch.float32),
            "D_rest": torch.ones(
                m.d_inner - m.state_channels, device=self.device, dtype=self.dtype
            ),
            "dt_bias": dt + torch.log(-torch.expm1(-dt)),  # inverse softplus
            "gate_norm": torch.ones(m.d_inner, device=self.device, dtype=self.dtype),
            "out_proj": self._linear(m.d_model, m.d_inner) * depth_scale,
        }

    # ------------------------------------------------------------------ forward
    @torch.inference_mode()
    def forward(
        self, tokens: torch.Tensor, past: SeqState | None = None, stops: Sequence[int] = ()
    ) -> Prefill:
        """Run ``tokens`` (1-D ids) after ``past``; keep the SSM states at ``stops``.

        ``stops`` are counts of new tokens (0 < s <= len(tokens)) after which the
        SSM states are wanted; the state after the last token is always returned.
        """
        n = int(tokens.shape[0])
        if n == 0:
            raise ValueError("forward needs at least one new token")
        cuts = sorted({int(s) for s in stops if 0 < s < n})
        offset = past.tokens if past is not None else 0
        x = F.embedding(tokens.to(self.device), self.embed)[None]  # (1, n, d)
        kv_out: list[Kv] = []
        ssm_end: list[SsmState] = []
        ssm_at: dict[int, list[SsmState]] = {s: [] for s in cuts}
        ai = si = 0
        rope = self._rope(offset, n) if self.spec.n_attention_layers else None
        for kind, w in zip(self.plan, self.layers, strict=True):
            h = F.rms_norm(x, (x.shape[-1],), w["norm"], EPS)
            if kind in FFN_PLAN:
                x = x + self.ffn(kind, h, w)
                continue
            parts = kind.split("+")
            for part in parts:
                wp: dict[str, torch.Tensor] = w if len(parts) == 1 else w[part]
                if part in KV_PLAN:
                    prev = past.kv[ai] if past is not None else None
                    window = self.spec.sliding_window if part == "swa" else None
                    out, kv = self._attention(h, wp, prev, rope, window)
                    kv_out.append(kv)
                    ai += 1
                else:
                    prev_s = past.ssm[si] if past is not None else None
                    out, end, at = self.recurrent(part)(h, wp, prev_s, cuts)
                    ssm_end.append(end)
                    for s, state in zip(cuts, at, strict=True):
                        ssm_at[s].append(state)
                    si += 1
                x = x + out
        last = F.rms_norm(x[:, -1], (x.shape[-1],), self.final_norm, EPS)
        logits = F.linear(last, self.lm_head)[0]
        if n in stops:
            ssm_at[n] = ssm_end
        return Prefill(logits, kv_out, ssm_end, ssm_at)

    def ffn(self, kind: str, h: torch.Tensor, w: dict[str, torch.Tensor]) -> torch.Tensor:
        """The FFN of kind ``mlp`` or ``moe`` on the normed hidden states ``h``."""
        if kind == "moe":
            return moe.moe_forward(h, w, self.spec.moe_top_k, self._mlp)
        return self._mlp(h, w)

    def recurrent(self, part: str) -> RecurrentMixer:
        """The layer function of a recurrent plan kind (``ssm``, ``mamba1`` or ``gdn``):
        ``(h, weights, previous state, cuts) -> (output, end state, states at the cuts)``."""
        if part == "mamba1":
            return lambda *a: recurrent.mamba1_forward(self, *a)
        if part == "gdn":
            return lambda *a: recurrent.gdn_forward(self, *a)
        return self._mamba

    def _rope(self, offset: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        pos = torch.arange(offset, offset + n, device=self.device, dtype=torch.float32)
        ang = torch.outer(pos, self._inv_freq)
        return ang.cos().to(self.dtype), ang.sin().to(self.dtype)

    @staticmethod
    def _rotate(t: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """RoPE on (1, heads, n, d) in the rotate-half layout (Llama / GPT-NeoX)."""
        cos, sin = rope
        half = t.shape[-1] // 2
        t1, t2 = t[..., :half], t[..., half:]
        return torch.cat((t1 * cos - t2 * sin, t2 * cos + t1 * sin), dim=-1)

    def _attention(
        self,
        h: torch.Tensor,
        w: dict[str, torch.Tensor],
        prev: Kv | None,
        rope: tuple[torch.Tensor, torch.Tensor] | None,
        window: int | None = None,
    ) -> tuple[torch.Tensor, Kv]:
        m = self.spec
        n, hd = h.shape[1], m.head_dim
        gate = m.n_heads if m.attn_output_gate else 0
        heads = m.n_heads + gate + 2 * m.n_kv_heads
        qkv = F.linear(h, w["qkv"]).view(1, n, heads, hd).transpose(1, 2)
        q, g, k, v = qkv.split((m.n_heads, gate, m.n_kv_heads, m.n_kv_heads), dim=1)
        assert rope is not None
        q, k = self._rotate(q, rope), self._rotate(k, rope)
        if prev is not None:
            k = torch.cat((prev[0], k), dim=2)
            v = torch.cat((prev[1], v), dim=2)
        else:
            v = v.contiguous()
        if window is None:
            y = self.ops.attention(q, k, v)  # (1, h, n, hd)
        else:  # only the keys some query's window reaches are read (older ones may be gone)
            first = max(0, k.shape[2] - n - window + 1)
            y = self.ops.window_attention(q, k[:, :, first:], v[:, :, first:], window)
        if gate:  # Qwen3-Next's gated attention: y * sigmoid(gate)
            y = y * torch.sigmoid(g)
        y = y.transpose(1, 2).reshape(1, n, m.n_heads * hd)
        return F.linear(y, w["o"]), (k, v)

    def _mamba(
        self, h: torch.Tensor, w: dict[str, torch.Tensor], prev: SsmState | None, cuts: list[int]
    ) -> tuple[torch.Tensor, SsmState, list[SsmState]]:
        m = self.spec
        n, di, k = h.shape[1], m.d_inner, m.ssm_conv_kernel
        heads, p, sc = m.n_ssm_heads, m.ssm_head_dim, m.state_channels
        gn = m.ssm_groups * m.ssm_d_state
        z, xbc, dt = F.linear(h, w["in_proj"]).split((di, di + 2 * gn, heads), dim=-1)
        xbc_t = xbc.transpose(1, 2)  # (1, c, n)
        conv_prev = prev[1] if prev is not None else xbc_t.new_zeros((1, xbc_t.shape[1], k - 1))
        xpad = torch.cat((conv_prev, xbc_t), dim=2)  # (1, c, k - 1 + n)
        xbc = F.silu(self.ops.conv(xpad, w["conv_w"], w["conv_b"])).transpose(1, 2)
        xs, B, C = xbc.split((di, gn, gn), dim=-1)
        B = B.view(1, n, m.ssm_groups, m.ssm_d_state)
        C = C.view(1, n, m.ssm_groups, m.ssm_d_state)
        x_scan = xs[..., :sc].reshape(1, n, heads, p)
        state = prev[0] if prev is not None else None
        ys, at = [], []
        bounds = [0, *cuts, n]
        for a, b in itertools.pairwise(bounds):
            y, state = self.ops.scan(
                x_scan[:, a:b],
                dt[:, a:b],
                w["A"],
                B[:, a:b],
                C[:, a:b],
                m.ssm_chunk_size,
                w["D"],
                w["dt_bias"],
                state,
            )
            ys.append(y)
            if b < n:  # the checkpoint: this layer's states after token b (clones: owned)
                at.append((state.clone(), xpad[..., b : b + k - 1].clone()))
        y = (torch.cat(ys, dim=1) if len(ys) > 1 else ys[0]).reshape(1, n, sc)
        if sc < di:  # channels without state: the D skip only (see the module docstring)
            y = torch.cat((y, xs[..., sc:] * w["D_rest"]), dim=-1)
        y = F.rms_norm(y * F.silu(z), (di,), w["gate_norm"], EPS)
        assert state is not None
        end = (state, xpad[..., n:].contiguous())
        return F.linear(y, w["out_proj"]), end, at

    @staticmethod
    def _mlp(h: torch.Tensor, w: dict[str, torch.Tensor]) -> torch.Tensor:
        up = F.linear(h, w["up"])
        if up.shape[-1] == w["down"].shape[1]:
            return F.linear(F.silu(up), w["down"])
        gate, val = up.chunk(2, dim=-1)
        return F.linear(F.silu(gate) * val, w["down"])
