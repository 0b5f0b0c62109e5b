"""Suite-wide isolation: a developer's own calibrations never change what the tests see."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _own_profile_folder(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    # `twin calibrate` writes here without --out and `--gpu NAME` looks here first
    # (twin.costmodel.profile_store.user_profiles_dir); subprocesses inherit the variable.
    folder: Path = tmp_path_factory.mktemp("twin-profiles")
    monkeypatch.setenv("TWIN_PROFILES_DIR", str(folder))
    return folder
