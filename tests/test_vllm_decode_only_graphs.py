"""InferenceMAX's B200 Llama-3.1-70B vLLM scripts capture graphs for decode batches only
(``cudagraph_mode`` ``FULL_DECODE_ONLY``): every step with a prompt runs eagerly, its host
time under the kernels (``EagerPrefillPricer(overlap=True)``,
``inferencemax_vllm.inferencemax_vllm_decode_only_graphs``)."""

from __future__ import annotations

import pytest
from silicon_rows import planned, silicon_row
from test_engine_helpers import ConstantPricer

from twin.engine.config import EngineConfig
from twin.engine.host_time import EagerPrefillPricer
from twin.errors import TwinError
from twin.presets import get_model
from twin.validate import silicon as sil
from twin.validate.silicon.inferencemax_vllm import inferencemax_vllm_decode_only_graphs

IMAX = "source_file=2026-04-06.csv; model=X; silicon_concurrency=4"


def _llama(**fields: object) -> sil.SiliconRow:
    base = {"source": IMAX, "model_path": "meta-llama/Llama-3.1-70B", "system": "b200_sxm"}
    base.update(backend_version="", precision="fp4", gemm_quant_mode="nvfp4", tp=8)
    base.update(moe_quant_mode=None)
    return silicon_row(**{**base, **fields})


def test_an_overlapped_eager_step_lasts_the_longer_of_kernels_and_host_time():
    series = EagerPrefillPricer(ConstantPricer(0.01), 0.02)
    under = EagerPrefillPricer(ConstantPricer(0.01), 0.02, overlap=True)
    hidden = EagerPrefillPricer(ConstantPricer(0.05), 0.02, overlap=True)
    assert series.step_time([(256, 0)], 8, 1000) == pytest.approx(0.03)
    assert under.step_time([(256, 0)], 8, 1000) == pytest.approx(0.02)  # host-bound
    assert hidden.step_time([(256, 0)], 8, 1000) == pytest.approx(0.05)  # kernels hide it
    assert under.step_time([], 64, 1000) == 0.01  # a decode step replays its graph
    assert "eager_overlap" not in EngineConfig().to_dict()
    assert EngineConfig.of(eager_overlap=True).to_dict()["eager_overlap"] is True
    with pytest.raises(TwinError, match="--eager-overlap: must be true or false"):
        EngineConfig.of(eager_overlap="maybe")  # a --deployment value that is no bool


def test_b200_llama_70b_rows_prefill_eagerly_at_every_size_under_the_kernels():
    dense = get_model("llama-3.1-70b")
    assert not dense.n_moe_layers
    for precision in ("fp4", "fp8"):
        row = _llama(precision=precision)
        assert inferencemax_vllm_decode_only_graphs(row) and sil.vllm_eager_overlaps(row)
        launches = sil.vllm_eager_launches(dense, 8)
        assert sil.eager_prefill_s(row, dense, "b200") == pytest.approx(
            sil.VLLM_OVERLAP_LAUNCH_S["b200"] * launches
        )
        sets = {"sets": {"max_num_batched_tokens": "8192", "max_num_seqs": "512"}}
        assert sil.vllm_graph_tokens(row, sets) == 0  # no graph for any prompt step
    # the Hopper scripts (piecewise graphs), other harnesses and named releases: not these
    for other in (
        _llama(system="h200_sxm"),
        _llama(system="h100_sxm"),
        _llama(source="x; measured=2025-12-05"),
        _llama(backend_version="0.19.0"),
        _llama(backend="sglang"),
    ):
        assert not inferencemax_vllm_decode_only_graphs(other)
    assert sil.eager_prefill_s(_llama(system="h200_sxm"), dense, "h200") == 0.0


def test_other_deployment_kinds_do_not_run_the_scripts_decode_only_graphs():
    # "defaults" and the generator's limits run vLLM's own piecewise graphs, not the
    # script's FULL_DECODE_ONLY: no overlap, no eager time for the dense model
    dense = get_model("llama-3.1-70b")
    row = _llama(precision="fp4")
    sets = {"sets": {"max_num_batched_tokens": "8192", "max_num_seqs": "512"}}
    for kind in ("defaults", "aiconfigurator"):
        assert not sil.vllm_eager_overlaps(row, kind)
        assert sil.eager_prefill_s(row, dense, "b200", kind=kind) == 0.0
        assert sil.vllm_graph_tokens(row, sets, kind) > 0


def test_a_planned_b200_llama_row_runs_its_eager_steps_under_the_kernels():
    pytest.importorskip("aiconfigurator_core")  # the model's config.json comes from the extra
    row = _llama(isl=1024, osl=1024, concurrency=8)
    plan = planned(row)
    assert plan.deployment["eager_graph_tokens"] == 0
    assert plan.deployment["eager_overlap"] is True
    assert plan.deployment["eager_prefill_s"] > 0
    hopper = planned(row, system="h200_sxm", precision="fp8", gemm_quant_mode="fp8")
    assert "eager_overlap" not in hopper.deployment
