"""The MLA prefill modules read only the rows that timed the decompressed form (issue 34,
helper ``mla-prefill30``): vLLM runs a context batch whose every query is at most its MLA
decode backend's ``reorder_batch_threshold`` tokens through the absorbed decode path
(vllm 0.24.0: ``FLASH_ATTN_MLA`` 512, ``FLASHMLA`` 128, the others 1), and the module
collector names such a row by that backend (``aic_mla.VLLM_MLA_DECODE_SOURCES``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from twin.calibration import aic_mla
from twin.calibration.aic_tables import system_dir
from twin.costmodel.profile_store import load_profile

# vLLM 0.24.0's ``reorder_batch_threshold`` per MLA decode backend
# (``v1/attention/backends/mla/flashattn_mla.py`` 512, ``flashmla.py`` 128; the base
# ``MLACommonMetadataBuilder`` 1).
THRESHOLDS = {"FLASH_ATTN_MLA": 512, "FLASHMLA": 128, "FLASHINFER_MLA": 1, "TRITON_MLA": 1}


def _row(source: str, isl: int) -> dict[str, Any]:
    return {"batch_size": 1, "isl": isl, "step": 0, "num_heads": 16, "latency": 1e-4,
            "mla_dtype": "bfloat16", "kv_cache_dtype": "bfloat16", "gemm_type": "bfloat16",
            "model": "deepseek-ai/DeepSeek-V3", "kernel_source": source}  # fmt: skip


def test_the_rule_names_vllm_decode_backends_only() -> None:
    """A vLLM context row of a decode backend is not the prefill form; vLLM's prefill
    backends and TensorRT-LLM's ``default`` are."""
    assert not aic_mla.prefill_form("vllm", _row("FLASH_ATTN_MLA", 512))
    assert not aic_mla.prefill_form("vllm", _row("FLASHINFER_MLA", 1))
    assert not aic_mla.prefill_form("vllm", _row("TRITON_MLA", 1))
    assert aic_mla.prefill_form("vllm", _row("FLASH_ATTN", 1024))
    assert aic_mla.prefill_form("vllm", _row("TRTLLM_RAGGED", 16))
    assert aic_mla.prefill_form("trtllm", _row("default", 1))
    assert set(THRESHOLDS) <= aic_mla.VLLM_MLA_DECODE_SOURCES


def test_the_reader_drops_a_decode_path_context_row_and_keeps_the_decode_table(
    tmp_path: Path,
) -> None:
    """One H100 vLLM folder: of two context rows the ``FLASH_ATTN_MLA`` one is left out of
    ``mla_module_prefill``; a generation row of the same backend stays in
    ``mla_module_decode``."""
    folder = tmp_path / "h100_sxm" / "mla" / "vllm" / "0.24.0"
    folder.mkdir(parents=True)
    rows = [_row("FLASH_ATTN_MLA", 512), _row("FLASH_ATTN", 1024)]
    pq.write_table(pa.Table.from_pylist(rows), folder / "mla_context_module_perf.parquet")
    gen = {**_row("FLASH_ATTN_MLA", 1), "step": 1025}
    pq.write_table(pa.Table.from_pylist([gen]), folder / "mla_generation_module_perf.parquet")
    fams = {f.kernel: f for f in aic_mla.module_rows(tmp_path / "h100_sxm", "vllm")}
    assert [r["shape"]["s"] for r in fams["mla_module_prefill"].rows] == [1024]
    assert len(fams["mla_module_decode"].rows) == 1


def test_the_tables_switch_form_at_vllm_thresholds() -> None:
    """NVIDIA's vLLM 0.24.0 module tables (aiconfigurator-core 0.12.0): every context row
    of a decode backend is at most that backend's threshold, and the prefill families keep
    the rest: H100 bf16 KV from 1,024 prompt tokens (472 rows), fp8 KV from 256 (616);
    B200 from 16 (904: only one-token prompts ran ``FLASHINFER_MLA``)."""
    pytest.importorskip("aiconfigurator_core")
    import pandas as pd

    for gpu in ("h100", "b200"):
        table = system_dir(gpu) / "mla" / "vllm" / "0.24.0" / "mla_context_module_perf.parquet"
        df = pd.read_parquet(table)
        dec = df[df.kernel_source.isin(list(THRESHOLDS))]
        assert len(dec) and all(dec.isl <= dec.kernel_source.map(THRESHOLDS))
    want = {
        ("h100", "mla_module_prefill"): (472, 1024),
        ("h100", "mla_module_prefill_fp8kv"): (616, 256),
        ("b200", "mla_module_prefill"): (904, 16),
        ("b200", "mla_module_prefill_nvfp4_fp8kv"): (904, 16),
    }
    for (gpu, kernel), (n, shortest) in want.items():
        fam = next(f for f in aic_mla.module_rows(system_dir(gpu), "vllm") if f.kernel == kernel)
        assert (len(fam.rows), min(r["shape"]["s"] for r in fam.rows)) == (n, shortest)


@pytest.mark.parametrize("gpu", ["h100", "h200", "b200", "b300", "gb200", "gb300"])
def test_regenerated_vllm_prefill_modules_were_fitted_on_the_prefill_form(gpu: str) -> None:
    """The vLLM prefill modules regenerated with the rule were fitted from the prefill
    backend's rows alone (their provenance's ``kernel_source``: ``FLASH_ATTN``, where the
    fits before read ``FLASH_ATTN,FLASH_ATTN_MLA`` on H100); a regeneration without the
    rule, or a profile spliced back, fails here."""
    prof = load_profile(gpu, "vllm")
    fits = {k: f for k, f in prof.kernels.items() if k.startswith("mla_module_prefill")}
    assert fits
    for fit in fits.values():
        sources = set(str(fit.provenance["kernel_source"]).split(","))
        assert sources and not sources & aic_mla.VLLM_MLA_DECODE_SOURCES
