"""``twin reproduce PAPER``: rerun a paper's experiments with the twin, its numbers beside ours.

One small module per paper, found by name in :data:`PAPERS`. A paper module
(:class:`reports.reproduce.base.Paper`) names its workloads, the replays and
simulations to run on them, and how its claims are judged; the runner
(:mod:`reports.reproduce.runner`) executes any paper's plan and
:mod:`reports.reproduce.render` writes the report. Adding a paper never edits
the runner or the renderer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twin.errors import lookup
from twin.exports import Registry

if TYPE_CHECKING:
    from twin.reports.reproduce.base import Paper

# Each paper by its ``name``, imported when looked up (``twin reproduce --help`` lists the
# names without importing the papers' runs: issue 33).
PAPERS: Registry[type[Paper]] = Registry(
    {
        "marconi": "twin.reports.reproduce.marconi:Marconi",
        "prompt-cache": "twin.reports.reproduce.prompt_cache:PromptCache",
        "jenga": "twin.reports.reproduce.jenga:Jenga",
    }
)


def get_paper(name: str) -> Paper:
    """The paper called ``name`` (a fresh one), or a ``TwinError`` listing the papers."""
    return lookup(PAPERS, name, "paper", "available")()


__all__ = ["PAPERS", "get_paper"]
