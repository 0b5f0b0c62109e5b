"""``twin reproduce PAPER``: rerun a paper's experiments with the twin, its numbers beside ours.

One small module per paper, found by name in :data:`PAPERS`. A paper module
(:class:`reports.reproduce.base.Paper`) names its workloads, the replays and
simulations to run on them, and how its claims are judged; the runner
(:mod:`reports.reproduce.runner`) executes any paper's plan and
:mod:`reports.reproduce.render` writes the report. Adding a paper never edits
the runner or the renderer.
"""

from __future__ import annotations

from twin.errors import TwinError
from twin.reports.reproduce.base import Paper
from twin.reports.reproduce.jenga import Jenga
from twin.reports.reproduce.marconi import Marconi
from twin.reports.reproduce.prompt_cache import PromptCache

PAPERS: dict[str, Paper] = {p.name: p for p in (Marconi(), PromptCache(), Jenga())}


def get_paper(name: str) -> Paper:
    """The paper registered as ``name``; a ``TwinError`` listing the available ones otherwise."""
    try:
        return PAPERS[name]
    except KeyError:
        raise TwinError(f"unknown paper {name!r}; available: {', '.join(PAPERS)}") from None


__all__ = ["PAPERS", "get_paper"]
