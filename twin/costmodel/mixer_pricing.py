"""Pricing the sequence mixers of a step: attention (full and sliding-window) over each
sequence's context, the Mamba2 scan, Mamba-1, Gated DeltaNet and their causal convs.

These kernels read the step's summed features (``twin.costmodel.step_features``);
Mamba-1 and GDN take the profile's fit where it has one, else the datasheet fallback
of ``twin.costmodel.mixer_kernels``.
"""

from __future__ import annotations

from collections.abc import Callable

from twin.costmodel import features as ft
from twin.costmodel import latency as lat
from twin.costmodel import mixer_kernels as mk
from twin.costmodel import ssm_features as ssm_ft
from twin.costmodel.breakdown import LABEL, StepCost
from twin.costmodel.shard_shapes import ShardShapes
from twin.costmodel.step_features import StepFeatures

_DECODE_MEMO_MAX = 1 << 14  # decode batch sizes (per recurrent kind) remembered


class MixerPricing(ShardShapes):
    """The context-dependent kernels of a step (a part of ``CostModel``)."""

    _conv_update: Callable[..., float]
    _mla_parts: Callable[[StepFeatures], list[tuple[str, str, float]]]

    def _setup_mixer_kernels(self) -> None:
        """Compile the Mamba-1 / GDN kernels this model uses: the profile's fit, else the
        datasheet fallback (``fallback_kernels`` names those)."""
        peaks = {**self.profile.peaks, "fp32_flops": mk.fp32_peak(self.profile)}
        used = {
            "mamba1": ("mamba1_scan", "mamba1_step"),
            "gdn": ("gdn_chunk", "gdn_step"),
        }
        self._opt: dict[str, Callable[..., float]] = {}
        self._opt_constants: dict[str, lat.KernelConstants] = {}  # for ``compiled``
        # (kind, decodes) -> that recurrent mixer's decode parts (``_recurrent_decode``).
        self._decode_memo: dict[tuple[str, int], list[tuple[str, str, float]]] = {}
        self.fallback_kernels: list[str] = []
        gpu = self.profile.gpu
        # The GDN chunk's sequential pass a chunk (``mk.gdn_chunk_s``): measured for the
        # fallback only (a profile's own fit prices the whole call).
        seq = "gdn_chunk" not in self.profile.kernels
        self.gdn_seq_s = mk.GDN_CHUNK_SEQ_S.get(gpu, 0.0) if seq else 0.0
        for kind, names in used.items():
            if not self.kinds.get(kind):
                continue
            for name in names:
                fit = self.profile.kernels.get(name)
                if fit is None:
                    self.fallback_kernels.append(name)
                params = fit.params if fit is not None else mk.fallback_params(name, gpu)
                self._opt[name] = lat.compile_fast(name, params, peaks)
                self._opt_constants[name] = lat.kernel_constants(name, params, peaks)

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
            heads = (self.heads, self.kv_heads, self.head_dim, e, self.kv_elem_bytes)
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
                    dec = ft.attn_decode_sums(
                        f.decodes, dec_keys, *heads, self.sms, self.decode_rule
                    )
                    parts.append((kind, "attn_decode", k["attn_decode"](*dec)))
        if kinds.get("mla"):  # twin.costmodel.mla_pricing
            parts.extend(self._mla_parts(f))
        if kinds.get("mamba2"):
            ssm = (self.ssm_heads, self.ssm_head_dim, self.ssm_d_state, self.ssm_groups)
            conv = ("mamba2", f, self.conv_channels, m.ssm_conv_kernel)
            if f.prefill_chunks:
                scan = ssm_ft.ssm_scan_sums(
                    f.prefill_tokens, f.scan_chunks, *ssm, self.chunk_size, e
                )
                parts.append(("mamba2", "ssm_scan", k["ssm_scan"](*scan)))
                parts.append(self._conv(*conv, decode=False))
            if f.decodes:
                parts.extend(self._recurrent_decode("mamba2", f))
        if kinds.get("mamba1"):
            o, conv = self._opt, ("mamba1", f, self.m1_inner, m.ssm_conv_kernel)
            if f.prefill_chunks:
                sums = mk.mamba1_scan_sums(f.prefill_tokens, self.m1_inner, self.m1_state, e)
                parts.append(("mamba1", "mamba1_scan", o["mamba1_scan"](*sums)))
                parts.append(self._conv(*conv, decode=False))
            if f.decodes:
                parts.extend(self._recurrent_decode("mamba1", f))
        if kinds.get("gdn"):
            o, conv = self._opt, ("gdn", f, self.gdn_conv, m.gdn_conv_kernel)
            dims = (self.gdn_v, self.gdn_k, m.gdn_head_k_dim, m.gdn_head_v_dim)
            if f.prefill_chunks:
                sums = mk.gdn_chunk_sums(f.prefill_tokens, f.gdn_chunks, *dims, m.gdn_chunk_size, e)
                chunk_s = mk.gdn_chunk_s(o["gdn_chunk"](*sums), f.gdn_depth, self.gdn_seq_s)
                parts.append(("gdn", "gdn_chunk", chunk_s))
                parts.append(self._conv(*conv, decode=False))
            if f.decodes:
                parts.extend(self._recurrent_decode("gdn", f))
        return parts

    def _recurrent_decode(self, kind: str, f: StepFeatures) -> list[tuple[str, str, float]]:
        """A recurrent mixer's decode parts (state update, conv update): functions of the
        number of decodes alone, so priced once per batch size."""
        memo = self._decode_memo
        key = (kind, f.decodes)
        parts = memo.get(key)
        if parts is not None:
            return parts
        m, k, e = self.model, self._k, self.elem_bytes
        if kind == "mamba2":
            ssm = (self.ssm_heads, self.ssm_head_dim, self.ssm_d_state, self.ssm_groups)
            sf, sb, _ = ssm_ft.ssm_step_features(f.decodes, *ssm, e, m.state_dtype_bytes)
            parts = [("mamba2", "ssm_step", k["ssm_step"](sf, sb))]
            parts.append(self._conv("mamba2", f, self.conv_channels, m.ssm_conv_kernel, True))
        elif kind == "mamba1":
            step = mk.mamba1_step_features(
                f.decodes, self.m1_inner, self.m1_state, e, m.state_dtype_bytes
            )
            parts = [("mamba1", "mamba1_step", self._opt["mamba1_step"](*step))]
            parts.append(self._conv("mamba1", f, self.m1_inner, m.ssm_conv_kernel, True))
        else:
            dims = (self.gdn_v, self.gdn_k, m.gdn_head_k_dim, m.gdn_head_v_dim)
            step = mk.gdn_step_features(f.decodes, *dims, e, m.state_dtype_bytes)
            parts = [("gdn", "gdn_step", self._opt["gdn_step"](*step))]
            parts.append(self._conv("gdn", f, self.gdn_conv, m.gdn_conv_kernel, True))
        if len(memo) < _DECODE_MEMO_MAX:
            memo[key] = parts
        return parts

    def _conv(
        self, kind: str, f: StepFeatures, width: int, taps: int, decode: bool
    ) -> tuple[str, str, float]:
        """The causal conv1d of a recurrent mixer: over the step's prompts, or its
        decode update."""
        e = self.elem_bytes
        if decode:
            # No L2 term in serving (``l2_bytes`` None: the state from HBM, 0 L2 bytes).
            cf, cb, x = ssm_ft.conv1d_features(f.decodes, 1, width, taps, e, True, self.sms)
            return (kind, "conv1d", self._conv_update(cf, cb, x["cta_waves"], x["l2_bytes"]))
        # The engines' varlen call: the step's prompt tokens packed, a CTA per chunk and
        # channel, every one on the unvectorised path (``ssm_features.conv1d_features``).
        cf, cb, x = ssm_ft.conv1d_features(
            1, f.prefill_tokens, width, taps, e, sequences=f.prefill_chunks
        )
        return (kind, "conv1d", self._k["conv1d"](cf, cb, x["seq_channels"], x["unaligned_ctas"]))
