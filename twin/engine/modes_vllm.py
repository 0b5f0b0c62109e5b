"""The ``vllm`` engine mode: vLLM V1's prefix cache for hybrid models and its flags.

Each flag function maps one of vLLM's own flag names (``--set name=value``)
onto :class:`~twin.engine.config.EngineConfig` fields or ``vllm+`` policy
options; :data:`VLLM` is the mode, registered in :mod:`twin.engine.modes`.
"""

from __future__ import annotations

from typing import Any

from twin.engine.mode_base import (
    EngineMode,
    Flag,
    _batching_flags,
    _bool,
    _choice,
    _float,
    _int,
)
from twin.engine.releases import Release, release_of
from twin.errors import TwinError
from twin.model import ModelSpec


def vllm_block_size(model: ModelSpec, block_size: int = 16) -> int:
    """The attention block vLLM uses for a hybrid model: one attention page >= one state page.

    vLLM ``vllm/platforms/interface.py`` ``Platform._align_hybrid_block_size``:
    ``attn_page_size_1_token`` is one attention layer's K+V of one token,
    ``mamba_page_size`` one recurrent layer's state (conv + SSM); the block is
    ``align * cdiv(mamba_page, align * attn_page_1)`` with ``align`` the larger
    of the kernel's block alignment (16, FlashAttention's
    ``get_supported_kernel_block_sizes``) and ``--block-size``, never smaller
    than ``--block-size``. With several recurrent kinds every state page is
    padded to one page size (``mamba_page_size_padded``), so the block must hold
    the largest: the page is the largest kind's state. Both pages come from the
    model's own byte methods.
    """
    if not (model.n_attention_layers and model.n_ssm_layers):
        return block_size
    attn_page_1 = model.kv_bytes_per_token // model.n_attention_layers
    mamba_page = largest_state_page(model)
    align = max(16, block_size)
    return max(block_size, align * -(-mamba_page // (align * attn_page_1)))


def largest_state_page(model: ModelSpec) -> int:
    """One layer's recurrent + conv state of the model's largest recurrent kind, bytes."""
    from twin.mixers import RECURRENT_KINDS

    return max(
        model.state_bytes_of(kind) // n
        for kind, n in model.mixer_counts.items()
        if kind in RECURRENT_KINDS and n
    )


def _vllm_block(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    block = _int("block_size", value)
    # vllm/config/cache.py CacheConfig.block_size takes any positive int, but the
    # attention backend must accept it: FlashAttention (vLLM's CUDA default)
    # declares get_supported_kernel_block_sizes() == [MultipleOf(16)], and a user
    # block size it does not support is refused at start-up
    # (vllm/v1/worker/utils.py select_common_block_size).
    if block % 16:
        raise TwinError(
            f"--set block_size={value}: vLLM's CUDA attention kernels (FlashAttention) "
            "need a multiple of 16 tokens"
        )
    out["vllm_block_size"] = block


def _vllm_retention(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    # vllm/config/cache.py CacheConfig.prefix_cache_retention_interval (0.33.0): None
    # (dense), 0 (semantic checkpoints only, the default) or N >= 0 tokens; the multiple-
    # of-the-block check needs the hybrid block, so it runs in _vllm_options.
    if value.strip().lower() == "none":
        out["vllm_retention"] = None
    else:
        out["vllm_retention"] = _int("prefix_cache_retention_interval", value, low=0)


def _vllm_shared_prefix(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    # vllm/config/cache.py CacheConfig.enable_mamba_shared_prefix_checkpoint (0.33.0; was
    # enable_mamba_fine_grained_prefix_cache): a junction checkpoint "where an EAGLE/MTP
    # sibling was observed to resume"; it takes effect only with EAGLE on the Mamba group
    # and prefix_match_unit < the Mamba block.
    if _bool("enable_mamba_shared_prefix_checkpoint", value):
        raise TwinError(
            f"--set enable_mamba_shared_prefix_checkpoint={value}: vLLM applies it only with "
            "EAGLE/MTP speculative decoding, which the twin does not model yet"
        )


def _vllm_match_unit(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    # vllm/config/cache.py CacheConfig.prefix_match_unit (0.33.0): hits may land every
    # prefix_match_unit tokens, finer than the block (None: the block). Checked against
    # the hybrid block in _vllm_options.
    out["vllm_match_unit"] = _int("prefix_match_unit", value)


def _vllm_replayssm(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    # vllm/config/cache.py CacheConfig.use_replayssm (0.33.0): the ReplaySSM Mamba2 decode
    # kernel (skips the per-step state store): a kernel the twin has no cost for.
    if _bool("use_replayssm", value) and model.n_ssm_layers:
        raise TwinError(
            f"--set use_replayssm={value}: the ReplaySSM decode kernel's cost is not modelled yet"
        )


def _vllm_replayssm_len(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    # vllm/config/cache.py CacheConfig.replayssm_buffer_len (0.33.0, default 16): read only
    # with use_replayssm, which the twin refuses, so it changes nothing here.
    _int("replayssm_buffer_len", value)


def _vllm_prefix_caching(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    if not _bool("enable_prefix_caching", value):
        out["policy"] = "vanilla"


def _vllm_mamba_mode(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    # vllm/config/cache.py MambaCacheMode: "all" | "align" | "none" in 0.19.0, "align" |
    # "none" in 0.33.0. "none" keeps no recurrent state for reuse: a hybrid model gets no
    # prefix hits; "align" is the hybrid prefix cache; "all" (0.19.0: a state at every
    # block boundary) is the dense retention (prefix_cache_retention_interval=none).
    release = release_of(out)
    choices = release.choice("mamba_cache_mode", ("align", "none"))
    if value == "all" and "all" not in choices:
        raise TwinError(
            f"--set mamba_cache_mode=all: vLLM {release.version} removed it; use "
            "--set prefix_cache_retention_interval=none (a state on every block)"
        )
    mode = _choice("mamba_cache_mode", value, choices)
    if mode == "none" and model.n_ssm_layers:
        out["policy"] = "vanilla"
    elif mode == "all":
        out["vllm_retention"] = None


def _vllm_offload(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    # vLLM's native CPU offloading (--kv-offloading-size GB, --kv-offloading-backend native).
    out["host_cache_bytes"] = int(_float("kv_offloading_size", value, 0.0, 1e6) * 1e9)


def _vllm_options(model: ModelSpec, out: dict[str, Any]) -> dict[str, Any]:
    release = release_of(out)
    default = release.default("prefix_cache_retention_interval", "none")
    block = out.pop("vllm_block_size", 16)
    retention = out.pop("vllm_retention", None if default == "none" else int(default))
    unit = out.pop("vllm_match_unit", None)
    out.setdefault("memory_utilization", float(release.default("gpu_memory_utilization", "0.9")))
    if out["policy"] != "vllm+":
        return {}
    size = vllm_block_size(model, block)
    if unit is not None and unit != size:
        # Hits finer than the block (vLLM 0.33.0 hashes every prefix_match_unit tokens;
        # every group's block must be a multiple of it) are not modelled: refused.
        raise TwinError(
            f"--set prefix_match_unit={unit}: hits finer than the block ({size} tokens for "
            f"{model.name}) are not modelled yet; give {size} or leave it unset"
        )
    if retention is None or not model.n_ssm_layers:
        # Dense (a state on every block), or nothing to retain: retention thins
        # recurrent states only (sliding-window KV is not modelled by the pool).
        return {"block_size": size}
    if retention % size:
        # kv_cache_coordinator.py _validate_prefix_cache_retention_interval.
        raise TwinError(
            f"--set prefix_cache_retention_interval={retention}: must be 0, none or a "
            f"multiple of the block size ({size} tokens for {model.name})"
        )
    return {"block_size": size, "retention_interval": retention}


# vllm/config/cache.py CacheConfig.prefix_cache_retention_interval: Field(default=0) (0.33.0).
VLLM_RETENTION_DEFAULT = 0

_VLLM_COMMON = (
    "block_size",
    "enable_prefix_caching",
    "mamba_cache_mode",
    "kv_offloading_size",
    "max_num_seqs",
    "max_num_batched_tokens",
    "gpu_memory_utilization",
)

# The releases modelled, newest first. Read from the releases' sdists on PyPI:
# vllm/config/cache.py (CacheConfig) and vllm/engine/arg_utils.py (EngineArgs).
VLLM_RELEASES = (
    Release(
        version="0.33.0",
        source="vllm 0.33.0: vllm/config/cache.py CacheConfig, vllm/engine/arg_utils.py",
        flags=(
            *_VLLM_COMMON[:3],
            "prefix_cache_retention_interval",
            "prefix_match_unit",
            "enable_mamba_shared_prefix_checkpoint",
            "use_replayssm",
            "replayssm_buffer_len",
            *_VLLM_COMMON[3:],
        ),
        renamed={
            "enable_mamba_fine_grained_prefix_cache": "renamed it "
            "enable_mamba_shared_prefix_checkpoint (give --set "
            "enable_mamba_shared_prefix_checkpoint=...)",
        },
        choices={"mamba_cache_mode": ("align", "none")},
        defaults={
            "prefix_cache_retention_interval": str(VLLM_RETENTION_DEFAULT),
            # CacheConfig.gpu_memory_utilization: Field(default=0.92) (0.9 in 0.19.0).
            "gpu_memory_utilization": "0.92",
        },
        notes="retention interval (default 0), prefix_match_unit, mamba_cache_mode align|none, "
        "gpu_memory_utilization 0.92",
    ),
    Release(
        version="0.19.0",
        source="vllm 0.19.0: vllm/config/cache.py CacheConfig, vllm/engine/arg_utils.py",
        flags=_VLLM_COMMON,
        choices={"mamba_cache_mode": ("all", "align", "none")},
        # No prefix_cache_retention_interval yet: a state on every block (dense).
        defaults={"prefix_cache_retention_interval": "none", "gpu_memory_utilization": "0.9"},
        notes="NVIDIA's measured vLLM runs (0.11.2 to 0.19.0); a state on every block, "
        "mamba_cache_mode all|align|none, gpu_memory_utilization 0.9",
    ),
)


VLLM = EngineMode(
    name="vllm",
    display="vLLM",
    kernels="vllm",
    policy="vllm+",
    preemption="recompute",
    models="vLLM V1 with --enable-prefix-caching and --mamba-cache-mode align",
    flags=dict(
        [
            (
                "block_size",
                Flag(
                    "attention block, a multiple of 16 (hybrids raise it to one state page)",
                    _vllm_block,
                    "16",
                ),
            ),
            ("enable_prefix_caching", Flag("cache prefixes", _vllm_prefix_caching, "true")),
            (
                "mamba_cache_mode",
                Flag(
                    "align (hybrid prefix caching) or none (0.19.0: also all, every block)",
                    _vllm_mamba_mode,
                    "align",
                ),
            ),
            (
                "prefix_cache_retention_interval",
                Flag(
                    "recurrent states kept: 0 junctions + replay boundary, N also every N "
                    "tokens, none every block",
                    _vllm_retention,
                    "0",
                ),
            ),
            (
                "prefix_match_unit",
                Flag(
                    "tokens a hit may land on (the block only: finer is refused)",
                    _vllm_match_unit,
                    "the block",
                ),
            ),
            (
                "enable_mamba_shared_prefix_checkpoint",
                Flag("needs EAGLE/MTP: true refused", _vllm_shared_prefix, "false"),
            ),
            (
                "use_replayssm",
                Flag("ReplaySSM decode kernel: true refused (hybrids)", _vllm_replayssm, "false"),
            ),
            (
                "replayssm_buffer_len",
                Flag("ReplaySSM history (read only with use_replayssm)", _vllm_replayssm_len, "16"),
            ),
            ("kv_offloading_size", Flag("CPU offload tier, GB", _vllm_offload, "0")),
            *_batching_flags("max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization"),
        ]
    ),
    options=_vllm_options,
    scheduler="vllm",
    # vLLM V1 frees a preempted request's blocks still hashed (twin.engine.vllm_batching).
    scheduler_options={"cache_preempted": True},
    releases=VLLM_RELEASES,
)
