"""Shared machinery of the synthetic workload generators.

A generator kind only describes *one session*: :meth:`WorkloadGenerator.session` yields
its turns (think time, new prompt tokens, whether they extend the history, and
the output ids) from a random generator private to that session. This module
does the rest:

- **Arrivals.** Sessions arrive as a Poisson process at ``session_rate``
  sessions/s (exponential gaps; the first session at t = 0). A run holds
  either ``n_sessions`` sessions or, with ``duration_s``, every session that
  starts in [0, duration_s): the same first sessions either way.
- **Determinism.** The arrival stream, each session's content and the content
  shared by all sessions (system prompts) come from independent streams of
  ``numpy.random.SeedSequence(seed)``. A session's tokens depend only on
  ``(seed, session_id)``, never on how rows interleave, so the same seed always
  gives the same rows.
- **Row order.** Rows come out in nominal arrival order: turn 0 at the session
  arrival, turn k at turn k-1's nominal time + its ``think_s`` (service taken
  as instant), ties broken by session id. A heap holds one pending turn per
  *active* session and sessions are created lazily in arrival order, so memory
  is O(active sessions) and 100K-session workloads stream straight to disk.
- **Knobs.** Each kind's ``Params`` is a frozen dataclass whose fields carry
  ``help``, ``source`` and range metadata; :meth:`WorkloadGenerator.parse_params` turns
  CLI ``--set key=value`` strings into it with one clear ``TwinError``.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import numpy as np

from twin.errors import TwinError
from twin.limits import DEFAULT_MAX_CONTEXT, MAX_SEQUENCE_TOKENS
from twin.workloads.schema import TOKEN_ID_MAX, WorkloadRow
from twin.workloads.writer import WorkloadWriter

# Spawn keys of the three independent random streams derived from the seed.
_ARRIVALS, _SESSIONS, _SHARED = 0, 1, 2
# Exponential gaps are drawn in blocks: one numpy call per block instead of per session.
_GAP_BLOCK = 1024


def knob(
    default: Any,
    help: str,
    source: str,
    *,
    lo: float | None = None,
    hi: float | None = None,
    gt: float | None = None,
) -> Any:
    """A ``Params`` field: default, help text, where the default comes from, and its range.

    ``lo``/``hi`` are inclusive bounds, ``gt`` an exclusive lower bound; they are
    checked in ``GeneratorParams.__post_init__``.
    """
    meta = {"help": help, "source": source, "lo": lo, "hi": hi, "gt": gt}
    return field(default=default, metadata=meta)


class KnobError(TwinError):
    """A bad knob value, spelled ``--set name=value: why``.

    ``name``, ``value`` and ``why`` are kept so that a command offering the
    knob as a flag of its own can name that flag instead.
    """

    def __init__(self, name: str, value: object, why: str) -> None:
        super().__init__(f"--set {name}={value}: {why}")
        self.name, self.value, self.why = name, value, why


def knob_error(name: str, value: object, why: str) -> KnobError:
    """The error for a bad knob, named as the CLI spells it: what the user has to fix."""
    return KnobError(name, value, why)


@dataclass(frozen=True)
class GeneratorParams:
    """Knobs every kind shares; subclasses add their own (all with defaults)."""

    vocab_size: int = knob(
        32000,
        "token ids are drawn uniformly from [0, vocab_size)",
        "Llama-2 / Mistral-7B tokenizer vocabulary of 32,000 entries (the Marconi "
        "traces are tokenized with meta-llama/Llama-2-7b-hf)",
        lo=2,
        hi=TOKEN_ID_MAX + 1,
    )

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            value = _coerce(f.name, getattr(self, f.name), hints[f.name])
            object.__setattr__(self, f.name, value)  # frozen: int -> float widening only
            _check_range(f, value)
        self.check()

    def check(self) -> None:
        """Cross-field rules (e.g. min <= mean <= max); raise ``TwinError`` via ``knob_error``."""

    def require_ordered(self, *names: str) -> None:
        """Knobs ``names`` must not decrease (min <= mean <= max); blames the first that does."""
        values = [getattr(self, n) for n in names]
        for i in range(1, len(names)):
            if values[i] < values[i - 1]:
                bounds = ", ".join(f"{n}={v}" for n, v in zip(names, values, strict=True))
                raise knob_error(names[i], values[i], f"needs {' <= '.join(names)} (got {bounds})")


def _coerce(name: str, value: object, typ: object) -> object:
    """Type-check a knob given from Python; ints widen to floats."""
    if typ is bool:
        if isinstance(value, bool | np.bool_):
            return bool(value)
        raise knob_error(name, value, "expected true or false")
    if typ is int:
        if isinstance(value, int | np.integer) and not isinstance(value, bool):
            return int(value)
        raise knob_error(name, value, "expected an integer")
    if typ is float:
        if isinstance(value, int | float | np.integer | np.floating) and not isinstance(
            value, bool
        ):
            value = float(value)
            if not math.isfinite(value):
                raise knob_error(name, value, "expected a finite number")
            return value
        raise knob_error(name, value, "expected a number")
    return value


def _check_range(f: dataclasses.Field[Any], value: object) -> None:
    lo, hi, gt = f.metadata.get("lo"), f.metadata.get("hi"), f.metadata.get("gt")
    if not isinstance(value, int | float) or isinstance(value, bool):
        return
    if lo is not None and value < lo:
        raise knob_error(f.name, value, f"must be >= {lo}")
    if gt is not None and value <= gt:
        raise knob_error(f.name, value, f"must be > {gt}")
    if hi is not None and value > hi:
        raise knob_error(f.name, value, f"must be <= {hi}")


def _parse(name: str, text: str, typ: object) -> object:
    """Convert one CLI string to the knob's type."""
    text = text.strip()
    try:
        if typ is bool:
            low = text.lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if typ is int:
            return int(text, 10)
        if typ is float:
            value = float(text)
            if not math.isfinite(value):
                raise ValueError
            return value
    except ValueError:
        kind = {bool: "true or false", int: "an integer", float: "a finite number"}[typ]  # type: ignore[index]
        raise knob_error(name, text, f"expected {kind}") from None
    return text


class Turn(NamedTuple):
    """One turn as a session yields it; the merge adds session id, index and timing."""

    think_s: float  # think / tool time before this turn (ignored on turn 0)
    input_tokens: np.ndarray  # int32; only the appended tokens when extends_history
    extends_history: bool
    output_tokens: np.ndarray  # int32, at least one id
    modules: np.ndarray | None = None  # (k, 3) rows of (id, start, length); kinds with modules


class WorkloadGenerator:
    """Base class of the synthetic generators; a kind sets ``name``, ``description``,
    ``Params`` and implements :meth:`session` (and optionally :meth:`shared`)."""

    name: ClassVar[str]
    description: ClassVar[str]
    Params: ClassVar[type[GeneratorParams]] = GeneratorParams
    # Whether rows carry the optional ``modules`` column (the writer reads it
    # from the metadata).
    has_modules: ClassVar[bool] = False

    def __init__(self, params: GeneratorParams | None = None) -> None:
        if params is None:
            params = self.Params()
        elif not isinstance(params, self.Params):
            raise TypeError(
                f"{type(self).__name__} needs {self.Params.__name__}, got {type(params).__name__}"
            )
        self.params = params
        # Largest number of sessions held at once by the last rows() call; the
        # tests use it to prove that generation streams.
        self.peak_active_sessions = 0

    # ----- knobs -------------------------------------------------------------

    @classmethod
    def parse_params(cls, overrides: Mapping[str, str]) -> GeneratorParams:
        """Build ``Params`` from CLI ``--set key=value`` strings (defaults for the rest)."""
        hints = typing.get_type_hints(cls.Params)
        names = [f.name for f in dataclasses.fields(cls.Params)]
        values: dict[str, object] = {}
        for key, text in overrides.items():
            if key not in names:
                raise TwinError(
                    f"--set {key}: unknown parameter for generator {cls.name!r}; "
                    f"valid parameters: {', '.join(names)}"
                )
            values[key] = _parse(key, str(text), hints[key])
        return cls.Params(**values)  # type: ignore[arg-type]  # checked per key above

    @classmethod
    def knobs(cls) -> list[dict[str, Any]]:
        """Every knob with its type, default, help and source, for ``--help`` listings."""
        hints = typing.get_type_hints(cls.Params)
        return [
            {
                "name": f.name,
                "type": getattr(hints[f.name], "__name__", str(hints[f.name])),
                "default": f.default,
                "help": f.metadata["help"],
                "source": f.metadata["source"],
            }
            for f in dataclasses.fields(cls.Params)
        ]

    def metadata(
        self,
        n_sessions: int | None,
        session_rate: float,
        seed: int,
        max_context: int,
        duration_s: float | None = None,
    ) -> dict[str, Any]:
        """The workload file's metadata: generator, knobs and run arguments.

        ``sessions`` is the number of sessions the run holds (with
        ``duration_s``, those starting before it); ``duration_s`` is recorded
        only when given, so count-based files keep their metadata.
        """
        _check_run(n_sessions, session_rate, seed, max_context, duration_s)
        extra: dict[str, Any] = {"modules": True} if self.has_modules else {}
        run: dict[str, Any] = {} if duration_s is None else {"duration_s": float(duration_s)}
        return {
            **extra,
            "generator": self.name,
            "params": dataclasses.asdict(self.params),
            "sessions": _session_count(n_sessions, session_rate, seed, duration_s),
            **run,
            "session_rate": session_rate,
            "seed": seed,
            "max_context": max_context,
        }

    def write(
        self,
        path: Path,
        n_sessions: int | None,
        session_rate: float,
        seed: int,
        max_context: int = DEFAULT_MAX_CONTEXT,
        duration_s: float | None = None,
    ) -> Path:
        """Write the workload of these run arguments (:meth:`metadata`, :meth:`rows`) to
        ``path``; return ``path``."""
        args = (n_sessions, session_rate, seed, max_context, duration_s)
        with WorkloadWriter(path, self.metadata(*args)) as writer:
            writer.write_all(self.rows(*args))
        return path

    # ----- what a kind implements ---------------------------------------------

    def shared(self, rng: np.random.Generator, max_context: int) -> Any:
        """Content common to all sessions (e.g. system prompts), drawn once per run."""
        return None

    def session(self, rng: np.random.Generator, shared: Any, max_context: int) -> Iterator[Turn]:
        """Yield one session's turns (at least one); every full sequence <= max_context."""
        raise NotImplementedError

    # ----- the merge ----------------------------------------------------------

    def rows(
        self,
        n_sessions: int | None,
        session_rate: float,
        seed: int,
        max_context: int = 32768,
        duration_s: float | None = None,
    ) -> Iterator[WorkloadRow]:
        """Yield the workload rows in nominal arrival order (see module docstring).

        ``n_sessions`` sessions, or (``n_sessions`` None) every session whose
        start is before ``duration_s`` seconds. Arguments are checked now, not
        at the first row, so a bad flag fails before any output file is opened.
        """
        _check_run(n_sessions, session_rate, seed, max_context, duration_s)
        n = _session_count(n_sessions, session_rate, seed, duration_s)
        root = np.random.SeedSequence(int(seed))
        shared = self.shared(_stream(root, (_SHARED,)), int(max_context))
        return self._merge(root, shared, n, float(session_rate), int(max_context))

    def _merge(
        self,
        root: np.random.SeedSequence,
        shared: Any,
        n_sessions: int,
        session_rate: float,
        max_context: int,
    ) -> Iterator[WorkloadRow]:
        arrivals = poisson_times(_stream(root, (_ARRIVALS,)), session_rate)
        # Heap entries: (nominal time, session id, turn index, Turn, session iterator).
        # (time, session id) is unique, so Turn and the iterator are never compared.
        heap: list[tuple[float, int, int, Turn, Iterator[Turn]]] = []
        self.peak_active_sessions = 0

        def admit(sid: int) -> None:
            turns = self.session(_stream(root, (_SESSIONS, sid)), shared, max_context)
            heapq.heappush(heap, (next(arrivals), sid, 0, next(turns), turns))

        admit(0)
        next_sid = 1
        while heap:
            self.peak_active_sessions = max(self.peak_active_sessions, len(heap))
            t, sid, k, turn, turns = heapq.heappop(heap)
            yield WorkloadRow(
                session_id=sid,
                turn=k,
                arrival_s=t if k == 0 else None,
                think_s=None if k == 0 else turn.think_s,
                input_tokens=turn.input_tokens,
                extends_history=turn.extends_history,
                output_tokens=turn.output_tokens,
                output_len=len(turn.output_tokens),
                modules=turn.modules,
            )
            # The next session is created only once its predecessor has arrived:
            # its arrival is later than every row emitted so far, and no earlier.
            if k == 0 and next_sid < n_sessions:
                admit(next_sid)
                next_sid += 1
            following = next(turns, None)
            if following is not None:
                heapq.heappush(heap, (t + following.think_s, sid, k + 1, following, turns))


def _check_run(
    n_sessions: int | None,
    session_rate: float,
    seed: int,
    max_context: int,
    duration_s: float | None = None,
) -> None:
    if duration_s is not None:
        if n_sessions is not None:
            raise TwinError("--sessions and --duration are mutually exclusive: give one")
        if (
            isinstance(duration_s, bool)
            or not isinstance(duration_s, int | float)
            or not math.isfinite(duration_s)
            or duration_s <= 0
        ):
            raise TwinError(f"--duration must be a positive number of seconds, got {duration_s!r}")
    elif (
        isinstance(n_sessions, bool)
        or not isinstance(n_sessions, int | np.integer)
        or n_sessions < 1
    ):
        raise TwinError(f"--sessions must be a positive integer, got {n_sessions!r}")
    if (
        not isinstance(session_rate, int | float)
        or not math.isfinite(session_rate)
        or session_rate <= 0
    ):
        raise TwinError(
            f"--session-rate must be a positive number of sessions/s, got {session_rate!r}"
        )
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise TwinError(f"--seed must be a non-negative integer, got {seed!r}")
    if (
        isinstance(max_context, bool)
        or not isinstance(max_context, int | np.integer)
        or not 2 <= max_context <= MAX_SEQUENCE_TOKENS
    ):
        # Two tokens: one prompt token and the first output token.
        raise TwinError(
            f"--max-context must be an integer in [2, {MAX_SEQUENCE_TOKENS}], got {max_context!r}"
        )


def _session_count(
    n_sessions: int | None, session_rate: float, seed: int, duration_s: float | None
) -> int:
    """The sessions a run holds: ``n_sessions``, or those whose start is before ``duration_s``."""
    if duration_s is None:
        assert n_sessions is not None  # _check_run
        return int(n_sessions)
    root = np.random.SeedSequence(int(seed))
    starts = poisson_times(_stream(root, (_ARRIVALS,)), float(session_rate))
    return count_before(starts, float(duration_s))


def _stream(root: np.random.SeedSequence, key: tuple[int, ...]) -> np.random.Generator:
    """An independent generator for ``key`` below ``root`` (what ``spawn`` does, lazily)."""
    child = np.random.SeedSequence(root.entropy, spawn_key=key)
    return np.random.Generator(np.random.PCG64(child))


def poisson_times(rng: np.random.Generator, rate: float) -> Iterator[float]:
    """Arrival times of a Poisson process: 0, then cumulative exponential gaps."""
    t = 0.0
    while True:
        for gap in rng.exponential(1.0 / rate, _GAP_BLOCK).tolist():
            yield t
            t += gap


def gamma_times(rng: np.random.Generator, rate: float, shape: float) -> Iterator[float]:
    """Arrival times of a gamma renewal process at ``rate``: 0, then cumulative gaps of
    shape ``shape`` and mean ``1 / rate`` (squared coefficient of variation 1 / shape).

    ``vllm bench serve --burstiness B`` draws its request gaps this way (vLLM 0.11,
    ``vllm/benchmarks/serve.py``, ``get_request``: gamma with shape B and scale
    1 / (rate B)): B < 1 is burstier than Poisson, B > 1 more regular.
    """
    t = 0.0
    scale = 1.0 / (rate * shape)
    while True:
        for gap in rng.gamma(shape, scale, _GAP_BLOCK).tolist():
            yield t
            t += gap


def session_start_times(rate: float, seed: int, burstiness: float = 1.0) -> Iterator[float]:
    """The engine's ``--session-rate`` stream (one definition, for the engine and for
    :mod:`workloads.extend`): Poisson from ``default_rng(seed)``, the first start at t = 0;
    gamma gaps of shape ``burstiness`` when it is not 1 (:func:`gamma_times`)."""
    rng = np.random.default_rng(seed)
    if burstiness == 1.0:
        return poisson_times(rng, rate)
    return gamma_times(rng, rate, burstiness)


def count_before(times: Iterator[float], end: float) -> int:
    """How many of the non-decreasing ``times`` come before ``end`` (the rest are not drawn)."""
    n = 0
    for t in times:
        if t >= end:
            return n
        n += 1
    return n  # a finite stream that ended before ``end``


# ----- sampling helpers the kinds share --------------------------------------


def lognormal_int(rng: np.random.Generator, mean: float, sigma: float, lo: int, hi: int) -> int:
    """A length with the given *mean* (not median) and log-spread, rounded, clipped to [lo, hi].

    Lognormal because message and observation lengths are right-skewed with long
    tails; parameterised by the mean since the datasets publish means.
    """
    mu = math.log(mean) - 0.5 * sigma * sigma
    return min(hi, max(lo, round(rng.lognormal(mu, sigma))))


def turn_count(rng: np.random.Generator, lo: int, mean: float, hi: int) -> int:
    """``lo`` + a geometric number of extra turns (mean ``mean - lo``), capped at ``hi``.

    Geometric: a constant chance of ending after each turn, the simplest model
    of when a user (or agent) stops.
    """
    extra_mean = mean - lo
    if extra_mean <= 0:
        return min(lo, hi)
    extra = int(rng.geometric(1.0 / (extra_mean + 1.0))) - 1  # numpy's geometric starts at 1
    return min(hi, lo + extra)


def zipf_weights(n: int, s: float) -> np.ndarray:
    """The popularity of ``n`` items, normalised: item k (from 1) weighs k^-s (Zipf-like)."""
    weights = np.arange(1, n + 1, dtype=np.float64) ** -s
    return weights / weights.sum()


def clip_turn(n_in: int, n_out: int, room: int) -> tuple[int, int]:
    """A first turn's input, then output, clipped to ``room >= 2`` tokens (it always fits)."""
    n_in = min(n_in, room - 1)
    return n_in, min(n_out, room - n_in)


def token_ids(rng: np.random.Generator, n: int, vocab: int) -> np.ndarray:
    """``n`` random int32 token ids in [0, vocab).

    floor(uniform * vocab) rather than ``rng.integers``: half the cost per call
    (this is the generators' hot path) and uniform to within 2^-53 * vocab.
    """
    return (rng.random(n) * vocab).astype(np.int32)
