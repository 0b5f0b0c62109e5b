"""Suite-wide isolation: a developer's own calibrations never change what the tests see."""

from __future__ import annotations

from pathlib import Path

import pytest

from twin.workloads.generators import get_generator


@pytest.fixture(autouse=True)
def _own_profile_folder(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    # `twin calibrate` writes here without --out and `--gpu NAME` looks here first
    # (twin.costmodel.profile_store.user_profiles_dir); subprocesses inherit the variable.
    folder: Path = tmp_path_factory.mktemp("twin-profiles")
    monkeypatch.setenv("TWIN_PROFILES_DIR", str(folder))
    return folder


@pytest.fixture(scope="module")
def batch1(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Eight benchmark requests (128 tokens in, 256 out), for batch-1 runs (speculative
    decoding's tests)."""
    path = tmp_path_factory.mktemp("w") / "fixed.parquet"
    cls = get_generator("fixed")
    gen = cls(cls.parse_params({"isl": "128", "osl": "256"}))
    return gen.write(path, 8, 1.0, 0, 8192)


@pytest.fixture(scope="module")
def oracle_structure():
    """The tests' oracle structure (``marconi_oracle.ORACLE_TREE``) registered for one
    module's tests and removed after them; a module that builds the oracles' caches asks
    for it (``pytestmark = pytest.mark.usefixtures("oracle_structure")``)."""
    from marconi_oracle import oracle_structure

    with oracle_structure():
        yield
