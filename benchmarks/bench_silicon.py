"""The twin against measured serving runs: NVIDIA's ``silicon_sample.csv`` (issue 31).

Run: ``python benchmarks/bench_silicon.py [--models M,..] [--systems S,..] [--backends B,..]
[--precisions F,..] [--split fit|held_out] [--deployment benchmark|aiconfigurator|
aiconfigurator-all|defaults] [--min-concurrency N] [--limit N] [--jobs N] [--executor local|ray]
[--no-aiconfigurator]`` (needs the ``twin[aic]`` extra: the CSV and the model configs
are read from the installed ``aiconfigurator-core``).

Every row of the CSV the twin can express (:mod:`twin.validate.silicon`: aggregated,
one instance, a precision its GPU's profile prices, a supported model family, a shipped
profile and engine mode) is simulated as its benchmark ran, at its precision: the
measured phase of its harness (:class:`twin.validate.silicon.Harness`) from an idle
server, ``c`` closed-loop clients starting at once, random prompts of ``isl`` tokens and
``osl`` output tokens (exact for aiconfigurator's aiperf runs, uniform in [0.8 x, 1 x]
for the InferenceMAX collection), on one worker's share of the clients; the
mean TTFT and TPOT over the measured requests are scored against the measurement (MAPE
and MdAPE per (model, system, backend, precision), per backend and precision priced,
per backend and overall, on the issue's fit / held-out split).
With the ``aiconfigurator`` package installed its own estimate for each row
(``cli_estimate``, as its accuracy job calls it) is scored beside the twin's.

Writes ``--out`` (``benchmarks/results/silicon/``: ``predictions.csv``, one row per
expressed CSV row with the measurement, the twin's and aiconfigurator's predictions and
their errors, and ``summary.json``) and ``benchmarks/results/silicon.json`` (the
summary with the command, filters, method and wall time), and prints the side-by-side
table.
``--limit N`` keeps N expressed rows spread evenly over the selection (a quick run).
Each row's result is also appended to ``--out``'s ``journal.jsonl`` as it lands, so a
long run that stops can go on with ``--resume`` (the same selection on the same code:
the journal records a digest of the ``twin`` package's files and refuses otherwise); the
journal is removed once the outputs are written.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable, Collection, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from twin.atomic import write_text_atomic
from twin.errors import TwinError
from twin.validate import silicon as sil

RESULTS = Path(__file__).resolve().parent / "results" / "silicon.json"
OUT = Path(__file__).resolve().parent / "results" / "silicon"


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def spread(items: Sequence[Any], limit: int | None) -> list[Any]:
    """``limit`` items spread evenly over ``items`` (all of them without a limit)."""
    if limit is None or limit >= len(items):
        return list(items)
    if limit <= 0:
        return []
    step = len(items) / limit
    return [items[math.floor(i * step)] for i in range(limit)]


JOURNAL = "journal.jsonl"


def code_digest() -> str:
    """SHA-256 over the ``twin`` package's files (source, profiles, data), path and bytes:
    two runs with the same digest price every row with the same code and tables."""
    root = Path(sil.__file__).resolve().parents[2]  # the ``twin`` package
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


class Journal:
    """Rows' results appended as they land (one JSON line each, after a header naming the
    selection and the code), so ``--resume`` scores only the rows a stopped run left."""

    def __init__(self, path: Path, header: dict[str, Any], resume: bool) -> None:
        self.path = path
        self.done: dict[str, dict[str, Any]] = {}
        if resume:
            self.done = self._read(header)
        elif path.exists():
            raise TwinError(
                f"--out {path.parent}: a stopped run's {JOURNAL} is there; --resume to go on "
                "with it, or remove it"
            )
        if not self.done:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(header, sort_keys=True) + "\n", encoding="utf-8")

    def _read(self, header: dict[str, Any]) -> dict[str, dict[str, Any]]:
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            raise TwinError(f"--resume: no {JOURNAL} in {self.path.parent}") from None
        try:
            first = json.loads(lines[0]) if lines else None
        except json.JSONDecodeError:
            first = None
        if first != header:
            differs = sorted(
                k for k in header if not isinstance(first, dict) or first.get(k) != header[k]
            )
            raise TwinError(
                f"--resume: {self.path} is another run's (its {', '.join(differs) or 'header'} "
                "differs: the same flags on the same code resume)"
            )
        done: dict[str, dict[str, Any]] = {}
        for line in lines[1:]:
            try:
                result = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short when the run stopped: that row runs again
            done[result["id"]] = result
        return done

    def add(self, result: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(result, sort_keys=True) + "\n")

    def close(self) -> None:
        self.path.unlink(missing_ok=True)


def run_rows(
    plans: Sequence[sil.RowPlan],
    aiconfigurator: bool,
    jobs: int,
    executor: str,
    ray_address: str | None,
    on_result: Callable[[sil.RowPlan, dict[str, Any]], None],
    skip_aic: Collection[str] = (),
) -> dict[str, int] | None:
    """Score every plan in the project's local process pool (``twin.workers``) or as
    Ray tasks (``reports.ray_executor``); ``on_result`` as each lands. Ray's per-node
    counts are returned. Rows whose id is in ``skip_aic`` are not estimated by
    aiconfigurator (their estimate is reused)."""

    def args(p: sil.RowPlan) -> tuple[Any, ...]:
        return (p, aiconfigurator and p.row.id not in skip_aic)

    if executor == "ray":
        from twin.reports.ray_executor import import_ray, run_on_ray

        ray = import_ray(ray_address)
        return run_on_ray(ray, ray_address, sil.score_row, plans, args, on_result)
    if jobs <= 1:
        for p in plans:
            on_result(p, sil.score_row(*args(p)))
        return None
    from twin.workers import run_in_pool

    run_in_pool(sil.score_row, plans, args, jobs, on_result)
    return None


AIC_COLUMNS = ("aic_ttft_ms", "aic_tpot_ms", "aic_error")


def read_aic_estimates(path: Path) -> dict[str, dict[str, Any]]:
    """aiconfigurator's estimates by row id from an earlier run's ``predictions.csv``: its
    estimates depend on the row and aiconfigurator's release, not on the twin."""
    import csv

    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = [c for c in ("id", *AIC_COLUMNS) if c not in (reader.fieldnames or [])]
            if missing:
                raise TwinError(f"--aic-from {path}: no column {missing[0]!r} (a predictions.csv?)")
            out: dict[str, dict[str, Any]] = {}
            for i, raw in enumerate(reader, start=2):
                est: dict[str, Any] = {}
                for column in ("aic_ttft_ms", "aic_tpot_ms"):
                    text = (raw.get(column) or "").strip()
                    try:
                        est[column] = float(text) if text else None
                    except ValueError:
                        raise TwinError(
                            f"--aic-from {path}: row {i}, column {column}: not a number ({text!r})"
                        ) from None
                est["aic_error"] = (raw.get("aic_error") or "").strip() or None
                # The GPUs the estimate was made at: an estimate for another layout of the
                # row (the CSV's own columns, before ``inferencemax_layout``) is not reused.
                gpus = (raw.get("tp") or "").strip()
                est["gpus"] = int(gpus) if gpus.isdigit() else None
                if est["aic_ttft_ms"] is not None or est["aic_error"]:
                    out[raw["id"]] = est
    except FileNotFoundError:
        raise TwinError(f"--aic-from {path}: no such file") from None
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise TwinError(f"--aic-from {path}: not a readable CSV file ({err})") from None
    return out


def reusable(
    earlier: dict[str, dict[str, Any]], gpus_of: dict[str, int]
) -> dict[str, dict[str, Any]]:
    """The earlier estimates made at the GPUs each row now runs at (``gpus_of``: row id
    -> GPUs); a file without the ``tp`` column is taken as is."""
    return {
        row_id: est
        for row_id, est in earlier.items()
        if row_id in gpus_of and est.get("gpus") in (None, gpus_of[row_id])
    }


def reuse_aic(result: dict[str, Any], estimate: dict[str, Any]) -> None:
    """``result`` with an earlier run's aiconfigurator estimate and its errors."""
    result.update({k: estimate[k] for k in AIC_COLUMNS if estimate.get(k) is not None})
    for metric in ("ttft", "tpot"):
        pred = result.get(f"aic_{metric}_ms")
        actual = result[f"silicon_{metric}_ms"]
        result[f"aic_{metric}_ape"] = sil.ape(pred, actual) if pred is not None else None


def _fmt(m: dict[str, Any] | None, metric: str) -> str:
    if not m:
        return "-"
    return f"{m[f'{metric}_mape']:.1f} / {m[f'{metric}_mdape']:.1f}"


def table(title: str, blocks: dict[str, dict[str, Any]], aic: bool) -> Table:
    """One line per (block, split): the rows scored, and the twin's (and aiconfigurator's,
    on the rows it estimated) MAPE / MdAPE of mean TTFT and mean TPOT, %."""
    t = Table(title=title, title_justify="left")
    t.add_column("", no_wrap=True)
    for name in ("split", "rows", "twin TTFT", "twin TPOT"):
        t.add_column(name, justify="left" if name == "split" else "right")
    if aic:
        for name in ("aic rows", "aic TTFT", "aic TPOT", "twin TTFT*", "twin TPOT*"):
            t.add_column(name, justify="right")
    for key, per_split in blocks.items():
        for i, split in enumerate(sil.SPLITS):
            b = per_split.get(split) or {}
            twin = b.get("twin")
            cells = [
                key if i == 0 else "",
                split,
                str((twin or {}).get("n", 0)),
                _fmt(twin, "ttft"),
                _fmt(twin, "tpot"),
            ]
            if aic:
                a, same = b.get("aiconfigurator"), b.get("twin_on_aiconfigurator_rows")
                cells += [
                    str((a or {}).get("n", 0)),
                    _fmt(a, "ttft"),
                    _fmt(a, "tpot"),
                    _fmt(same, "ttft"),
                    _fmt(same, "tpot"),
                ]
            t.add_row(*cells, end_section=i == len(sil.SPLITS) - 1)
    if aic:
        t.caption = "* the twin on the rows aiconfigurator estimated (like for like)"
    return t


def report(summary: dict[str, Any], aic_note: str, console: Console) -> None:
    splits = summary["splits"]
    aic = any(
        (splits[s]["overall"].get("aiconfigurator") is not None) for s in (*sil.SPLITS, "all")
    )
    rows = summary["rows"]
    left = rows.get("left_out_by_limit", 0)
    console.print(
        f"{rows['read']:,} rows selected: {rows['expressed']:,} expressed and run"
        + (f" ({left:,} more left out by --limit)" if left else "")
        + f", {rows['predicted']:,} predicted, {rows['twin_refused']:,} refused by the twin, "
        f"{rows['not_expressed']:,} not expressed; aiconfigurator: {aic_note}"
    )
    overall = {
        "all rows": {s: splits[s]["overall"] for s in sil.SPLITS},
        **{
            f"backend {b}": {s: splits[s]["by_backend"].get(b) for s in sil.SPLITS}
            for b in splits["all"]["by_backend"]
        },
    }
    console.print(table("MAPE / MdAPE (%), mean TTFT and TPOT", overall, aic))
    precisions = {
        k: {s: splits[s].get("by_precision", {}).get(k) for s in sil.SPLITS}
        for k in splits["all"].get("by_precision", {})
    }
    console.print(table("per backend | precision priced", precisions, aic))
    groups = {
        g: {s: splits[s]["by_group"].get(g) for s in sil.SPLITS} for g in splits["all"]["by_group"]
    }
    console.print(table("per model | system | backend | precision", groups, aic))
    if summary["not_expressed"]:
        console.print("not expressed, by reason:")
        for reason, n in summary["not_expressed"].items():
            console.print(f"  {n:>6,}  {reason}")
    for what in ("twin_refused", "aiconfigurator_failed"):
        if summary[what]:
            console.print(f"{what.replace('_', ' ')}:")
            for reason, n in summary[what].items():
                console.print(f"  {n:>6,}  {reason}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--csv",
        type=Path,
        default=None,
        help="a silicon_sample.csv (default: the installed package's)",
    )
    parser.add_argument(
        "--configs",
        type=Path,
        default=None,
        help="folder of <org>--<name>_config.json (default: the package's model_configs)",
    )
    parser.add_argument(
        "--models", default="", help="comma list: model paths containing any of these"
    )
    parser.add_argument("--systems", default="", help="comma list of systems (h100_sxm, ...)")
    parser.add_argument(
        "--backends", default="", help="comma list of backends (vllm, sglang, trtllm)"
    )
    parser.add_argument(
        "--precisions",
        default="",
        help="comma list of weight formats priced (bf16, fp8, fp8-block, nvfp4, ...)",
    )
    parser.add_argument(
        "--attention-dp",
        choices=("any", "only", "none"),
        default="any",
        help="rows by attention data parallelism: any, only attention_dp_size > 1, or none",
    )
    parser.add_argument(
        "--min-concurrency",
        type=int,
        default=None,
        help="only rows of at least N benchmark clients (the high-concurrency rows)",
    )
    parser.add_argument(
        "--limit", type=int, default=None, help="at most N expressed rows, spread evenly"
    )
    parser.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, help="local worker processes"
    )
    parser.add_argument(
        "--split",
        choices=("fit", "held_out"),
        default=None,
        help="score one split only (tune on fit, never on held_out)",
    )
    parser.add_argument(
        "--deployment",
        choices=sil.DEPLOYMENTS,
        default="benchmark",
        help="server limits: each collection's own (default: aiconfigurator's generated "
        "deployment where its fit rows ran with it, vLLM; InferenceMAX's scripts' limits "
        "for that collection), aiconfigurator's for every row (aiconfigurator), for every "
        "engine it sizes (aiconfigurator-all), or the engines' defaults",
    )
    parser.add_argument("--executor", choices=("local", "ray"), default="local")
    parser.add_argument("--ray-address", default=None)
    parser.add_argument(
        "--no-aiconfigurator", action="store_true", help="skip aiconfigurator's estimates"
    )
    parser.add_argument(
        "--aic-from",
        type=Path,
        default=None,
        help="reuse aiconfigurator's estimates from an earlier run's predictions.csv (the "
        "same aiconfigurator release: its results JSON records it); rows not in it are "
        "estimated",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help=f"go on with a stopped run: rows in --out's {JOURNAL} are not run again",
    )
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.min_concurrency is not None and args.min_concurrency < 1:
        parser.error(f"--min-concurrency must be at least 1 (got {args.min_concurrency})")
    console = Console(width=max(Console().width, 180))
    try:
        return _main(args, console)
    except TwinError as err:
        console.print(f"error: {err}", markup=False, highlight=False)
        return 2


def _relative(path: Path) -> Path:
    """``path`` relative to the checkout when it is inside it."""
    root = Path(__file__).resolve().parents[1]
    try:
        return path.resolve().relative_to(root)
    except ValueError:
        return path


def _split(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _main(args: argparse.Namespace, console: Console) -> int:
    started = time.perf_counter()
    csv_path = args.csv or sil.default_csv()
    every = sil.read_rows(csv_path)
    rows = sil.select(every, _split(args.models), _split(args.systems), _split(args.backends))
    if args.attention_dp != "any":
        dp_rows = args.attention_dp == "only"
        rows = [r for r in rows if ((r.attention_dp or 1) > 1) == dp_rows]
    if args.min_concurrency is not None:
        rows = [r for r in rows if (r.concurrency or 0) >= args.min_concurrency]
    expressible, reasons = sil.plan_rows(rows, args.configs, args.deployment)
    if args.split:
        kept = [p for p in expressible if p.row.split == args.split]
        reasons[f"not in split {args.split}"] += len(expressible) - len(kept)
        expressible = kept
    formats = _split(args.precisions)
    if formats:
        kept = [p for p in expressible if p.priced.split(",")[0].strip() in formats]
        reasons["precision not in --precisions"] += len(expressible) - len(kept)
        expressible = kept
    plans = spread(expressible, args.limit)
    if args.no_aiconfigurator:
        aic, aic_note = False, "not run (--no-aiconfigurator)"
    elif sil.aiconfigurator_available():
        aic, aic_note = True, f"aiconfigurator {_version('aiconfigurator')}"
    else:
        aic, aic_note = False, sil.AIC_NOT_INSTALLED
    console.print(
        f"{csv_path}: {len(every):,} rows, {len(rows):,} selected, {len(plans):,} to run "
        f"({args.jobs if args.executor == 'local' else 'ray'} workers); aiconfigurator: {aic_note}"
    )
    journal = Journal(
        args.out / JOURNAL,
        {
            "code": code_digest(),
            "csv": str(csv_path),
            "rows": [p.row.id for p in plans],
            "deployment": args.deployment,
            "aiconfigurator": aic,
        },
        args.resume,
    )
    results: dict[str, dict[str, Any]] = dict(journal.done)
    if results:
        console.print(f"  {len(results):,} rows from {journal.path} (--resume)")
    earlier = read_aic_estimates(args.aic_from) if aic and args.aic_from else {}
    earlier = reusable(earlier, {p.row.id: p.tp for p in plans})
    if earlier:
        reused = {p.row.id for p in plans if p.row.id in earlier}
        aic_note += f" ({len(reused):,} estimates reused from {args.aic_from})"

    def done(plan: sil.RowPlan, result: dict[str, Any]) -> None:
        if plan.row.id in earlier:
            reuse_aic(result, earlier[plan.row.id])
        results[plan.row.id] = result
        journal.add(result)
        if len(results) % 10 == 0 or len(results) == len(plans):
            console.print(
                f"  {len(results):,}/{len(plans):,} rows, {time.perf_counter() - started:,.0f} s"
            )

    todo = [p for p in plans if p.row.id not in results]
    nodes = run_rows(
        todo, aic, args.jobs, args.executor, args.ray_address, done, skip_aic=set(earlier)
    )
    ordered = [results[p.row.id] for p in plans]
    summary = sil.summarize(ordered, reasons, len(rows))
    summary["rows"]["left_out_by_limit"] = len(expressible) - len(plans)
    sil.write_outputs(args.out, ordered, summary)
    journal.close()
    wall = time.perf_counter() - started
    out = {
        "benchmark": "silicon",
        "command": "python benchmarks/bench_silicon.py " + " ".join(sys.argv[1:]),
        # The installed package's file is named as such (no machine's path in the results).
        "csv": "aiconfigurator_core/systems/silicon_sample.csv"
        if args.csv is None
        else str(csv_path),
        "aiconfigurator_core": _version("aiconfigurator-core"),
        "aiconfigurator": aic_note,
        "filters": {
            "models": _split(args.models),
            "systems": _split(args.systems),
            "backends": _split(args.backends),
            "precisions": formats,
            "split": args.split,
            "limit": args.limit,
            "min_concurrency": args.min_concurrency,
            "rows_in_csv": len(every),
            "rows_selected": len(rows),
            "expressible": len(expressible),
        },
        "method": {
            "measured_requests": f"{sil.MEASURED_ROUNDS} x concurrency (aiconfigurator's "
            f"aiperf), {sil.INFERENCEMAX.measured_rounds} x (InferenceMAX's collection)",
            "warmup_requests": f"{sil.WARMUP_ROUNDS} x concurrency in a phase of their own "
            "that drains before the measured one: not simulated; the measured phase starts "
            "from an idle server with every client at once",
            "lengths": "exact ISL/OSL (aiperf); uniform in [0.8 x, 1 x] ISL and OSL for the "
            "InferenceMAX collection (benchmark_serving.py --random-range-ratio 0.8)",
            "workers": "concurrency = workers x attention_dp x batch_size: one worker's share",
            "clients": "all start at t=0 (twin simulate --concurrency)",
            "prediction": "mean TTFT and mean TPOT over the measured requests",
            "deployment": args.deployment,
            "cache": "--cache-gb auto (the engine's shared KV pool), default prefix caching",
            "precision": "the row's (gemm/moe quant mode, precision column, else the "
            "checkpoint); KV cache: the checkpoint's, else fp8 with fp8/nvfp4 weights "
            "(aiconfigurator's pairing)",
        },
        "jobs": args.jobs,
        "executor": args.executor,
        "ray_nodes": nodes,
        "wall_s": round(wall, 1),
        "python": platform.python_version(),
        "outputs": [str(_relative(args.out / n)) for n in ("predictions.csv", "summary.json")],
        "summary": summary,
    }
    from twin.metrics import to_json

    write_text_atomic(args.results, to_json(out))
    report(summary, aic_note, console)
    written = f"{args.out / 'predictions.csv'}, {args.out / 'summary.json'} and {args.results}"
    console.print(f"wrote {written} ({wall:,.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
