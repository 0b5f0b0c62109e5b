"""twin: a performance digital twin of LLM serving with hybrid-model prefix caching."""

from __future__ import annotations

from functools import cache


@cache
def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("twin")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "0.0.0+unknown"


def __getattr__(name: str) -> str:
    # ``__version__`` on first use: importlib.metadata costs ~20 ms that ``twin --help``
    # need not pay (PEP 562).
    if name == "__version__":
        return _version()
    raise AttributeError(name)
