"""Small example workloads shipped with twin, rebuilt from the generators.

``python -m twin.workloads.examples`` regenerates every file here; the test suite
checks that the shipped files equal a fresh build, so they never drift from
the generator code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from twin.limits import DEFAULT_MAX_CONTEXT
from twin.workloads.generators import get_generator

EXAMPLES_DIR = Path(__file__).resolve().parent
# The example a command runs when given no workload (twin simulate, twin plan).
DEFAULT_EXAMPLE = "chat"


@dataclass(frozen=True)
class Example:
    """One shipped workload: the generator call that builds it."""

    kind: str
    sessions: int
    session_rate: float
    seed: int
    max_context: int = DEFAULT_MAX_CONTEXT
    knobs: dict[str, str] = field(default_factory=dict)

    def build(self, out: Path) -> None:
        gen_cls = get_generator(self.kind)
        gen = gen_cls(gen_cls.parse_params(self.knobs))
        gen.write(out, self.sessions, self.session_rate, self.seed, self.max_context)


# Sizes keep each file well under 2 MB while holding enough sessions for the
# cache to matter.
EXAMPLES: dict[str, Example] = {
    "chat": Example("chat", sessions=60, session_rate=0.5, seed=1),
    "swebench": Example("swebench", sessions=6, session_rate=0.05, seed=2),
    "system-prompt": Example("system-prompt", sessions=300, session_rate=4.0, seed=3),
}


def example_path(name: str) -> Path:
    """Path of the shipped example ``name``."""
    return EXAMPLES_DIR / f"{name}.parquet"


def build_all(dest: Path = EXAMPLES_DIR) -> list[Path]:
    """(Re)build every example into ``dest``."""
    paths = []
    for name, example in EXAMPLES.items():
        path = dest / f"{name}.parquet"
        example.build(path)
        paths.append(path)
    return paths
