"""The workload schema: one parquet row per request, grouped in sessions.

Columns (see DESIGN.md, "Workload schema"):

- ``session_id`` int64: conversation / agent episode.
- ``turn`` int32: 0, 1, 2, ... within the session, in row order.
- ``arrival_s`` float64, nullable: open-loop arrival time. Null means closed
  loop: the turn arrives ``think_s`` after the previous turn of its session
  completes (turn 0 at the session's arrival, which the engine then draws).
- ``think_s`` float64, nullable: think / tool time before this turn (a
  closed-loop client's turn 0: its delay after the client became free).
- ``input_tokens`` list<int32>: the whole prompt, or, when ``extends_history``
  is true, only the tokens appended after the previous turn's prompt + output.
- ``extends_history`` bool.
- ``output_tokens`` list<int32>, nullable: generated token ids.
- ``output_len`` int32: number of generated tokens.
- ``modules`` list<struct<id int64, start int32, length int32>>, optional
  column, nullable: the prompt modules this request imports (Prompt Cache,
  Gim et al., MLSys 2024, sec. 3.2: a schema declares reusable segments).
  ``start`` is the token position of the module in the request's full prompt
  (history included), ``length`` its tokens; one id always names the same
  tokens. Modules are sorted by ``start`` and never overlap. Files without
  the column are valid (no modules).
- ``spec_acceptance`` float64, optional column, nullable: this request's
  speculative-decoding acceptance, the probability that a drafted token is
  accepted given the ones before it, in [0, 1] (real traces differ by request:
  code is accepted more than chat). Read only by a run with speculative decoding
  (``twin.engine.speculative``), where it replaces the run's acceptance for this
  request; null, or a file without the column: the run's (its flag or default).
  Like ``modules``, files without the column are valid and unchanged.

Row order is replay order: non-null arrivals never decrease down the file,
and closed-loop turns sit where their nominal arrival (previous nominal
arrival + think time, service taken as instant) puts them.

Token ids in files are in [0, 2**31 - 1]. Negative ids are reserved for the
fresh output ids drawn at read time when ``output_tokens`` is null, so they
can never collide with a prompt token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

SCHEMA = pa.schema(
    [
        pa.field("session_id", pa.int64(), nullable=False),
        pa.field("turn", pa.int32(), nullable=False),
        pa.field("arrival_s", pa.float64()),
        pa.field("think_s", pa.float64()),
        pa.field("input_tokens", pa.list_(pa.int32()), nullable=False),
        pa.field("extends_history", pa.bool_(), nullable=False),
        pa.field("output_tokens", pa.list_(pa.int32())),
        pa.field("output_len", pa.int32(), nullable=False),
    ]
)
COLUMNS = tuple(SCHEMA.names)
# The optional ``modules`` column (module docstring) and the schema of a file that has it.
MODULE_TYPE = pa.list_(
    pa.struct(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("start", pa.int32(), nullable=False),
            pa.field("length", pa.int32(), nullable=False),
        ]
    )
)
MODULES_COLUMN = "modules"
SCHEMA_WITH_MODULES = SCHEMA.append(pa.field(MODULES_COLUMN, MODULE_TYPE))
# The optional per-request speculative acceptance rate (module docstring).
ACCEPTANCE_COLUMN = "spec_acceptance"
# Light columns: everything but the token lists; cheap to read whole.
INDEX_COLUMNS = ("session_id", "turn", "arrival_s", "think_s", "extends_history", "output_len")

# Key of the file-level metadata entry holding the producer and its parameters (JSON).
METADATA_KEY = b"twin.workload"

TOKEN_ID_MAX = 2**31 - 1


@dataclass(slots=True)
class WorkloadRow:
    """One request as written to a workload file (before history is expanded)."""

    session_id: int
    turn: int
    arrival_s: float | None
    think_s: float | None
    input_tokens: np.ndarray
    extends_history: bool
    output_tokens: np.ndarray | None
    output_len: int
    # (k, 3) int64 rows of (id, start, length), sorted by start; None: no modules.
    modules: np.ndarray | None = None


def check_modules(modules: np.ndarray, prompt_len: int | None = None) -> str | None:
    """What is wrong with one row's ``modules`` array, or ``None`` when it is valid.

    ``prompt_len`` (when known: the reader knows the expanded prompt) bounds
    every module's end.
    """
    if modules.ndim != 2 or modules.shape[1] != 3:
        return f"expected rows of (id, start, length), got shape {modules.shape}"
    ids, starts, lengths = modules[:, 0], modules[:, 1], modules[:, 2]
    for what, bad in (
        ("negative module id", ids < 0),
        ("negative module start", starts < 0),
        ("module length must be at least 1", lengths < 1),
    ):
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            return f"module {i} (id {int(ids[i])}): {what}"
    ends = starts + lengths
    overlap = np.flatnonzero(starts[1:] < ends[:-1])
    if overlap.size:
        i = int(overlap[0]) + 1
        return (
            f"module {i} (id {int(ids[i])}) starts at {int(starts[i])}, before the end of "
            f"module {i - 1} at {int(ends[i - 1])} (modules are sorted by start, never overlap)"
        )
    if prompt_len is not None and len(ends) and int(ends[-1]) > prompt_len:
        i = len(ends) - 1
        return (
            f"module {i} (id {int(ids[i])}) ends at token {int(ends[-1])}, past the "
            f"prompt's {prompt_len} tokens"
        )
    return None
