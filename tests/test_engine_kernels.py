"""The table a release older than every collection reads follows the kernel it runs
(issue 31): ``twin.costmodel.engine_kernels`` (which kernel a release runs, which kernel
a table times) and ``table_release.pick_for_kernel`` (the release rule among the tables of
that kernel), read by ``Profile.table_picks``.

The shipped profiles (in the repository) carry every table's fit with its
``kernel_source``; no test here needs ``aiconfigurator-core``.
"""

from __future__ import annotations

import dataclasses

import pytest

from twin.costmodel import engine_kernels as ek
from twin.costmodel.profile import KernelFit, Profile, TableReleases
from twin.costmodel.profile_store import load_profile
from twin.costmodel.table_release import pick_for_kernel, pick_version, version_key

OAI = "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic"
MARLIN = "vllm_compressedtensorswna16marlinmoe_marlin_marlinexperts"


@pytest.mark.parametrize(
    ("runs", "release", "expected"),
    [
        ("k", "0.18.0", "0.24.0"),  # older than k's tables: the oldest table timing k
        ("j", "0.12.0", "0.19.0"),
        (None, "0.18.0", "0.12.0"),  # kernel unknown: pick_version over every table
        ("x", "0.18.0", "0.12.0"),  # no table times it: the same
        (None, "0.10.0", "0.12.0"),
        ("j", "0.30.0", "0.19.0"),  # the newest at or before it among its kernel's tables
        ("k", "0.30.0", "0.24.0"),
        ("k", "0.22.0", "0.24.0"),  # the nearest release timing k, not 0.19.0's other one
        ("j", None, "0.19.0"),  # no release: the newest of its kernel's tables
    ],
)
def test_pick_for_kernel(runs: str | None, release: str | None, expected: str) -> None:
    timed = {"0.24.0": "k", "0.19.0": "j", "0.12.0": None}
    assert pick_for_kernel(timed, release, runs) == expected


def test_pick_for_kernel_without_a_kernel_is_pick_version() -> None:
    timed = {"0.24.0": "k", "0.19.0": None, "0.22.0": "j", "nightly-dev": None}
    for release in (None, "", "0.12.0", "0.19.0", "0.20.0", "0.22.0", "0.30.0", "nightly"):
        assert pick_for_kernel(timed, release, None) == pick_version(timed, release)
        assert pick_for_kernel(timed, release, "absent") == pick_version(timed, release)
    assert pick_for_kernel({}, "0.18.0", "k") is None


@pytest.mark.parametrize(
    ("engine", "family", "gpu", "release", "kernel"),
    [
        ("vLLM", "moe_mxfp4", "h200", "0.18.0", ek.OAI_TRITON_MXFP4),
        ("vLLM", "moe_mxfp4", "h100", "0.15.1", ek.OAI_TRITON_MXFP4),
        ("vLLM", "moe_mxfp4", "h200", "0.19.0", ek.OAI_TRITON_MXFP4),
        ("vLLM", "moe_mxfp4", "b200", "0.15.1", ek.FLASHINFER_TRTLLM_MXFP4),
        ("vLLM", "moe_mxfp4", "b300", "0.19.0", ek.FLASHINFER_TRTLLM_MXFP4),
        ("vLLM", "moe_mxfp4", "b200", "0.15.0", None),  # before the releases read
        ("vLLM", "moe_mxfp4", "a100-80gb", "0.18.0", None),  # neither Hopper nor SM100
        ("vLLM", "moe_mxfp4", "h200", "0.19.1", None),  # after the releases read
        ("vLLM", "moe_mxfp4", "h200", "0.15.0", None),  # before them
        ("vLLM", "moe_int4_wo", "h200", "0.16.0", ek.MARLIN_WNA16),
        ("vLLM", "moe_int4_wo", "b200", "0.15.1", ek.MARLIN_WNA16),
        ("vLLM", "moe_int4_wo", "a100-80gb", "0.16.0", None),
        ("SGLang", "moe_int4_wo", "h200", "0.16.0", None),
        ("vLLM", "moe_fp8", "h200", "0.18.0", None),
        ("vLLM", "moe_fp8_block", "b200", "0.19.0", ek.FLASHINFER_TRTLLM_FP8_BLOCK),
        ("vLLM", "moe_fp8_block", "b300", "0.19.0", ek.FLASHINFER_TRTLLM_FP8_BLOCK),
        ("vLLM", "moe_fp8_block", "b200", "0.18.0", None),  # refuses float32 router logits
        ("vLLM", "moe_fp8_block", "b200", "0.17.0", None),
        ("vLLM", "moe_fp8_block", "h200", "0.19.0", None),  # Hopper: Triton first for TP
        ("vLLM", "moe_fp8", "b200", "0.19.0", None),
        ("vLLM", "moe_mxfp4", "h200", None, None),
        ("vLLM", "moe_mxfp4", "h200", "nightly-dev", None),
    ],
)
def test_release_kernel(
    engine: str, family: str, gpu: str, release: str | None, kernel: str | None
) -> None:
    assert ek.release_kernel(engine, family, gpu, release) == kernel


def test_rules_are_well_formed() -> None:
    timed = set(ek.TABLE_KERNELS.values())
    for rule in ek.RELEASE_KERNELS:
        low, high = version_key(rule.first), version_key(rule.last)
        assert low is not None and high is not None and low <= high
        assert rule.kernel in timed  # a rule no table times could never change a pick
        assert rule.source
    # the collector's int4 label times vLLM's Triton W4A16 kernel, not Marlin (its name)
    assert ek.table_kernel("vLLM", "vllm_marlin_int4_moe") == ek.TRITON_WNA16
    assert ek.table_kernel("vLLM", MARLIN) == ek.MARLIN_WNA16
    assert ek.table_kernel("SGLang", MARLIN) is None


def test_shipped_h200_vllm_old_releases_read_their_kernels_table() -> None:
    prof = load_profile("h200", "vllm")
    for family, label in (("moe_mxfp4", OAI), ("moe_int4_wo", MARLIN)):
        assert prof.kernels[family].provenance["kernel_source"] == label
        assert set(prof.table_releases[family].fits) == {"0.19.0"}
        for release in ("0.16.0", "0.18.0", "0.19.0"):
            assert prof.table_picks(release)[family] == "0.24.0"
            assert prof.at_release(release).kernels[family] is prof.kernels[family]
        # a release no rule covers: the release rule as before (0.19.0's table)
        assert prof.table_picks("0.20.0")[family] == "0.19.0"
        old = prof.table_releases[family].fits["0.19.0"]
        assert prof.at_release("0.20.0").kernels[family] is old
    # families without a rule keep the oldest table for a release older than every one
    for family in ("moe", "moe_fp8", "moe_fp8_block"):
        assert prof.table_picks("0.18.0")[family] == "0.19.0"
    assert prof.at_release(None) is prof


def test_shipped_b200_vllm_int4_follows_marlin_mxfp4_unchanged() -> None:
    prof = load_profile("b200", "vllm")
    assert prof.table_picks("0.15.1")["moe_int4_wo"] == "0.24.0"
    # the 0.22.0 int4 rows are the old collector's (Triton W4A16): not preferred either
    assert set(prof.table_releases["moe_int4_wo"].fits) == {"0.19.0", "0.22.0"}
    assert prof.table_picks("0.15.1")["moe_nvfp4"] == "0.19.0"


def test_shipped_b200_vllm_mxfp4_reads_the_trtllm_gen_table() -> None:
    """vLLM 0.15.1-0.19.0 run gpt-oss's experts on SM100 with FlashInfer's TRT-LLM-gen
    MXFP4 kernel: the 0.24.0 table that times it, not 0.19.0's ``vllm_mxfp4_moe`` module
    (3.7-4x slower from 1,024 tokens at gpt-oss's shape)."""
    prof = load_profile("b200", "vllm")
    fam = "moe_mxfp4"
    trtllm = ek.table_kernel("vLLM", str(prof.kernels[fam].provenance["kernel_source"]))
    assert trtllm == ek.FLASHINFER_TRTLLM_MXFP4
    for release in ("0.15.1", "0.18.0", "0.19.0"):
        assert prof.table_picks(release)[fam] == "0.24.0"
        assert prof.at_release(release).kernels[fam] is prof.kernels[fam]
    assert prof.table_picks("0.20.0")[fam] == "0.19.0"  # no rule: the release rule


def test_shipped_b200_vllm_block_fp8_experts_read_flashinfer_at_0_19_0() -> None:
    """vLLM 0.19.0 runs block-fp8 experts on SM100 with FlashInfer's TRT-LLM-gen kernel
    (``TrtLlmFp8ExpertsModular``): the 0.24.0 table that times it, not 0.19.0's Triton
    ``vllm_fused_moe`` rows (about twice as slow at 80-256 tokens at MiniMax-M2.5's
    shape). A release no rule covers keeps the oldest table (Triton)."""
    prof = load_profile("b200", "vllm")
    fam = "moe_fp8_block"
    default = ek.table_kernel("vLLM", str(prof.kernels[fam].provenance["kernel_source"]))
    assert default == ek.FLASHINFER_TRTLLM_FP8_BLOCK
    old = prof.table_releases[fam].fits["0.19.0"]
    assert ek.table_kernel("vLLM", str(old.provenance["kernel_source"])) == ek.TRITON_FUSED_MOE
    assert prof.table_picks("0.19.0")[fam] == "0.24.0"
    assert prof.at_release("0.19.0").kernels[fam] is prof.kernels[fam]
    for release in ("0.17.0", "0.18.0"):
        assert prof.table_picks(release)[fam] == "0.19.0"
        assert prof.at_release(release).kernels[fam] is old
    # the other fp8 families have no rule: 0.19.0's own tables as before
    for other in ("moe", "moe_fp8"):
        assert prof.table_picks("0.19.0")[other] == "0.19.0"


def _relabelled(prof: Profile, family: str, labels: dict[str, str]) -> Profile:
    """``prof`` with ``family``'s fits re-labelled (release -> kernel_source)."""

    def label(fit: KernelFit, release: str) -> KernelFit:
        return dataclasses.replace(
            fit, provenance={**fit.provenance, "kernel_source": labels[release]}
        )

    rel = prof.table_releases[family]
    fits = {v: label(f, v) for v, f in rel.fits.items()}
    kernels = {**prof.kernels, family: label(prof.kernels[family], rel.default)}
    releases = {**prof.table_releases, family: TableReleases(rel.default, fits)}
    return dataclasses.replace(prof, kernels=kernels, table_releases=releases)


def test_the_pick_follows_the_tables_labels() -> None:
    """The choice comes from each table's kernel, not from which release it is: with the
    shipped labels a 0.18.0 run reads the 0.24.0 table, with the labels swapped the 0.19.0
    one; with both timing its kernel, the
    nearest one (0.19.0, the oldest); with neither, the oldest as before."""
    prof = load_profile("h200", "vllm")
    fam = "moe_mxfp4"
    real = _relabelled(prof, fam, {"0.24.0": OAI, "0.19.0": "vllm_mxfp4_moe"})
    assert real.table_picks("0.18.0")[fam] == "0.24.0"
    swapped = _relabelled(prof, fam, {"0.24.0": "vllm_mxfp4_moe", "0.19.0": OAI})
    assert swapped.table_picks("0.18.0")[fam] == "0.19.0"
    both = _relabelled(prof, fam, {"0.24.0": OAI, "0.19.0": OAI})
    assert both.table_picks("0.18.0")[fam] == "0.19.0"
    assert both.table_picks("0.24.0")[fam] == "0.24.0"
    neither = _relabelled(prof, fam, {"0.24.0": "other", "0.19.0": "other"})
    assert neither.table_picks("0.18.0")[fam] == "0.19.0"
    # another GPU name: no rule, the release rule as before
    assert dataclasses.replace(prof, gpu="b200").table_picks("0.18.0")[fam] == "0.19.0"
