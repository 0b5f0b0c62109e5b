"""The measured rows: NVIDIA's ``silicon_sample.csv`` read from the installed package, the
issue's fixed fit / held-out split, and the reasons a row is not expressed."""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from twin.errors import TwinError, where
from twin.validate.silicon.harness import config_id, model_named
from twin.validate.silicon.inferencemax import inferencemax_deepseek, inferencemax_layout
from twin.validate.silicon.inferencemax_trtllm import inferencemax_trtllm_script_layout
from twin.validate.silicon.inferencemax_vllm import inferencemax_vllm_script_layout
from twin.validate.silicon.vllm_data_parallel import vllm_data_parallel_layout

CSV_IN_PACKAGE = ("systems", "silicon_sample.csv")
CONFIGS_IN_PACKAGE = "model_configs"
# The columns this module reads (the file has more: disaggregated workers' settings).
COLUMNS = (
    "id",
    "silicon_data_source",
    "backend",
    "backend_version",
    "model_path",
    "system",
    "precision",
    "mode",
    "isl",
    "osl",
    "gemm_quant_mode",
    "moe_quant_mode",
    "batch_size",
    "tp_size",
    "pp_size",
    "attention_dp_size",
    "moe_tp_size",
    "moe_ep_size",
    "silicon_ttft_ms",
    "silicon_tpot_ms",
)
_CONCURRENCY = re.compile(r"silicon_concurrency=(\d+)")

# The fixed split: a row is fitted on when the first hex digit of the SHA-256 of
# its id is 0-7 (half the rows, whatever their order), held out otherwise.
FIT, HELD_OUT = "fit", "held_out"
SPLITS = (FIT, HELD_OUT)
_FIT_DIGITS = frozenset("01234567")


# Reasons a row is not expressed, in the order they are checked (a row is counted once,
# under the first that applies).
REASON_NO_MEASUREMENT = "no measured TTFT/TPOT"
REASON_DISAGG = "disaggregated serving (mode disagg)"
REASON_PP = "pipeline parallel (pp_size > 1)"
REASON_ATTN_DP = "attention data parallel (attention_dp_size > 1)"
REASON_EP = "expert parallel (moe_ep_size > 1)"
REASON_NO_CONCURRENCY = "no silicon_concurrency in silicon_data_source"
REASON_NO_LENGTHS = "no isl/osl"


@dataclass(frozen=True)
class SiliconRow:
    """One row of the CSV, parsed (``None`` where the file leaves a value empty)."""

    id: str
    source: str
    backend: str
    backend_version: str
    model_path: str
    system: str
    precision: str
    mode: str
    isl: int | None
    osl: int | None
    gemm_quant_mode: str
    moe_quant_mode: str
    batch_size: int | None
    tp: int | None
    pp: int | None
    attention_dp: int | None
    moe_tp: int | None
    moe_ep: int | None
    concurrency: int | None
    ttft_ms: float | None
    tpot_ms: float | None
    # Another row of the file holds the same measurement (``measurement_key``) under a
    # fit id: the measurement was seen when fitting, so this row is fit too.
    copy_in_fit: bool = False
    # The CSV's own parallel columns where they were read as another layout
    # (:func:`inferencemax_layout`); empty where the columns are the run's.
    csv_layout: str = ""
    # The InferenceMAX configurations (the CI database's ``config_id``) named for this
    # row's measurement, by itself or a copy (``measurement_key``), and for any measurement
    # at its point (``run_point``): :func:`mark_configurations`.
    named_configs: frozenset[str] = frozenset()
    point_configs: frozenset[str] = frozenset()

    @property
    def split(self) -> str:
        return FIT if self.copy_in_fit else split_of(self.id)

    @property
    def measurement_key(self) -> tuple[object, ...] | None:
        """What makes two rows one measurement: the same measured TTFT and TPOT (to 0.01
        ms) at the same lengths, concurrency, system and backend. The InferenceMAX
        collections repeat measurements under other ids, model names (DeepSeek-V3 and
        -R1) and versions, and the Kimi-K2.5 gap-analysis file repeats InferenceMAX rows
        rounded (exact floats missed 151 such held-out copies); ``None`` without a
        measurement."""
        if self.ttft_ms is None or self.tpot_ms is None:
            return None
        return (
            round(self.ttft_ms, COPY_DIGITS),
            round(self.tpot_ms, COPY_DIGITS),
            self.isl,
            self.osl,
            self.concurrency,
            self.system,
            self.backend,
        )

    @property
    def run_point(self) -> tuple[object, ...]:
        """What a configuration's search space names a run by: the model (InferenceMAX's
        DeepSeek-R1 under either name), system, engine and release, format, layout,
        lengths and clients. Several measurements can share a point where two
        configurations cover it (a plain and an -mtp one)."""
        model = "deepseek-r1" if inferencemax_deepseek(self) else self.model_path.lower()
        return (
            model,
            self.system,
            self.backend,
            self.backend_version,
            self.precision,
            self.tp,
            self.attention_dp,
            self.moe_ep,
            self.isl,
            self.osl,
            self.concurrency,
        )

    @property
    def model_name(self) -> str:
        """The model's name without its organisation (``Qwen3-32B``)."""
        return self.model_path.rsplit("/", 1)[-1]

    @property
    def precision_label(self) -> str:
        return self.precision or "unspecified"

    @property
    def group(self) -> str:
        """The summary's group: model | system | backend | precision."""
        return f"{self.model_name}|{self.system}|{self.backend}|{self.precision_label}"

    @property
    def layout_columns(self) -> str:
        """The CSV's parallel columns as written, for ``csv_layout`` where a rule reads them
        as another layout."""
        return (
            f"tp_size {self.tp}, attention_dp_size {self.attention_dp}, "
            f"moe_tp_size {self.moe_tp}, moe_ep_size {self.moe_ep}"
        )


def split_of(row_id: str) -> str:
    """``fit`` when the first hex digit of SHA-256(``row_id``) is 0-7, else ``held_out``
    (a row's split also counts its copies: ``SiliconRow.split``)."""
    digit = hashlib.sha256(row_id.encode("utf-8")).hexdigest()[0]
    return FIT if digit in _FIT_DIGITS else HELD_OUT


def package_dir() -> Path:
    """The installed ``aiconfigurator_core`` (a TwinError naming the extra if absent)."""
    from twin.calibration.aic_tables import package_dir as aic_package_dir

    return aic_package_dir("scoring against silicon_sample.csv")


def default_csv() -> Path:
    return package_dir().joinpath(*CSV_IN_PACKAGE)


def default_configs() -> Path:
    return package_dir() / CONFIGS_IN_PACKAGE


def _number(text: str, path: Path, row: int, column: str, what: str) -> float | None:
    """A cell as a float (None when empty); one error naming file, row and column."""
    text = text.strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise TwinError(f"{where(path, row, column)}: expected {what} (got {text!r})") from None


def int_cell(text: str, path: Path, row: int, column: str) -> int | None:
    """A cell as a whole number (None when empty); one error naming file, row and column."""
    value = _number(text, path, row, column, "an integer")
    if value is None:
        return None
    if not value.is_integer():
        raise TwinError(f"{where(path, row, column)}: expected an integer (got {text.strip()!r})")
    return int(value)


def _float(text: str, path: Path, row: int, column: str) -> float | None:
    value = _number(text, path, row, column, "a number")
    if value is None:
        return None
    return value if math.isfinite(value) and value > 0 else None


def read_rows(path: str | Path | None = None) -> list[SiliconRow]:
    """The CSV's rows (the installed package's ``systems/silicon_sample.csv`` by default).

    A missing column or a malformed number is a TwinError naming the file, row and
    column; an empty value is ``None`` (the row is then not expressed, with a reason).
    """
    p = Path(path) if path is not None else default_csv()
    try:
        with p.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise TwinError(f"{p}: missing column {missing[0]!r} (a silicon_sample.csv?)")
            rows = []
            for i, raw in enumerate(reader, start=1):
                row = inferencemax_layout(_parse(raw, p, i))
                row = inferencemax_trtllm_script_layout(row)
                row = inferencemax_vllm_script_layout(row)
                rows.append(vllm_data_parallel_layout(row))
    except FileNotFoundError:
        raise TwinError(f"{p}: no such file") from None
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise TwinError(f"{p}: not a readable CSV file ({err})") from None
    seen: set[str] = set()
    for i, r in enumerate(rows, start=1):
        if not r.id:
            raise TwinError(f"{where(p, i, 'id')}: empty id")
        if r.id in seen:
            raise TwinError(f"{where(p, i, 'id')}: duplicate id {r.id!r}")
        seen.add(r.id)
    return mark_configurations(mark_copies(rows))


def mark_copies(rows: Sequence[SiliconRow]) -> list[SiliconRow]:
    """``rows`` with ``copy_in_fit`` set where another row holds the same measurement
    under a fit id, so a held-out score never counts a measurement the fit split saw
    (759 held-out rows of the package's CSV have a fit copy; 608 by exact floats)."""
    fit_keys = {
        r.measurement_key for r in rows if r.measurement_key is not None and split_of(r.id) == FIT
    }
    return [
        dataclasses.replace(r, copy_in_fit=True)
        if split_of(r.id) != FIT and r.measurement_key in fit_keys
        else r
        for r in rows
    ]


# Two roundings of "the same measurement" (ms decimals), two questions, not one rule:
# - COPY_DIGITS (0.01 ms, ``SiliconRow.measurement_key``): is a held-out row a copy of a fit
#   row? Copies cross model names, versions and files, and the Kimi-K2.5 gap-analysis
#   file rounds InferenceMAX's floats, so the rule must be as coarse as the coarsest copy
#   (exact floats found 608 of the 759 copies); a false join only moves a row to fit.
# - RUN_DIGITS (0.1 us, ``_run_of``): which CI-database configuration ran a row, at its
#   run point (same release). Only the run's own floats (last digit changed) name it:
#   at 0.01 ms the 36 gap-analysis rounded copies at a named point would be named too
#   (config 635; checked 2026-11-30), though they are another file's report of the run.
COPY_DIGITS = 2
RUN_DIGITS = 4


def _run_of(row: SiliconRow) -> tuple[object, ...] | None:
    """A measurement at its point, to 0.1 us (:data:`RUN_DIGITS`): the collections repeat a
    run's floats with their last digit changed (22.529311712042354 and ...35 ms), so exact
    floats miss some copies (finer than ``measurement_key``'s 0.01 ms, which also joins
    rounded copies across model names and versions)."""
    if row.ttft_ms is None or row.tpot_ms is None:
        return None
    return (*row.run_point, round(row.ttft_ms, RUN_DIGITS), round(row.tpot_ms, RUN_DIGITS))


def mark_configurations(rows: Sequence[SiliconRow]) -> list[SiliconRow]:
    """``rows`` with ``named_configs`` and ``point_configs`` set from the CI database's
    rows, which name their configuration (``config_id=``): the same measurement at the
    same point in 2026-03-25.csv or 2026-04-06.csv is the same run, and a measurement at
    a point where another one is named is another configuration's run (the plain and
    -mtp servers of one point, ``inferencemax_sglang``)."""
    by_run: dict[tuple[object, ...], set[str]] = {}
    by_point: dict[tuple[object, ...], set[str]] = {}
    for r in rows:
        found, run = config_id(r), _run_of(r)
        if found and run is not None:
            by_run.setdefault(run, set()).add(found)
            by_point.setdefault(r.run_point, set()).add(found)
    out = []
    for r in rows:
        run = _run_of(r)
        named = by_run.get(run, set()) if run is not None else set()
        point = by_point.get(r.run_point, set())
        if named or point:
            r = dataclasses.replace(
                r, named_configs=frozenset(named), point_configs=frozenset(point)
            )
        out.append(r)
    return out


def _parse(raw: dict[str, str | None], path: Path, i: int) -> SiliconRow:
    text = {c: (raw.get(c) or "").strip() for c in COLUMNS}

    def n(column: str) -> int | None:
        return int_cell(text[column], path, i, column)

    found = _CONCURRENCY.search(text["silicon_data_source"])
    return SiliconRow(
        id=text["id"],
        source=text["silicon_data_source"],
        backend=text["backend"].lower(),
        backend_version=text["backend_version"],
        model_path=text["model_path"],
        system=text["system"].lower(),
        precision=text["precision"].lower(),
        mode=text["mode"].lower(),
        isl=n("isl"),
        osl=n("osl"),
        gemm_quant_mode=text["gemm_quant_mode"].lower(),
        moe_quant_mode=text["moe_quant_mode"].lower(),
        batch_size=n("batch_size"),
        tp=n("tp_size"),
        pp=n("pp_size"),
        attention_dp=n("attention_dp_size"),
        moe_tp=n("moe_tp_size"),
        moe_ep=n("moe_ep_size"),
        concurrency=int(found.group(1)) if found else None,
        ttft_ms=_float(text["silicon_ttft_ms"], path, i, "silicon_ttft_ms"),
        tpot_ms=_float(text["silicon_tpot_ms"], path, i, "silicon_tpot_ms"),
    )


def select(
    rows: Iterable[SiliconRow],
    models: Sequence[str] = (),
    systems: Sequence[str] = (),
    backends: Sequence[str] = (),
) -> list[SiliconRow]:
    """Rows whose model path contains one of ``models`` (case-insensitive), whose system
    is one of ``systems`` and backend one of ``backends`` (empty: any)."""
    ms = list(models)
    ss = {s.lower() for s in systems}
    bs = {b.lower() for b in backends}
    return [
        r
        for r in rows
        if (not ms or model_named(r, ms) is not None)
        and (not ss or r.system in ss)
        and (not bs or r.backend in bs)
    ]
