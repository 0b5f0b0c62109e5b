"""The disaggregated rows of ``silicon_sample.csv`` as a held-out check (issue 36).

1,602 of the CSV's rows are ``mode == disagg``: a Dynamo deployment of
``prefill_num_workers`` prefill workers of ``prefill_tp_size`` GPUs and
``decode_num_workers`` decode workers of ``decode_tp_size`` GPUs (each pool with its own
pipeline, attention-DP and MoE layout and batch size), ``c`` closed-loop clients sending
random ``isl``-token prompts for exactly ``osl`` tokens, the mean TTFT and TPOT measured
end to end. Nothing is fitted on them: they are scored as they come.

A row is expressed through :mod:`twin.validate.silicon` itself, unchanged: each pool is
checked as an aggregated row of its own layout (:func:`silicon.plan_row`: model config,
precision, profile, all-reduce at its GPUs, heads, expert and attention-DP ranks), and the
run is the prefill pool's plan with the pools added to its ``build_run`` keywords
(``prefill_workers``, ``decode_workers``, and the decode pool's ``decode_tp``,
``decode_ep``, ``decode_dp_attention`` where they differ: :mod:`twin.engine.disagg`), so
:func:`silicon.predict` and :func:`silicon.score_row` run and score it as they do an
aggregated row. The engines' own defaults size both pools (``deployment="defaults"``),
except each pool's running-request cap, the row's per-pool batch size given as that
pool's own engine flag (:func:`pool_flags`). With the ``aiconfigurator`` package
installed its own disaggregated estimate (``cli_estimate(mode="disagg", ...)`` with the
row's pools) is scored beside.
"""

from __future__ import annotations

import csv
import dataclasses
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twin.engine import RunArgs, typed_settings
from twin.engine.disagg import check_tp_pair
from twin.errors import TwinError
from twin.validate import silicon as sil
from twin.validate.silicon.rows import int_cell

POOL_FIELDS = ("batch_size", "num_workers", "tp_size", "pp_size", "attention_dp_size",
               "moe_tp_size", "moe_ep_size")  # fmt: skip
POOL_COLUMNS = tuple(f"{side}_{f}" for side in ("prefill", "decode") for f in POOL_FIELDS)

REASON_NOT_DISAGG = "aggregated (mode agg): scored by twin.validate.silicon"
REASON_NO_POOLS = "no prefill/decode worker counts"


@dataclass(frozen=True)
class Pool:
    """One pool of a disaggregated row (``None`` where the file leaves a value empty)."""

    batch_size: int | None
    num_workers: int | None
    tp: int | None
    pp: int | None
    attention_dp: int | None
    moe_tp: int | None
    moe_ep: int | None


@dataclass(frozen=True)
class DisaggRow:
    """A disaggregated row: the common columns (:class:`silicon.SiliconRow`) and its pools."""

    row: sil.SiliconRow
    prefill: Pool
    decode: Pool


def read_disagg_rows(path: str | Path | None = None) -> list[DisaggRow]:
    """The CSV's disaggregated rows with their pools (:func:`silicon.read_rows` reads the
    common columns; the pools' columns are read here, one error naming the cell)."""
    p = Path(path) if path is not None else sil.default_csv()
    rows = {r.id: r for r in sil.read_rows(p) if r.mode == "disagg"}
    out = []
    with p.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [c for c in POOL_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise TwinError(f"{p}: missing column {missing[0]!r} (a silicon_sample.csv?)")
        for i, raw in enumerate(reader, start=1):
            row = rows.get((raw.get("id") or "").strip())
            if row is None:
                continue
            pools = [
                Pool(*(int_cell(raw.get(f"{s}_{f}") or "", p, i, f"{s}_{f}") for f in POOL_FIELDS))
                for s in ("prefill", "decode")
            ]
            out.append(DisaggRow(row, *pools))
    return out


def _as_aggregated(row: sil.SiliconRow, pool: Pool) -> sil.SiliconRow:
    """``row`` as an aggregated row of ``pool``'s layout (what :func:`silicon.plan_row`
    checks a pool against). Its batch size is left out: the row's clients are the whole
    deployment's, not one aggregated worker's share (:func:`silicon.agg_workers`)."""
    return dataclasses.replace(
        row,
        mode="agg",
        batch_size=None,
        tp=pool.tp,
        pp=pool.pp,
        attention_dp=pool.attention_dp,
        moe_tp=pool.moe_tp,
        moe_ep=pool.moe_ep,
    )


def _of_layout(reason: str) -> bool:
    """Whether :func:`silicon.plan_row`'s ``reason`` is about a pool's parallel layout."""
    layout = (sil.REASON_PP, sil.REASON_ATTN_DP, sil.REASON_EP)
    return reason in layout or reason.startswith("tp_size")


def plan_disagg_row(d: DisaggRow, configs: Path | None = None) -> sil.RowPlan | str:
    """The twin's run of a disaggregated row, or the reason it cannot express it (each
    pool's reason prefixed with the pool's name)."""
    row = d.row
    if row.mode != "disagg":
        return REASON_NOT_DISAGG
    if not (d.prefill.num_workers and d.decode.num_workers):
        return REASON_NO_POOLS
    plans = {}
    for side, pool in (("prefill", d.prefill), ("decode", d.decode)):
        found = sil.plan_row(_as_aggregated(row, pool), configs, deploy="defaults", pool=True)
        if isinstance(found, str):  # a reason of the pool's layout names the pool
            return f"{side} pool: {found}" if _of_layout(found) else found
        plans[side] = found
    prefill, decode = plans["prefill"], plans["decode"]

    # The KV moves between the pools' attention TP ranks (tp / attention DP a rank).
    p_attn, d_attn = prefill.tp // prefill.dp, decode.tp // decode.dp
    try:
        check_tp_pair(p_attn, d_attn)
    except TwinError:
        return f"prefill attention tp {p_attn} and decode {d_attn}: neither divides the other"
    pools: dict[str, Any] = {
        "prefill_workers": d.prefill.num_workers,
        "decode_workers": d.decode.num_workers,
    }
    # Each pool its own layout (GPUs, expert and attention-DP ranks); the prefill pool's
    # are the run's (tp, ep, dp_attention: silicon.predict), the decode pool's its own.
    for name, value, run in (
        ("decode_tp", decode.tp, prefill.tp),
        ("decode_ep", decode.ep, prefill.ep),
        ("decode_dp_attention", decode.dp, prefill.dp),
    ):
        if value != run:
            pools[name] = value
    pools.update(pool_flags(d, prefill.engine))
    # The row's id keys the split and the workload's seed, as for an aggregated row.
    return dataclasses.replace(prefill, row=row, deployment=typed_settings(RunArgs, pools.items()))


# The engine flag a pool's batch size is (aiconfigurator 0.12.0
# ``generator/config/backend_config_mapping.yaml``: ``max_batch_size`` is vLLM's
# ``max-num-seqs``, SGLang's ``max-running-requests`` and TensorRT-LLM's ``max_batch_size``;
# its ``generator/rule_plugin/
# benchmark/<backend>.rule`` writes the prefill and decode workers' own max_batch_size).
BATCH_FLAG = {
    "vllm": "max_num_seqs",
    "sglang": "max_running_requests",
    "trtllm": "max_batch_size",
}


def pool_flags(d: DisaggRow, engine: str) -> dict[str, dict[str, str]]:
    """``build_run``'s per-pool engine flags for the row's per-pool batch sizes
    (``prefill_batch_size``, ``decode_batch_size``): each pool's running-request cap.

    The CSV's batch size is a rank's: ``silicon_concurrency = decode_num_workers x
    decode_attention_dp_size x decode_batch_size`` on every expressed row, and the twin's
    ``max_running`` is a unit's (a worker, or each attention-DP rank of one), so the flag
    carries the column as it is. (SGLang itself divides ``--max-running-requests`` over
    the attention-DP ranks: 0.5.x ``managers/tp_worker.py``; the twin's SGLang mode reads
    the flag as a rank's.) Empty where the engine has no such flag or the column is."""
    flag = BATCH_FLAG.get(engine)
    out: dict[str, dict[str, str]] = {}
    for side, pool in (("prefill", d.prefill), ("decode", d.decode)):
        if flag and pool.batch_size:
            out[f"{side}_engine_flags"] = {flag: str(pool.batch_size)}
    return out


def plan_disagg_rows(
    rows: Iterable[DisaggRow], configs: Path | None = None
) -> tuple[list[sil.RowPlan], Counter[str]]:
    """The expressible rows' plans, and how many rows each reason left out."""
    return sil.split_plans(plan_disagg_row(d, configs) for d in rows)


def aiconfigurator_disagg_estimate(plan: sil.RowPlan, d: DisaggRow) -> dict[str, Any]:
    """aiconfigurator's own estimate of the disaggregated row (``cli_estimate`` with
    ``mode="disagg"`` and the row's pools; the package's current database and the cached
    config the twin uses, as :func:`silicon.aiconfigurator_estimate` does for aggregated
    rows). ``{"aic_error": ...}`` when it fails or is not installed."""
    if not sil.aiconfigurator_available():
        return {"aic_error": sil.AIC_NOT_INSTALLED}
    args = sil.cli_estimate_args(plan, "disagg")
    for side, pool in (("prefill", d.prefill), ("decode", d.decode)):
        args.update(sil.layout_args(pool, f"{side}_"))
        for name, value in (("batch_size", pool.batch_size), ("num_workers", pool.num_workers)):
            if value:
                args[f"{side}_{name}"] = value
    return sil.run_cli_estimate(args)


def score_disagg_row(
    plan: sil.RowPlan, d: DisaggRow, aiconfigurator: bool = False
) -> dict[str, Any]:
    """One result row (:func:`silicon.score_row`, the twin's run of both pools), with
    aiconfigurator's disaggregated estimate in place of its aggregated one."""
    out = sil.score_row(plan, aiconfigurator=False)
    out["layout"] = f"{d.prefill.num_workers}P{d.decode.num_workers}D"
    if aiconfigurator:
        out.update(aiconfigurator_disagg_estimate(plan, d))
        for metric in ("ttft", "tpot"):
            pred = out.get(f"aic_{metric}_ms")
            out[f"aic_{metric}_ape"] = (
                sil.ape(pred, out[f"silicon_{metric}_ms"]) if pred is not None else None
            )
    return out


__all__ = [
    "DisaggRow",
    "Pool",
    "aiconfigurator_disagg_estimate",
    "plan_disagg_row",
    "plan_disagg_rows",
    "pool_flags",
    "read_disagg_rows",
    "score_disagg_row",
]
