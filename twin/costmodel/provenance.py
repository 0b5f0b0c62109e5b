"""Where each kernel family's numbers come from, as one line for every output.

A profile may mix sources: NVIDIA's tables measure GEMMs, attention, the causal
conv1d and all-reduce, but not the Mamba2 scan or copies, which keep a datasheet
model or an own-GPU measurement (``twin calibrate --merge``). Each ``KernelFit``
then carries ``provenance = {"source": ..., "label": ...}`` and the mixture reads
e.g. "GEMM: measured (vLLM 0.24.0 torch.nn.functional.linear, H100 SXM5);
attention: measured (...); SSM scan, element-wise, copies: datasheet".
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

from twin.costmodel.collective_families import family
from twin.costmodel.formulas import MODEL_VARIANTS, PRECISION_VARIANTS

if TYPE_CHECKING:
    from twin.costmodel.profile import KernelFit, Profile

# Display group of each formula family, in display order.
GROUPS: dict[str, str] = {
    "gemm": "GEMM",
    **{k: "GEMM" for k in PRECISION_VARIANTS if k.startswith("gemm_")},
    "attn_prefill": "attention",
    "attn_decode": "attention",
    "attn_prefill_fp8kv": "attention",
    "attn_decode_fp8kv": "attention",
    **{k: "MoE experts" for k in MODEL_VARIANTS if k.startswith("moe")},
    **{k: "MLA attention" for k in MODEL_VARIANTS if k.startswith("mla")},
    "conv1d": "causal conv1d",
    "conv1d_update": "causal conv1d",
    "allreduce": "all-reduce",
    "allgather": "all-gather / reduce-scatter",
    "reducescatter": "all-gather / reduce-scatter",
    "allreduce_nccl": "all-reduce",
    **{k: "MoE all-to-all" for k in MODEL_VARIANTS if k.startswith("a2a")},
    "ssm_scan": "SSM scan",
    "ssm_step": "SSM scan",
    "elementwise": "element-wise",
    "copy_d2d": "copies",
    "copy_h2d": "copies",
    "copy_d2h": "copies",
}


def family_label(profile: Profile, fit: KernelFit) -> str:
    """The label of one family: its own, else the whole profile's."""
    return str(fit.provenance.get("label") or profile.profile_label())


def family_source(profile: Profile, fit: KernelFit) -> str:
    """``measured`` / ``datasheet`` / ``transferred`` of one family."""
    return str(fit.provenance.get("source") or profile.source)


def mixture(
    profile: Profile,
    used: Collection[str] | None = None,
    groups: Mapping[str, str] | None = None,
    notes: Mapping[str, str] | None = None,
) -> str:
    """Groups with their labels; groups sharing one label are listed together.

    ``used``: the profile keys that price the run (default: every family but the
    precision and model variants (MoE fits), i.e. a bf16 run of a dense model),
    precision variants first; ``groups`` renames
    a key's group (the bf16 GEMM is the ``LM head`` of a quantised run); ``notes`` adds
    a remark to a group's labels (an fp8 KV cache priced by the bf16 attention fit).
    """
    variants = (*PRECISION_VARIANTS, *MODEL_VARIANTS)
    if used is None:
        names = [k for k in profile.kernels if k not in variants]
    else:
        names = [k for k in profile.kernels if k in used and k in PRECISION_VARIANTS]
        names += [k for k in profile.kernels if k in used and k not in PRECISION_VARIANTS]
    labels_by_group: dict[str, list[str]] = {}
    for name in names:
        fit = profile.kernels[name]
        group = (groups or {}).get(name) or GROUPS.get(family(name), name)
        labels = labels_by_group.setdefault(group, [])
        label = family_label(profile, fit)
        if label not in labels:
            labels.append(label)
    for group, note in (notes or {}).items():
        if group in labels_by_group:
            labels_by_group[group] = [f"{label}, {note}" for label in labels_by_group[group]]
    groups_by_label: dict[str, list[str]] = {}
    order = list(dict.fromkeys(GROUPS.values()))
    order.insert(order.index("attention"), "LM head")
    for group in sorted(labels_by_group, key=lambda g: order.index(g) if g in order else 99):
        text = " + ".join(labels_by_group[group])
        groups_by_label.setdefault(text, []).append(group)
    return "; ".join(f"{', '.join(groups)}: {text}" for text, groups in groups_by_label.items())


__all__ = ["GROUPS", "family_label", "family_source", "mixture"]
