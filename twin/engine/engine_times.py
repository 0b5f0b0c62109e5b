"""Engine times fitted to measured serving runs, per (engine mode, GPU): the data file's reader.

``twin/calibration/engine_times.json`` holds, per engine mode and GPU, times the kernel tables
cannot give: the host time of an engine step (``step_host_s``, ``seq_host_s``:
:mod:`twin.engine.host_time`), the serving front end's time per request (``frontend_s``)
and per prompt token (``frontend_token_s``), served one at a time or as a latency
(``frontend_batch``, a whole number: :class:`twin.engine.cluster.Cluster`), and the
response path's per streamed output token (``stream_token_s``:
:class:`twin.engine.batching.ContinuousBatching`). Each entry says how
it was fitted (which rows of NVIDIA's ``silicon_sample.csv``, the fit split only, when,
and with which version of the twin's engine rules). :func:`engine_time_defaults` gives an
engine mode's numbers on a GPU as :class:`~twin.engine.config.EngineConfig` fields, which
``build_config`` applies where a field is not given; a GPU without an entry gets none
(the kernels' price alone, no front end).
"""

from __future__ import annotations

import importlib.resources
import json
from functools import cache
from pathlib import Path
from typing import Any

FILE = "engine_times.json"
FIELDS = ("step_host_s", "seq_host_s", "frontend_s", "frontend_token_s", "stream_token_s")
COUNTS = ("frontend_batch",)  # whole numbers (HostTimeConfig refuses a float batch)


def data_path() -> Path:
    """``engine_times.json``, package data of ``twin.calibration`` (``importlib.resources``)."""
    return Path(str(importlib.resources.files("twin") / "calibration" / FILE))


@cache
def _table() -> dict[str, Any]:
    path = data_path()
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    return dict(data.get("engines") or {})


def engine_time_defaults(engine: str, gpu: str) -> dict[str, float | int]:
    """The fitted engine times of ``engine`` on ``gpu`` (EngineConfig fields); {} if none."""
    entry = (_table().get(engine) or {}).get(gpu) or {}
    out: dict[str, float | int] = {name: float(entry[name]) for name in FIELDS if name in entry}
    out.update({name: _count(entry[name], name) for name in COUNTS if name in entry})
    return out


def _count(value: Any, name: str) -> int:
    """``value`` as a whole number: an integer, or a float with no fraction (JSON's 0.0)."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not float(value).is_integer():  # JSON's NaN / Infinity refused too
        raise ValueError(f"{FILE}: {name} {value!r} is not a whole number")
    return int(value)
