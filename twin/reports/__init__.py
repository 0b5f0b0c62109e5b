"""Capacity-planning sweeps and their HTML/Markdown reports.

Data flows one way: :mod:`reports.sweep` runs one engine simulation per grid
point and keeps a resumable ``results.parquet``; :mod:`reports.analysis`
aggregates seeds and picks the smallest cache meeting an SLO;
:mod:`reports.perrequest` digests each point's requests (TTFT quantiles, hit
rate by input length); :mod:`reports.load` finds the P95 knee and the maximum
sustainable rate; :mod:`reports.render_figures` draws the figures and
:mod:`reports.render` writes ``report.html`` and ``report.md``.
"""
