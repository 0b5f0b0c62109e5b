"""SGLang's ignore-EOS adder (``twin.engine.sglang_batching``): where the radix cache is
off, prompts are taken whole while they fit the chunk budget and the one that crosses it is
cut, with no input-budget check before an add (SGLang 0.5.5 / 0.5.9 ``schedule_policy.py``
``PrefillAdder.add_one_req_ignore_eos``), and its own memory check; the scorer passes the
InferenceMAX B200 DeepSeek scripts' ``--disable-radix-cache``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
from silicon_rows import deepseek_row
from test_engine_helpers import ConstantPricer, run, single_turns, write_rows

from twin.engine.admission import DEFAULTS
from twin.engine.cost import Chunk
from twin.engine.modes import get_mode
from twin.presets import get_model
from twin.validate.silicon.inferencemax_sglang import inferencemax_sglang
from twin.workloads.schema import WorkloadRow


class RecordingPricer(ConstantPricer):
    """Every step takes one second; the steps' prefill chunks are kept."""

    def __init__(self) -> None:
        super().__init__(1.0)
        self.steps: list[list[Chunk]] = []

    def step_time(self, prefills: Sequence[Chunk], decode_batch: int, decode_context: int) -> float:
        self.steps.append(list(prefills))
        return self.step_s


def _first_batches(tmp_path, disabled: bool) -> list[list[Chunk]]:
    """Two 6-token prompts at once, chunk and input budgets both 8 (as the fp8 scripts'
    32,768 both, or the fp4 ones' 16,384 and SGLang's default)."""
    path = single_turns(tmp_path / "w.parquet", [0.0, 0.0], prompt_len=6, output_len=3)
    pricer = RecordingPricer()
    options = {"max_prefill_tokens": 8, "radix_cache_disabled": disabled}
    run(
        path,
        pricer,
        policy="vanilla",
        scheduler="sglang",
        max_batched_tokens=8,
        max_running=8,
        scheduler_options=options,
    )
    return pricer.steps[:2]


def test_the_ignore_eos_adder_cuts_the_prompt_that_crosses_the_chunk(tmp_path):
    """Radix cache off: A whole and B's first 2 tokens (trunc_len = rem_chunk_tokens), then
    B's last 4; add_one_req would leave B whole for the next batch (its 6 tokens are at
    least the 2 of input budget left: AddReqResult.OTHER)."""
    assert _first_batches(tmp_path, True) == [[(6, 0), (2, 0)], [(4, 2)]]
    assert _first_batches(tmp_path, False) == [[(6, 0)], [(6, 0)]]


def _second_admitted(tmp_path, disabled: bool) -> tuple[float, float]:
    """A (10 + 142 tokens) runs; B (10 + 150) arrives at 1.5, on a pool of 300 tokens.
    add_one_req's check admits B at once (room 300 - 12 - 0.7 x 140 = 190 > 10 + 150 + 1);
    the ignore-EOS one refuses it (sorted by output left, A 140 then B 150: 300 - 12 - 10
    - 140 x 2 < 2 x IGNORE_EOS_RESERVE_TOKENS), and batch_is_full holds B until A ends."""
    model = get_model("tiny-transformer")
    rng = np.random.default_rng(0)
    rows = [
        WorkloadRow(i, 0, t, None, rng.integers(0, 30000, 10, dtype=np.int32), False, None, out)
        for i, (t, out) in enumerate([(0.0, 142), (1.5, 150)])
    ]
    path = write_rows(tmp_path / "m.parquet", rows)
    _, recs = run(
        path,
        ConstantPricer(),
        model,
        policy="vanilla",
        preemption="retract",
        new_token_ratio=dict(DEFAULTS),
        scheduler="sglang",
        pool_bytes=300 * model.kv_bytes_per_token,
        scheduler_options={"radix_cache_disabled": disabled},
    )
    by = {r.row: r for r in recs}
    return by[1].admitted_s, by[0].completed_s


def test_the_ignore_eos_adder_keeps_room_for_every_running_output(tmp_path):
    admitted, a_done = _second_admitted(tmp_path, True)
    assert admitted == a_done
    admitted, a_done = _second_admitted(tmp_path, False)
    assert admitted == 2.0 < a_done


def test_disable_radix_cache_takes_the_ignore_eos_adder():
    """The mode's flag turns the cache off and names the adder; without it, neither."""
    model = get_model("tiny-transformer")
    sglang = get_mode("sglang")
    on = sglang.settings(model, {"disable_radix_cache": "true"})
    assert on["policy"] == "vanilla"
    assert on["scheduler_options"]["radix_cache_disabled"] is True
    off = sglang.settings(model, {})
    assert "radix_cache_disabled" not in off.get("scheduler_options", {})


def _deepseek(system: str, precision: str = "fp4", release: str = "0.5.9") -> dict[str, str]:
    empty = frozenset[str]()
    row = deepseek_row("2026-03-01", 16, csv="2026-03-25.csv", backend_version=release)
    rest = {"named_configs": empty, "point_configs": empty}
    return inferencemax_sglang(replace(row, system=system, precision=precision, **rest))


def test_every_deepseek_script_disables_the_radix_cache():
    """dsr1_fp{4,8}_b200.sh and dsr1_fp8_h200.sh at 12ba0ae and dsr1_*_b300.sh at e8924a6
    all pass --disable-radix-cache; a row no configuration covers gets no flags at all."""
    assert _deepseek("b200_sxm")["disable_radix_cache"] == "true"
    assert _deepseek("b200_sxm", "fp8")["disable_radix_cache"] == "true"
    assert _deepseek("h200_sxm", "fp8")["disable_radix_cache"] == "true"
    assert _deepseek("b300_sxm", "fp4", "0.5.10.post1")["disable_radix_cache"] == "true"
    assert _deepseek("b300_sxm", "fp8", "0.5.10.post1")["disable_radix_cache"] == "true"
    assert _deepseek("h200_sxm", "fp4") == {}
