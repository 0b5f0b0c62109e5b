"""Fuzzing the doors of issue 32's second part: profiles, --model-set / --set /
--policy-option strings and the numeric flags of cost, workload generate, replay,
report capacity and plan.

Whatever goes in, ``twin`` exits 0 or 2, never a traceback or an exception escaping
``run``, and a refusal is exactly one ``error:`` line. An accepted profile must price
finite, positive latencies (a NaN or negative one was silent nonsense). The corpus
under ``tests/data/fuzz`` (tiny bad files found or written by hand) is replayed by
the fast test every run; ``-m slow`` draws thousands of new cases.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twin.calibration.datasheet import datasheet_profile
from twin.cli.main import run
from twin.workloads.generators import get_generator

CORPUS = Path(__file__).parent / "data" / "fuzz"
_HC = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
FAST = settings(max_examples=150, derandomize=True, deadline=None, suppress_health_check=_HC)
SLOW = settings(max_examples=1500, deadline=None, suppress_health_check=_HC)
BASE = datasheet_profile("h100").to_dict()


def outcome(capsys, argv: list[str]) -> tuple[int, str]:
    """Run ``twin argv`` in-process: exit 0 or 2, no traceback, a refusal one line."""
    try:
        rc = run(argv)
    except BaseException as err:
        raise AssertionError(f"{argv}: {type(err).__name__} escaped run: {err}") from err
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, (argv, err[-2000:])
    assert rc in (0, 2), (argv, rc, err[-2000:])
    if rc == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (argv, err[-2000:])
    return rc, out


# --- profiles -----------------------------------------------------------------------------

_BAD = [
    math.nan,
    math.inf,
    -math.inf,
    -1.0,
    0.0,
    1e300,
    -1e-300,
    10**400,
    "1e3",
    None,
    [],
    {},
    True,
]


def _paths(data, prefix=()):
    if isinstance(data, dict):
        for k, v in data.items():
            yield (*prefix, k)
            yield from _paths(v, (*prefix, k))


_PROFILE_PATHS = sorted(_paths(BASE), key=str)


@st.composite
def bad_profile(draw) -> dict:
    data = json.loads(json.dumps(BASE))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_PROFILE_PATHS))
        node = data
        for key in path[:-1]:
            if not isinstance(node, dict) or key not in node:
                break
            node = node[key]
        else:
            if isinstance(node, dict):
                kind = draw(st.sampled_from(["value", "drop", "deep"]))
                if kind == "drop":
                    node.pop(path[-1], None)
                elif kind == "deep":
                    node[path[-1]] = json.loads("[" * 50 + "]" * 50)
                else:
                    node[path[-1]] = draw(st.sampled_from(_BAD))
    return data


def _dump(data) -> str:
    try:
        return json.dumps(data)
    except ValueError:  # an integer past a float: write it as JSON text anyway
        return json.dumps(data, default=str)


def check_profile_file(capsys, path: Path) -> None:
    rc, out = outcome(
        capsys, ["cost", "-m", "tiny-hybrid", "--profile", str(path), "--json", "--lengths", "64"]
    )
    if rc == 0:  # accepted: every price finite and positive
        data = json.loads(out)
        for row in (*data["prefill"], *data["decode"]):
            assert math.isfinite(row["total_s"]) and row["total_s"] > 0, (path, row)


def _fuzz_profile(data, capsys, tmp_path) -> None:
    path = tmp_path / "p.json"
    path.write_text(_dump(data))
    check_profile_file(capsys, path)


@FAST
@given(data=bad_profile())
def test_fuzz_profiles(data, capsys, tmp_path) -> None:
    _fuzz_profile(data, capsys, tmp_path)


@pytest.mark.slow
@SLOW
@given(data=bad_profile())
def test_fuzz_profiles_long(data, capsys, tmp_path) -> None:
    _fuzz_profile(data, capsys, tmp_path)


# --- KEY=VALUE strings ----------------------------------------------------------------------

_KEYS = ["n_layers", "hidden", "n_heads", "precision", "kv_dtype", "ssm_d_state", "x", "", "name"]
_VALS = ["nan", "inf", "-1", "0", "1e308", "2", "[1,2]", "{}", "[" * 80 + "]" * 80, "", "fp8", "="]
_pair = st.builds(
    lambda k, v, sep: f"{k}{sep}{v}",
    st.sampled_from(_KEYS) | st.text(max_size=6),
    st.sampled_from(_VALS) | st.text(max_size=6),
    st.sampled_from(["=", "", "=="]),
)


def _fuzz_pairs(pairs: list[str], capsys) -> None:
    argv = ["cost", "-m", "tiny-hybrid", "-g", "h100", "--json", "--lengths", "64"]
    for p in pairs:
        argv += ["--model-set", p]
    outcome(capsys, argv)


@FAST
@given(pairs=st.lists(_pair, min_size=1, max_size=3))
def test_fuzz_model_set(pairs, capsys) -> None:
    _fuzz_pairs(pairs, capsys)


@pytest.mark.slow
@SLOW
@given(pairs=st.lists(_pair, min_size=1, max_size=4))
def test_fuzz_model_set_long(pairs, capsys) -> None:
    _fuzz_pairs(pairs, capsys)


# --- numeric flags ------------------------------------------------------------------------

_NUMS = [
    "nan",
    "inf",
    "-inf",
    "-1",
    "0",
    "1e309",
    "1e9",
    "1000000000",
    "abc",
    "",
    "1,,2",
    "0.5",
    "3",
]
_COST = ["--lengths", "--batches", "--context", "--cached-frac", "--tp"]
_GENERATE = [
    "--sessions",
    "--duration",
    "--session-rate",
    "--seed",
    "--max-context",
    "--isl",
    "--osl",
]


@st.composite
def numeric_flags(draw, flags: list[str]) -> list[str]:
    argv: list[str] = []
    for flag in draw(st.lists(st.sampled_from(flags), min_size=1, max_size=3, unique=True)):
        argv += [flag, draw(st.sampled_from(_NUMS))]
    return argv


def _fuzz_cost(argv: list[str], capsys) -> None:
    outcome(capsys, ["cost", "-m", "tiny-hybrid", "-g", "h100", "--json", *argv])


def _fuzz_generate(argv: list[str], capsys, tmp_path: Path) -> None:
    out = tmp_path / "g.parquet"
    out.unlink(missing_ok=True)
    # Accepted values stay small: -n 3 unless the draw sets --sessions or --duration.
    size = [] if {"--sessions", "--duration"} & set(argv) else ["-n", "3"]
    rc, _ = outcome(capsys, ["workload", "generate", "chat", "-o", str(out), *size, *argv])
    assert (rc == 0) == out.is_file()


@FAST
@given(argv=numeric_flags(_COST))
def test_fuzz_cost_flags(argv, capsys) -> None:
    _fuzz_cost(argv, capsys)


@FAST
@given(argv=numeric_flags(_GENERATE))
def test_fuzz_generate_flags(argv, capsys, tmp_path) -> None:
    if {"--sessions", "--duration"} & set(argv) and any(
        v in ("1e9", "1000000000", "3") for v in argv
    ):
        return  # a large valid count is a real (long) run, tested by the bounds instead
    _fuzz_generate(argv, capsys, tmp_path)


@pytest.mark.slow
@SLOW
@given(argv=numeric_flags(_COST))
def test_fuzz_cost_flags_long(argv, capsys) -> None:
    _fuzz_cost(argv, capsys)


# The slow part also drives the sweep commands' numeric flags on a tiny workload.
_RUNS = {
    "replay": (["--cache-gb", "--session-rate", "--jobs"], ["-m", "tiny-hybrid"]),
    "report": (["--seeds", "--jobs", "--duration", "--cache-gb"], ["-m", "tiny-hybrid"]),
    "plan": (["--duration", "--tp", "--cache-gb"], ["-m", "tiny-hybrid"]),
}


@pytest.fixture(scope="module")
def tiny_workload(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("fz") / "tiny.parquet"
    return get_generator("chat")().write(path, 2, 1.0, 0, 1024)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=_HC)
@given(data=st.data())
def test_fuzz_sweep_flags_long(data, capsys, tiny_workload, tmp_path) -> None:
    command = data.draw(st.sampled_from(sorted(_RUNS)))
    flags, extra = _RUNS[command]
    argv = data.draw(numeric_flags(flags))
    if any(v in ("1e9", "1000000000") for v in argv):
        return  # a huge valid count is refused by the bounds tests
    head = {"replay": ["replay"], "report": ["report", "capacity"], "plan": ["plan"]}[command]
    out = tmp_path / f"o{data.draw(st.integers(0, 10**9))}"
    tail = [] if command == "replay" else ["--out", str(out)]
    outcome(capsys, [*head, str(tiny_workload), *extra, *tail, *argv])


# --- the corpus -----------------------------------------------------------------------------


def _corpus() -> list[Path]:
    return sorted(CORPUS.glob("*"))


def test_corpus_is_small_and_present() -> None:
    files = _corpus()
    assert len(files) >= 24 and all(p.stat().st_size < 64_000 for p in files)


@pytest.mark.parametrize("path", _corpus(), ids=lambda p: p.name)
def test_fuzz_corpus(path: Path, capsys, tmp_path) -> None:
    """Every bad file of the corpus through the reader it is for: exit 2, one line."""
    if path.name.startswith("profile-"):
        argv = ["cost", "-m", "tiny-hybrid", "--profile", str(path), "--json"]
    elif path.name.startswith("config-"):
        argv = ["models", "show", "--config", str(path)]
    elif path.suffix == ".jsonl":
        argv = ["workload", "import", "mooncake", str(path), "-o", str(tmp_path / "t.parquet")]
    else:
        argv = ["workload", "info", str(path)]
    rc, _ = outcome(capsys, argv)
    assert rc == 2, f"{path.name}: accepted"
