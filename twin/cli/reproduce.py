"""``twin reproduce PAPER``: rerun a paper's experiments; its numbers beside the twin's."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from twin.cli import checks
from twin.cli.common import (
    ExecutorOption,
    JobsOption,
    RayAddressOption,
    command_line,
    console,
    err_console,
    progress_bar,
)
from twin.errors import TwinError
from twin.reports.reproduce import PAPERS, get_paper


def reproduce_cmd(
    paper: str = typer.Argument(..., help=f"Paper to reproduce: {', '.join(PAPERS)}."),
    out: Path = typer.Option(..., "--out", "-o", help="Output folder (reruns resume in it)."),
    quick: bool = typer.Option(
        False, "--quick", help="Smaller traces and fewer cache sizes: minutes, not the full run."
    ),
    jobs: JobsOption = 1,
    executor: ExecutorOption = "local",
    ray_address: RayAddressOption = None,
) -> None:
    """Rerun a paper's experiments on workloads the twin generates to its descriptions, and
    write OUT/report.html (self-contained), OUT/report.md and OUT/claims.json: for each
    claim, the paper's number, the twin's, and whether it reproduces (yes / qualitatively
    / no), with the exact command of every point.

    Finished points are kept in OUT (replays.json, sim/*/results.parquet), so rerunning
    the same command computes only what is missing.

    The full form (no --quick; tens of minutes on two cores) is what
    docs/reproduce/PAPER/ holds; $TWIN_MARCONI_ARTIFACT, set to a checkout of the
    authors' artifact, adds its hit rates beside the twin's.

    Example:

      twin reproduce marconi --quick --out repro-quick --jobs 2

      twin reproduce jenga --out repro-jenga
    """
    from twin.reports.reproduce.runner import plan_size, reproduce  # the runs: numpy, the engine

    get_paper(paper)  # an unknown name fails before any work
    if executor not in ("local", "ray"):
        raise TwinError(f"--executor {executor!r}: choose from local, ray")
    if ray_address is not None and executor != "ray":
        raise TwinError("--ray-address: only with --executor ray")
    checks.out_dir("--out", out)
    checks.claim_out("--out", out)
    with progress_bar(f"reproducing {paper}", plan_size(paper, quick)) as advance:
        claims, files = reproduce(
            paper,
            out,
            quick=quick,
            jobs=jobs,
            executor=executor,
            ray_address=ray_address,
            command=command_line("reproduce", paper),
            progress=advance,
        )
    table = Table(title=f"{paper}: the paper's claims in the twin", title_justify="left")
    for col in ("#", "claim", "paper", "twin", "reproduces?"):
        table.add_column(col)
    for c in claims:
        table.add_row(str(c.number), c.title, c.paper, c.twin, c.verdict)
    console.print(table)
    err_console.print(
        f"finished points kept in {out} (a rerun computes only what is missing)", highlight=False
    )
    console.print("wrote " + ", ".join(str(f) for f in files), highlight=False)
