"""The shipped profiles: measured ones by default where NVIDIA's tables cover the GPU,
``--engine`` choosing whose kernels, the datasheet ones reachable by name."""

from __future__ import annotations

import pytest

from twin.calibration.aic_tables import SYSTEMS
from twin.costmodel import CostModel
from twin.costmodel.kernel_sources import KERNEL_SOURCES
from twin.costmodel.profile_store import load_profile, resolve_profile, shipped_profiles
from twin.errors import TwinError
from twin.hardware import get_gpu
from twin.presets import get_model

MEASURED = [n for n in shipped_profiles() if n.rsplit("-", 1)[-1] in KERNEL_SOURCES]


def test_every_gpu_of_the_database_ships_a_measured_profile_per_engine() -> None:
    for gpu in SYSTEMS:
        for engine in KERNEL_SOURCES:
            assert f"{gpu}-{engine}" in shipped_profiles(), (gpu, engine)
        get_gpu(gpu)  # and has a GpuSpec


def test_a_gpu_name_means_its_measured_profile_for_vllm() -> None:
    p = load_profile("h100")
    assert p.source == "mixed"
    assert p.provenance["engine"] == "vllm"
    assert p.kernels["attn_prefill"].provenance["source"] == "measured"
    assert "vLLM" in p.provenance_label and "SSM scan" in p.provenance_label
    assert load_profile("h100", "sglang").provenance["engine"] == "sglang"
    assert resolve_profile("b200", None, "trtllm").provenance["engine"] == "trtllm"
    # the datasheet profile stays reachable by its full name; GPUs outside the tables keep it
    assert load_profile("h100-datasheet").source == "datasheet"
    assert load_profile("l4").source == "datasheet"
    with pytest.raises(TwinError, match="no sglang profile for --gpu l4"):
        load_profile("l4", "sglang")
    with pytest.raises(TwinError, match="--engine 'tgi'"):
        load_profile("h100", "tgi")


def test_shipped_profiles_carry_their_gpus_memory() -> None:
    # The engines size their pools from the driver's total (twin.hardware): every shipped
    # GPU profile, measured or datasheet, carries its GpuSpec's bytes, not a stale copy.
    names = [n for n in shipped_profiles() if n != "cpu"]
    assert len(names) > len(SYSTEMS)
    for name in names:
        p = load_profile(name)
        assert p.peaks["mem_bytes"] == get_gpu(p.gpu).hbm_bytes, name


@pytest.mark.parametrize("name", MEASURED)
def test_measured_profiles_price_monotonically(name: str) -> None:
    p = load_profile(name)
    for fit in p.kernels.values():
        if fit.provenance.get("source") == "measured":
            assert fit.n_heldout > 0 and fit.heldout_median_rel_err is not None
    cm = CostModel(get_model("marconi-hybrid-7b"), p)
    pre = [cm.prefill(n) for n in (1, 64, 512, 4096, 16384)]
    assert pre == sorted(pre) and len(set(pre)) == len(pre)
    dec = [cm.decode([2048] * b) for b in (1, 8, 64, 256)]
    assert dec == sorted(dec)
    assert cm.prefill(1000, 3000) <= cm.prefill(4000)
