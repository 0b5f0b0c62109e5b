"""Stretching a workload to a duration at a session rate.

A simulation run with ``--session-rate R`` for ``D`` seconds starts as many
sessions as the engine's seeded Poisson stream puts in [0, D):
:func:`sessions_started` counts them with that very stream. When the workload
file holds fewer, :func:`extended_workload` regenerates it, longer, from the
generator, knobs, seed and context cap recorded in its metadata. A session's
content depends only on ``(seed, session_id)`` (``workloads.generators.base``),
so the longer file's first sessions are the original's, row for row; this is
checked before the longer file is handed out. Imported traces cannot be
extended and are refused.

No engine imports here: the engine calls this module, not the other way round.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from twin.atomic import atomic_path, locked, sha256_of
from twin.errors import TwinError
from twin.limits import MAX_SESSION_RATE, MAX_SESSIONS
from twin.workloads.arrow_numpy import numpy_of
from twin.workloads.generators import get_generator
from twin.workloads.generators.base import count_before, session_start_times
from twin.workloads.reader import Workload
from twin.workloads.writer import WorkloadWriter

# What regenerating a file needs from its metadata (``WorkloadGenerator.metadata``).
_RUN_KEYS = ("generator", "params", "seed", "max_context", "session_rate")


def sessions_started(
    session_rate: float, duration_s: float, seed: int, burstiness: float = 1.0
) -> int:
    """Sessions the engine's ``--session-rate`` stream starts in [0, ``duration_s``).

    The stream is ``twin.engine.source``'s: :func:`session_start_times`, the first
    session at t = 0 (so at least one).
    """
    if not (isinstance(session_rate, int | float) and math.isfinite(session_rate)) or (
        session_rate <= 0
    ):
        raise TwinError(f"--session-rate must be a positive number, got {session_rate!r}")
    if not (isinstance(duration_s, int | float) and math.isfinite(duration_s)) or duration_s <= 0:
        raise TwinError(f"--duration must be a positive number of seconds, got {duration_s!r}")
    if session_rate * duration_s > MAX_SESSIONS:
        raise TwinError(
            f"--duration {duration_s:g} at --session-rate {session_rate:g}: about "
            f"{session_rate * duration_s:.3g} sessions; at most {MAX_SESSIONS:,} in one run "
            "(twin.limits.MAX_SESSIONS)"
        )
    starts = session_start_times(float(session_rate), seed, burstiness)
    return count_before(starts, float(duration_s))


def extended_workload(path: Path, sessions: int, cache_dir: Path, need: str = "") -> Path:
    """A workload file with at least ``sessions`` sessions whose first ones are ``path``'s.

    ``path`` itself when it holds enough; otherwise the same generator run
    with ``sessions`` sessions, written once to
    ``cache_dir/<stem>-<key>.parquet`` (``key``: the first 12 hex digits of the
    SHA-256 of the source file's SHA-256 and ``sessions``) and reused after.
    ``need`` says why so many are needed (e.g. ``"16 sessions/s for 600 s"``)
    in the error for a file that cannot be extended.
    """
    path = Path(path)
    if sessions < 1:
        raise ValueError(f"sessions must be >= 1, got {sessions}")
    workload = Workload.open(path)
    have = workload.num_sessions
    if have >= sessions:
        return path
    meta = workload.metadata
    why = f" ({need})" if need else ""
    short = f"{path} holds {have:,} sessions but {sessions:,} are needed{why}"
    if "generator" not in meta:
        made = "it was imported, not generated" if "importer" in meta else "no generator made it"
        raise TwinError(
            f"{short}; {made}, so it cannot be extended: "
            "give a longer trace or a shorter --duration"
        )
    missing = [k for k in _RUN_KEYS if k not in meta]
    if missing:
        raise TwinError(
            f"{short}; its metadata lacks {', '.join(missing)}, so it cannot be regenerated "
            "longer: generate it again with twin workload generate --duration"
        )
    _check_run(path, meta)  # before the cache is touched: a refusal writes nothing
    digest = sha256_of(path)
    key = hashlib.sha256(f"{digest} {sessions}".encode()).hexdigest()[:12]
    target = Path(cache_dir) / f"{path.stem}-{key}.parquet"
    # Workers of one sweep may all ask at once: one writes, the others wait and reuse.
    with locked(Path(cache_dir) / f".{target.name}.lock"):
        if target.is_file():
            return target
        with atomic_path(target) as tmp:
            _regenerate(meta, sessions, tmp, {"file": str(path), "sha256": digest})
            if _fingerprint(tmp, have) != _fingerprint(path, have):
                raise TwinError(
                    f"{short}; regenerating it from its metadata gives other first sessions "
                    f"(it was edited, or made by another version of the {meta['generator']!r} "
                    "generator): generate it again with twin workload generate --duration"
                )
    return target


def _check_run(path: Path, meta: dict[str, Any]) -> None:
    """The recorded generator run is one this version can repeat: a known generator, a
    mapping of knobs, a positive finite rate, a seed and a context cap that are whole
    numbers >= 0; a ``TwinError`` naming the file and the metadata field otherwise."""

    def bad(field: str, what: str) -> TwinError:
        return TwinError(
            f"{path}: metadata field {field!r} {what} (got {meta[field]!r}); it cannot be "
            "regenerated longer: generate it again with twin workload generate --duration"
        )

    try:
        get_generator(str(meta["generator"]))
    except TwinError as err:
        raise bad("generator", f"names no generator of this version ({err})") from None
    if not isinstance(meta["params"], dict):
        raise bad("params", "is not a mapping of knobs")
    rate = meta["session_rate"]
    if not (
        isinstance(rate, int | float)
        and not isinstance(rate, bool)
        and math.isfinite(rate)
        and 0 < rate <= MAX_SESSION_RATE
    ):
        raise bad("session_rate", f"is not a number of sessions/s in (0, {MAX_SESSION_RATE:g}]")
    for field in ("seed", "max_context"):
        value = meta[field]
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise bad(field, "is not a whole number >= 0")


def _regenerate(meta: dict[str, Any], sessions: int, out: Path, source: dict[str, str]) -> None:
    """Write ``meta``'s generator run again with ``sessions`` sessions to ``out``."""
    try:
        gen_cls = get_generator(str(meta["generator"]))
        if not isinstance(meta["params"], dict):
            raise TwinError("'params' is not a mapping of knobs")
        gen = gen_cls(gen_cls.Params(**meta["params"]))
    except (TypeError, TwinError) as err:  # a kind or knob this version does not have
        raise TwinError(
            f"{source['file']}: its generator run cannot be repeated by this version ({err}); "
            "generate it again with twin workload generate --duration"
        ) from None
    rate, seed, max_context = meta["session_rate"], meta["seed"], meta["max_context"]
    metadata = {**gen.metadata(sessions, rate, seed, max_context), "extended_from": source}
    with WorkloadWriter(out, metadata) as writer:
        writer.write_all(gen.rows(sessions, rate, seed, max_context))


def _fingerprint(path: Path, sessions: int) -> bytes:
    """A digest of the rows of sessions ``< sessions``, in row order, over every column.

    Each column feeds its own hash with its values end to end (list columns:
    their lengths and flattened values), so how the rows are split into batches
    does not change the digest.
    """
    try:
        parquet = pq.ParquetFile(path, page_checksum_verification=True)
        names = parquet.schema_arrow.names
        hashes = {name: hashlib.sha256() for name in names}
        for batch in parquet.iter_batches():
            batch = batch.filter(pc.less(batch.column("session_id"), sessions))
            for name in names:
                _feed(hashes[name], batch.column(name))
    except (OSError, pa.ArrowException) as err:  # a failed page checksum, a torn file
        raise TwinError(f"{path}: unreadable parquet ({err})") from None
    return hashlib.sha256(b"".join(hashes[n].digest() for n in names)).digest()


def _feed(h: Any, column: pa.Array) -> None:
    h.update(numpy_of(column.is_null()).tobytes())
    if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
        h.update(numpy_of(pc.fill_null(pc.list_value_length(column), 0).cast(pa.int64())).tobytes())
        values = pc.list_flatten(column)
        if pa.types.is_struct(values.type):  # modules: (id, start, length)
            for i in range(values.type.num_fields):
                _feed(h, pc.struct_field(values, [i]))
        else:
            _feed(h, values)
    elif pa.types.is_null(column.type):
        return
    elif pa.types.is_boolean(column.type):
        h.update(numpy_of(pc.fill_null(column, False)).tobytes())
    else:  # numbers; a null's slot was hashed as null above, its value as 0
        wide = pa.float64() if pa.types.is_floating(column.type) else pa.int64()
        h.update(numpy_of(pc.fill_null(column.cast(wide), 0)).tobytes())
