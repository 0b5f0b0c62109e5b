"""Shared pieces of the engine tests: pricers with known behaviour and tiny workload files."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from twin.engine import EngineConfig, PricerBase, simulate
from twin.engine.cost import Chunk
from twin.metrics import RequestRecord
from twin.model import ModelSpec
from twin.presets import get_model
from twin.workloads.generators import get_generator
from twin.workloads.reader import Workload
from twin.workloads.schema import WorkloadRow
from twin.workloads.writer import WorkloadWriter


class ConstantPricer(PricerBase):
    """Every step takes ``step_s``, whatever it holds (deterministic service: M/D/1)."""

    def __init__(self, step_s: float = 1.0) -> None:
        self.step_s = step_s

    def step_time(self, prefills: Sequence[Chunk], decode_batch: int, decode_context: int) -> float:
        return self.step_s

    def decode_affine(self, batch: int) -> tuple[float, float]:
        return self.step_s, 0.0


class FillingPricer(ConstantPricer):
    """1 s steps, with a compiled decode's ``decode_ends`` (fills the ends of ``n`` steps
    from step ``first`` on, 1 s apart)."""

    def decode_ends(self, batch, context):
        def fill(ends, first, n):
            start = ends[first - 1] if first else 0.0
            ends[first : first + n] = start + np.arange(1, n + 1)

        return fill


class ExponentialPricer(PricerBase):
    """Each step takes an independent exponential time of mean ``mean_s`` (M/M/1 service)."""

    def __init__(self, mean_s: float = 1.0, seed: int = 0) -> None:
        self.mean_s = mean_s
        self.rng = np.random.default_rng(seed)
        self.draws: list[float] = []

    def step_time(self, prefills: Sequence[Chunk], decode_batch: int, decode_context: int) -> float:
        t = float(self.rng.exponential(self.mean_s))
        self.draws.append(t)
        return t


class LinearPricer(PricerBase):
    """A step costs ``base`` + per new token + per key attended + per decoding sequence.

    ``affine=False`` hides the closed form so the engine prices decode runs step by step.
    """

    def __init__(
        self,
        base: float = 1e-3,
        per_token: float = 1e-5,
        per_key: float = 1e-9,
        per_seq: float = 1e-4,
        copy_s: float = 0.0,
        affine: bool = True,
    ) -> None:
        self.base, self.per_token, self.per_key, self.per_seq = base, per_token, per_key, per_seq
        self.copy_s = copy_s
        self.affine = affine

    def step_time(self, prefills: Sequence[Chunk], decode_batch: int, decode_context: int) -> float:
        new = sum(n for n, _ in prefills)
        keys = sum(n * c + n * (n + 1) // 2 for n, c in prefills) + decode_context
        return self.base + self.per_token * new + self.per_key * keys + self.per_seq * decode_batch

    def decode_affine(self, batch: int) -> tuple[float, float] | None:
        if not self.affine:
            return None
        return self.base + self.per_seq * batch, self.per_key

    def checkpoint_copy_time(self) -> float:
        return self.copy_s


def write_rows(path: Path, rows: list[WorkloadRow]) -> Path:
    with WorkloadWriter(path, {"generator": "test"}) as w:
        w.write_all(rows)
    return path


def single_turns(
    path: Path,
    arrivals: Sequence[float | None],
    prompt_len: int = 8,
    output_len: int = 1,
    seed: int = 0,
) -> Path:
    """One single-turn session per arrival (None: the engine draws the session start)."""
    rng = np.random.default_rng(seed)
    rows = [
        WorkloadRow(
            i,
            0,
            a,
            None,
            rng.integers(0, 30000, prompt_len, dtype=np.int32),
            False,
            None,
            output_len,
        )
        for i, a in enumerate(arrivals)
    ]
    return write_rows(path, rows)


def generated(
    path: Path,
    kind: str,
    sessions: int | None,
    rate: float,
    seed: int = 7,
    max_context: int = 4096,
    knobs: Mapping[str, object] | None = None,
    duration_s: float | None = None,
) -> Path:
    """``kind``'s workload with these ``--set`` knobs, written to ``path``."""
    cls = get_generator(kind)
    gen = cls(cls.parse_params({k: str(v) for k, v in (knobs or {}).items()}))
    return gen.write(path, sessions, rate, seed, max_context, duration_s)


def doc_qa(
    path: Path, sessions: int = 60, rate: float = 4.0, doc_tokens: tuple[int, int] = (40, 120)
) -> Path:
    """A small ``doc-qa`` workload (short documents) with a ``modules`` column."""
    knobs = {"n_documents": 8, "doc_min_tokens": doc_tokens[0], "doc_max_tokens": doc_tokens[1]}
    return generated(path, "doc-qa", sessions, rate, 3, 4096, knobs)


def run(
    path: Path,
    pricer: PricerBase,
    model: ModelSpec | str = "tiny-hybrid",
    out: Path | None = None,
    pool_bytes: float | None = None,
    **config: object,
) -> tuple[dict, list[RequestRecord]]:
    """Simulate; return the summary (as ``summary.json`` holds it) and the records in
    completion order. ``pool_bytes``: a shared KV pool of that many bytes beside the
    weights (the GPU's memory at the default 0.9 utilisation)."""
    spec = get_model(model) if isinstance(model, str) else model
    if pool_bytes is not None:
        config |= {"shared_pool": True, "gpu_memory_bytes": (spec.weight_bytes + pool_bytes) / 0.9}
    records: list[RequestRecord] = []
    summary = simulate(
        Workload.open(path), spec, pricer, EngineConfig.of(**config), out, on_record=records.append
    )
    return summary.to_dict(), records


def lindley(arrivals: np.ndarray, service: np.ndarray) -> np.ndarray:
    """FCFS single-server waits: w[i+1] = max(0, w[i] + s[i] - (a[i+1] - a[i]))."""
    w = np.zeros(len(arrivals))
    for i in range(1, len(arrivals)):
        w[i] = max(0.0, w[i - 1] + service[i - 1] - (arrivals[i] - arrivals[i - 1]))
    return w
