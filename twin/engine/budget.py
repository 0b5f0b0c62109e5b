"""A replica's memory for running requests (:func:`memory_budget`): the GPUs' usable memory
less the weights (each stage's and each rank's share under the layout), the activations the
engine holds back, the dedicated cache and a speculative draft's, scaled to the KV a token
really takes where the layout replicates it (:func:`kv_replication_scale`)."""

from __future__ import annotations

from fractions import Fraction

from twin.engine.config import EngineConfig
from twin.engine.memory_rules import held_bytes, pool_bytes
from twin.errors import TwinError
from twin.hardware import GB
from twin.model import ModelSpec
from twin.parallel import (
    PP_SPLIT_OF_ENGINE,
    Layout,
    kv_bytes_per_token_per_gpu,
    stage_shares,
    stage_weight_bytes_per_gpu,
    weight_bytes_per_gpu,
)


def memory_budget(model: ModelSpec, config: EngineConfig) -> float:
    """Bytes a replica has for running requests: usable HBM - weights - cache.

    With the shared pool, the pool's size: usable HBM - weights (running
    requests and the cache share it).
    """
    c, m = config.cluster, config.memory
    gpu_bytes = m.gpu_memory_bytes
    if gpu_bytes is None:
        if m.shared_pool:
            raise TwinError(
                "the shared KV pool needs the GPU's memory (give a profile or --cache-gb)"
            )
        return float("inf")
    usable = c.tp * gpu_bytes * m.memory_utilization
    cache = 0 if m.shared_pool else m.cache_bytes
    weights = model.weight_bytes
    if c.ep > 1 or c.dp_attention > 1:
        # Each GPU's share under the layout (twin.parallel), rounded up.
        weights = c.tp * weight_bytes_per_gpu(model, _layout(config))
    if c.pp > 1:
        # Each stage's tp GPUs hold its layers' weights and its share of every request's
        # KV and states (twin.parallel); the engine's rule (twin.engine.memory_rules)
        # sizes each stage's pool from its own weights, and the tightest stage, over its
        # share, sets the replica's pool in the engine's whole-model count.
        layout = _layout(config)
        stage_weights = [c.tp * w for w in stage_weight_bytes_per_gpu(model, layout)]
        shares = stage_shares(model, layout.pp, layout.pp_split)
        weights = sum(stage_weights)
        usable *= c.pp
        budget = (
            min(
                pool_bytes(model, config, w) / float(share)
                for w, share in zip(stage_weights, shares, strict=True)
            )
            - cache
        )
    else:
        # The engine's own rule for what the weights leave (twin.engine.memory_rules: vLLM
        # and TensorRT-LLM also hold their activation peak back).
        budget = pool_bytes(model, config, weights) - cache
    if config.mode.speculative:  # the draft's weights and KV (twin.engine.speculative)
        from twin.engine.speculative import Speculation

        # The draft's layers under the target's layout where its weights are per GPU.
        per_gpu = c.ep > 1 or c.dp_attention > 1
        draft_layout = _layout(config) if per_gpu and c.pp == 1 else None
        budget = Speculation.from_dict(config.mode.speculative).budget(budget, model, draft_layout)
    if budget > 0:
        budget *= kv_replication_scale(model, config)
    if budget <= 0:
        held = held_bytes(model, config, weights)
        also = f", {held / GB:.1f} GB of activations" if held else ""
        raise TwinError(
            f"no memory left for running requests: {c.tp * c.pp} GPU(s) x "
            f"{gpu_bytes / GB:.1f} GB x {m.memory_utilization:g} = "
            f"{usable / GB:.1f} GB, minus {weights / GB:.1f} GB of weights{also} and "
            f"{m.cache_bytes / GB:.1f} GB of cache; lower --cache-gb or raise --tp"
        )
    return budget


def kv_replication_scale(model: ModelSpec, config: EngineConfig) -> float:
    """The share of the replica's bytes its tokens' KV can really use: 1 where every
    layer's KV splits over the ``tp`` GPUs, less where it is replicated.

    The engine counts a token at ``model.kv_bytes_per_token`` over the replica's GPUs.
    MLA's latent sits whole on every attention-TP rank, and GQA KV heads fewer than the
    GPUs are copied (:func:`twin.parallel.kv_bytes_per_token_per_gpu`, with the engines'
    sources), so a token takes ``tp x`` that per-GPU figure: DeepSeek at tp 8 holds an
    eighth of the tokens the plain count gives. Scaling the budget by the ratio makes
    the engine's count right for the KV of models without recurrent states. With
    attention data parallelism (``dp_attention``) a token takes that figure on its
    rank's ``tp / dp`` GPUs only, and the budget is the replica's: its ranks share it
    evenly (``twin.engine.dp_attention``).
    """
    # Hybrids keep their budget: their recurrent states shard over the GPUs, and one
    # scale for KV and states would shrink the states' share too.
    layout = _layout(config)
    a_tp = layout.attention_tp
    replicated = model.mixer_counts.get("mla", 0) or 0 < model.n_kv_heads < a_tp
    if not model.kv_bytes_per_token or not replicated or model.n_ssm_layers:
        return 1.0
    # With attention data parallelism a token lives on its rank's ``tp / dp`` GPUs only.
    held = a_tp * kv_bytes_per_token_per_gpu(model, layout)
    if held <= model.kv_bytes_per_token:
        return 1.0
    return float(Fraction(model.kv_bytes_per_token) / held)


def _layout(config: EngineConfig) -> Layout:
    """The replica's parallel layout (``twin.parallel``)."""
    c = config.cluster
    split = PP_SPLIT_OF_ENGINE.get(config.mode.engine, "vllm")
    return Layout(c.tp, c.ep, c.dp_attention, c.pp, split)
