"""One measured row of ``silicon_sample.csv`` for a test: every field empty but those given."""

from __future__ import annotations

import dataclasses
from typing import Any

from twin.validate import silicon as sil


def silicon_row(**fields: Any) -> sil.SiliconRow:
    """A ``SiliconRow``: an aggregated vLLM 0.16.0 row of gpt-oss-120b on H200 in fp4 (the
    fields a row is planned from), every other field None, ``fields`` over them."""
    base: dict[str, Any] = {f.name: None for f in dataclasses.fields(sil.SiliconRow)}
    base.update(id="r", source="", backend="vllm", backend_version="0.16.0", mode="agg")
    base.update(model_path="openai/gpt-oss-120b", system="h200_sxm", precision="fp4")
    base.update(gemm_quant_mode="nvfp4", moe_quant_mode="nvfp4", copy_in_fit=False)
    base.update(csv_layout="")
    base.update(fields)
    return sil.SiliconRow(**base)
