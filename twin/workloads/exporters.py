"""Export a workload to other tools' formats: the Marconi artifact's trace JSONL.

The Marconi format (see ``twin/workloads/importers/marconi.py`` for where it comes
from) holds, per request, the *full* prompt and the output as token id lists,
keyed by ``session_id`` / ``turn_id`` with an arrival ``ts`` in seconds. Lines
are written with the artifact's own key order and ``json.dump`` separators, so
the artifact's simulator reads them unchanged and ``MarconiImporter`` reads
them back to the same full prompts and outputs per request.

Two choices the schema leaves open:

- **Fresh output ids.** A row without ``output_tokens`` gets negative ids at
  read time (-1, -2, ... in row order); the Marconi format needs real ids.
  Fresh id ``-k`` becomes ``base + k - 1`` with ``base`` = 1 + the largest id
  stored anywhere in the file, so mapped ids never collide with a real prompt
  or output token and stay distinct from each other: prefix sharing is
  exactly what it was. Prompts (whose history holds earlier outputs) get the
  same map. Too many ids to fit under 2**31 - 1 is an error.
- **Closed-loop rows** (``arrival_s`` null). ``ts`` is the nominal arrival the
  schema defines for row order: the previous turn's ``ts`` + ``think_s``
  (service taken as instant). A closed-loop turn 0 has no time of its own;
  it gets the ``ts`` of the row before it (0 for the first row) + ``think_s``,
  which keeps ``ts`` in file order. Re-importing such an export gives an open-
  loop workload: the Marconi format has no closed loop.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.compute as pc

from twin.atomic import atomic_path
from twin.errors import TwinError
from twin.workloads.importers.base import ProgressFn, _no_progress
from twin.workloads.reader import Workload
from twin.workloads.schema import TOKEN_ID_MAX


def _max_stored_id(workload: Workload) -> int:
    """Largest token id stored in the file's input and output lists (-1 if none).

    One scan of the token columns without history expansion: every id a
    request can hold (prompt history included) is one of these or fresh.
    """
    best = -1
    for batch in workload.token_batches():
        for col in batch.columns:
            if col.null_count == len(col):
                continue
            m = pc.max(pc.list_flatten(col)).as_py()
            if m is not None:
                best = max(best, int(m))
    return best


def export_marconi(
    workload: Workload,
    out: Path,
    on_progress: ProgressFn = _no_progress,
) -> int:
    """Write ``workload`` as a Marconi trace JSONL at ``out`` (atomically); return rows written.

    ``on_progress(n)`` is called with the number of requests written since the
    previous call (the CLI's bar runs over ``workload.num_rows``).
    """
    out = Path(out)
    base = _max_stored_id(workload) + 1
    session_ts: dict[int, float] = {}  # last ts of each session, for closed-loop turns
    last_ts = 0.0
    rows = 0
    with atomic_path(out) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for req in workload.requests():
            if req.arrival_s is not None:
                ts = req.arrival_s
            else:
                start = session_ts.get(req.session_id, last_ts) if req.turn else last_ts
                ts = start + (req.think_s or 0.0)
            # One float per session: small next to the history the reader holds.
            session_ts[req.session_id] = ts
            last_ts = ts
            prompt = _map_fresh(req.prompt, base, workload.path, req.row)
            output = _map_fresh(req.output, base, workload.path, req.row)
            record = {
                "session_id": req.session_id,
                "turn_id": req.turn,
                "ts": ts,
                "num_input_tokens": len(prompt),
                "num_output_tokens": len(output),
                "input_tokens": prompt.tolist(),
                "output_tokens": output.tolist(),
            }
            f.write(json.dumps(record))
            f.write("\n")
            rows += 1
            on_progress(1)
    return rows


def _map_fresh(ids: np.ndarray, base: int, path: Path, row: int) -> np.ndarray:
    """Map fresh negative ids ``-k`` to ``base + k - 1``; real ids pass through."""
    neg = ids < 0
    if not neg.any():
        return ids
    mapped = ids.astype(np.int64)
    mapped[neg] = base - 1 - mapped[neg]
    top = int(mapped.max())
    if top > TOKEN_ID_MAX:
        raise TwinError(
            f"{path}, row {row}: fresh output id {top} would exceed {TOKEN_ID_MAX} "
            f"(stored ids reach {base - 1}); cannot export to the Marconi format"
        )
    return mapped
