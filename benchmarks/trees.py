"""The project's trees for the benchmarks' A/B runs: a child process importing the project
from a given tree, and a git revision's tree written out (``--baseline REF``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def child_env(root: Path = ROOT) -> dict[str, str]:
    """The environment of a child importing the project from ``root`` (first on its path)."""
    return {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def export_tree(ref: str, dest: Path) -> str:
    """Write the project's files at git revision ``ref`` under ``dest``; return its commit
    (exit status 2 with one line if ``ref`` names none)."""
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--verify", f"{ref}^{{commit}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if commit.returncode != 0:
        print(f"--baseline: {ref!r} is not a git revision of {ROOT}", file=sys.stderr)
        sys.exit(2)
    sha = commit.stdout.strip()
    dest.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", sha], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return sha
