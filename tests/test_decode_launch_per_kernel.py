"""The attention decode families' third extra is the launch of the kernel each table times
(``features.decode_launch_rule``, issue 34, helper attnfix39): FA3 / FA2's packed grid over the
SMs, FlashInfer's grid over ``FLASHINFER_BLOCKS_PER_SM`` CTAs a SM, TensorRT-LLM Hopper's XQA
CTAs (coefficient ``c_xqa_ctas``), the FA3 grid kept where no launch source was read."""

from __future__ import annotations

import json
from itertools import accumulate, pairwise
from pathlib import Path

import numpy as np
import pytest

from twin.costmodel import features as ft
from twin.costmodel import latency as lat
from twin.costmodel.profile import Profile

PROFILES = Path(__file__).resolve().parents[1] / "twin" / "calibration" / "profiles"
B200_SMS = 148
DECODE = ("attn_decode", "attn_decode_fp8kv")

# The kernel each shipped measured decode table times, by profile (engine, GPU) and family.
EXPECTED = {
    **{f"{g}-{e}": ft.FA3_GRID_RULE for g in ("h100", "h200") for e in ("vllm", "sglang")},
    **{f"{g}-vllm": ft.FA2_GRID_RULE for g in ("a100-80gb", "l40s", "rtx-pro-6000")},
    **{
        f"{g}-sglang": ft.FLASHINFER_GRID_RULE
        for g in ("b200", "b300", "gb200", "gb300", "l40s", "rtx-pro-6000")
    },
}


def _rule(name: str, family: str) -> str:
    fit = json.loads((PROFILES / f"{name}.json").read_text())["kernels"][family]
    src = fit.get("provenance") or {}
    return ft.decode_launch_rule(
        family,
        str(src.get("framework", "")),
        str(src.get("device", "")),
        str(src.get("kernel_source", "")),
    )


def test_every_shipped_decode_table_takes_its_kernels_rule() -> None:
    """All 27 + 22 measured decode fits: the rule their provenance names; TensorRT-LLM's bf16-KV
    Hopper tables XQA; every other (TensorRT-LLM elsewhere, vLLM's trtllm-gen decode, SGLang's
    A100 ``flash_attention``, TensorRT-LLM Hopper fp8 KV) the unread rule; datasheets too."""
    seen = {f: 0 for f in DECODE}
    for path in sorted(PROFILES.glob("*.json")):
        data = json.loads(path.read_text())
        for family in DECODE:
            if family not in data.get("kernels", {}):
                continue
            rule = _rule(path.stem, family)
            if path.stem.endswith("-datasheet") or path.stem == "cpu":
                assert rule == ft.UNREAD_GRID_RULE, path.stem
                continue
            seen[family] += 1
            if path.stem in ("h100-trtllm", "h200-trtllm") and family == "attn_decode":
                want = ft.TRTLLM_XQA_RULE
            else:
                want = EXPECTED.get(path.stem, ft.UNREAD_GRID_RULE)
            assert rule == want, (path.stem, family, rule)
    assert seen == {"attn_decode": 27, "attn_decode_fp8kv": 22}


def test_flashinfer_waves_at_known_shapes() -> None:
    """``ceil(batch x kv_heads x ceil(group / cta_tile_q) / (2 x SMs)) x head_dim``: a B200
    holds 296 (sequence, KV head) CTAs a wave at two a SM; FA3's grid one a SM."""
    assert ft.FLASHINFER_BLOCKS_PER_SM == 2
    assert ft.flashinfer_decode_waves(296, 8, 1, 128, B200_SMS) == 128.0
    assert ft.flashinfer_decode_waves(297, 8, 1, 128, B200_SMS) == 256.0
    assert ft.attn_decode_waves_d(296, 8, 1, 128, B200_SMS) == 256.0
    # FlashInfer's tile of packed rows: 16 up to 16, 64 up to 64, then 128 (FA3's 64 rows).
    assert [ft.flashinfer_cta_tile_q(g) for g in (1, 4, 16, 17, 64, 65, 128)] == [
        16,
        16,
        16,
        64,
        64,
        128,
        128,
    ]
    assert ft.flashinfer_decode_waves(296, 96, 1, 128, B200_SMS) == 128.0  # one 128-row tile
    assert ft.attn_decode_waves_d(296, 96, 1, 128, B200_SMS) == 512.0  # two 64-row blocks
    assert ft.flashinfer_decode_waves(296, 8, 1, 128, None) == 0.0
    # Non-decreasing in the batch; constant in the keys (the affine runs stay affine).
    waves = [ft.flashinfer_decode_waves(b, 32, 8, 128, B200_SMS) for b in range(1, 400)]
    assert all(a <= b for a, b in pairwise(waves))
    rule = ft.FLASHINFER_GRID_RULE
    for keys in (37, 3700, 370000):
        z = ft.attn_decode_sums(37, keys, 32, 8, 128, 2, None, B200_SMS, rule)[4]
        assert z == ft.flashinfer_decode_waves(37, 32, 8, 128, B200_SMS)
    many = ft.attn_decode_sums(37, np.array([37.0, 3700.0]), 32, 8, 128, 2, None, B200_SMS, rule)
    assert many[4] == ft.flashinfer_decode_waves(37, 32, 8, 128, B200_SMS)


def test_fa2_and_unread_rules_price_as_fa3() -> None:
    """FA2's split-KV grid is FA3's CTAs (``seqlenq_ngroups_swapped``, 64-row block); the
    unread tables keep that feature: the launch extra is the same function for all three."""
    for rule in (ft.FA3_GRID_RULE, ft.FA2_GRID_RULE, ft.UNREAD_GRID_RULE):
        for b in (1, 7, 132, 133, 500):
            assert ft.attn_decode_launch(b, b * 900, 64, 8, 128, 132, rule) == (
                ft.attn_decode_waves_d(b, 64, 8, 128, 132),
                0.0,
            )
        assert ft.launch_code(rule) == 0
    assert ft.launch_code(ft.TRTLLM_XQA_RULE) == 1
    assert ft.launch_code(ft.FLASHINFER_GRID_RULE) == 2


def test_a_flashinfer_serving_step_prices_its_grid_in_every_path() -> None:
    """On b200-sglang (FlashInfer tables): the model reads the rule from the fit's provenance;
    the step, the decode runs (tight loop and arrays), the compiled step and the decode fill
    agree, and the step's decode kernel carries FlashInfer's waves, not FA3's."""
    from twin.costmodel import CostModel
    from twin.costmodel import compiled as dk
    from twin.costmodel.profile_store import resolve_profile
    from twin.presets import get_model

    prof = resolve_profile("b200", None, "sglang")
    plain = CostModel(get_model("llama-3-8b"), prof)
    assert plain.decode_rule == ft.FLASHINFER_GRID_RULE
    compiled = CostModel(get_model("llama-3-8b"), prof)
    assert compiled.compile_steps()
    for batch, context in ((1, 100), (36, 36 * 2000), (37, 37 * 2000), (40, 40 * 3000)):
        want = plain.step_spread((), batch, context)
        assert compiled.step_spread((), batch, context) == want, (batch, context)
        assert plain.decode_steps_s(batch, [context])[0] == want
    many = list(range(100, 2000, 3))
    assert plain.decode_steps_s(1, many) == [plain.step_spread((), 1, c) for c in many]
    c = compiled.decode_run_constants(37)
    assert c is not None
    ends = np.zeros(200)
    dk.fill_ends(c, 37 * 101, 37, ends, 0, 200)
    steps = plain.decode_steps_s(37, range(37 * 100, 37 * 100 + 37 * 200, 37))
    assert ends.tolist() == list(accumulate(steps))
    # The kernel's extra: 8 KV heads x 37 sequences = 296 CTAs, one FlashInfer wave; FA3's two.
    fit = prof.kernels["attn_decode"]
    fn = lat.compile_kernel("attn_decode", fit.params, prof.peaks)
    flops, nbytes, ex = ft.attn_decode_features(
        37, 2000, 32, 8, 128, 2, None, 148, plain.decode_rule
    )
    assert ex["waves_d"] == 128.0 == ft.flashinfer_decode_waves(37, 32, 8, 128, 148)
    assert fn(flops, nbytes, ex) > 0


def _merge_stage_xqa_fit(coefficient: str = "c_waves_d") -> dict[str, object]:
    """h100-trtllm's ``attn_decode`` fit as written before the rename (``c_waves_d``; with
    ``c_xqa_ctas``: as attnfix39 wrote it), under the slot's model name."""
    data = json.loads((PROFILES / "h100-trtllm.json").read_text())
    fit = data["kernels"]["attn_decode"]
    fit["params"] = {(coefficient if k == "c_xqa_ctas" else k): v for k, v in fit["params"].items()}
    fit["model"] = "roofline+score_elems+tiles+waves_d"
    return data


def test_the_xqa_fits_model_name_says_what_its_coefficient_prices(tmp_path: Path) -> None:
    """The XQA fit's model name carries its coefficient's name
    (``KernelFormula.model_name_of``, review39): the shipped files say
    ``roofline+score_elems+tiles+xqa_ctas``; a file of either earlier form (``+waves_d`` with
    ``c_waves_d``, before attnfix39, or with ``c_xqa_ctas``, attnfix39's) loads to the same fit
    and saves with the new name; the FA3 / FlashInfer / unread fits keep ``+waves_d``; a stale
    name is still refused."""
    from twin.costmodel import formulas as fm
    from twin.errors import TwinError

    xqa = "roofline+score_elems+tiles+xqa_ctas"
    shipped = json.loads((PROFILES / "h100-trtllm.json").read_text())["kernels"]
    assert shipped["attn_decode"]["model"] == xqa
    assert shipped["attn_decode_fp8kv"]["model"] == fm.get_formula("attn_decode").model_name
    new = Profile.load(PROFILES / "h100-trtllm.json")
    assert new.kernels["attn_decode"].model == xqa
    assert Profile.load(PROFILES / "b200-sglang.json").kernels["attn_decode"].model == (
        "roofline+score_elems+tiles+flashinfer_waves"
    )
    assert Profile.load(PROFILES / "h100-sglang.json").kernels["attn_decode"].model == (
        "roofline+score_elems+tiles+waves_d"
    )
    for coefficient in ("c_waves_d", "c_xqa_ctas"):
        path = tmp_path / f"{coefficient}.json"
        path.write_text(json.dumps(_merge_stage_xqa_fit(coefficient)))
        old = Profile.load(path)
        assert old.kernels["attn_decode"].model == xqa
        assert old.kernels["attn_decode"].params == new.kernels["attn_decode"].params
        saved = json.loads(old.save(tmp_path / "again.json").read_text())
        assert saved["kernels"]["attn_decode"]["model"] == xqa
    stale = _merge_stage_xqa_fit()
    stale["kernels"]["attn_decode"]["model"] = "roofline+score_elems+tiles+ctas"  # type: ignore[index]
    (tmp_path / "stale.json").write_text(json.dumps(stale))
    with pytest.raises(TwinError, match="is not this version's"):
        Profile.load(tmp_path / "stale.json")


def test_the_xqa_coefficient_is_named_and_an_old_file_prices_identically(tmp_path: Path) -> None:
    """The shipped XQA fits carry ``c_xqa_ctas``; a file written with ``c_waves_d`` loads as
    it (``fit_upgrade.upgrade_fit``), at the same value, and prices every decode shape to the bit;
    saved again it carries the new name. FA3 / FA2 / unread fits keep ``c_waves_d``; SGLang's
    FlashInfer fits carry ``c_flashinfer_waves``."""
    new = Profile.load(PROFILES / "h100-trtllm.json")
    assert "c_xqa_ctas" in new.kernels["attn_decode"].params
    assert "c_waves_d" not in new.kernels["attn_decode"].params
    assert "c_waves_d" in new.kernels["attn_decode_fp8kv"].params
    b200 = Profile.load(PROFILES / "b200-sglang.json").kernels["attn_decode"].params
    assert "c_flashinfer_waves" in b200 and "c_waves_d" not in b200
    assert "c_waves_d" in Profile.load(PROFILES / "h100-sglang.json").kernels["attn_decode"].params
    old_file = tmp_path / "old.json"
    old_file.write_text(json.dumps(_merge_stage_xqa_fit(), indent=2) + "\n")
    old = Profile.load(old_file)
    assert old.kernels["attn_decode"].params == new.kernels["attn_decode"].params
    fo = lat.compile_kernel("attn_decode", old.kernels["attn_decode"].params, old.peaks)
    fn = lat.compile_kernel("attn_decode", new.kernels["attn_decode"].params, new.peaks)
    for b, c in ((1, 100), (1, 700), (8, 4096), (64, 1000)):
        f, n, ex = ft.attn_decode_features(b, c, 32, 8, 128, 2, None, 132, ft.TRTLLM_XQA_RULE)
        assert fo(f, n, ex) == fn(f, n, ex)
    # A fit that names its coefficient either way prices the same (read by position).
    params = dict(new.kernels["attn_decode"].params)
    renamed = {("c_waves_d" if k == "c_xqa_ctas" else k): v for k, v in params.items()}
    assert lat.kernel_constants("attn_decode", params, new.peaks) == lat.kernel_constants(
        "attn_decode", renamed, new.peaks
    )
    saved = json.loads(old.save(tmp_path / "again.json").read_text())
    assert "c_xqa_ctas" in saved["kernels"]["attn_decode"]["params"]
    shipped = json.loads((PROFILES / "h100-trtllm.json").read_text())
    assert saved["kernels"]["attn_decode"]["params"] == shipped["kernels"]["attn_decode"]["params"]


def test_the_compiled_step_takes_flashinfers_128_row_tile_above_a_group_of_64() -> None:
    """At a group of 96 (one 128-row tile a KV head, ``flashinfer_cta_tile_q``, where a 64-row
    tile would launch two) the compiled step, the decode runs and the step agree on
    b200-sglang across a wave's edge (review39: at a group of 64 or less every tile holds the
    group, so no other test tells the tiles apart). The compiled step compiles the rule itself
    (``features.decode_launch``); this checks it is handed the FlashInfer launch code and
    the heads as the Python step prices them."""
    from dataclasses import replace

    from twin.costmodel import CostModel
    from twin.costmodel.profile_store import resolve_profile
    from twin.presets import get_model

    prof = resolve_profile("b200", None, "sglang")
    model = replace(get_model("llama-3-8b"), n_heads=96, n_kv_heads=1, head_dim=128)
    plain = CostModel(model, prof)
    compiled = CostModel(model, prof)
    assert compiled.compile_steps()
    assert ft.flashinfer_decode_waves(297, 96, 1, 128, B200_SMS) == 256.0  # 297 CTAs: 2 waves
    for batch, context in ((1, 100), (296, 296 * 500), (297, 297 * 500), (600, 600 * 300)):
        want = plain.step_spread((), batch, context)
        assert compiled.step_spread((), batch, context) == want, (batch, context)
        assert plain.decode_steps_s(batch, [context])[0] == want


def _flashinfer_file(tmp_path: Path, coefficient: str, where: str = "kernels") -> Path:
    """b200-sglang's profile with its FlashInfer ``attn_decode`` fit's launch coefficient named
    ``coefficient`` (the slot's ``c_waves_d``: as a file written before session 40), in
    ``kernels`` or as another release's fit in ``table_releases``."""
    data = json.loads((PROFILES / "b200-sglang.json").read_text())
    fit = data["kernels"]["attn_decode"]
    fit["params"] = {
        (coefficient if k == "c_flashinfer_waves" else k): v for k, v in fit["params"].items()
    }
    fit["model"] = "roofline+score_elems+tiles+" + coefficient.removeprefix("c_")
    if where == "table_releases":
        data["kernels"]["attn_decode"] = json.loads((PROFILES / "b200-sglang.json").read_text())[
            "kernels"
        ]["attn_decode"]
        data.setdefault("table_releases", {})["attn_decode"] = {
            "default": "0.5.14",
            "fits": {"0.5.6": fit},
        }
    path = tmp_path / f"{coefficient}-{where}.json"
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


@pytest.mark.parametrize("where", ["kernels", "table_releases"])
def test_a_flashinfer_fit_under_the_slot_name_is_refused(tmp_path: Path, where: str) -> None:
    """A FlashInfer decode fit read from a file under ``c_waves_d`` is ambiguous (FA3's grid
    before attnfix39, FlashInfer's after; review39's first item): loading refuses it with one
    line naming the fit and the refit; ``--refit``'s ``drop`` of the family loads the rest;
    under its own name it loads and prices as the shipped file."""
    from twin.errors import TwinError

    path = _flashinfer_file(tmp_path, "c_waves_d", where)
    with pytest.raises(TwinError) as err:
        Profile.load(path)
    text = str(err.value)
    assert "\n" not in text and str(path) in text and "--refit attn_decode" in text
    assert ("kernels.attn_decode" if where == "kernels" else "fits.0.5.6") in text
    kept = Profile.load(path, drop=lambda k: k.startswith("attn_decode"))
    assert "attn_decode" not in kept.kernels
    ok = Profile.load(_flashinfer_file(tmp_path, "c_flashinfer_waves"))
    shipped = Profile.load(PROFILES / "b200-sglang.json")
    assert ok.kernels["attn_decode"].params == shipped.kernels["attn_decode"].params


def test_a_flashinfer_fit_made_in_code_is_named_for_its_grid() -> None:
    """The fitter writes the formula's slot name (``c_waves_d``); a profile built from such a
    fit names it for FlashInfer's grid, and an FA3 fit keeps the slot's name."""
    from dataclasses import replace

    shipped = Profile.load(PROFILES / "b200-sglang.json")
    fit = shipped.kernels["attn_decode"]
    slot = {("c_waves_d" if k == "c_flashinfer_waves" else k): v for k, v in fit.params.items()}
    made = replace(
        shipped,
        kernels={
            **shipped.kernels,
            "attn_decode": replace(fit, params=slot, model="roofline+score_elems+tiles+waves_d"),
        },
    )
    assert made.kernels["attn_decode"].params == fit.params
    assert made.kernels["attn_decode"].model.endswith("+flashinfer_waves")
    fa3 = Profile.load(PROFILES / "h100-sglang.json").kernels["attn_decode"]
    assert "c_waves_d" in fa3.params and fa3.model.endswith("+waves_d")


def test_a_malformed_field_is_named_before_a_stale_fit(tmp_path: Path) -> None:
    """The launch-name refusal runs after every field is parsed (review40's fourth item): a file
    whose ``gpu`` is not text and whose FlashInfer fit is stale names the ``gpu`` first, as
    before the refusal existed."""
    from twin.errors import TwinError

    path = _flashinfer_file(tmp_path, "c_waves_d")
    data = json.loads(path.read_text())
    data["gpu"] = 5
    path.write_text(json.dumps(data))
    with pytest.raises(TwinError, match=r"\bgpu\b") as err:
        Profile.load(path)
    assert "launch coefficient" not in str(err.value)
