"""Where each kernel family's numbers come from, as one line for every output.

A profile may mix sources: NVIDIA's tables measure GEMMs, attention, the causal
conv1d and all-reduce, but not the Mamba2 scan or copies, which keep a datasheet
model or an own-GPU measurement (``twin calibrate --merge``). Each ``KernelFit``
then carries ``provenance = {"source": ..., "label": ...}`` and the mixture reads
e.g. "GEMM: measured (vLLM 0.24.0 torch.nn.functional.linear, H100 SXM5);
attention: measured (...); SSM scan, element-wise, copies: datasheet".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twin.costmodel.formulas import family

if TYPE_CHECKING:
    from twin.costmodel.profile import KernelFit, Profile

# Display group of each formula family, in display order.
GROUPS: dict[str, str] = {
    "gemm": "GEMM",
    "attn_prefill": "attention",
    "attn_decode": "attention",
    "conv1d": "causal conv1d",
    "conv1d_update": "causal conv1d",
    "allreduce": "all-reduce",
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


def mixture(profile: Profile) -> str:
    """Groups with their labels; groups sharing one label are listed together."""
    labels_by_group: dict[str, list[str]] = {}
    for name, fit in profile.kernels.items():
        group = GROUPS.get(family(name), name)
        labels = labels_by_group.setdefault(group, [])
        label = family_label(profile, fit)
        if label not in labels:
            labels.append(label)
    groups_by_label: dict[str, list[str]] = {}
    order = list(dict.fromkeys(GROUPS.values()))
    for group in sorted(labels_by_group, key=lambda g: order.index(g) if g in order else 99):
        text = " + ".join(labels_by_group[group])
        groups_by_label.setdefault(text, []).append(group)
    return "; ".join(f"{', '.join(groups)}: {text}" for text, groups in groups_by_label.items())


__all__ = ["GROUPS", "family_label", "family_source", "mixture"]
