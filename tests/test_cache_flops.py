"""``PrefillFlops``: the cache's fast prefill-FLOP count equals the model's own, to the bit,
for every preset, including those mixing full and sliding-window attention."""

from __future__ import annotations

import dataclasses

import pytest

from twin.cache import PrefillFlops
from twin.presets import PRESETS, get_model

# Prompt lengths and cached contexts on both sides of the presets' windows (8, 128, 1024).
_GRID = [(n, c) for n in (1, 2, 7, 9, 127, 129, 1000, 5000) for c in (0, 1, 6, 120, 1023, 70000)]


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_is_priced_by_the_formula_exactly(name: str) -> None:
    model = get_model(name)
    flops = PrefillFlops(model)
    assert flops.exact  # no fallback to the model, gpt-oss and Gemma-3 included
    for n, c in _GRID:
        assert flops.total(n, c) == model.prefill_flops(n, c).total, (n, c)


def test_full_and_windowed_layers_each_count_their_own_keys() -> None:
    """Past the window a full-attention layer keeps paying for every key and a windowed
    one for ``sliding_window``: one coefficient for both would miss one or the other."""
    model = get_model("gpt-oss-20b")
    flops = PrefillFlops(model)
    assert flops.quad_full > 0 and flops.quad_window > 0
    w = model.sliding_window
    assert w is not None
    # One more token at context 10 w: full layers see 10 w + 1 keys, windowed ones w.
    extra = flops.total(1, 10 * w) - flops.total(1, 0)
    assert extra == flops.quad_full * 10 * w + flops.quad_window * (w - 1)


def test_a_window_of_one_token_is_linear() -> None:
    model = dataclasses.replace(get_model("tiny-swa"), sliding_window=1)
    flops = PrefillFlops(model)
    assert flops.exact and flops.quad_window == 0
    for n, c in _GRID:
        assert flops.total(n, c) == model.prefill_flops(n, c).total
