"""Importer of the Marconi artifact's request traces (MLSys'25, ruipeterpan/marconi).

What the artifact writes, read from its generator ``utils/generate_trace.py``
(functions ``generate_lmsys_trace``, ``generate_sharegpt_trace``,
``process_swebench_trace``, ``generate_wildchat_trace``; as stored in the fork
meghrathod/marconi, commit 0b2e026a, and described in meghrathod/marconi-repro
``llm-docs/04-trace-reply.md``). One JSON object per line::

    {"session_id": 42, "turn_id": 3, "ts": 28.5, "num_input_tokens": 1847,
     "num_output_tokens": 256, "input_tokens": [1, 3907, ...], "output_tokens": [450, ...]}

- ``session_id``: int, the conversation index; ``turn_id``: int, 0, 1, 2, ...
- ``ts``: float **seconds** from the trace start. Turn 0 of session ``s`` is at
  ``s / sessions_per_second``; each later turn adds a typing delay (words /
  90 wpm) or, for SWE-bench, a Poisson "agent response time" to the previous
  turn's ``ts`` (not to its completion: the trace is open loop).
- ``input_tokens``: the **full prompt** as Llama-2 token id *lists* (history of
  every earlier user input and LLM output + this turn's user input), never a
  count. ``output_tokens``: the LLM reply's token ids (a list, history-free).
- ``num_input_tokens`` / ``num_output_tokens``: the two lengths (optional here;
  checked when present).
- Lines are sorted by ``ts`` globally (Python's stable sort), so sessions
  interleave. Sessions stop early (not skip turns) past 8192 tokens.

SWE-bench traces collapse old observations out of the history, so a prompt is
not always previous prompt + previous output + new input. Hence each turn is
checked: when it *is* an exact extension, the row stores only the appended
tokens with ``extends_history`` (much smaller files for long sessions);
otherwise it stores the full prompt, which is always correct.

Rows: ``arrival_s = ts``, ``think_s`` null (the trace's delays run from the
previous *arrival*, which is not the schema's think-after-completion), output
ids kept. The whole file is read first (these traces are small) and rows are
emitted sorted by (ts, session_id, turn_id) so that unsorted files work too.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from twin.errors import TwinError
from twin.limits import MAX_SEQUENCE_TOKENS
from twin.workloads.importers.base import (
    Importer,
    ProgressFn,
    _no_progress,
    at,
    get_int,
    get_int_array,
    get_time,
    json_lines,
)
from twin.workloads.schema import WorkloadRow


@dataclass(slots=True)
class _Record:
    line: int
    session_id: int
    turn: int
    ts: float
    prompt: np.ndarray  # int32, the full prompt as in the file
    output: np.ndarray  # int32


def _tokens(path: Path, line: int, obj: dict, field: str, count_field: str) -> np.ndarray:
    ids = get_int_array(path, line, obj, field)
    if ids.size == 0:
        what = "prompt" if field == "input_tokens" else "output (a request generates >= 1 token)"
        raise TwinError(f"{at(path, line, field)}: empty {what}")
    if count_field in obj:
        n = get_int(path, line, obj, count_field)
        if n != ids.size:
            raise TwinError(f"{at(path, line, count_field)}: {n}, but {field} holds {ids.size} ids")
    return ids.astype(np.int32)


class MarconiImporter(Importer):
    """The Marconi artifact's JSONL traces: full-prompt token id lists per turn."""

    name: ClassVar[str] = "marconi"
    description: ClassVar[str] = (
        "Marconi artifact trace JSONL (session_id, turn_id, ts seconds, full-prompt "
        "input_tokens and output_tokens id lists)"
    )

    def rows(self, path: Path, on_progress: ProgressFn = _no_progress) -> Iterator[WorkloadRow]:
        path = Path(path)
        records = self._read(path, on_progress)
        last_turn = self._check_sessions(path, records)
        records.sort(key=lambda r: (r.ts, r.session_id, r.turn))
        # prompt + output of each open session's previous turn, to detect extensions;
        # dropped at the session's last turn so memory follows the open sessions.
        history: dict[int, np.ndarray] = {}
        for r in records:
            prev = history.pop(r.session_id, None)
            n_prev = 0 if prev is None else len(prev)
            extends = (
                prev is not None
                and len(r.prompt) > n_prev
                and np.array_equal(r.prompt[:n_prev], prev)
            )
            if r.turn < last_turn[r.session_id]:
                history[r.session_id] = np.concatenate((r.prompt, r.output))
            yield WorkloadRow(
                session_id=r.session_id,
                turn=r.turn,
                arrival_s=r.ts,
                think_s=None,
                input_tokens=r.prompt[n_prev:] if extends else r.prompt,
                extends_history=bool(extends),
                output_tokens=r.output,
                output_len=len(r.output),
            )

    @staticmethod
    def _read(path: Path, on_progress: ProgressFn) -> list[_Record]:
        records: list[_Record] = []
        for line, obj in json_lines(path, on_progress):
            sid = get_int(path, line, obj, "session_id")
            turn = get_int(path, line, obj, "turn_id", maximum=2**31 - 1)
            ts = get_time(path, line, obj, "ts")
            prompt = _tokens(path, line, obj, "input_tokens", "num_input_tokens")
            output = _tokens(path, line, obj, "output_tokens", "num_output_tokens")
            if len(prompt) + len(output) > MAX_SEQUENCE_TOKENS:
                raise TwinError(
                    f"{at(path, line, 'input_tokens')}: {len(prompt)} + {len(output)} output "
                    f"tokens is over the {MAX_SEQUENCE_TOKENS}-token limit"
                )
            records.append(_Record(line, sid, turn, ts, prompt, output))
        return records

    @staticmethod
    def _check_sessions(path: Path, records: list[_Record]) -> dict[int, int]:
        """Each session needs turns 0..n-1 once each, at non-decreasing ts; returns last turns."""
        by_session: dict[int, list[_Record]] = {}
        for r in records:
            by_session.setdefault(r.session_id, []).append(r)
        last_turn: dict[int, int] = {}
        for sid, recs in by_session.items():
            recs.sort(key=lambda r: (r.turn, r.line))
            for i, r in enumerate(recs):
                if r.turn != i:
                    if i and recs[i - 1].turn == r.turn:
                        raise TwinError(
                            f"{at(path, r.line, 'turn_id')}: session {sid} turn {r.turn} "
                            f"appears twice (also line {recs[i - 1].line})"
                        )
                    raise TwinError(
                        f"{at(path, r.line, 'turn_id')}: session {sid} has turn {r.turn} "
                        f"but no turn {i} (turns must be 0, 1, 2, ...)"
                    )
                if i and r.ts < recs[i - 1].ts:
                    raise TwinError(
                        f"{at(path, r.line, 'ts')}: session {sid} turn {r.turn} at ts {r.ts:g} "
                        f"is earlier than its turn {i - 1} (ts {recs[i - 1].ts:g}, line "
                        f"{recs[i - 1].line}); timestamps must not decrease within a session"
                    )
            last_turn[sid] = len(recs) - 1
        return last_turn
