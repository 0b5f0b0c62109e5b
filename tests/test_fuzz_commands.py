"""The catalog of ``tests/fuzz_commands.py`` (issue 32): bad flags and files of ``calibrate``,
``validate``, ``reproduce``, ``models``, ``workload import/export`` and a workload stretched
by ``simulate --duration``, each refused in one line naming the flag, file or field, exit 2,
before any expensive work, writing nothing and overwriting nothing; under ``-m slow``,
random mixes of those flags (valid ones too) held to the same rules."""

from __future__ import annotations

from pathlib import Path

import pytest
from fuzz_commands import BASES, MIX, catalog, check, check_base, make_inputs, mix
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

CASES = catalog()


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fuzz-commands") / "inputs"
    make_inputs(folder)
    return folder


def test_the_catalog_covers_every_command() -> None:
    heads = {c.id.split(":")[0].split("-")[0] for c in CASES}
    assert heads == {"calibrate", "validate", "reproduce", "models", "import", "export", "extend"}
    assert len(CASES) >= 300 and len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize(
    "base",
    [pytest.param(b, marks=pytest.mark.slow) if b == "extend" else b for b in BASES],
)
def test_each_base_command_line_passes_its_checks(base: str, pristine: Path, tmp_path) -> None:
    """A variant's refusal is the variant's doing: the line it was made from is accepted."""
    assert check_base(BASES[base], pristine, tmp_path / "w") in (0, "reached its expensive work")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_a_bad_flag_or_file_is_refused_cleanly(case, pristine: Path, tmp_path) -> None:
    assert check(case, pristine, tmp_path / "w") == []


_HC = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


@st.composite
def mixes(draw) -> tuple[str, list[tuple[str, str]]]:
    base = draw(st.sampled_from(sorted(MIX)))
    pool = MIX[base]
    picks = []
    for flag, values in draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3)):
        picks.append((flag, draw(st.sampled_from(values))))
    return base, picks


@pytest.mark.slow
@settings(max_examples=1500, deadline=None, suppress_health_check=_HC)
@given(drawn=mixes())
def test_fuzz_command_flag_mixes_long(drawn, pristine: Path, tmp_path) -> None:
    case = mix(*drawn)
    assert check(case, pristine, tmp_path / "w", must_refuse=False) == [], case.argv
