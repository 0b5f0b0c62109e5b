"""Speculative decoding under attention data parallelism: every forward of an iteration
(the verification and each draft pass) is a synchronised step of the ranks
(``twin.engine.speculative_pricing.SpeculativePricer.sync_time`` over
``twin.engine.dp_pricing.DPStepPricer``)."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from twin.cli.main import run as twin
from twin.costmodel.profile_store import load_profile
from twin.engine.config import ClusterConfig, EngineConfig, EngineModeConfig
from twin.engine.dp_pricing import IDLE, DPStepPricer, SyncPricer, dp_pricer
from twin.engine.speculative import Speculation
from twin.engine.speculative_pricing import SpeculativePricer, speculative_pricer
from twin.errors import TwinError
from twin.parallel import Layout, weight_bytes_per_gpu
from twin.presets import get_model

MTP = Speculation("mtp", 3, 4, 3.0, "test", extend_tokens=4)


def _pricers() -> tuple[DPStepPricer, DPStepPricer, SpeculativePricer]:
    model = get_model("deepseek-v3")
    profile = load_profile("h200", "sglang")
    target = dp_pricer(model, profile, 8, 8, 4, 0.0, 0.0, "", MTP.absorbed_extend)
    draft_spec = MTP.draft_spec(model)
    assert draft_spec is not None and draft_spec.n_moe_layers == 1
    draft = dp_pricer(draft_spec, profile, 8, 8, 4, 0.0, 0.0, "", MTP.absorbed_extend)
    return target, draft, SpeculativePricer(target, draft, MTP)


def test_a_decode_token_step_is_the_synchronised_forwards_over_tau():
    target, draft, spec = _pricers()
    # Rank 0: 4 decoders over 4,000 keys; rank 1: 2 over 1,001; ranks 2 and 3 idle.
    steps = [((), 4, 4_000), ((), 2, 1_001), IDLE, IDLE]
    verify = [([(4, 1_000)] * 4, 0, 0), ([(4, 501), (4, 500)], 0, 0), IDLE, IDLE]
    first = [([(4, 1_000)] * 4, 0, 0), ([(4, 501), (4, 500)], 0, 0), IDLE, IDLE]
    later = [((), 4, 4_000), ((), 2, 1_001), IDLE, IDLE]
    # The verification of a decode-only iteration is exchanged as a decode batch's tokens
    # (SGLang's DECODE scheduler batch, MAX_LEN padding); the draft extend as an extend's.
    iteration = (
        target.sync_time(verify, extend=False) + draft.sync_time(first) + 2 * draft.sync_time(later)
    )
    assert spec.sync_time(steps) == pytest.approx(iteration / 3.0, rel=1e-12)
    # The busiest rank sets every forward: rank 1 alone is cheaper, rank 0 alone equal
    # but for the FFN's tokens.
    alone = spec.sync_time([((), 2, 1_001), IDLE, IDLE, IDLE])
    assert alone < spec.sync_time(steps)
    assert isinstance(spec, SyncPricer)


def test_a_mixed_step_is_the_mixed_iteration_less_the_decoders_further_tokens():
    _, _, spec = _pricers()
    steps = [([(512, 0)], 0, 0), ((), 3, 3_000), IDLE, IDLE]
    decode = spec._iteration([((), 0, 0), ((), 3, 3_000), IDLE, IDLE])
    mixed = spec._iteration(steps)
    assert spec.sync_time(steps) == pytest.approx(mixed - (1 - 1 / 3.0) * decode, rel=1e-12)
    # A prefill-only step is one iteration: the target's and the draft's extend.
    only = [([(512, 0)], 0, 0), IDLE, IDLE, IDLE]
    assert spec.sync_time(only) == spec._iteration(only)


def test_a_decode_iteration_s_verification_gathers_as_a_decode_batch():
    target, _, spec = _pricers()
    steps = [((), 8, 8_000)] * 4
    verify = [([(4, 1_000)] * 8, 0, 0)] * 4
    tokens = [32] * 4
    # Even ranks: a decode batch pads to the longest rank once (MAX_LEN), an extend
    # gathers by an all-reduce and then reduces (SUM_LEN): twice the exchange.
    saved = target.comm_time(tokens, True) - target.comm_time(tokens, False)
    assert saved > 0
    assert target.sync_time(verify) - target.sync_time(verify, extend=False) == pytest.approx(
        saved, rel=1e-12
    )
    assert spec._forward(target, verify, decode=True) == target.sync_time(verify, extend=False)
    # An iteration that also prefills is an extend batch: its verification too.
    mixed = [([(512, 0)], 8, 8_000)] + [((), 8, 8_000)] * 3
    chunks = [([(512, 0)] + [(4, 1_000)] * 8, 0, 0), *verify[1:]]
    assert spec._iteration(mixed) == pytest.approx(
        target.sync_time(chunks) + spec._drafting(mixed), rel=1e-12
    )
    assert spec._iteration(steps) == pytest.approx(
        target.sync_time(verify, extend=False) + spec._drafting(steps), rel=1e-12
    )


def test_the_draft_is_priced_by_the_ranks_pricer_under_dp():
    model = get_model("deepseek-v3")
    profile = load_profile("h200", "sglang")
    cfg = EngineConfig(
        cluster=ClusterConfig(tp=8, ep=8, dp_attention=8),
        mode=EngineModeConfig(speculative=MTP.to_dict()),
    )
    target = dp_pricer(model, profile, 8, 8, 8, 0.0, 0.0)
    pricer = speculative_pricer(target, model, profile, cfg)
    assert isinstance(pricer.draft, DPStepPricer) and pricer.draft.dp == 8


def test_a_draft_at_tp_1_under_dp_is_refused_in_one_line():
    spec = {**MTP.to_dict(), "method": "eagle", "draft_tp": 1}
    with pytest.raises(TwinError, match=r"draft tensor parallelism 1 with --dp-attention 8"):
        EngineConfig(
            cluster=ClusterConfig(tp=8, ep=8, dp_attention=8),
            mode=EngineModeConfig(speculative=spec),
        )


@pytest.mark.slow
def test_dp_attention_with_mtp_runs_end_to_end_and_decodes_faster(tmp_path):
    base = ["simulate", "-m", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--ep", "8"]
    base += ["--dp-attention", "8", "--engine", "sglang", "--duration", "20"]
    mtp = ["--set", "speculative_algorithm=NEXTN", "--set", "speculative_num_steps=3"]
    mtp += ["--set", "speculative_eagle_topk=1", "--set", "speculative_num_draft_tokens=4"]
    tpot = {}
    for name, extra in (("plain", []), ("mtp", mtp)):
        assert twin([*base, *extra, "--out", str(tmp_path / name)]) == 0
        summary = json.loads((tmp_path / name / "summary.json").read_text())
        assert pq.read_table(tmp_path / name / "requests.parquet").num_rows > 0
        tpot[name] = summary["tpot_s"]["mean"]
    assert tpot["mtp"] < tpot["plain"] / 1.5


def test_the_mtp_module_s_weights_are_counted_per_gpu_under_the_layout():
    ds = get_model("deepseek-v3")
    draft = MTP.draft_spec(ds)
    assert draft is not None
    layout = Layout(8, 8, 8)
    # Its layer per GPU as the target's (attention whole on each DP rank's GPU), plus
    # eh_proj (2d x d) as before; then the target's share of the KV.
    weights = 8 * weight_bytes_per_gpu(draft, layout) + 2 * 7168 * 7168 * 2
    kv, extra = ds.kv_bytes_per_token, draft.kv_bytes_per_token
    budget = 500e9
    assert MTP.budget(budget, ds, layout) == pytest.approx(
        (budget - weights) * kv / (kv + extra), rel=1e-12
    )
    # Eight DP ranks each hold the module's attention: more than the whole-model count.
    assert MTP.budget(budget, ds, layout) < MTP.budget(budget, ds)
