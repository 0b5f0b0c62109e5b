"""Importer of the Mooncake FAST'25 trace format (kvcache-ai/Mooncake, FAST25-release/traces).

One JSON object per line::

    {"timestamp": 0, "input_length": 40160, "output_length": 6, "hash_ids": [0, 1, ...]}

- ``timestamp``: arrival in milliseconds from the trace start (never decreasing).
- ``input_length`` / ``output_length``: prompt and output token counts.
- ``hash_ids``: one id per ``block_size``-token block of the prompt (512 in
  the release), the last block possibly partial; equal ids mean equal blocks.

The trace carries no text or token ids, and no session structure: every
request becomes its own one-turn session (arrival = timestamp / 1000, output
ids left to the reader, which draws fresh ones).

Token ids: block ``h`` expands to the run ``h * block_size + arange(block_size)``.
Runs of different hashes are disjoint and a hash always gives the same run,
so two prompts share exactly the prefix their hash lists share, no more (no
accidental token collisions) and no less. The last block is cut to
``input_length - block_size * (len(hash_ids) - 1)`` tokens. Ids must fit in
int32, hence ``h * block_size + block_size - 1 <= 2**31 - 1`` (4,194,303 for 512 blocks;
the synthetic release tops out near 44k).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

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
from twin.workloads.schema import TOKEN_ID_MAX, WorkloadRow


class MooncakeImporter(Importer):
    """Mooncake FAST'25 JSONL: timestamp (ms), input/output lengths, block hash ids."""

    name: ClassVar[str] = "mooncake"
    description: ClassVar[str] = (
        "Mooncake FAST'25 trace JSONL (timestamp ms, input_length, output_length, hash_ids "
        "of 512-token blocks); one session per request"
    )

    def __init__(self, block_size: int = 512) -> None:
        if type(block_size) is not int or block_size < 1:
            raise TwinError(
                f"mooncake importer: block_size must be a positive integer, got {block_size!r}"
            )
        self.block_size = block_size
        # Largest hash whose whole run fits in int32: h * bs + bs - 1 <= 2**31 - 1
        # (equals (2**31 - 1) // 512 for the release's 512-token blocks).
        self.max_hash = (TOKEN_ID_MAX + 1) // block_size - 1
        # Offsets inside one block, shared by every request (built once).
        self._offsets = np.arange(block_size, dtype=np.int32)

    def options(self) -> dict[str, Any]:
        return {"block_size": self.block_size}

    def tokens(self, hash_ids: np.ndarray, input_length: int) -> np.ndarray:
        """Expand block hashes into the prompt's int32 token ids (vectorised, no token loop)."""
        starts = hash_ids.astype(np.int32) * np.int32(self.block_size)
        # (blocks, block_size) broadcast then flatten: one allocation, row-major,
        # so block i occupies [i * block_size, (i + 1) * block_size).
        full = (starts[:, None] + self._offsets[None, :]).reshape(-1)
        return full[:input_length]

    def rows(self, path: Path, on_progress: ProgressFn = _no_progress) -> Iterator[WorkloadRow]:
        path = Path(path)
        bs = self.block_size
        last_ms = -1.0
        last_line = 0
        # Session ids number the requests in file order (blank lines skipped).
        for session, (line, obj) in enumerate(json_lines(path, on_progress)):
            ts_ms = get_time(path, line, obj, "timestamp")
            if ts_ms < last_ms:
                # The engine replays rows in file order; an unsorted trace would
                # silently reorder arrivals, so refuse it instead.
                raise TwinError(
                    f"{at(path, line, 'timestamp')}: timestamps must not decrease "
                    f"({obj['timestamp']} after {last_ms:g} on line {last_line})"
                )
            n_in = get_int(path, line, obj, "input_length", minimum=1)
            n_out = get_int(path, line, obj, "output_length", minimum=1)
            if n_in + n_out > MAX_SEQUENCE_TOKENS:
                raise TwinError(
                    f"{at(path, line, 'input_length')}: {n_in} + {n_out} output tokens is over "
                    f"the {MAX_SEQUENCE_TOKENS}-token limit"
                )
            hashes = get_int_array(path, line, obj, "hash_ids", maximum=self.max_hash)
            n_blocks = -(-n_in // bs)
            if len(hashes) != n_blocks:
                raise TwinError(
                    f"{at(path, line, 'hash_ids')}: {len(hashes)} block hashes, but input_length "
                    f"{n_in} needs ceil({n_in}/{bs}) = {n_blocks}"
                )
            yield WorkloadRow(
                session_id=session,
                turn=0,
                arrival_s=ts_ms / 1000.0,
                think_s=None,
                input_tokens=self.tokens(hashes, n_in),
                extends_history=False,
                output_tokens=None,
                output_len=n_out,
            )
            last_ms, last_line = ts_ms, line
