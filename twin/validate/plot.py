"""The validation figure: per-request service times, and the TTFT distributions.

Left, predicted vs measured service time per request on log-log axes with
the y = x line and the target band: how far single predictions stray, and
whether the error depends on the request's size. Right, the measured and
predicted TTFT CDFs: what the percentile targets summarise.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def plot_validation(cols: dict[str, np.ndarray], path: str | Path, band: float) -> None:
    """Draw the figure from :func:`twin.validate.compare.join`'s columns; write a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    meas, pred = 1e3 * cols["measured_service_s"], 1e3 * cols["predicted_service_s"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.6))
    try:
        positive = np.concatenate((meas, pred))
        positive = positive[positive > 0]
        lo, hi = (positive.min() / 1.5, positive.max() * 1.5) if positive.size else (1e-3, 1e3)
        line = np.geomspace(lo, hi, 50)
        left.fill_between(
            line,
            line * (1 - band),
            line * (1 + band),
            color="tab:green",
            alpha=0.15,
            label=f"±{band:.0%}",
        )
        left.plot(line, line, color="tab:green", lw=1, label="y = x")
        left.scatter(meas, pred, s=10, alpha=0.7, color="tab:blue", label="request")
        left.set(
            xscale="log",
            yscale="log",
            xlim=(lo, hi),
            ylim=(lo, hi),
            xlabel="measured service time (ms)",
            ylabel="predicted service time (ms)",
            title="prefill service time per request",
        )
        left.legend(loc="upper left")
        for key, label, color in (
            ("measured_ttft_s", "measured", "tab:orange"),
            ("predicted_ttft_s", "predicted", "tab:blue"),
        ):
            x = np.sort(1e3 * cols[key])
            right.step(
                x, np.arange(1, x.size + 1) / max(x.size, 1), where="post", label=label, color=color
            )
        ttfts = np.concatenate((cols["measured_ttft_s"], cols["predicted_ttft_s"]))
        right.set(
            xscale="log" if (ttfts > 0).all() else "linear",
            xlabel="TTFT (ms)",
            ylabel="fraction of requests",
            ylim=(0, 1.02),
            title="TTFT CDF",
        )
        right.legend(loc="lower right")
        for axis in (left.xaxis, left.yaxis, right.xaxis):
            if axis.get_scale() == "log":  # plain 1, 2, 5, 10, ... labels that never overlap
                axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
                axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
                axis.set_minor_formatter(NullFormatter())
        fig.tight_layout()
        fig.savefig(path, format="png", dpi=120)
    finally:
        plt.close(fig)
