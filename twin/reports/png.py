"""One figure of a capacity report as a PNG (for a README or a slide), from its results.

    python -m twin.reports.png DIR FIGURE OUT.png

``DIR`` holds a ``twin report capacity`` results table; ``FIGURE`` is the stem
of one of the report's figures (``fig-ttft-vs-rate``, ``fig-hit-vs-cache-2``,
... as in ``DIR/report.md``). The figure is drawn by the report's own code.
"""

from __future__ import annotations

import base64
import sys
from pathlib import Path

from twin.atomic import atomic_path
from twin.errors import TwinError
from twin.reports.analysis import aggregate, by_gpu_count
from twin.reports.capacity import split_infeasible
from twin.reports.results_table import read_results


def report_png(results_dir: str | Path, stem: str, out: str | Path) -> Path:
    """Write figure ``stem`` of the report on ``results_dir`` to ``out`` (PNG)."""
    from twin.reports.figure_canvas import png_figures
    from twin.reports.render_figures import figures

    rows, _ = split_infeasible(read_results(Path(results_dir)))
    if not rows:
        raise TwinError(f"{results_dir}: no results to draw")
    with png_figures():
        figs = {name: img for name, _, img in figures(by_gpu_count(aggregate(rows)), None, rows)}
    if stem not in figs:
        raise TwinError(f"figure {stem!r}: the report has {', '.join(sorted(figs))}")
    with atomic_path(Path(out)) as tmp:
        Path(tmp).write_bytes(base64.b64decode(figs[stem]))
    return Path(out)


if __name__ == "__main__":  # pragma: no cover - a documented one-liner
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    print(report_png(*sys.argv[1:]))
