"""Reporting in one place: the paper's Section 5.2 tables and figures from a sweep, and the quickstart summary.

Modules, each owning one thing:

- :mod:`~plasticity.report.collect`: every read (records, ``metrics.csv``, per-block CSVs); a bad
  file becomes a ``(path, reason)`` problem, never an exception.
- :mod:`~plasticity.report.tables`: pure table and statistics functions, including the "best run"
  rule (:func:`~plasticity.report.tables.best_per_component`) that the report and the summary share.
- :mod:`~plasticity.report.claims`: the paper's claims C1..C5 tested on a sweep (``claims.csv``).
- :mod:`~plasticity.report.pretraining`: the ranking of the groups' plasticity through pretraining.
- :mod:`~plasticity.report.paper`: the paper's Table 6 as run records (``python -m plasticity.report.paper``).
- :mod:`~plasticity.report.figures`: every figure (plasticity analysis and report).
- :mod:`~plasticity.report.markdown`: the text of ``report.md``.
- :mod:`~plasticity.report.writer`: :func:`write_report`, which writes the report folder.
- :mod:`~plasticity.report.summary`: the quickstart table (``python -m plasticity.report.summary``).

``python launch.py task=report sweep_dir=<sweep_dir> [task.select=test] [task.optimizer=NAME]`` writes the report.
"""

from plasticity.report.collect import Sweep, check_sweep_dir, collect, read_metric
from plasticity.report.writer import ReportError, ReportResult, write_report

__all__ = ["ReportError", "ReportResult", "Sweep", "check_sweep_dir", "collect", "read_metric", "summary_table",
           "write_report"]


def __getattr__(name: str):
    """``summary_table`` loads on first use, so that ``python -m plasticity.report.summary`` does
    not find its module already imported by the package."""
    if name == "summary_table":
        from plasticity.report.summary import summary_table

        return summary_table
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
