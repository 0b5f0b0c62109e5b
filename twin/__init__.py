"""twin: a performance digital twin of LLM serving with hybrid-model prefix caching."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("twin")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"
