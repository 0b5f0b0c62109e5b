"""NVIDIA's MoE all-to-all tables (``aiconfigurator-core`` 0.12.0) as the twin's rows.

Families ``a2a_<mode>_<phase>`` (``twin.costmodel.collective_families.a2a_kernel``; features
``twin.costmodel.a2a``): DeepEP's dispatch and combine in its high-throughput (``ht``,
"normal") and low-latency (``ll``) modes, per engine, from
``systems/data/<gpu>/comm/<engine>/<version>/``:

- TensorRT-LLM and vLLM: ``moe_a2a_perf`` (columns ``comm_backend``, ``phase``,
  ``comm_dtype``, ``ep_size``, ``node_num``, ``hidden_size``, ``topk``, ``num_experts``,
  ``num_tokens``, ``latency`` in microseconds). Backends ``trtllm_deepep_ht`` /
  ``trtllm_deepep_ll`` and vLLM's ``deepep_ht`` / ``deepep_ll``: aiconfigurator's
  ``MOE_A2A_BACKENDS`` (``sdk/operations/moe_comm.py``) runs the ``ht`` ones for the
  context phase and the ``ll`` ones for generation. vLLM's H100 ``deepep_v2_*`` rows
  (DeepEP v2, not the engine's default) are not read. TensorRT-LLM's wire format: the
  ``bfloat16`` rows, what ``communication_dtype_for`` (same file) picks for a bf16 or an
  fp8 model's high-throughput path and a bf16 model's low-latency one (its fp8 and nvfp4
  wire formats are left for a later step), but the low-latency combine's ``fp8`` rows,
  which time the same bf16 combine again (``REPEAT_DTYPES``: a shape keeps its faster
  timing); vLLM's rows are all ``default``.
- SGLang: ``wideep_deepep_normal_perf`` (``ht``: ``<phase>_transmit_us +
  <phase>_notify_us`` at ``dispatch_sms`` / ``combine_sms`` 20, DeepEP's
  ``Buffer.num_sms`` default, the SM budget vLLM's table was collected at) and
  ``wideep_deepep_ll_perf`` (``ll``: ``<phase>_avg_t_us``). These tables have no EP
  column: aiconfigurator reads them at its legacy coordinate EP 8 on one node
  (``aiconfigurator/sdk/moe_comm_resolver.py`` ``a2a_covers_parallel``: "SGLang keeps its
  legacy normalized (ep=8, node_num=1) coordinate"), and so does the twin.

vLLM's low-latency families read the same system's SGLang low-latency table instead
(``KERNEL_TABLES``): vLLM's ``deepep_ll`` rows time the host's path through vLLM's
``prepare`` / ``finalize`` around DeepEP's kernels, not the kernels, which the graphed decode
step that runs them pays (docs/decisions.md, "vLLM's DeepEP low-latency families").

Rows kept: one node (``node_num`` 1; SGLang 0.5.6.post2's multi-node rows are left for a
later step), the system's own device (SGLang 0.5.6.post2's H200 normal table holds its
one-node rows from an H100). Per family the version directory with such rows that the
release picks (``twin.costmodel.table_release.pick_version``), as ``moe_rows`` does.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from twin.calibration.aic_mla import system_sms
from twin.calibration.aic_tables import FamilyRows, _family, _read, _row, _versions
from twin.costmodel.a2a import a2a_features
from twin.costmodel.collective_families import A2A_MODES, A2A_PHASES, a2a_kernel
from twin.costmodel.table_release import pick_version
from twin.errors import TwinError

# DeepEP's default SM budget of the high-throughput kernels (deep_ep/buffer.py,
# ``Buffer.num_sms = 20``); vLLM's ``deepep_ht`` rows were all collected at it.
DEEPEP_SMS = 20
# The EP of SGLang's tables (the module docstring).
SGLANG_EP = 8
BACKENDS = {
    "trtllm": {"ht": "trtllm_deepep_ht", "ll": "trtllm_deepep_ll"},
    "vllm": {"ht": "deepep_ht", "ll": "deepep_ll"},
}
# The engine whose table prices another engine's family mode. vLLM's ``deepep_ll`` rows
# (aiconfigurator 7d2513dc2 collector/wideep/vllm/collect_moe_a2a.py,
# ``VllmBenchmarkAdapter.benchmark``) time vLLM 0.24.0's whole eager
# ``DeepEPLLPrepareAndFinalize.prepare`` / ``finalize``
# (model_executor/layers/fused_moe/prepare_finalize/deepep_ll.py) between two CUDA events
# with the GPU idle at the start event: the host's path, 3-6x (dispatch) and up to 12x
# (combine) SGLang's kineto-timed DeepEP low-latency kernels at the same shapes. vLLM runs
# ``deepep_low_latency`` under CUDA graphs (vllm/config/compilation.py, 0.24.0: only
# ``deepep_high_throughput`` turns them off), where a step pays the kernels. So vLLM's
# ``ll`` families read SGLang's table of the same DeepEP kernels (its newest release: vLLM's
# releases do not order SGLang's). The ``ht`` rows keep vLLM's own table: that path runs
# eager and pays its host floor (``KernelFormula.floor``, every all-to-all family's: the
# comment on ``collective_families.A2A_EXTRAS``).
KERNEL_TABLES = {("vllm", "ll"): "sglang"}
WIRE_DTYPES = {"trtllm": {"bfloat16"}, "vllm": {"default"}}
# Wire formats whose rows time the *same* kernel as the read one (repeats of a shape), per
# (engine, mode, phase): TensorRT-LLM's low-latency combine. Its ``DeepEPLowLatency.combine``
# (``tensorrt_llm/_torch/modules/fused_moe/communication/deep_ep_low_latency.py``) calls
# DeepEP's bf16 ``low_latency_combine`` unless ``use_low_precision_combine``, which the
# table's collector turns off (ai-dynamo/aiconfigurator
# ``collector/wideep/trtllm/collect_moe_a2a.py``, ``use_low_precision_moe_combine=False``,
# TensorRT-LLM 1.3.0rc11 at 14efb6ac): the ``fp8`` invocation changes the dispatch's payload
# only, its combine row times the bf16 combine of the same bf16 expert output. A shape timed
# twice keeps its faster timing: the collector builds one DeepEP backend per (wire format,
# shape) and times each token count after 20 warm-up iterations, and the slow repeats are
# the first rows after a new backend (H100's first shape at one token 136 us against 28 in
# its repeat; GB300's first shape 226-247 us at every token count against 56-78): timing
# noise adds time, it never removes it (docs/decisions.md, helper a2a37).
REPEAT_DTYPES = {("trtllm", "ll", "combine"): ("fp8",)}
SGLANG_TABLES = {"ht": "wideep_deepep_normal_perf.parquet", "ll": "wideep_deepep_ll_perf.parquet"}


def _num(row: dict[str, Any], column: str, where: Path) -> float:
    value = row.get(column)
    if value is None:
        raise TwinError(f"{where}: missing column {column!r}")
    return float(value)


def _own_device(rows: list[dict[str, Any]], table: Path) -> list[dict[str, Any]]:
    """``rows`` of ``table``'s most common device over all its rows (module docstring)."""
    counts = Counter(str(r.get("device", "")) for r in _read(table))
    if not counts:
        return rows
    device = counts.most_common(1)[0][0]
    return [r for r in rows if str(r.get("device", "")) == device]


def _unified(table: Path, engine: str, mode: str, phase: str) -> list[dict[str, Any]]:
    """``moe_a2a_perf`` rows of ``engine``'s ``mode`` backend and ``phase``; a shape that
    a repeat wire format timed again (``REPEAT_DTYPES``) keeps the faster of its rows."""
    backend = BACKENDS[engine][mode]
    wire = WIRE_DTYPES[engine]
    repeats = REPEAT_DTYPES.get((engine, mode, phase), ())
    rows = [
        r
        for r in _read(table)
        if r.get("comm_backend") == backend
        and r.get("phase") == phase
        and str(r.get("comm_dtype")) in {*wire, *repeats}
        and int(r.get("node_num") or 1) == 1
    ]
    rows = _own_device(rows, table)
    if not repeats:
        return rows
    fastest: dict[tuple[int, ...], dict[str, Any]] = {}
    for r in rows:
        if str(r.get("comm_dtype")) in wire:
            fastest[_shape_key(r)] = r
    for r in rows:
        key = _shape_key(r)
        if key in fastest and float(r["latency"]) < float(fastest[key]["latency"]):
            fastest[key] = r  # a repeat of a read shape only: no shape the wire lacks
    return list(fastest.values())


def _shape_key(r: dict[str, Any]) -> tuple[int, ...]:
    """One ``moe_a2a_perf`` row's shape: what a repeat must match."""
    cols = ("ep_size", "hidden_size", "topk", "num_experts", "num_tokens")
    return tuple(int(r.get(c) or 0) for c in cols)


def _sglang(table: Path, mode: str, phase: str) -> list[dict[str, Any]]:
    """SGLang's DeepEP rows of ``mode`` (one node, DeepEP's SM budget for ``ht``)."""
    rows = [r for r in _read(table) if int(r.get("node_num") or 1) == 1]
    if mode == "ht":
        rows = [r for r in rows if int(r.get(f"{phase}_sms") or 0) == DEEPEP_SMS]
    return _own_device(rows, table)


def _fit_row(r: dict[str, Any], mode: str, phase: str, engine: str, where: Path, sms: int) -> dict:
    kernel = a2a_kernel(mode, phase)
    if engine == "sglang":
        t = int(_num(r, "num_token", where))
        top = int(_num(r, "num_topk", where))
        ep = SGLANG_EP
        if mode == "ht":
            us = _num(r, f"{phase}_transmit_us", where) + float(r.get(f"{phase}_notify_us") or 0)
        else:
            us = _num(r, f"{phase}_avg_t_us", where)
    else:
        t = int(_num(r, "num_tokens", where))
        top = int(_num(r, "topk", where))
        ep = int(_num(r, "ep_size", where))
        us = _num(r, "latency", where)
    d = int(_num(r, "hidden_size", where))
    e = int(_num(r, "num_experts", where))
    if not us > 0:
        raise TwinError(f"{where}: a latency must be positive (got {us!r})")
    shape = {"t": t, "d": d, "k": top, "e": e, "ep": ep}
    return _row(kernel, a2a_features(mode, phase, t, d, top, e, ep, sms), us * 1e-3, shape)


def a2a_rows(system: Path, engine: str, release: str | None = None) -> list[FamilyRows]:
    """The all-to-all families of ``engine`` on this system, each from the table of engine
    release ``release`` among the versions with rows of it (None: the newest such)."""
    families = []
    for mode in A2A_MODES:
        src = KERNEL_TABLES.get((engine, mode), engine)  # the engine whose table is read
        base = system / "comm" / src
        name = SGLANG_TABLES[mode] if src == "sglang" else "moe_a2a_perf.parquet"
        for phase in A2A_PHASES:
            if src != "sglang" and src not in BACKENDS:
                continue

            def pick(
                table: Path, m: str = mode, p: str = phase, e: str = src
            ) -> list[dict[str, Any]]:
                return _sglang(table, m, p) if e == "sglang" else _unified(table, e, m, p)

            timed = {v.name: v for v in _versions(base, name) if pick(v / name)}
            chosen = pick_version(timed, release if src == engine else None)
            if chosen is None:
                continue
            table = timed[chosen] / name
            raw = pick(table)
            sms = system_sms(system)  # DeepEP's low-latency launch (twin.costmodel.a2a)
            out = [_fit_row(r, mode, phase, src, table, sms) for r in raw]
            source = BACKENDS.get(src, {}).get(mode, f"deepep_{mode}")
            families.append(_family(a2a_kernel(mode, phase), table, raw, source, out))
    return families


__all__ = ["a2a_rows"]
