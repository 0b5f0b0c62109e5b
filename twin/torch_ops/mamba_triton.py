"""mamba_ssm's Triton kernels, loaded even where the package's ``__init__`` fails.

mamba_ssm's ``__init__`` imports its CUDA extension (``selective_scan_cuda``); the Triton
kernels (``ops.triton.*``) do not need it, so where the extension is missing or broken the
submodule is imported under a stub parent package.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from collections.abc import Callable
from typing import Any


def import_mamba_triton(module: str, attr: str) -> tuple[Callable[..., Any] | None, str]:
    """``attr`` of ``mamba_ssm.<module>`` (see the module docstring), and a note saying how."""
    full = f"mamba_ssm.{module}"
    try:
        return getattr(importlib.import_module(full), attr), f"mamba_ssm {module}.{attr}"
    except Exception as err:  # ImportError, OSError from a broken CUDA extension, ...
        first = f"{type(err).__name__}: {err}"
    spec = importlib.util.find_spec("mamba_ssm") if "mamba_ssm" not in sys.modules else None
    if spec is None or not spec.submodule_search_locations:
        return None, f"mamba_ssm not importable ({first})"
    saved = {k: v for k, v in sys.modules.items() if k == "mamba_ssm" or k.startswith("mamba_ssm.")}
    for k in saved:
        del sys.modules[k]
    stub = types.ModuleType("mamba_ssm")
    stub.__path__ = list(spec.submodule_search_locations)
    sys.modules["mamba_ssm"] = stub
    try:
        fn = getattr(importlib.import_module(full), attr)
    except Exception as err:
        for k in [k for k in sys.modules if k == "mamba_ssm" or k.startswith("mamba_ssm.")]:
            del sys.modules[k]
        sys.modules.update(saved)
        return None, (
            f"mamba_ssm not importable ({first}; without its __init__: {type(err).__name__}: {err})"
        )
    return fn, f"mamba_ssm {module}.{attr} (loaded without the package __init__: {first})"
