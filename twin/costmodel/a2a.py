"""The bytes of expert parallelism's all-to-all: what one rank sends in a dispatch or a
combine (the features of the ``a2a_<mode>_<phase>`` fits, ``twin.costmodel.formulas``).

An expert-parallel MoE layer sends each token's hidden state to the ranks that hold its
``topk`` experts (the dispatch) and brings the experts' outputs back (the combine). The
engines run DeepEP's kernels for it in two modes (``deep_ep/buffer.py`` of DeepEP, as
SGLang's ``--moe-a2a-backend deepep``, vLLM's ``--all2all-backend deepep_high_throughput /
deepep_low_latency`` and TensorRT-LLM's DeepEP path call them):

- ``ht`` (high-throughput, DeepEP's "normal" ``Buffer.dispatch`` / ``combine``): a token
  travels once to each *rank* that holds at least one of its experts (the receiving rank
  fans it out to its local experts, and reduces their outputs before the combine sends
  one row back);
- ``ll`` (low-latency, ``Buffer.low_latency_dispatch`` / ``low_latency_combine``): a token
  is written into the receive buffer of each of its ``topk`` *experts* (one message per
  expert, no rank-level dedup), and each expert's output comes back on its own.

With routing spread evenly over ``experts`` experts, ``experts / ep`` on each of ``ep``
ranks, and a token's ``topk`` experts distinct, the ranks a token reaches are
``ep x (1 - C(experts - experts/ep, topk) / C(experts, topk))``; the share of the copies
that stays on the sending rank (``1 / ep``) does not cross a link. The bytes are those of
the hidden state at ``elem_bytes`` a value: the wire format the engine runs (fp8 with
scales for DeepEP's low-latency dispatch, bf16 elsewhere) is the fit's own; its
efficiency absorbs the ratio, so a family is fitted and priced at one convention (2 bytes).

The bytes alone do not set the time: DeepEP's kernels move the rows with a few SMs' warps,
one warp a row (DeepEP ``csrc/kernels/intranode.cu`` and ``internode_ll.cu`` at 73b6ea4,
the commit vLLM 0.24.0's table was collected with; the terms of each family:
``collective_families.A2A_EXTRAS``):

- ``ht`` runs on ``Buffer.num_sms`` (20) SMs, a sending and a receiving SM for each of
  10 channels, whatever the GPU. The dispatch's receivers copy each received row out of
  the channel's buffer, the combine's receivers reduce each of the rank's tokens (one
  warp a token: its rows from every rank it reached, then one row written): work per
  token and hidden element on a fixed budget of warps (``token_elems``, the tokens times
  ``hidden``), that does not scale with the ranks a token reaches. A token's row is copied
  by one warp (``UNROLLED_WARP_COPY``) and reduced by one, so the smallest batch has one
  row's copy on its critical path (``row_elems``: ``hidden``). Fitted on one node's
  tables, where a lone token takes 30 us at hidden 2048 and 47 us at 7168 (SGLang
  0.5.12's H200 combine) and the time per token at 131,072 tokens is 82 ns at hidden
  5120, top-1 (0.9 copies) against 68 ns at hidden 2048, top-8 (4.6 copies).
  Each (token, rank it reaches) pair is one row a sending warp of that rank's share
  claims a slot for, copies and tags with the token's top-k indices and weights
  (``intranode.cu`` ``dispatch``: the warps split by ``responsible_rank``, a row per
  ``is_token_in_rank``, the rank's own copy through its buffer too), and one row the
  combine's receiver reads back: ``rank_rows``, the tokens times the ranks reached. Without
  it, the price of SGLang 0.5.12's GB300 dispatch at 131,072 tokens was 21% under the time
  at hidden 2048, top-8 and 27% over it at hidden 5120, top-1: a row costs more than its
  bytes.
- ``ll`` dispatch launches ``ceil(experts / SMs)`` warp groups a SM, ``32 / groups``
  warps a group, on ``ceil(experts / groups)`` SMs (``ll_launch``). Each SM sends the
  tokens ``sm_id, sm_id + SMs, ...`` one after another (a token's FP8 cast by the SM's
  warps, then one warp a top-k expert copies the row): ``sm_row_elems``, ``hidden`` times
  ``ceil(tokens / SMs)``. Each warp group receives one (source rank, local expert) pair's
  rows, ``tokens x topk / experts`` of them on average, its warps a row each in turn:
  ``group_row_elems``, ``hidden`` times ``ceil(tokens x topk / experts / warps)``. With
  8 experts the dispatch runs on 8 SMs: SGLang 0.5.12's H200 table times 64 tokens at
  hidden 6144, top-2 at 36 us, twice what the bytes and the per-expert term said.
- ``ll`` combine keeps the bytes and the per-expert term, and adds the rows a receiving
  group reduces in series (``topk_rows``). Its receive phase (``internode_ll.cu``
  ``combine``) gives each SM's receiving groups the tokens ``sm_id + SMs x group, ...``;
  per token a TMA warp loads the token's ``topk`` rows one after another into a
  three-stage ring and the reduction warps wait on each stage's barrier in turn: a lone
  token's combine has its ``topk`` row loads on the critical path, whatever the bytes.
  The launch is the dispatch's (``ll_launch``), with ``min(2, warps / (decode warps +
  1))`` receiving groups a SM (``ll_combine_slots``), so the tables' <= 256 tokens a rank
  are one token a group: ``topk_rows`` is ``topk`` there. Without it TensorRT-LLM
  1.3.0rc11's B200 combine, flat at 36-40 us at top-6 and 43-47 us at top-8 up to 32
  tokens, was priced between the two (docs/decisions.md, helper a2a37). The rows per SM
  and per group without the top-k (session 22) fitted no better.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

from twin.costmodel import latency as lat
from twin.costmodel.collective_families import A2A_EXTRAS, A2A_MODES, A2A_PHASES, a2a_kernel
from twin.costmodel.features import Features
from twin.errors import TwinError, expect_one_of
from twin.hardware import GPUS

ELEM_BYTES = 2  # the convention of the fitted rows and the pricing (module docstring)


def ranks_reached(topk: int, experts: int, ep: int) -> float:
    """Expected number of ranks holding at least one of a token's ``topk`` distinct experts,
    picked evenly among ``experts`` spread ``experts / ep`` a rank over ``ep`` ranks."""
    if ep <= 1:
        return 1.0
    per_rank = experts // ep
    k = min(topk, experts)
    miss = math.comb(experts - per_rank, k) / math.comb(experts, k)
    return ep * (1.0 - miss)


def copies(mode: str, topk: int, experts: int, ep: int) -> float:
    """Copies of a token's hidden state one rank sends over the links in ``mode``."""
    if mode not in A2A_MODES:
        raise ValueError(f"all-to-all mode {mode!r}: expected one of {', '.join(A2A_MODES)}")
    if ep <= 1:
        return 0.0
    reached = float(min(topk, experts)) if mode == "ll" else ranks_reached(topk, experts, ep)
    return reached * (ep - 1) / ep


def a2a_bytes(
    mode: str,
    tokens: float,
    hidden: int,
    topk: int,
    experts: int,
    ep: int,
    elem_bytes: float = ELEM_BYTES,
) -> float:
    """Bytes one rank with ``tokens`` tokens sends in a dispatch (or receives back in a
    combine) of DeepEP mode ``mode`` (module docstring)."""
    return float(tokens) * hidden * elem_bytes * copies(mode, topk, experts, ep)


def ll_launch(experts: int, sms: int) -> tuple[int, int, int]:
    """(warp groups a SM, warps a group, SMs) of DeepEP's low-latency dispatch on a GPU of
    ``sms`` SMs (``internode_ll.cu`` ``dispatch``, host side, at 73b6ea4:
    ``num_warp_groups = ceil_div(num_experts, num_device_sms)``, ``num_warps_per_group =
    32 / num_warp_groups``, ``num_sms = ceil_div(num_experts, num_warp_groups)``)."""
    if experts < 1 or sms < 1:
        raise ValueError(f"DeepEP's launch needs experts and SMs (got {experts}, {sms})")
    groups = -(-experts // sms)
    return groups, 32 // groups, -(-experts // groups)


def ll_combine_slots(experts: int, hidden: int, sms: int) -> int:
    """Tokens DeepEP's low-latency combine reduces at once on a GPU of ``sms`` SMs: its
    launch's SMs (``ll_launch``) times the receiving groups a SM (``internode_ll.cu``
    ``combine`` at 73b6ea4: ``kNumSendUnrolls`` 4 where ``hidden`` is a multiple of 1,024
    else 2; the row's 16-byte words padded to ``32 x kNumSendUnrolls``; one decode warp
    per ``32 x kNumRecvUnrolls`` (2) words; ``num_groups = min(2, warps / (decode warps
    + 1))``, ``warps`` the SM's ``groups x (32 / groups)`` of the launch)."""
    groups, warps, used = ll_launch(experts, sms)
    unrolls = 4 if hidden % 1024 == 0 else 2
    words = -(-(hidden // 8) // (32 * unrolls)) * 32 * unrolls
    decode_warps = words // (32 * 2)
    return used * max(1, min(2, groups * warps // (decode_warps + 1)))


def a2a_features(
    mode: str,
    phase: str,
    tokens: float,
    hidden: int,
    topk: int,
    experts: int,
    ep: int,
    sms: int | None,
) -> Features:
    """The fitting features of one all-to-all ``phase`` of DeepEP mode ``mode`` on a GPU
    of ``sms`` SMs (None: not known; the low-latency phases need it): no FLOPs, the
    bytes on the links, and the family's extra terms (``collective_families.A2A_EXTRAS``, module
    docstring)."""
    nbytes = a2a_bytes(mode, tokens, hidden, topk, experts, ep, ELEM_BYTES)
    names = A2A_EXTRAS[a2a_kernel(mode, phase)]
    values: tuple[float, ...]
    if mode == "ht":
        values = (
            float(tokens),
            float(tokens) * hidden,
            float(hidden),
            float(tokens) * ranks_reached(topk, experts, ep),
        )
        return 0.0, nbytes, dict(zip(names, values, strict=True))
    if sms is None:
        raise TwinError(
            f"DeepEP's low-latency {phase}: the GPU's SM count is not known "
            "(twin.hardware.SM_COUNTS)"
        )
    if phase == "combine":
        slots = ll_combine_slots(experts, hidden, sms)
        values = (
            experts / max(ep, 1),
            float(min(topk, experts) * math.ceil(float(tokens) / slots)),
        )
    else:
        _, warps, used = ll_launch(experts, sms)
        per_group = math.ceil(float(tokens) * min(topk, experts) / experts / warps)
        values = (
            experts / max(ep, 1),
            float(hidden * math.ceil(float(tokens) / used)),
            float(hidden * per_group),
        )
    return 0.0, nbytes, dict(zip(names, values, strict=True))


class A2APrice:
    """Seconds of one MoE layer's dispatch + combine on a rank with ``tokens`` tokens, from
    the profile's fitted ``a2a_<mode>_<phase>`` families (``model`` a
    ``twin.model.ModelSpec`` with MoE fields, ``profile`` a ``twin.costmodel.Profile``).

    The mode is DeepEP's ``auto`` as SGLang resolves it (``DeepEPMode.resolve``,
    ``python/sglang/srt/layers/moe/utils.py``, 0.5.10.post1): ``ht`` ("normal") when any
    rank has an extend in the batch, else ``ll`` (low-latency); the extend flag is
    global across the DP ranks (the MLP sync of ``prepare_mlp_sync_batch_raw``).
    """

    # ``EngineConfig.moe_a2a`` -> the mode it forces (None: DeepEP's auto, per step).
    BACKENDS: ClassVar[dict[str, str | None]] = {
        "deepep": None,
        "deepep_ht": "ht",
        "deepep_ll": "ll",
    }

    def __init__(self, model: Any, profile: Any, ep: int, backend: str = "deepep") -> None:
        expect_one_of(backend, self.BACKENDS, "MoE all-to-all")
        self.forced = self.BACKENDS[backend]
        kernels = [a2a_kernel(m, p) for m in A2A_MODES for p in A2A_PHASES]
        missing = [k for k in kernels if k not in profile.kernels]
        if missing:
            raise TwinError(
                f"DeepEP all-to-all: profile {profile.gpu!r} has no fit of "
                f"{', '.join(missing)} (twin calibrate --from aiconfigurator)"
            )
        if not model.n_moe_layers or ep <= 1:
            raise TwinError(
                f"DeepEP all-to-all: model {model.name!r} at --ep {ep} sends no tokens "
                "between expert ranks (needs MoE layers and --ep > 1)"
            )
        self._fits: dict[str, Callable[[float, float, dict[str, float]], float]] = {
            k: lat.compile_kernel(k, profile.kernels[k].params, profile.peaks) for k in kernels
        }
        from twin.costmodel.provenance import mixture

        self.provenance = mixture(profile, used=kernels)  # "MoE all-to-all: measured (...)"
        self.hidden, self.topk = model.d_model, model.moe_top_k
        self.experts, self.ep = model.moe_n_experts, ep
        # The SMs DeepEP's low-latency dispatch launches over (``ll_launch``).
        spec = GPUS.get(profile.gpu)
        self.sms = spec.sm_count if spec is not None else None
        if self.sms is None and self.forced != "ht":
            raise TwinError(
                f"DeepEP all-to-all: GPU {profile.gpu!r} has no SM count for the "
                "low-latency kernels' launch (twin.hardware.SM_COUNTS)"
            )

    def mode(self, extend: bool) -> str:
        """DeepEP's mode of a step (class docstring), or the one the backend forces
        (vLLM's ``deepep_high_throughput`` / ``deepep_low_latency``)."""
        if self.forced is not None:
            return self.forced
        return "ht" if extend else "ll"

    def seconds(self, tokens: int, extend: bool) -> float:
        """Dispatch + combine of one MoE layer for a rank of ``tokens`` tokens."""
        if tokens <= 0:
            return 0.0
        mode = self.mode(extend)
        total = 0.0
        for phase in A2A_PHASES:
            _, nbytes, extras = a2a_features(
                mode, phase, tokens, self.hidden, self.topk, self.experts, self.ep, self.sms
            )
            total += self._fits[a2a_kernel(mode, phase)](0.0, nbytes, extras)
        return total


__all__ = [
    "ELEM_BYTES",
    "A2APrice",
    "a2a_bytes",
    "a2a_features",
    "copies",
    "ll_combine_slots",
    "ll_launch",
    "ranks_reached",
]
