"""Pricing MLA layers (``twin.mixers``' ``mla``; issue 34) from the profile's MLA families.

Per GPU, the rank's heads are ``n_heads / tp`` (the engines split MLA by query heads:
q_b_proj, kv_b_proj and the absorbed W_UK/W_UV column-parallel, o_proj row-parallel;
the q_a/kv_a projection is whole on every rank, vLLM's ``DeepSeekV2FusedQkvAProjLinear``
with ``disable_tp=True`` in ``vllm/model_executor/models/deepseek_v2.py``; SGLang's
``fused_qkv_a_proj_with_mqa`` is a ``ReplicatedLinear``), and every rank holds the whole
latent cache (``twin.parallel.kv_bytes_per_token_per_gpu``). A layer is priced one of
three ways, in aiconfigurator's order of preference (``sdk/models/deepseek.py``: the
profiled module first, the kernel-and-GEMM path as its fallback):

- ``module``: the profile has the module fits of the model's GEMM format and KV dtype
  (``mla_module_prefill``/``_decode``, vLLM's and TensorRT-LLM's tables): the prefill
  chunks through the prefill module, the decodes through the decode module (each the
  smooth maximum of its GEMMs, then its attention kernel's KV stream and FLOPs:
  ``mla_module.module_attention_split``); the layer's
  pre-norm and all-reduce as for every layer. A step that mixes both runs the shared
  projections' weights twice in this pricing (the tables time each phase whole);
- ``kernels``: per phase, the attention-kernel fit (``mla_prefill``/``mla_decode``,
  SGLang's and TensorRT-LLM's tables) with every projection as a GEMM of the model's
  precision:
  q_a + kv_a, q_b and o_proj over all tokens; kv_b_proj over every visible row of the
  prefill chunks (the cached context is decompressed again: vLLM's chunked-context loop,
  SGLang's ``MHA_CHUNKED_KV``); the absorbed decode's two BMMs (``mla_bmm``, else the GEMM
  fit on the same features);
- ``gqa`` (no MLA fit for the phase in the profile: datasheet profiles, GPUs whose
  tables lack MLA, SGLang's prefill off Blackwell, ``calibration.aic_mla``): as
  ``kernels`` with the GQA attention fits standing in, prefill as MHA at the mean of
  the QK and V widths (its FLOPs exact), decode as one KV head of half the latent width
  (its bytes exact); the provenance says so (``precision_kernels.MLA_AS_GQA_NOTE``).
"""

from __future__ import annotations

from collections.abc import Callable

from twin.costmodel import features as ft
from twin.costmodel import latency as lat
from twin.costmodel import mla_bmm as mbmm
from twin.costmodel import mla_decode_kernels as mdk
from twin.costmodel import mla_families as mlaf
from twin.costmodel import mla_features as mf
from twin.costmodel import mla_module as mmod
from twin.costmodel.kernel_layout import KernelLayout
from twin.costmodel.shard_shapes import ShardShapes
from twin.costmodel.step_features import StepFeatures
from twin.precision import kv_elem_bytes

MODES = ("module", "kernels", "gqa")


class MlaPricing(ShardShapes):
    """The MLA layers of a step (a part of ``CostModel``)."""

    _proj: Callable[[float, float, float], float]
    _gemm: Callable[[float, float, float], float]
    mla_mode: str | None  # "module", or "<prefill>/<decode>" of "kernels" and "gqa"
    mla_modes: tuple[str, str]  # (prefill, decode): "module", "kernels" or "gqa"
    mla_dims: mf.MlaDims
    _mla_rule: str | None
    _mla_block: int | None
    kernel_layout: KernelLayout

    def _setup_mla(self) -> None:
        """The MLA fits this model takes (``precision_kernels.priced_precision`` chose the
        keys), compiled; ``mla_mode`` None for a model without MLA layers."""
        self.mla_mode = None
        if not self.kinds.get("mla"):
            return
        m, keys, prof = self.model, self.priced.keys, self.profile
        self.mla_dims = mf.MlaDims(
            m.d_model,
            m.q_lora_rank,
            m.kv_lora_rank,
            m.qk_nope_head_dim,
            m.qk_rope_head_dim,
            m.v_head_dim,
            self.heads,
        )
        # The prefill kernel's waves (alone and in the prefill module) run over the GPU's
        # SMs (``self.sms``, ``mla_features.mla_prefill_waves``); every GPU with NVIDIA's
        # MLA tables has a count (``calibration.aic_mla`` refuses to fit one without), so
        # a GPU without one has no fit that prices its waves.
        self._mla: dict[str, Callable[..., float]] = {}
        for family in ("mla_module_prefill", "mla_module_decode", "mla_prefill", "mla_decode"):
            key = keys.get(family)
            if key is not None:
                self._mla[family] = lat.compile_fast(key, prof.kernels[key].params, prof.peaks)
        # The decode kernel's split rule, from the kernel its fit's table timed
        # (``mla_decode_kernels.decode_rule``).
        self._mla_rule = self._decode_rule(
            "mla_decode", self.priced.mla_kv_elem_bytes[1], mdk.kernel_decode_rule
        )
        # What its ``tiles`` feature counts (``mla_decode_kernels.decode_tile_rule``).
        self._mla_tile_rule = self._decode_rule(
            "mla_decode", self.priced.mla_kv_elem_bytes[1], mdk.decode_tile_rule
        )
        # Its query-row block where read (``mla_decode_kernels.decode_block_rows``).
        self._mla_block = self._decode_block("mla_decode", self.priced.mla_kv_elem_bytes[1])
        # The decode module's attention launch: the rule of the kernel its table timed, at
        # the KV stream its fit's features read (``mla_module.module_decode_features``).
        stream = self.priced.mla_kv_elem_bytes[1] * self.priced.mla_module_kv_share
        self._module_rule = self._decode_rule("mla_module_decode", stream, mdk.module_decode_rule)
        # Whether each phase's module fit timed linears that quantise their activation in a
        # serial loop first (``mla_bmm.module_quant_rule``: TensorRT-LLM's fp8 block-scale
        # GEMMs on SM120), priced as its ``quant_steps`` (``mla_module.module_quant_steps``).
        self._module_quant = (
            self._module_quant_rule("mla_module_prefill"),
            self._module_quant_rule("mla_module_decode"),
        )
        if "mla_module_prefill" in self._mla:
            self.mla_modes = ("module", "module")
        else:
            self.mla_modes = (
                "kernels" if "mla_prefill" in self._mla else "gqa",
                "kernels" if "mla_decode" in self._mla else "gqa",
            )
        self.mla_mode = "module" if self.mla_modes[0] == "module" else "/".join(self.mla_modes)
        # The absorbed BMMs: their own fit (its launch features on this GPU's SMs and L2:
        # ``mla_bmm.mla_bmm_features``), else the GEMM fit on a GEMM's features.
        bmm = keys.get("mla_bmm")
        self._mla_bmm_fit = bmm is not None
        if bmm is not None:
            self._mla_bmm = lat.compile_fast(bmm, prof.kernels[bmm].params, prof.peaks)
            # No L2 residency in a serving step: the tables' L2 reads are their CUDA-graph
            # replays on the same buffers (``mla_bmm_features``); in a forward pass a
            # layer's W_UK / W_UV were last read a whole pass earlier, so they come from HBM.
            self._mla_bmm_gpu = (self.sms or 0, None)
            # The quantisation kernel's serial steps where its table timed one
            # (``mla_bmm.bmm_quant_rule``: TensorRT-LLM's fp8 BMM on SM120).
            source = str(prof.kernels[bmm].provenance.get("kernel_source", ""))
            self._mla_bmm_quant = mbmm.bmm_quant_rule(prof.gpu, source)
        else:
            self._mla_bmm = self._k["gemm"]
        self._mla_bmm_bytes = self.priced.mla_bmm_bytes
        self._mla_gemm_bytes = self.priced.mla_gemm_bytes

    def _decode_rule(
        self, family: str, kv_e: float, rule: Callable[[str, str, float], str | None]
    ) -> str | None:
        """The split rule (``rule``: the kernel tables' ``mla_decode_kernels.kernel_decode_rule``,
        or the decode module's ``module_decode_rule``) of the kernel ``family``'s fit's
        table timed, at ``kv_e`` bytes a latent element; None without that fit."""
        key = self.priced.keys.get(family)
        if key is None:
            return None
        source = str(self.profile.kernels[key].provenance.get("kernel_source", ""))
        return rule(self.profile.gpu, source, kv_e)

    def _module_quant_rule(self, family: str) -> bool:
        """``mla_bmm.module_quant_rule`` of the module ``family``'s fit: the kernel its
        table timed and the GEMM type its key names (``mla_families.MLA_MODULE_GEMMS``);
        False without that fit."""
        key = self.priced.keys.get(family)
        if key is None:
            return False
        source = str(self.profile.kernels[key].provenance.get("kernel_source", ""))
        gemm = next(
            (
                g
                for g in mlaf.MLA_MODULE_GEMMS
                for kv in mlaf.MLA_KV
                if mlaf.mla_kernel(family, g, kv) == key
            ),
            "",
        )
        return mbmm.module_quant_rule(self.profile.gpu, source, gemm)

    def _decode_block(self, family: str, kv_e: float) -> int | None:
        """The query-row block (``mla_decode_kernels.decode_block_rows``) of the kernel
        ``family``'s fit's table timed, at ``kv_e`` bytes a latent element."""
        key = self.priced.keys.get(family)
        if key is None:
            return None
        fit = self.profile.kernels[key]
        source = str(fit.provenance.get("kernel_source", ""))
        return mdk.decode_block_rows(self.profile.gpu, source, kv_e)

    # ------------------------------------------------------------ token-count parts
    def _mla_dense(self, t: int, norm: float, ar: float) -> tuple[tuple[str, float], ...]:
        """What an MLA layer costs for ``t`` tokens whatever their phase: the pre-norm and
        the all-reduce, and outside the module pricing the q_a/kv_a and q_a norms, RoPE
        and the projections every token runs (q_a + kv_a, q_b, o_proj)."""
        idx_gemm, idx_elem = self._indexer(t)
        if self.mla_mode == "module":
            return (("elementwise", norm + idx_elem), ("gemm", idx_gemm), ("allreduce", ar))
        elems, gemms = self._projections(t)
        return (
            ("elementwise", norm + elems + idx_elem),
            ("gemm", gemms + idx_gemm),
            ("allreduce", ar),
        )

    def _projections(self, t: int) -> tuple[float, float]:
        """(element-wise, GEMM) seconds of what a module fit includes besides attention,
        for ``t`` tokens: the q_a and kv_a RMSNorms, RoPE on the rank's q_pe and the
        shared k_pe, and the projections (q_a + kv_a, q_b, o_proj)."""
        d, e, elem = self.mla_dims, self.elem_bytes, self._k["elementwise"]
        latent = d.kv_lora + d.rope
        norms = elem(0.0, e * (2.0 * t * (d.q_lora + d.kv_lora) + d.q_lora + d.kv_lora))
        rope = elem(0.0, e * 2.0 * t * (d.heads + 1) * d.rope)
        qk = d.heads * (d.nope + d.rope)
        if d.q_lora:
            gemms = self._proj(t, d.d_model, d.q_lora + latent) + self._proj(t, d.q_lora, qk)
        else:
            gemms = self._proj(t, d.d_model, latent) + self._proj(t, d.d_model, qk)
        gemms += self._proj(t, d.heads * d.v, d.d_model)
        return norms + rope, gemms

    def _indexer(self, t: int) -> tuple[float, float]:
        """(GEMM, element-wise) seconds of a DeepSeek Sparse Attention indexer's launches
        for ``t`` tokens (``ModelSpec.index_n_heads``; (0, 0) without one), in the order
        SGLang 0.5.9 issues them on its main stream in a captured decode graph
        (``layers/attention/nsa/nsa_indexer.py`` ``Indexer.forward_cuda`` with
        ``enable_dual_stream``; the key's ``wk`` GEMM, LayerNorm, Hadamard rotation and
        fp8 quantisation run on the second stream beside the query's and are not added):
        the head gates (``weights_proj``, a bf16 GEMM of ``index_n_heads`` columns, and
        their scaling), the query projection ``wq_b`` from the query latent, RoPE on the
        query's and key's rope parts and the two copies back into them, the query's
        Hadamard rotation (``rotate_activation``) and fp8 quantisation (``act_quant``),
        the gates times the query scales, the key's store into the index cache
        (``set_index_k_scale_buffer``), the logits (``deep_gemm.fp8_paged_mqa_logits``)
        and the top-k (``topk_transform``). Each is one launch at its floor plus the
        step's own bytes; the logits' and the top-k's reads of every sequence's index
        keys grow with the context and are not priced (nor the sparse attention's cap of
        ``index_topk`` keys, which the dense MLA price leaves out the other way): at a few
        clients the floors are the indexer's cost."""
        m = self.model
        heads, width = m.index_n_heads, m.index_head_dim
        if not heads:
            return 0.0, 0.0
        d, e, elem = self.mla_dims, float(self.elem_bytes), self._k["elementwise"]
        q = t * heads * width  # the query's elements
        rope = t * (heads + 1) * d.rope  # the query's and the key's rope parts
        gemms = self._gemm(t, d.d_model, heads) + self._proj(t, d.q_lora, heads * width)
        passes = (
            elem(0.0, 4.0 * 2.0 * t * heads)  # the gates' scaling (fp32)
            + elem(0.0, e * 2.0 * rope)  # RoPE
            + elem(0.0, e * 2.0 * t * heads * d.rope)  # the query's rope part copied back
            + elem(0.0, e * 2.0 * t * d.rope)  # the key's
            + elem(0.0, e * 2.0 * q)  # Hadamard rotation
            + elem(0.0, (e + 1.0) * q)  # fp8 quantisation
            + elem(0.0, 4.0 * 2.0 * t * heads)  # gates x query scales
            + elem(0.0, t * (width + 4.0))  # the key's fp8 store and scale
            + elem(0.0, q)  # the logits (the step's fp8 queries)
            + elem(0.0, 4.0 * t * heads)  # the top-k
        )
        return gemms, passes

    # ------------------------------------------------------------ context parts
    def _mla_parts(self, f: StepFeatures) -> list[tuple[str, str, float]]:
        """The context-dependent MLA kernels of a step: (kind, kernel, seconds per layer)."""
        parts: list[tuple[str, str, float]] = []
        if f.prefill_chunks:
            parts.append(("mla", *self._mla_prefill(f)))
            indexer = self._indexer_prefill(f)
            if indexer:
                parts.append(("mla", "indexer_prefill", indexer))
        if f.decodes:
            module = self._dsa_decode_module(f)
            if module is not None:
                parts.append(("mla", "mla_sparse_decode_module", module))
            else:
                parts.extend(self._mla_decode(f.decodes, f.decode_keys))
        if f.absorbed_chunks:
            parts.extend(
                self._mla_decode(
                    f.absorbed_chunks,
                    f.absorbed_keys,
                    f.absorbed_tokens,
                    f.absorbed_kv_rows,
                    f.absorbed_width,
                )
            )
        return parts

    def _indexer_prefill(self, f: StepFeatures) -> float:
        """Seconds a layer's DSA indexer spends on the prefill chunks' logits and top-k
        (``KernelLayout.nsa_indexer_pair_s`` a query-key pair): SGLang 0.5.9
        ``layers/attention/nsa/nsa_indexer.py`` ``Indexer.forward_cuda`` skips them only
        where the batch's longest sequence is at most ``index_topk``
        (``skip_logits_computation``, the key-only path); past it ``_get_topk_ragged``
        scores every new token against its sequence's keys (``deep_gemm.fp8_mqa_logits``
        over ``ks``..``ke``) and selects from them (``topk_transform``), also where the
        backend then runs dense MHA and ignores the indices (``return_indices=False``,
        ``forward_mha.py``): the causal pairs ``prefill_keys``. 0 below the top-k or
        without a measured rate."""
        rate = self.kernel_layout.nsa_indexer_pair_s
        if not rate or not self.model.index_n_heads or f.prefill_longest <= self.model.index_topk:
            return 0.0
        return rate * f.prefill_keys

    def _mla_prefill(self, f: StepFeatures) -> tuple[str, float]:
        d, e, kv_e = self.mla_dims, self.elem_bytes, self.priced.mla_kv_elem_bytes[0]
        n, keys, rows, seqs = f.prefill_tokens, f.prefill_keys, f.prefill_kv_rows, f.prefill_chunks
        forced = self._dsa_sparse_module(f)
        if forced is not None:
            return forced
        sparse = self._mla_sparse_prefill(f)
        if sparse is not None:
            return sparse
        mode = self.mla_modes[0]
        if mode == "module":
            act_e, w_e = self._mla_gemm_bytes
            module = mmod.mla_module_prefill_sums(d, n, keys, rows, seqs, e, act_e, w_e, kv_e)
            waves = mf.mla_prefill_waves(n, seqs, d.heads, self.sms) if self.sms else 0.0
            steps = self._module_quant[0]
            quant = mmod.module_quant_steps(d, n, rows, self.sms or 0) if steps else 0.0
            features = mmod.module_prefill_features(module, waves, quant)
            return "mla_module", self._mla["mla_module_prefill"](*features)
        kv_b = self._proj(rows, d.kv_lora, d.heads * (d.nope + d.v))
        if mode == "kernels":
            sums = mf.mla_prefill_sums(n, keys, rows, seqs, d, e, kv_e)
            sms = self.sms
            waves = mf.mla_prefill_waves(n, seqs, d.heads, sms) if sms else 0.0
            # No L2 bytes: the tables' L2 reads are their CUDA-graph replays over one set of
            # buffers (``mf.kernel_replay_l2``); a serving step reads its prompt from HBM.
            return "mla_prefill", kv_b + self._mla["mla_prefill"](*sums, 0.0, waves)
        # GQA stand-in: MHA at the mean of the QK and V widths (4 x width per score: exact
        # FLOPs), one tile per sequence and head.
        width = (d.nope + d.rope + d.v) // 2
        sums4 = ft.attn_prefill_sums(n, keys, rows, seqs, d.heads, d.heads, width, e, kv_e)
        return "attn_prefill", kv_b + self._k["attn_prefill"](*sums4)

    def _dsa_sparse_module(self, f: StepFeatures) -> tuple[str, float] | None:
        """The prefill chunks' attention module where the engine's layout forces sparse MLA
        at every length (``KernelLayout.nsa_sparse_module``: SGLang's GLM-5 on Blackwell,
        ``twin.engine.kernel_layouts_sglang.SGLANG_DSA_SPARSE_MODULE``; else None): its measured
        floor, a rate a new token and a rate a selected key (each new token's position
        capped at ``index_topk``, ``StepFeatures.prefill_topk_keys``). The measured module
        holds the layer's projections: outside the module pricing ``_mla_dense`` prices
        them for every token, so they come off here; the indexer is priced apart
        (``_indexer``, ``_indexer_prefill``), as the table's skip-indexer module leaves it
        out."""
        m = self.kernel_layout.nsa_sparse_module
        if m is None:
            return None
        n = f.prefill_tokens
        price = m.floor_s + m.token_s * n + m.key_s * f.prefill_topk_keys
        if self.mla_mode != "module":
            price = max(price - sum(self._projections(n)), 0.0)
        return "mla_sparse_module", price

    def _dsa_decode_module(self, f: StepFeatures) -> float | None:
        """The decodes' attention module where the engine's layout prices it from its
        measured module (``KernelLayout.nsa_decode_module``: SGLang's NSA decode on Hopper,
        ``twin.engine.kernel_layouts_sglang.SGLANG_DSA_DECODE_MODULE``; else None): its floor, a
        rate a sequence, a selected key (``StepFeatures.decode_topk_keys``) and a key the
        indexer's logits read (every key, ``decode_keys``), and the top-k's selection once
        a sequence passes it. The measured module holds the layer's projections and its
        indexer: ``_mla_dense`` prices the indexer's launches (and outside the module
        pricing the projections) for every token of the step, so the decodes' come off
        the module's floor and per-sequence part (never below zero: the twin's own launch
        floors can exceed the graph-replayed module's); its key terms (the sparse kernel's
        and the logits' streams) stay whole."""
        m = self.kernel_layout.nsa_decode_module
        if m is None:
            return None
        n = f.decodes
        keys = m.price(n, f.decode_keys, f.decode_topk_keys) - m.price(n, 0, 0)
        launches = m.price(n, 0, 0) - sum(self._indexer(n))
        if self.mla_mode != "module":
            launches -= sum(self._projections(n))
        return keys + max(launches, 0.0)

    def _mla_sparse_prefill(self, f: StepFeatures) -> tuple[str, float] | None:
        """The prefill chunks' attention in SGLang's sparse absorbed form, where the
        engine's layout runs it (``KernelLayout.nsa_sparse_prefill``) and the step's
        longest sequence exceeds the model's ``index_topk`` (``mla_features.
        sparse_prefill_heads``; else None, the dense form): W_UK and W_UV at the rank's
        heads over the new tokens (``mla_bmm``; the latent is not decompressed, no
        kv_b_proj), and each query token over ``index_topk`` latent keys (the kernel
        walks a query's whole index list, -1 entries masked) at the padded heads, QK at
        ``kv_lora + rope`` and AV at ``kv_lora``; the MHA fit prices it (its FLOPs exact:
        4 x the mean width a score, one shared latent head)."""
        topk = self.model.index_topk
        if not self.kernel_layout.nsa_sparse_prefill or f.prefill_longest <= topk:
            return None
        # The cache's own element bytes pick SGLang's kernel, not the bytes the dense
        # MLA fits were fitted at (``priced.mla_kv_elem_bytes``: SGLang's module fits are
        # priced at fp8 features over a bf16 cache, ``precision_kernels._mla_keys``).
        d, e, kv_e = self.mla_dims, self.elem_bytes, kv_elem_bytes(self.model)
        padded = mf.sparse_prefill_heads(self.profile.gpu, d.heads, kv_e)
        if not padded:
            return None
        n = f.prefill_tokens
        bmm = self._absorbed_bmms(n)
        width = (2 * d.kv_lora + d.rope) // 2
        sums = ft.attn_prefill_sums(
            n, n * topk, f.prefill_kv_rows, f.prefill_chunks, padded, 1, width, e, kv_e
        )
        price = bmm + self._k["attn_prefill"](*sums)
        if self.mla_mode == "module":  # the sparse form replaces the whole module fit
            price += sum(self._projections(n))
        return "attn_prefill", price

    def _absorbed_bmms(self, rows: int) -> float:
        """W_UK's and W_UV's batched GEMMs over ``rows`` tokens at the rank's heads."""
        d, e = self.mla_dims, self.elem_bytes
        act_b, w_b = self._mla_bmm_bytes
        total = 0.0
        for k, n in ((d.nope, d.kv_lora), (d.kv_lora, d.v)):
            if self._mla_bmm_fit:
                feats = mbmm.mla_bmm_features(
                    rows, d.heads, k, n, e, act_b, w_b, *self._mla_bmm_gpu
                )
                sms = self._mla_bmm_gpu[0]
                quant = mbmm.bmm_quant_steps(self._mla_bmm_quant, rows, d.heads, k, sms)
                total += self._mla_bmm(*feats, quant, mbmm.bmm_k_steps(k))
            else:
                # The GEMM fit: one product a head (``ft.gemm_wave_k``'s groups).
                waves = ft.gemm_wave_k(rows, n, k, self.sms, d.heads)
                total += self._mla_bmm(
                    *mbmm.mla_bmm_sums(rows, d.heads, k, n, e, act_b, w_b), waves
                )
        return total

    def _mla_decode(
        self,
        batch: int,
        keys: int,
        queries: int | None = None,
        kv_rows: int | None = None,
        width: int = 1,
    ) -> list[tuple[str, str, float]]:
        """Absorbed-form parts of ``batch`` sequences reading ``keys`` keys in all: one
        query token a sequence (a decode), or ``queries`` tokens, at most ``width`` a
        sequence, reading the sequences' ``kv_rows`` latent rows once (an absorbed extend,
        ``step_features.split_absorbed``)."""
        d, e, kv_e = self.mla_dims, self.elem_bytes, self.priced.mla_kv_elem_bytes[1]
        rows = batch if queries is None else queries
        kv = keys if kv_rows is None else kv_rows
        mode = self.mla_modes[1]
        if mode == "module":
            act_e, w_e = self._mla_gemm_bytes
            stream = kv_e * self.priced.mla_module_kv_share  # precision_kernels
            module = mmod.mla_module_absorbed_sums(
                d, batch, rows, keys, kv, width, e, act_e, w_e, stream
            )
            sms = self.sms or 0
            launch = mdk.mla_decode_launch(self._module_rule, batch, kv, width, d, stream, sms)
            quant = mmod.module_quant_steps(d, rows, 0, sms) if self._module_quant[1] else 0.0
            features = mmod.module_decode_features(module, launch, 0.0, quant)
            price = self._mla["mla_module_decode"](*features)
            return [("mla", "mla_module", price)]
        bmms = self._absorbed_bmms(rows)
        if mode == "kernels":
            flops, nbytes, tiles, seq = mf.mla_absorbed_sums(
                batch, rows, keys, kv, width, d, e, kv_e
            )
            tiles = mdk.decode_tiles(self._mla_tile_rule, tiles, rows, d.heads, kv_e)
            sums = (flops, nbytes, tiles, seq)
            sms = self.sms or 0
            launch = mdk.mla_decode_launch(self._mla_rule, batch, kv, width, d, kv_e, sms)
            block_keys = mdk.decode_block_keys(self._mla_block, kv, d.heads * width)
            # No L2 term: the tables' L2 reads are their CUDA-graph replays over one cache
            # (``mf.kernel_replay_l2``); a serving step reads each layer's cache once, after
            # every other layer's weights and cache have streamed through L2, so from HBM.
            attn = self._mla["mla_decode"](*mdk.decode_kernel_features(sums, block_keys, launch))
            kernel = "mla_decode"
        else:
            # GQA stand-in: one KV head of half the latent width (2 x width bytes per key:
            # exact bytes), the rank's heads; an extend's query tokens as more heads, as the
            # absorbed kernel packs them (``mla_features.mla_absorbed_sums``).
            half = (d.kv_lora + d.rope) // 2
            heads = d.heads * width
            feats = ft.attn_decode_sums(
                batch, kv, heads, 1, half, e, kv_e, self.sms, self.decode_rule
            )
            attn = self._k["attn_decode"](*feats)
            kernel = "attn_decode"
        return [("mla", "mla_bmm", bmms), ("mla", kernel, attn)]


__all__ = ["MODES", "MlaPricing"]
