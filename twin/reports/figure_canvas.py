"""The canvas every report figure is drawn on: matplotlib (Agg) to inline SVG text.

Text stays text, element ids are salted so files are identical run to run, and
:func:`png_figures` switches the output to base64 PNG (``reports.png``).
"""

from __future__ import annotations

import base64
import contextlib
import io
from collections.abc import Iterator
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on servers; must precede pyplot
import matplotlib.pyplot as plt

# Text stays text (smaller files, selectable labels) and the hash salt makes
# element ids, hence the files, identical from run to run.
matplotlib.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "twin-report"})


# "png" while :func:`png_figures` is active: each figure comes back as base64 PNG.
_FORMAT = ["svg"]


@contextlib.contextmanager
def png_figures() -> Iterator[None]:
    """Within this block every ``fig_*`` function returns a base64 PNG instead of SVG."""
    _FORMAT.append("png")
    try:
        yield
    finally:
        _FORMAT.pop()


def figure_text(fig: Any) -> str:
    """``fig`` as inline ``<svg>`` text (base64 PNG inside :func:`png_figures`); closes it."""
    if _FORMAT[-1] == "png":
        raw = io.BytesIO()
        fig.savefig(raw, format="png", dpi=120, bbox_inches="tight", metadata={"Software": None})
        plt.close(fig)
        return base64.b64encode(raw.getvalue()).decode()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    # Inline SVG in HTML needs no XML prolog or DOCTYPE.
    return text[text.index("<svg") :]


__all__ = ["figure_text", "plt", "png_figures"]
