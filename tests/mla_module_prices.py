"""A serving decode module's price against its fit at the features of a launch rule: the
shared body of the module-rule tests (``test_mla_module_fmha_v2``, ``test_mla_serving_rules``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from twin.costmodel import CostModel
from twin.costmodel import latency as lat
from twin.costmodel import mla_decode_kernels as mdk
from twin.costmodel import mla_module as mmod
from twin.hardware import get_gpu

# Each sequence's cached keys in the priced decode.
KEYS_PER_SEQUENCE = 8000


class ModulePrices(NamedTuple):
    """One decode step's module seconds: as the cost model prices it, and as its fit prices
    the module's features with ``rule``'s launch and with none."""

    serving: float
    with_rule: float
    without_rule: float


def priced_fit(cm: CostModel, family: str) -> Callable[..., float]:
    """The fit ``cm`` prices ``family`` with, compiled at its profile's peaks."""
    key = cm.priced.keys[family]
    return lat.compile_fast(key, cm.profile.kernels[key].params, cm.profile.peaks)


def module_decode_prices(cm: CostModel, gpu: str, batch: int, rule: str) -> ModulePrices:
    """``cm``'s decode module (``gpu``'s profile, priced by modules) for ``batch`` sequences
    of :data:`KEYS_PER_SEQUENCE` cached keys, one query token each."""
    assert cm.mla_modes[1] == "module"
    d, e = cm.mla_dims, cm.elem_bytes
    act_e, w_e = cm.priced.mla_gemm_bytes
    stream = cm.priced.mla_kv_elem_bytes[1] * cm.priced.mla_module_kv_share
    sms = get_gpu(gpu).sm_count or 0
    keys = batch * KEYS_PER_SEQUENCE
    module = mmod.mla_module_absorbed_sums(d, batch, batch, keys, keys, 1, e, act_e, w_e, stream)
    fit = priced_fit(cm, "mla_module_decode")

    def price(launch_rule: str | None) -> float:
        launch = mdk.mla_decode_launch(launch_rule, batch, keys, 1, d, stream, sms)
        return fit(*mmod.module_decode_features(module, launch))

    parts = dict((k, v) for _, k, v in cm._mla_decode(batch, keys))
    return ModulePrices(parts["mla_module"], price(rule), price(None))
