"""TensorRT-LLM's MoE exchange under attention DP (issue 34): an all-gather of every
rank's tokens (NVFP4 / fp8 quantised before it) and a reduce-scatter of the experts'
outputs in the MoE layers, no exchange in the dense layers
(``twin.costmodel.gather_scatter``, ``KernelLayout.moe_gather_scatter``)."""

from __future__ import annotations

import dataclasses

import pytest

from twin.costmodel import CostModel
from twin.costmodel.breakdown import StepCost
from twin.costmodel.features import gather_features
from twin.costmodel.gather_scatter import GatherScatterPrice, gathered_bytes_per_token
from twin.costmodel.kernel_layout import DEFAULT_LAYOUT, KernelLayout
from twin.costmodel.profile import KernelFit
from twin.costmodel.profile_store import resolve_profile
from twin.engine.dp_pricing import DPStepPricer, dp_pricer
from twin.engine.kernel_layouts_trtllm import trtllm_kernel_layout
from twin.engine.modes import get_mode
from twin.presets import get_model

# DeepSeek-R1 with its experts and linear layers in nvfp4, as the B200 TensorRT-LLM rows
R1_FP4 = dataclasses.replace(get_model("deepseek-r1"), precision="nvfp4", moe_precision=None)


class _Collective:
    """A cost model whose all-reduce costs R a row and a collective G a byte."""

    R, G = 1e-6, 1e-9

    def allreduce_time(self, tokens: int) -> float:
        return self.R * tokens

    def gather_time(self, nbytes: float) -> float:
        return self.G * nbytes

    def scatter_time(self, nbytes: float) -> float:
        return self.G * nbytes


def test_the_gathered_token_is_in_the_format_quantised_before_the_gather() -> None:
    ds = get_model("deepseek-r1")  # d_model 7168, top 8
    fp4 = dataclasses.replace(ds, precision="nvfp4", moe_precision=None)
    fp8 = dataclasses.replace(ds, precision="fp8", moe_precision=None)
    block = dataclasses.replace(ds, precision="fp8-block", moe_precision=None)
    route = 8 * 8  # an int32 expert id and an fp32 weight per top-k slot
    assert gathered_bytes_per_token(fp4) == 7168 * (0.5 + 1 / 16) + route
    assert gathered_bytes_per_token(fp8) == 7168 * 1 + route
    # fp8 block scales quantise inside the kernel: the model's dtype on the wire
    assert gathered_bytes_per_token(block) == 7168 * ds.dtype_bytes + route


def test_moe_layers_gather_and_scatter_dense_layers_exchange_nothing() -> None:
    model = R1_FP4
    ffn = _Collective()
    price = GatherScatterPrice(model, ffn)
    plain = DPStepPricer(None, ffn, 4, ffn_layers=5)
    trt = DPStepPricer(None, ffn, 4, ffn_layers=5, moe_layers=3, gather_scatter=price)
    tokens = [1, 2, 3, 4]  # 10 rows in all, whatever the step
    per_layer = _Collective.G * 10 * (gathered_bytes_per_token(model) + 7168 * 2)
    for extend in (False, True):
        assert trt.comm_time(tokens, extend) == pytest.approx(3 * per_layer)
    assert trt.comm_time([0, 0, 0, 0], True) == 0.0
    assert plain.comm_time(tokens, True) == pytest.approx(5 * 2 * 10 * _Collective.R)


def test_tensorrt_llm_lays_out_the_gather_under_attention_dp_only() -> None:
    ds = get_model("deepseek-r1")
    assert trtllm_kernel_layout(ds, "1.1.0rc2.post2", 8, 8, 1, "").moe_gather_scatter
    assert trtllm_kernel_layout(ds, "1.2.0rc6.post2", 4, 4, 1, "").moe_gather_scatter
    assert not trtllm_kernel_layout(ds, "1.1.0rc2.post2", 8, 1, 1, "").moe_gather_scatter
    assert not get_mode("sglang").layout_for(ds, "0.5.9", 8, 8, 1, "").moe_gather_scatter
    assert not DEFAULT_LAYOUT.moe_gather_scatter


def test_shipped_profile_prices_trt_s_exchange_on_nccl_s_collectives() -> None:
    model, prof = R1_FP4, resolve_profile("b200", None, "trtllm")
    assert {"allgather_8gpu", "reducescatter_8gpu"} <= set(prof.kernels)
    sglang = dp_pricer(model, prof, 8, 8, 8, 0.0, 0.0)
    trt = dp_pricer(
        model, prof, 8, 8, 8, 0.0, 0.0, kernel_layout=KernelLayout(moe_gather_scatter=True)
    )
    assert trt.gather_scatter is not None and sglang.gather_scatter is None
    ffn = trt.ffn
    for tokens, extend in (([32] * 8, False), ([1024, 0, 512, 0, 0, 0, 0, 8], True)):
        total = sum(tokens)
        one = ffn.gather_time(total * gathered_bytes_per_token(model)) + ffn.scatter_time(
            total * model.d_model * model.dtype_bytes
        )
        assert trt.comm_time(tokens, extend) == pytest.approx(model.n_moe_layers * one)
    # NCCL's all-gather of a decode step's rows (~1 MB) costs more than the custom
    # all-reduce at the same ring traffic, the price before its fit (~16 us against ~6 us
    # at the table's smallest size)
    assert ffn.gather_time(256 * 4000) > 1.5 * ffn._allreduce_bytes(256 * 4000 / 2)


# ---------------------------------------------------------------- dense FFN on the rank
class _Split:
    """A cost model whose dense MLP costs M a token, MoE layers E a token of which S is
    the shared expert's (per MoE layer: ``shared_expert_s``), at any TP."""

    M, E, S, MOE_LAYERS = 1e-4, 1e-3, 1e-6, 3

    def step_spread_cost(self, prefills, batch, context):  # type: ignore[no-untyped-def]
        tokens = sum(c for c, _ in prefills) + batch
        cost = StepCost()
        cost.add("attention", "attention", 1e-2 * tokens)
        cost.add("mlp", "gemm", self.M * tokens)
        cost.add("moe", "gemm", self.E * tokens)
        cost.add("moe", "allreduce", 7.0)
        return cost

    def step_spread(self, prefills, batch, context):  # type: ignore[no-untyped-def]
        return self.step_spread_cost(prefills, batch, context).total_s

    def shared_expert_s(self, tokens: int) -> float:
        return self.S * tokens

    def allreduce_time(self, tokens: int) -> float:
        return _Collective.R * tokens


def test_dense_layers_and_shared_expert_run_on_each_rank_s_own_tokens() -> None:
    attn, ffn = _Split(), _Split()
    moe = _Split.MOE_LAYERS
    together = DPStepPricer(attn, ffn, 2, ffn_layers=5, moe_layers=moe)
    on_rank = DPStepPricer(attn, ffn, 2, ffn_layers=5, moe_layers=moe, dense_on_rank=True)
    steps = [([(16, 0)], 0, 0), ((), 4, 0)]  # 16 and 4 tokens: 20 in all
    shared = moe * _Split.S
    # Together: the slowest rank's attention, every FFN priced over the 20 rows.
    assert together.attention_time(steps[0]) == pytest.approx(1e-2 * 16)
    assert together.ffn_time(20) == pytest.approx(20 * (_Split.M + _Split.E))
    # On the rank: its dense MLP and shared expert join its attention side over its own
    # rows; the replica's FFN keeps the routed experts over all of them.
    assert on_rank.attention_time(steps[0]) == pytest.approx(16 * (1e-2 + _Split.M + shared))
    assert on_rank.ffn_time(20) == pytest.approx(20 * (_Split.E - shared))
    # SGLang's gather/scatter then exchanges the MoE layers' rows only.
    assert together.comm_time([16, 4], True) == pytest.approx(5 * 2 * 20 * _Collective.R)
    assert on_rank.comm_time([16, 4], True) == pytest.approx(moe * 2 * 20 * _Collective.R)


def test_the_rule_per_engine_under_attention_dp() -> None:
    ds = get_model("deepseek-r1")
    # TensorRT-LLM (modeling_deepseekv3.py: mlp_tp_size and shared_tp_size 1 under
    # attention DP) and vLLM (each DP rank's own TP group) run them on the rank ...
    assert trtllm_kernel_layout(ds, "1.1.0rc2.post2", 8, 8, 1, "").dense_ffn_on_rank
    assert get_mode("vllm").layout_for(ds, "0.12.0", 8, 8, 1, "").dense_ffn_on_rank
    # ... SGLang 0.5.9 at the replica's TP unless --moe-dense-tp-size 1 (not modelled).
    assert not get_mode("sglang").layout_for(ds, "0.5.9", 8, 8, 1, "").dense_ffn_on_rank
    assert not trtllm_kernel_layout(ds, "1.1.0rc2.post2", 8, 1, 1, "").dense_ffn_on_rank
    assert not get_mode("vllm").layout_for(ds, "0.12.0", 8, 1, 1, "").dense_ffn_on_rank


def test_shipped_profile_moves_the_dense_weights_to_every_rank() -> None:
    model, prof = R1_FP4, resolve_profile("b200", None, "trtllm")
    gather = KernelLayout(moe_gather_scatter=True)
    on_rank = dataclasses.replace(gather, dense_ffn_on_rank=True)
    before = dp_pricer(model, prof, 8, 8, 8, 0.0, 0.0, kernel_layout=gather)
    after = dp_pricer(model, prof, 8, 8, 8, 0.0, 0.0, kernel_layout=on_rank)
    assert after.attention.shared_expert_s(32) > 0.0
    # The replica's FFN loses the dense layers and the shared experts, exactly.
    cost = before.ffn.step_spread_cost((), 256, 0)
    mlp = sum(s for k, s in cost.items["mlp"].items() if k != "allreduce")
    shared = model.n_moe_layers * before.ffn.shared_expert_s(256)
    assert after.ffn_time(256) == pytest.approx(before.ffn_time(256) - mlp - shared)
    # A decode step of 32 rows a rank reads the dense weights whole on every GPU: slower.
    decode = [((), 32, 32 * 2000)] * 8
    assert after.sync_time(decode) > before.sync_time(decode)


# ---------------------------------------------------------------- NCCL's gather fits
def test_a_fitted_nccl_gather_prices_the_exchange_in_place_of_the_all_reduce() -> None:
    model, prof = R1_FP4, resolve_profile("b200", None, "trtllm")
    kernels = {k: v for k, v in prof.kernels.items() if not k.startswith(("allgather", "reduce"))}
    bare = dataclasses.replace(prof, kernels=kernels)
    ring = CostModel(model, bare, 8, ep=8)
    nbytes = 1e6
    # Without the families: half an all-reduce of the buffer, both ways.
    assert ring.gather_time(nbytes) == pytest.approx(ring._allreduce_bytes(nbytes / 2))
    assert ring.scatter_time(nbytes) == ring.gather_time(nbytes)
    fit = KernelFit("bandwidth", {"t0_s": 20e-6, "eff_bytes": 0.5})
    nccl = dataclasses.replace(
        bare,
        kernels={**kernels, "allgather_8gpu": fit, "reducescatter_8gpu": fit},
    )
    fitted = CostModel(model, nccl, 8, ep=8)
    _, ring_bytes, _ = gather_features(nbytes, 8)
    assert ring_bytes == pytest.approx(nbytes * 7 / 8)
    assert fitted.gather_time(nbytes) > 20e-6 > ring.gather_time(nbytes)
    assert fitted.scatter_time(nbytes) == pytest.approx(fitted.gather_time(nbytes))
    assert CostModel(model, nccl, 1).gather_time(nbytes) == 0.0


def test_the_generator_reads_nccl_s_all_gather_and_reduce_scatter_rows() -> None:
    pytest.importorskip("aiconfigurator_core")
    from twin.calibration.aic_collectives import gather_rows
    from twin.calibration.aic_tables import system_dir

    families = {f.kernel: f for f in gather_rows(system_dir("b200"))}
    assert {"allgather_8gpu", "reducescatter_8gpu"} <= set(families)
    rows = families["allgather_8gpu"].rows
    # NCCL's B200 table: an 8-GPU all-gather of 256 half elements takes ~16 us
    small = rows[0]
    assert small["shape"] == {"n": 8, "bytes": 512}
    assert 10e-6 < small["median_s"] < 25e-6
    assert small["bytes"] == pytest.approx(512 * 7 / 8)
    assert families["allgather_8gpu"].framework.startswith("NCCL ")
