"""How each collection measured its rows (the benchmark client: requests, warm-up, the
lengths' spread, the prompts' tokens) and what a row's strings say: its collection, the
day it was measured, the model it names. The collections' server limits are their own
modules (``aiconfigurator_limits``, ``inferencemax_*``), chosen by ``deployment``."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from twin.errors import TwinError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from twin.validate.silicon.rows import SiliconRow


# Requests per row, in rounds of ``c``: aiconfigurator's own benchmark script (the
# package ``aiconfigurator`` 0.12.0, generator/config/backend_templates/benchmark/
# bench_run.sh.j2) runs ``aiperf profile --concurrency c --num-requests c x
# AICONFIGURATOR_BENCH_MULTI_ROUND`` (default 20) after ``--warmup-request-count 2c``.
# The warm-up requests run first and are left out of the means. (Rows of the InferenceMAX
# collection follow their own harness: :data:`INFERENCEMAX`.) That script is a stand-in,
# not the collection's client: it was added on 2026-02-11 (ai-dynamo/aiconfigurator #334,
# 50 rounds then), after the dated "aic-auto-gap-analysis" files (measured 2026-01-23 and
# -25, ``tools/accuracy_tracking/silicon_refs.csv``). Its aiperf defaults would repeat 100
# prompts, which the fit rows refute (docs/decisions.md, "the aiperf rows' repeated
# prompts"): the twin sends every request its own prompt.
MEASURED_ROUNDS = 20
WARMUP_ROUNDS = 2


@dataclass(frozen=True)
class Harness:
    """The benchmark client a collection of rows was measured with."""

    name: str
    measured_rounds: int  # measured requests per client
    # Prompt and output lengths are drawn uniformly from [int(len x range_ratio), len]
    # (1.0: exactly the row's ISL and OSL).
    range_ratio: float
    # Seconds: each request leaves the client a delay drawn uniformly from
    # [0, dispatch_spread_s) after its client's slot frees (the first round's too: every
    # slot is free at the start), seeded by the row (``predict.write_workload``). Both
    # clients are a semaphore over an event loop, whose dispatch is not instant nor
    # constant: aiperf's concurrency mode (ai-dynamo/aiperf
    # ``aiperf/timing/request_rate_strategy.py``, commit 06440a3, ``CONCURRENCY_BURST``)
    # acquires an ``asyncio.Semaphore(concurrency)``, then drops a credit to a worker
    # process (a ZMQ message) that builds and sends the HTTP request, and a returned
    # credit (another message) releases the slot; vLLM's ``benchmark_serving.py``
    # creates every request's task at once, each awaiting an
    # ``asyncio.Semaphore(max_concurrency)`` (``limited_request_func``) in one event loop
    # that also reads every stream's chunks. A deterministic twin without it keeps the
    # phase its first round set forever (docs/decisions.md, "the twin's closed loop
    # phase-locks", session 27). No source gives the delay's size: the value is chosen
    # on the fit rows (docs/decisions.md, "helper jitter40, session 40"). 0: none.
    dispatch_spread_s: float = 0.0

    def __post_init__(self) -> None:
        check_dispatch_spread(self.dispatch_spread_s, f"harness {self.name!r}: ")


def check_dispatch_spread(spread: float, where: str = "") -> None:
    """Refuse a dispatch spread (:attr:`Harness.dispatch_spread_s`) that is no finite number
    of seconds >= 0 (a bool is none), in one line prefixed ``where``."""
    number = isinstance(spread, (int, float)) and not isinstance(spread, bool)
    if not (number and math.isfinite(spread) and spread >= 0):
        raise TwinError(
            f"{where}dispatch_spread_s must be a finite number of seconds >= 0, not {spread!r}"
        )


# aiconfigurator's benchmark (above): aiperf with ``--isl-stddev 0 --osl-stddev 0``
# (``generator/config/deployment_config.yaml`` defaults) and ``ignore_eos``: exact lengths.
# Dispatch spread 0: U(0, 5 / 10 / 20 ms) raised the fit TTFT MAPE of a stratified fit
# subsample's aiperf rows (docs/decisions.md, "helper jitter40, session 40").
AIPERF = Harness("aiconfigurator aiperf", MEASURED_ROUNDS, 1.0, 0.0)
# The CSV's InferenceMAX collections: "2026-04-06.csv", "2026-03-25.csv" and the
# "db-dump/2026-04-27" rows (Llama-3.1-70B, gpt-oss-120b, DeepSeek-R1, MiniMax-M2.5, ...
# at ISL/OSL 1k/1k, 1k/8k, 8k/1k, 4-256 clients). They are one measurement pipeline dumped
# three times: 2,151 rows of the CSV share their exact (TTFT, TPOT, ISL, OSL, concurrency,
# system, backend) with a row of another of the three (``measurement_key``), and the
# db-dump's ``workflow_run_id``/``config_id`` name CI runs. The matrix is InferenceMAX's;
# no source names the harness, so this is read off the matrix, not stated by the data.
# InferenceMAX's client (``benchmarks/benchmark_lib.sh`` ``run_benchmark_serving``) runs
# vLLM's ``benchmark_serving.py`` with ``--dataset-name random --random-range-ratio``
# (0.8 by default, ``.github/workflows/benchmark-tmpl.yml``), ``--num-prompts $((CONC *
# 10))``, ``--num-warmups $((2 * CONC))``, ``--ignore-eos``; its random dataset draws each
# prompt and output length uniformly from ``[int(len x ratio), len]``
# (``sample_random_requests``).
# Dispatch spread 0: U(0, 5 / 10 / 20 ms) left the subsample's fit TTFT MAPE 0.1-0.2
# points higher (docs/decisions.md, "helper jitter40, session 40").
INFERENCEMAX = Harness("InferenceMAX benchmark_serving", 10, 0.8, 0.0)
# ``qwen3.5-397b-gap-analysis.csv`` (76 SGLang rows of Qwen3.5-397B on B200 and H200) is
# InferenceMAX's Qwen3.5 measurements again: 75 of its 76 rows equal a row of the
# 2026-03-25.csv / 2026-04-06.csv / db-dump collections in TTFT and TPOT rounded to 0.1 ms,
# ISL, OSL, concurrency and system (its values carry two decimals, theirs the full float),
# and its layouts and clients are those of InferenceMAX's qwen3.5 configurations.
# ``kimi-k2.5-gap-analysis.csv`` (47 vLLM rows of Kimi-K2.5: B200 fp4 0.17.0, B200 int4
# 0.15.1, H200 int4 0.16.0) likewise: each of its 47 rows equals a row of those three
# collections in TTFT and TPOT rounded to 0.01 ms (its two decimals), ISL, OSL,
# concurrency, system, backend, release and layout (tp 8 ep 1, tp 4 ep 4). So they ran
# InferenceMAX's client and servers (``max_num_batched_tokens`` 8,192), not
# aiconfigurator's aiperf benchmark with its ``batch + isl + 1500`` budget, which priced
# each client burst as several prefill steps (docs/decisions.md, "Issue 31, step: the
# Kimi-K2.5 gap-analysis rows are InferenceMAX's").
INFERENCEMAX_SOURCES = frozenset(
    {
        "2026-03-25.csv",
        "2026-04-06.csv",
        "qwen3.5-397b-gap-analysis.csv",
        "kimi-k2.5-gap-analysis.csv",
    }
)
INFERENCEMAX_DUMP = "db-dump/"  # ``silicon_data_source`` of the CI database's rows
_SOURCE_FILE = re.compile(r"source_file=([^;]*)")


def harness_of(row: SiliconRow) -> Harness:
    """The benchmark client ``row`` was measured with, from its ``silicon_data_source``."""
    found = _SOURCE_FILE.search(row.source)
    if found and found.group(1).strip() in INFERENCEMAX_SOURCES:
        return INFERENCEMAX
    if row.source.startswith(INFERENCEMAX_DUMP):
        return INFERENCEMAX
    return AIPERF


def inferencemax_row(row: SiliconRow, backend: str | None = None) -> bool:
    """Whether ``row`` is of the InferenceMAX collection (and of ``backend``, where named)."""
    return harness_of(row) is INFERENCEMAX and backend in (None, row.backend)


# Random prompt token ids are drawn from [0, TOKEN_RANGE): random prompts share no
# prefix (the chance that two share even their first two tokens is 1e-10), so the
# engine's default prefix caching is kept and never hits, as on the real servers.
TOKEN_RANGE = 100_000


def model_named(row: SiliconRow, names: Iterable[str]) -> str | None:
    """The first of ``names`` that ``row``'s ``model_path`` contains, case-insensitively
    (a script's or rule's model, matched by name); ``None``: none of them."""
    path = row.model_path.lower()
    return next((name for name in names if name.lower() in path), None)


# gpt-oss-120b as InferenceMAX's rows name it (``model_named``), read by the TensorRT-LLM and
# the vLLM scripts' rules alike.
INFERENCEMAX_GPTOSS = ("gpt-oss-120b",)


_MEASURED = re.compile(r"measured=(\d{4}-\d{2}-\d{2})")


def measured_on(row: SiliconRow) -> str | None:
    """The day ``row`` was measured (``measured=`` of its source, ISO), if it says."""
    found = _MEASURED.search(row.source)
    return found.group(1) if found else None


CONFIG_ID = re.compile(r"config_id=(\d+)")


def config_id(row: SiliconRow) -> str | None:
    """The CI database's configuration that ran ``row`` (``config_id=`` of its source), if
    it says."""
    found = CONFIG_ID.search(row.source)
    return found.group(1) if found else None


# InferenceMAX's client sent no warm-up request before InferenceX d053ae24e (2026-01-21,
# "upstream kimbochen/bench_serving, adding warmup"): ``benchmarks/benchmark_lib.sh``
# ``run_benchmark_serving`` at d053ae24e^ clones kimbochen/bench_serving and runs it without
# ``--num-warmups``; from d053ae24e it passes ``--num-warmups $((2 * max_concurrency))``
# (:data:`INFERENCEMAX`'s two rounds). A row measured before that day met a server that no
# request but the engine's own start-up one had reached. None of the CSV's rows is dated
# that day; a row without a day is not known to have run cold, so no rule takes it as cold.
INFERENCEMAX_WARMUP_FROM = "2026-01-21"


def cold_server(row: SiliconRow) -> bool:
    """Whether ``row``'s own data says its client sent no warm-up (above): an InferenceMAX
    row measured before :data:`INFERENCEMAX_WARMUP_FROM`."""
    day = measured_on(row)
    return inferencemax_row(row) and day is not None and day < INFERENCEMAX_WARMUP_FROM


# The TensorRT-LLM 1.3.0rc1 rows of the "aic-auto-gap-analysis" collection (26 rows:
# Qwen3-32B GB200, DeepSeek-R1-NVFP4 B200, gpt-oss-120b H100; Dynamo 0.9.0 runtime image,
# measured 2026-03-17 to -23) record a TPOT that their own fields' decode work does not set
# (docs/decisions.md, "Issue 31, step: the Llama-3.1-8B-FP8 vLLM and TensorRT-LLM 1.3.0rc1
# outliers"), read off the fit rows:
# - Qwen3-32B GB200 tp 2: each ISL/OSL is one deployment (one ``gtl_task_id`` for all its
#   concurrencies, ``batch_size`` the clients a worker gets: c / 2 at 2k/500, c / 4 at
#   4k/1k). At one client a worker TPOT is 8.1 ms with one client in all (c 1) and 41.9 ms
#   with two (c 2, 2k/500); at 4k/1k 8.2 ms at one client, 50.7 ms at two a worker, 94.1 at
#   four and 71.8 at 32: a TPOT that falls as each worker's batch grows 8x, where decoding
#   one to four sequences of a 32B dense model reads the same weights.
# - DeepSeek-R1-NVFP4 B200: 85.2-91.8 ms over 5 to 56 clients a worker at tp 4 and 8 (an 11x
#   batch and half the GPUs within 8%), where DeepSeek-V3.1-NVFP4 (the same architecture)
#   on B200 with TensorRT-LLM 1.3.0rc5, tp 8 ep 8, batch 56 (448 clients) measures 21.2 ms.
# - gpt-oss-120b H100 tp 4: 47.3 and 49.3 ms at 40 and 96 clients a worker.
# No reading of the fields (their workers; one worker with every client; attention DP
# over the tp ranks) brings the twin's decode near these; no source names what else ran.
GAP_ANALYSIS_SOURCE = "aic-auto-gap-analysis/"
GAP_ANALYSIS_UNPACED_RELEASES = frozenset({("trtllm", "1.3.0rc1")})
REASON_GAP_ANALYSIS_TPOT = (
    "TensorRT-LLM 1.3.0rc1 gap-analysis rows: TPOT not set by their decode batch "
    "(inconsistent within a sweep)"
)


def gap_analysis_tpot_unpaced(row: SiliconRow) -> bool:
    """Whether ``row`` is one of the gap-analysis collection's releases whose TPOT its
    own decode batch does not set (above)."""
    found = _SOURCE_FILE.search(row.source)
    return (
        found is not None
        and GAP_ANALYSIS_SOURCE in found.group(1)
        and (row.backend, row.backend_version) in GAP_ANALYSIS_UNPACED_RELEASES
    )


# TensorRT-LLM 1.2.0rc2's attention DP did not compute gpt-oss-120b correctly: InferenceMAX's
# B200 runs in that image with ``dp-attn: true`` (``.github/configs/nvidia-master.yaml``,
# InferenceX PR #266, 2025-12-02) answered GSM8K with ``"<|channel|>!!!!..."`` (InferenceX
# issue #514, 2026-01-21, TP 2 EP 2 DP attention on B200); PR #430 (2026-01-15, "Fixes accuracy
# issue when DP ATTN is on") moved the image to 1.2.0rc2.post1, reverted by #459 (01-17), and
# the config ran 1.2.0rc2.post2 from then on (#1490's "from v1.2.0rc2.post2"). A row of that
# release with attention DP timed an engine that skipped or broke part of the work the model
# sets: on the two fit rows (ids ending 390 and 2006, tp 1 x attention DP 4) the twin's TPOT
# is +48% / +40%, where the 1.2.0rc2.post2 rows of the same layout are -5..0%, and the measured
# TPOT at 64 clients is 5.66 ms under 1.2.0rc2 and 6.42 ms under 1.2.0rc2.post2
# (benchmarks/results/gptdq-s35/); 1.2.0rc2's rows without attention DP are priced as before.
BROKEN_ATTENTION_DP_RELEASES = frozenset({("trtllm", "1.2.0rc2")})
REASON_BROKEN_ATTENTION_DP = (
    "TensorRT-LLM 1.2.0rc2 attention-DP rows: the release's attention DP computed a wrong "
    "answer (InferenceX #514)"
)


def attention_dp_broken(row: SiliconRow) -> bool:
    """Whether ``row`` ran attention DP in a release whose attention DP was broken (above)."""
    return (row.attention_dp or 1) > 1 and (
        row.backend,
        row.backend_version,
    ) in BROKEN_ATTENTION_DP_RELEASES
