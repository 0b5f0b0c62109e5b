"""A group-limited model's experts skip the fused-MoE tables timed at the collectors' group
tie (``twin.costmodel.moe_layout.group_tied_table``, read by ``Profile.table_picks``):
SGLang's 0.5.14 ``moe_perf`` rows route DeepSeek's shape to 4 tied groups of 8 (half
the experts), its 0.5.10 rows of the same Triton kernel to all (docs/decisions.md,
issue 31: the experts' tables of H200)."""

from __future__ import annotations

from twin.costmodel import moe_layout
from twin.costmodel.profile_store import load_profile
from twin.presets import resolve_model


def test_group_tied_table_is_sglang_from_0_5_14() -> None:
    assert moe_layout.group_tied_table("sglang", "0.5.14")
    assert moe_layout.group_tied_table("SGLang", "0.5.16")
    assert not moe_layout.group_tied_table("sglang", "0.5.10")
    assert not moe_layout.group_tied_table("vllm", "0.24.0")


def test_shipped_h200_sglang_deepseek_experts_skip_the_tied_table() -> None:
    prof = load_profile("h200", "sglang")
    family = "moe_fp8_block"
    fits = prof.table_releases[family]
    assert fits.default == "0.5.14" and "0.5.10" in fits.fits
    assert moe_layout.group_limited(resolve_model("deepseek-r1"))
    for release in ("0.5.14", "0.5.16", None):
        assert prof.table_picks(release, group_limited=True)[family] == "0.5.10"
        old = fits.fits["0.5.10"]
        assert prof.at_release(release, group_limited=True).kernels[family] is old
    # 0.5.9 read 0.5.10's table already; a plain top-k model keeps the release rule
    assert prof.table_picks("0.5.9", group_limited=True)[family] == "0.5.10"
    assert prof.table_picks("0.5.14").get(family, "0.5.14") == "0.5.14"
    assert prof.at_release("0.5.14").kernels[family] is prof.kernels[family]
    assert prof.at_release(None) is prof
