"""The flags and files of ``calibrate``, ``validate``, ``reproduce``, ``models`` and ``workload
import/export`` (and a workload stretched by ``simulate --duration``), fuzzed (issue 32).

A catalog of bad command lines, built from a few valid ones: each numeric flag given a
negative, zero, NaN, infinite, huge or non-numeric value its range excludes; each name an
unknown one; each input file missing, a dangling link, a folder, empty, truncated or of
another format; each output a folder, a file where a folder belongs, or one of the
command's own inputs; flags that contradict each other. Every case must end as
:func:`check` requires: exit 2, one ``error:`` line naming the flag, file or field, no
traceback, no exception escaping ``twin.cli.main.run``, nothing written or changed in the
case's folder, and the command's expensive work (timing kernels, fitting tables, running
the executor, reproducing a paper) never started (:func:`expensive`).

``tests/test_fuzz_commands.py`` runs the catalog and, under ``-m slow``, random mixes of
these flags (exit 0 or 2, one line, nothing overwritten); ``benchmarks/bench_reliability.py``
runs the catalog on this tree and on a baseline revision (it patches the command modules by
name, so both trees must have them).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import json
import os
import shutil
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parents[1]


class Reached(BaseException):
    """A command got past its checks into its expensive work."""


class Hang(BaseException):
    """A case ran past its time limit (``check``'s ``timeout_s``)."""


def _alarm(signum: int, frame: Any) -> None:
    raise Hang


@dataclass(frozen=True)
class Bad:
    """A command line (``{d}``: the case's folder) that must be refused, naming ``names``
    (any one of them) in its error line."""

    id: str
    argv: tuple[str, ...]
    names: tuple[str, ...]


# --- inputs ---------------------------------------------------------------------------------


def make_inputs(folder: Path) -> None:
    """The files every case starts from (a few hundred KB): valid ones and broken ones."""
    from twin.calibration.datasheet import datasheet_profile
    from twin.workloads.generators import get_generator
    from twin.workloads.importers import get_importer
    from twin.workloads.schema import METADATA_KEY
    from twin.workloads.writer import WorkloadWriter

    folder.mkdir(parents=True, exist_ok=True)
    get_generator("chat")().write(folder / "w.parquet", 2, 1.0, 0, 1024)
    shutil.copy(DATA / "mooncake_small.jsonl", folder / "t.jsonl")
    importer = get_importer("mooncake")()
    with WorkloadWriter(folder / "imported.parquet", importer.metadata(folder / "t.jsonl")) as w:
        w.write_all(importer.rows(folder / "t.jsonl"))
    measured = ROOT / "twin" / "calibration" / "validation" / "gpu_stage2" / "h100.json"
    shutil.copy(measured, folder / "measured.json")
    profiles = ROOT / "twin" / "calibration" / "profiles"
    shutil.copy(profiles / "h100-vllm.json", folder / "p1.json")
    shutil.copy(profiles / "h100-sglang.json", folder / "p2.json")
    (folder / "sheet.json").write_text(json.dumps(datasheet_profile("h100").to_dict()))
    shutil.copy(DATA / "hf_configs" / "llama-3-8b.json", folder / "config.json")
    # Broken files.
    for suffix in ("json", "parquet", "jsonl"):
        (folder / f"empty.{suffix}").write_bytes(b"")
    raw = (folder / "w.parquet").read_bytes()
    (folder / "trunc.parquet").write_bytes(raw[: len(raw) // 2])
    text = (folder / "measured.json").read_bytes()
    (folder / "trunc.json").write_bytes(text[: len(text) // 2])
    line = (folder / "t.jsonl").read_bytes().splitlines()[0]
    (folder / "trunc.jsonl").write_bytes(line[: len(line) // 2])
    (folder / "text.parquet").write_text("session_id,turn\n0,0\n")
    (folder / "binary.json").write_bytes(bytes(range(256)) * 4)
    (folder / "list.json").write_text("[1, 2, 3]\n")
    (folder / "dir").mkdir()
    (folder / "file").write_text("a file, not a folder\n")
    os.symlink(folder / "gone.json", folder / "dangling.json")
    (folder / "vout").mkdir()
    shutil.copy(folder / "w.parquet", folder / "vout" / "workload.parquet")
    shutil.copy(folder / "sheet.json", folder / "vout" / "validation.json")
    # A generated workload whose metadata no longer says how to make it again.
    import pyarrow.parquet as pq

    table = pq.read_table(folder / "w.parquet")
    meta = json.loads(table.schema.metadata[METADATA_KEY])
    for name, change in (
        ("nogen", {"generator": None}),
        ("badparams", {"params": [1, 2]}),
        ("strrate", {"session_rate": "fast"}),
        ("nanrate", {"session_rate": float("nan")}),
        ("negseed", {"seed": -4}),
        ("unknowngen", {"generator": "no-such-kind"}),
    ):
        edited = {k: v for k, v in {**meta, **change}.items() if v is not None}
        data = json.dumps(edited).encode()
        pq.write_table(
            table.replace_schema_metadata({METADATA_KEY: data}), folder / f"{name}.parquet"
        )


# Input files as the broken variants a file flag is given, with the expected error's name.
def _broken(what: str) -> list[tuple[str, str]]:
    """(case id, path relative to {d}) of the broken variants of an input of type ``what``."""
    wrong = {"json": "w.parquet", "parquet": "measured.json", "jsonl": "w.parquet"}[what]
    return [
        ("missing", f"missing.{what}"),
        ("dangling", "dangling.json"),
        ("folder", "dir"),
        ("empty", f"empty.{what}"),
        ("truncated", f"trunc.{what}"),
        ("wrong-format", wrong),
        ("binary", "binary.json"),
    ]


# --- numbers ---------------------------------------------------------------------------------

# name -> the text given; each flag lists the names its range excludes.
NUMBERS = {
    "negative": "-1",
    "zero": "0",
    "nan": "nan",
    "inf": "inf",
    "-inf": "-inf",
    "overflow": "1e309",
    "huge": "1e30",
    "huge-int": "1000000000000",
    "text": "abc",
    "fraction": "0.5",
}
POSITIVE_INT = tuple(NUMBERS)  # > 0, whole, bounded
POSITIVE_REAL = ("negative", "zero", "nan", "inf", "-inf", "overflow", "huge", "text")
NONNEG_REAL = ("negative", "nan", "inf", "-inf", "overflow", "huge", "text")


def _numbers(cmd: str, base: list[str], flag: str, kinds: tuple[str, ...]) -> Iterator[Bad]:
    for kind in kinds:
        yield Bad(f"{cmd}:{flag}={kind}", (*base, flag, NUMBERS[kind]), (flag,))


def _files(cmd: str, base: list[str], flag: str, what: str) -> Iterator[Bad]:
    for name, rel in _broken(what):
        path = f"{{d}}/{rel}"
        yield Bad(f"{cmd}:{flag}={name}", (*base, flag, path), (flag, path))


def _names(cmd: str, base: list[str], flag: str, values: list[str]) -> Iterator[Bad]:
    for v in values:
        # A --model-set value may be refused naming the model's field instead of the flag.
        field = (v.split("=")[0],) if flag == "--model-set" else ()
        shown = v if len(v) < 40 else f"{v[:30]}...({len(v)} chars)"
        yield Bad(f"{cmd}:{flag}={shown}", (*base, flag, v), (flag, *field))


# --- the catalog -----------------------------------------------------------------------------

CAL = ["calibrate", "--gpu", "cpu", "--level", "tiny", "--kernels", "gemm", "-o", "{d}/out/p.json"]
CAL_TRANSFER = ["calibrate", "--gpu", "a100", "--transfer-from", "{d}/measured.json"]
CAL_TRANSFER += ["-o", "{d}/out/a.json"]
CAL_FROM = ["calibrate", "--from", "aiconfigurator", "--gpu", "h100", "-o", "{d}/out/h.json"]
CAL_MERGE = [
    "calibrate",
    "--merge",
    "{d}/p1.json",
    "--merge",
    "{d}/p2.json",
    "-o",
    "{d}/out/m.json",
]
VAL = ["validate", "--workload", "{d}/w.parquet", "--profile", "{d}/sheet.json"]
VAL += ["--requests", "3", "--out", "{d}/val"]
VAL_GEN = ["validate", "--generate", "chat", "--profile", "{d}/sheet.json", "--out", "{d}/val"]
REPRO = ["reproduce", "marconi", "--quick", "--out", "{d}/repro"]
IMPORT = ["workload", "import", "mooncake"]
EXPORT = ["workload", "export", "marconi"]
SIM = ["simulate", "-m", "tiny-hybrid", "--cache-gb", "0.001", "--out", "{d}/sim"]
EXTEND = [*SIM, "--duration", "5", "--session-rate", "2"]
SHOW = ["models", "show", "tiny-hybrid", "--json"]

# Valid command lines the catalog is built from: each must pass its checks (exit 0, or reach
# its expensive work), so that a refusal of a variant is the variant's doing.
BASES = {
    "calibrate": CAL,
    "calibrate-transfer": CAL_TRANSFER,
    "calibrate-from": CAL_FROM,
    "calibrate-merge": CAL_MERGE,
    "validate": VAL,
    "validate-generate": VAL_GEN,
    "reproduce": REPRO,
    "models-show": SHOW,
    "models-config": ["models", "show", "--config", "{d}/config.json", "--json"],
    "import": [*IMPORT, "{d}/t.jsonl", "-o", "{d}/o.parquet"],
    "export": [*EXPORT, "{d}/w.parquet", "-o", "{d}/o.jsonl"],
    "extend": [*EXTEND[:1], "{d}/w.parquet", *EXTEND[1:]],
}


def catalog() -> list[Bad]:
    """Every bad command line of the catalog."""
    cases: list[Bad] = []
    add = cases.extend

    # calibrate: measuring, transferring, fitting tables, merging.
    add(
        _numbers("calibrate", CAL, "--seed", ("negative", "nan", "inf", "huge", "text", "fraction"))
    )
    add(_numbers("calibrate", CAL, "--threads", POSITIVE_INT))
    add(_names("calibrate", CAL, "--level", ["huge", "QUICK!"]))
    add(_names("calibrate", CAL, "--kernels", ["nosuch", "gemm,,attn", ",", "gemm,gemm2"]))
    add(_names("calibrate", CAL, "--model", ["no-such-model"]))
    add(_names("calibrate", CAL, "--gpu", ["h999", "gpu0"]))
    add(_files("calibrate", CAL, "--model", "json"))
    add(_files("calibrate-transfer", CAL_TRANSFER, "--transfer-from", "json"))
    add(_files("calibrate-from", CAL_FROM, "--keep-fits", "json"))
    add(_names("calibrate-from", CAL_FROM, "--engine", ["nosuch"]))
    add(_names("calibrate-from", CAL_FROM, "--from", ["nvidia", "aic"]))
    add(_names("calibrate-from", CAL_FROM, "--gpu", ["h999", "cpu"]))
    add(_names("calibrate-transfer", CAL_TRANSFER, "--gpu", ["h999", "cpu"]))
    for name, rel in _broken("json"):
        path = f"{{d}}/{rel}"
        argv = ("calibrate", "--merge", path, "--merge", "{d}/p2.json", "-o", "{d}/out/m.json")
        cases.append(Bad(f"calibrate:--merge={name}", argv, ("--merge", path)))
    for base, tag in ((CAL, "measure"), (CAL_TRANSFER, "transfer"), (CAL_FROM, "from")):
        head = base[: base.index("-o")]
        for out, why in (("{d}/dir", "folder"), ("{d}/file/p.json", "under-a-file")):
            cases.append(Bad(f"calibrate-{tag}:-o={why}", (*head, "-o", out), ("--out", out)))
    same = [
        ("transfer-into-source", [*CAL_TRANSFER[:-2], "-o", "{d}/measured.json"]),
        ("merge-into-input", [*CAL_MERGE[:-2], "-o", "{d}/p1.json"]),
        ("measure-onto-model", [*CAL[:-2], "--model", "{d}/config.json", "-o", "{d}/config.json"]),
        ("measure-as-raw", [*CAL[:-2], "-o", "{d}/out/p.parquet"]),
    ]
    for why, argv in same:
        cases.append(Bad(f"calibrate:-o={why}", tuple(argv), ("--out",)))
    conflicts = [
        ("merge-one", ["calibrate", "--merge", "{d}/p1.json", "-o", "{d}/out/m.json"], "--merge"),
        ("merge-gpu", [*CAL_MERGE, "--gpu", "h100"], "--merge"),
        ("merge-no-out", CAL_MERGE[:-2], "--merge"),
        ("keep-fits-no-from", [*CAL, "--keep-fits", "{d}/p1.json"], "--keep-fits"),
        ("from-transfer", [*CAL_FROM, "--transfer-from", "{d}/measured.json"], "--transfer-from"),
        ("from-level", [*CAL_FROM, "--level", "tiny"], "--level"),
        ("from-quick", [*CAL_FROM, "--quick"], "--quick"),
        ("from-kernels", [*CAL_FROM, "--kernels", "gemm"], "--kernels"),
        ("from-overhead", [*CAL_FROM, "--overhead"], "--overhead"),
        ("from-model", [*CAL_FROM, "--model", "llama-3-8b"], "--model"),
        ("from-threads", [*CAL_FROM, "--threads", "2"], "--threads"),
        ("transfer-kernels", [*CAL_TRANSFER, "--kernels", "gemm"], "--kernels"),
        ("transfer-level", [*CAL_TRANSFER, "--level", "tiny"], "--level"),
        ("transfer-shapes-only", [*CAL_TRANSFER, "--model-shapes-only"], "--model-shapes-only"),
        ("transfer-seed", [*CAL_TRANSFER, "--seed", "3"], "--seed"),
        ("engine-without-from", [*CAL, "--engine", "sglang"], "--engine"),
        ("merge-level", [*CAL_MERGE, "--level", "tiny"], "--level"),
        ("no-gpu", ["calibrate", "--level", "tiny", "-o", "{d}/out/p.json"], "--gpu"),
    ]
    for why, argv, flag in conflicts:
        cases.append(Bad(f"calibrate:{why}", tuple(argv), (flag,)))

    # validate
    for base, tag in ((VAL, "validate"), (VAL_GEN, "validate-generate")):
        add(_numbers(tag, base, "--requests", POSITIVE_INT))
        add(_numbers(tag, base, "--repeats", POSITIVE_INT))
        add(_numbers(tag, base, "--session-rate", POSITIVE_REAL))
        add(_numbers(tag, base, "--cache-gb", NONNEG_REAL))
        add(_numbers(tag, base, "--seed", ("negative", "nan", "inf", "huge", "text", "fraction")))
        add(_names(tag, base, "--device", ["tpu", "CUDA:0"]))
        add(_names(tag, base, "--policy", ["nosuch", "oracle"]))
        add(_names(tag, base, "-m", ["no-such-model"]))
        add(_names(tag, base, "--model-set", ["n_attention_layers=10000000", "d_model=nan", "x=1"]))
        add(_files(tag, base, "--profile", "json"))
    add(_numbers("validate-generate", VAL_GEN, "--sessions", POSITIVE_INT))
    add(_names("validate-generate", VAL_GEN, "--generate", ["nosuch"]))
    add(_files("validate", VAL[:1] + VAL[3:], "--workload", "parquet"))
    for out, why in (("{d}/file", "a-file"), ("{d}/file/v", "under-a-file")):
        cases.append(Bad(f"validate:--out={why}", (*VAL[:-2], "--out", out), ("--out", out)))
    # A previous validation's folder: its workload and a profile named as an output.
    val_same = [
        (
            "workload-in-out",
            [*VAL[:2], "{d}/vout/workload.parquet", *VAL[3:-2], "--out", "{d}/vout"],
            "--workload",
        ),
        (
            "profile-in-out",
            [*VAL[:4], "{d}/vout/validation.json", *VAL[5:-2], "--out", "{d}/vout"],
            "--profile",
        ),
    ]
    for why, argv, flag in val_same:
        cases.append(Bad(f"validate:{why}", tuple(argv), (flag, "--out")))
    val_conflicts = [
        ("workload-generate", [*VAL, "--generate", "chat"], "--generate"),
        ("sessions-with-workload", [*VAL, "--sessions", "3"], "--sessions"),
        ("neither", ["validate", "--profile", "{d}/sheet.json", "--out", "{d}/val"], "--workload"),
    ]
    for why, argv, flag in val_conflicts:
        cases.append(Bad(f"validate:{why}", tuple(argv), (flag,)))

    # reproduce
    add(_numbers("reproduce", REPRO, "--jobs", POSITIVE_INT))
    add(_names("reproduce", REPRO, "--executor", ["nosuch", "Ray!"]))
    cases.append(Bad("reproduce:paper=nosuch", ("reproduce", "nosuch", *REPRO[2:]), ("nosuch",)))
    for out, why in (("{d}/file", "a-file"), ("{d}/file/r", "under-a-file")):
        cases.append(Bad(f"reproduce:--out={why}", (*REPRO[:-2], "--out", out), ("--out", out)))
    cases.append(
        Bad("reproduce:ray-address-local", (*REPRO, "--ray-address", "x:1"), ("--ray-address",))
    )

    # models
    add(_names("models-show", SHOW, "--model-set", [
        "n_attention_layers=10000000", "n_ssm_layers=5000", "n_mlp_layers=100000",
        "d_model=100000000000", "d_model=0", "n_heads=nan", "vocab_size=1e9", "vocab_size=-1",
        "head_dim=inf", "moe_n_experts=1000000000", "mlp_d_ff=99999999999", "x=1", "d_model",
        "layers=" + ",".join(["mamba2/mlp"] * 2000),
    ]))  # fmt: skip
    add(_names("models-show", SHOW, "--precision", ["fp7", "nan"]))
    add(_names("models-show", SHOW, "--kv-dtype", ["int3"]))
    add(_files("models-show", ["models", "show", "--json"], "--config", "json"))
    cases.append(Bad("models-show:name=nosuch", ("models", "show", "nosuch"), ("nosuch",)))
    cases.append(
        Bad("models-show:name-and-config", (*SHOW, "--config", "{d}/config.json"), ("--config",))
    )
    listed = ("models", "show", "--config", "{d}/list.json")
    cases.append(Bad("models-show:config-list", listed, ("{d}/list.json",)))
    for name, rel in _broken("json"):
        path = f"{{d}}/{rel}"
        cases.append(Bad(f"models-show:NAME={name}", ("models", "show", path), (path,)))

    # workload import / export
    for name, rel in _broken("jsonl"):
        path = f"{{d}}/{rel}"
        argv = (*IMPORT, path, "-o", "{d}/o.parquet")
        cases.append(Bad(f"import:IN={name}", argv, ("IN", path)))
    for name, rel in _broken("parquet"):
        path = f"{{d}}/{rel}"
        argv = (*EXPORT, path, "-o", "{d}/o.jsonl")
        cases.append(Bad(f"export:IN={name}", argv, ("IN", path)))
    for cmd, src, out in (
        ("import", "{d}/t.jsonl", "o.parquet"),
        ("export", "{d}/w.parquet", "o.jsonl"),
    ):
        argv = ("workload", cmd, "nosuch", src, "-o", f"{{d}}/{out}")
        cases.append(Bad(f"{cmd}:format=nosuch", argv, ("nosuch",)))
    io_outs = [
        ("import", (*IMPORT, "{d}/t.jsonl"), "{d}/t.jsonl", "same-as-input"),
        ("import", (*IMPORT, "{d}/t.jsonl"), "{d}/dir", "folder"),
        ("import", (*IMPORT, "{d}/t.jsonl"), "{d}/file/o.parquet", "under-a-file"),
        (
            "import",
            (*IMPORT, "{d}/t.jsonl"),
            "{d}/w.parquet.jsonl/../t.jsonl",
            "same-by-another-name",
        ),
        ("export", (*EXPORT, "{d}/w.parquet"), "{d}/w.parquet", "same-as-input"),
        ("export", (*EXPORT, "{d}/w.parquet"), "{d}/dir", "folder"),
        ("export", (*EXPORT, "{d}/w.parquet"), "{d}/file/o.jsonl", "under-a-file"),
        ("export", (*EXPORT, "{d}/w.parquet"), "{d}/./w.parquet", "same-by-another-name"),
    ]
    for cmd, head, out, why in io_outs:
        cases.append(Bad(f"{cmd}:-o={why}", (*head, "-o", out), ("--out", out)))

    # a workload stretched by simulate --duration (twin.workloads.extend)
    ext_tail = EXTEND[1:]
    for name in ("imported", "nogen", "badparams", "strrate", "nanrate", "negseed", "unknowngen"):
        path = f"{{d}}/{name}.parquet"
        cases.append(Bad(f"extend:workload={name}", ("simulate", path, *ext_tail), (path,)))
    ext = BASES["extend"]
    add(_numbers("extend", ext[:-4], "--duration", POSITIVE_REAL))
    add(_numbers("extend", [*ext[:-4], "--duration", "5"], "--session-rate", POSITIVE_REAL))
    cases.append(
        Bad("extend:duration-concurrency", (*ext, "--concurrency", "2"), ("--concurrency",))
    )
    return cases


# --- random mixes (the slow test) ---------------------------------------------------------

# Per base: (flag, values) a mix draws from: the catalog's bad values and some valid ones.
_ANY_NUMBER = [*NUMBERS.values(), "1", "3", "0.25"]
_FILE_VALUES = [f"{{d}}/{rel}" for _, rel in _broken("json") + _broken("parquet")] + [
    "{d}/measured.json",
    "{d}/w.parquet",
    "{d}/t.jsonl",
    "{d}/config.json",
]
MIX: dict[str, list[tuple[str, list[str]]]] = {
    "calibrate": [
        ("--seed", _ANY_NUMBER),
        ("--threads", _ANY_NUMBER),
        ("--level", ["tiny", "quick", "huge"]),
        ("--kernels", ["gemm", "nosuch", "gemm,,x"]),
        ("--model", ["tiny-hybrid", "nosuch", *_FILE_VALUES]),
        ("--engine", ["vllm", "sglang", "nosuch"]),
        ("--keep-fits", _FILE_VALUES),
        ("--transfer-from", _FILE_VALUES),
        ("--merge", _FILE_VALUES),
        ("--from", ["aiconfigurator", "nosuch"]),
        ("-o", ["{d}/new/p.json", "{d}/measured.json", "{d}/dir", "{d}/file/x.json"]),
    ],
    "validate": [
        ("--requests", _ANY_NUMBER),
        ("--repeats", _ANY_NUMBER),
        ("--sessions", _ANY_NUMBER),
        ("--session-rate", _ANY_NUMBER),
        ("--cache-gb", _ANY_NUMBER),
        ("--seed", _ANY_NUMBER),
        ("--policy", ["marconi", "vanilla", "oracle", "nosuch"]),
        ("--generate", ["chat", "nosuch"]),
        ("--workload", _FILE_VALUES),
        ("--profile", _FILE_VALUES),
        ("--model-set", ["n_attention_layers=10000000", "d_model=nan", "ssm_d_state=16"]),
    ],
    "reproduce": [
        ("--jobs", _ANY_NUMBER),
        ("--executor", ["local", "ray", "nosuch"]),
        ("--ray-address", ["x:1"]),
        ("--out", ["{d}/file", "{d}/new-repro"]),
    ],
    "models-show": [
        ("--model-set", ["n_ssm_layers=5000", "d_model=0", "vocab_size=1e9", "ssm_d_state=16"]),
        ("--precision", ["fp8", "fp7"]),
        ("--kv-dtype", ["fp8", "int3"]),
        ("--config", _FILE_VALUES),
    ],
    "import": [("-o", ["{d}/new.parquet", "{d}/t.jsonl", "{d}/dir", "{d}/w.parquet"])],
    "export": [("-o", ["{d}/new.jsonl", "{d}/w.parquet", "{d}/dir", "{d}/t.jsonl"])],
    "extend": [
        ("--duration", _ANY_NUMBER),
        ("--session-rate", _ANY_NUMBER),
        ("--concurrency", ["2"]),
    ],
}


def mix(base: str, picks: list[tuple[str, str]]) -> Bad:
    """``BASES[base]`` with the (flag, value) pairs of ``picks`` appended (the last given of a
    flag wins, as click reads it)."""
    argv = [*BASES[base]]
    for flag, value in picks:
        argv += [flag, value]
    return Bad(f"{base}:mix", tuple(argv), ())


# --- running one case ------------------------------------------------------------------------


def _reach(*_: Any, **__: Any) -> Any:
    raise Reached


# The expensive step of each command, replaced by ``_reach`` while the catalog runs:
# (module, attribute). The commands import their runners when they run (issue 33), so each
# is replaced where it is defined.
EXPENSIVE = (
    ("twin.calibration.harness", "calibrate"),
    ("twin.calibration.aic_import", "import_profile"),
    ("twin.validate.entry", "_calibrate"),
    ("twin.validate.entry", "fix_arrivals"),
    ("twin.reports.reproduce.runner", "reproduce"),
)


@contextlib.contextmanager
def expensive() -> Iterator[None]:
    """Replace every command's expensive step with one raising ``Reached``."""
    import importlib

    undo = []
    for module, attr in EXPENSIVE:
        mod = importlib.import_module(module)
        undo.append((mod, attr, getattr(mod, attr)))
        setattr(mod, attr, _reach)
    try:
        yield
    finally:
        for mod, attr, real in undo:
            setattr(mod, attr, real)


def snapshot(folder: Path) -> dict[str, str]:
    """Every entry under ``folder`` (hidden ones too): path -> digest of its bytes, or a tag."""
    found = {}
    for p in sorted(folder.rglob("*")):
        rel = str(p.relative_to(folder))
        if p.is_symlink():
            found[rel] = "link:" + os.readlink(p)
        elif p.is_dir():
            found[rel] = "dir"
        else:
            found[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return found


def run_case(argv: list[str]) -> tuple[int | str, str]:
    """``twin argv`` in this process: (status, or what escaped; stderr + stdout)."""
    from twin.cli.main import run

    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            rc: int | str = run(argv)
        except Reached:
            rc = "reached its expensive work"
        except Hang:
            rc = "still running after its time limit (a hang)"
        except BaseException as exc:  # the finding itself
            rc = f"{type(exc).__name__} escaped run: {str(exc)[:200]}"
    return rc, err.getvalue() + "\n" + out.getvalue()


def check(
    case: Bad, pristine: Path, work: Path, timeout_s: int = 60, must_refuse: bool = True
) -> list[str]:
    """Run ``case`` in a fresh copy of ``pristine`` at ``work``; what is wrong (empty: held).
    A case still running after ``timeout_s`` is stopped (SIGALRM) and counted as a hang.

    ``must_refuse=False`` (a random mix of flags, which may be valid): exit 0 or reaching
    the expensive work is fine too, provided no file that was there changed (outputs go
    to new names only); a refusal is held to the same rules."""
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(pristine, work, symlinks=True)
    os.symlink(work / "gone.json", work / "dangling.json.tmp")
    os.replace(work / "dangling.json.tmp", work / "dangling.json")
    argv = [a.replace("{d}", str(work)) for a in case.argv]
    before = snapshot(work)
    env = {"XDG_CACHE_HOME": str(work / ".cache"), "TWIN_PROFILES_DIR": str(work / ".profiles")}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout_s)
    try:
        with expensive():
            rc, text = run_case(argv)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    found = []
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    if "Traceback" in text:
        found.append("a traceback")
    if not must_refuse and rc in (0, "reached its expensive work"):
        after = snapshot(work)
        outs = _outputs(argv, work)
        changed = sorted(
            k for k in before if before[k] != after.get(k) and not any(o(k) for o in outs)
        )
        return [*found, *([f"accepted but changed {changed[:4]}"] if changed else [])]
    if rc != 2:
        found.append(f"exit {rc}" if isinstance(rc, int) else str(rc))
    elif len(lines) != 1 or not lines[0].startswith("error: "):
        found.append(f"not one error line: {lines[:3]}")
    elif must_refuse:
        names = [n.replace("{d}", str(work)) for n in case.names]
        if not any(n in lines[0] for n in names):
            found.append(f"the error names none of {case.names}: {lines[0][:200]}")
    after = snapshot(work)
    if after != before:
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        found.append(f"wrote or changed {changed[:4]}")
    return found


def _outputs(argv: list[str], work: Path) -> list[Any]:
    """Tests of which entries (paths relative to ``work``) an accepted run may replace: what
    its ``-o``/``--out`` names (a folder: what is under it) and a profile's raw table."""
    tests = []
    for flag, value in itertools.pairwise(argv):
        if flag in ("-o", "--out"):
            rel = os.path.relpath(os.path.abspath(value), work)
            raw = str(Path(rel).with_suffix(".parquet"))
            tests.append(lambda k, r=rel, w=raw: k in (r, w) or k.startswith(r + os.sep))
    return tests


def check_base(argv: tuple[str, ...] | list[str], pristine: Path, work: Path) -> int | str:
    """A base command line's outcome: 0, or ``reached ...``; anything else is a broken base."""
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(pristine, work, symlinks=True)
    env = {"XDG_CACHE_HOME": str(work / ".cache"), "TWIN_PROFILES_DIR": str(work / ".profiles")}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with expensive():
            rc, text = run_case([a.replace("{d}", str(work)) for a in argv])
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return rc if rc in (0, "reached its expensive work") else f"{rc}: {text.strip()[-300:]}"
