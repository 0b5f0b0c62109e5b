"""``twin calibrate --merge A.json B.json ...``: one profile from several, per kernel family.

Each family is taken from the first profile that measured it (per-family source
``measured`` or ``transferred``); a family no profile measured comes from the first
profile that has it. So ``--merge h100-vllm.json own-h100.json`` keeps NVIDIA's
GEMM and attention fits and takes the Mamba2 scan, state update and copies from
the own-GPU measurement instead of the datasheet. Every family keeps (or gains)
its provenance label, so the merged profile says where each number comes from.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from dataclasses import replace

from twin.costmodel.profile import KernelFit, Profile
from twin.costmodel.provenance import family_label, family_source
from twin.errors import TwinError


def merge_profiles(profiles: Sequence[Profile], names: Sequence[str] | None = None) -> Profile:
    """The per-family merge described in the module docstring (first profile's peaks)."""
    if len(profiles) < 2:
        raise TwinError("--merge needs at least two profiles")
    names = list(names or [p.gpu for p in profiles])
    first = profiles[0]
    for p, name in zip(profiles[1:], names[1:], strict=True):
        if p.gpu != first.gpu:
            raise TwinError(
                f"--merge {name}: profile of {p.gpu!r}, but {names[0]} is of {first.gpu!r}; "
                "merge profiles of one GPU"
            )
    chosen: dict[str, tuple[KernelFit, Profile, str]] = {}
    for p, name in zip(profiles, names, strict=True):
        for kernel, fit in p.kernels.items():
            held = chosen.get(kernel)
            measured = family_source(p, fit) != "datasheet"
            if held is None or (measured and family_source(held[1], held[0]) == "datasheet"):
                chosen[kernel] = (fit, p, name)
    kernels = {}
    for kernel, (fit, p, name) in chosen.items():
        prov = dict(fit.provenance) or {"source": family_source(p, fit)}
        prov.setdefault("label", family_label(p, fit))
        prov["merged_from"] = name
        kernels[kernel] = replace(fit, params=dict(fit.params), provenance=prov)
    sources = {k.provenance["source"] for k in kernels.values()}
    overheads = [p.layer_overhead for p in profiles if p.layer_overhead is not None]
    return Profile(
        gpu=first.gpu,
        device=first.device,
        source=sources.pop() if len(sources) == 1 else "mixed",
        # The first's peaks, plus the FP8/FP4 peaks a later profile's precision fits need.
        peaks={**{k: v for p in profiles for k, v in p.peaks.items()}, **first.peaks},
        kernels=kernels,
        provenance={
            "date": _dt.date.today().isoformat(),
            "merged": list(names),
            "method": "per family: the first profile that measured it, else the first",
        },
        dtype=first.dtype,
        # Host overhead describes an eager executor: kept only if a source carried it.
        layer_overhead=overheads[0] if overheads else None,
    )


__all__ = ["merge_profiles"]
