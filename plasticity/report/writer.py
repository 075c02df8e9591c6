"""``write_report``: the paper's Section 5.2 tables and figures from a sweep, written into one folder.

Reads every finetuning ``result.json`` under the sweep directory and writes into ``<sweep>/report/``:

- ``runs.csv``: every usable record, flattened, whatever its status.
- ``table6.csv`` / ``table6.md``: per dataset and group, the learning rate chosen by mean validation
  (``select="val"``) or test (``select="test"``, the paper's choice) accuracy over seeds, and the
  mean and sample std of the test accuracy (%) over seeds at that rate, plus an ``average`` row
  (Table 6).
- ``relative_gain.csv`` / ``.png``: improvement (%) over the linear probing (``head``) accuracy
  (Fig. 2, right).
- ``table1.csv``: mean decrease from MHA to each other group and its Wilcoxon signed-rank p-value
  over datasets (Table 1).
- ``accuracy.png`` (average accuracy with pooled standard error, Fig. 17), ``spread.png``
  (accuracy over learning rates and seeds, Figs. 4 left and 18), ``curves_<dataset>.png`` (``/``
  in the name becomes ``-``) (gradient norm and validation loss at the chosen learning rate and
  first seed, Fig. 4 middle and right).
- ``plasticity_vs_accuracy.csv``: Spearman correlation between per-group plasticity and accuracy
  where plasticity analysis runs exist.
- ``report.md``: all of the above, every run that is not ``done``, every missing run, and every
  file that could not be used (truncated ``result.json`` or ``metrics.csv``, non-numeric fields),
  by path. Such files enter no table; the rest of the report is still written.

Only ``done`` runs enter the numbers; the others are listed, never silently dropped. A missing,
empty or non-directory ``sweep_dir`` is a :class:`ReportError` before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from plasticity.report import figures
from plasticity.report.collect import Problem, Sweep, check_sweep_dir, collect, group_values, read_metrics
from plasticity.report.markdown import problems_md, rows_md, table6_md
from plasticity.report.tables import (
    AVERAGE,
    SELECT_KEYS,
    TABLE6_COLUMNS,
    Cells,
    done_cells,
    flatten,
    group_plasticity,
    missing_runs,
    plasticity_vs_accuracy,
    relative_gain,
    table1,
    table6,
)
from plasticity.runs.io import write_csv_atomic, write_text_atomic

__all__ = ["ReportError", "ReportResult", "write_report"]

IDENTITY_COLUMNS = ("run_dir", "task", "dataset", "model", "component", "optimizer", "lr", "seed", "status")
"""The first columns of ``runs.csv``; the other record fields follow in first-seen order."""


class ReportError(ValueError):
    """The report cannot be written (bad ``sweep_dir`` or ``select``); raised before any file is."""


@dataclass
class ReportResult:
    """What :func:`write_report` wrote.

    Attributes:
        path: The ``report.md`` file.
        runs: Number of usable finetuning records (any status).
        done: How many of them are ``done`` (those enter the tables).
        problems: ``(path, reason)`` of every file that could not be used, as listed in report.md.
    """

    path: Path
    runs: int
    done: int
    problems: list[Problem] = field(default_factory=list)


def write_report(sweep_dir: str | Path, select: str = "val", out_dir: str | Path | None = None) -> ReportResult:
    """Writes the Section 5.2 tables, figures and ``report.md`` for the finetuning runs under
    ``sweep_dir`` (see the module docstring).

    Args:
        sweep_dir: Directory searched recursively for ``result.json`` files (hidden folders skipped).
        select: ``"val"`` picks each (dataset, group)'s learning rate by mean validation accuracy
            over seeds; ``"test"`` by mean test accuracy (the paper's choice).
        out_dir: Where to write; ``<sweep_dir>/report`` by default.

    Returns:
        The path of ``report.md``, the run counts and the problems it lists.

    Raises:
        ReportError: ``select`` is not ``val``/``test``, or ``sweep_dir`` is unset, missing, a
            file, or holds no ``result.json`` (see :func:`check_sweep_dir`); nothing is written.
    """
    _check(sweep_dir, select)
    sweep = collect(sweep_dir)
    out = Path(out_dir) if out_dir is not None else sweep.root / "report"
    problems = list(sweep.problems)
    write_runs_csv(sweep.finetune, out / "runs.csv")
    cells = done_cells(sweep.finetune)
    body = warnings_md(sweep.finetune)
    if cells:
        body += _write_results(cells, sweep.analysis, select, out, problems)
    body.append(problems_md(sweep.finetune, missing_runs(sweep.finetune), problems))
    done = sum(r.get("status") == "done" for _, r in sweep.finetune)
    write_text_atomic(out / "report.md", "\n".join([header_md(sweep, done, select, problems)] + body))
    return ReportResult(out / "report.md", len(sweep.finetune), done, problems)


def _check(sweep_dir: str | Path | None, select: str) -> None:
    if select not in SELECT_KEYS:
        raise ReportError(f"select={select!r} is not one of {', '.join(SELECT_KEYS)}. Fix: select=val (learning "
                          f"rate by mean validation accuracy) or select=test (by mean test accuracy, the paper's).")
    problem = check_sweep_dir(sweep_dir)
    if problem:
        raise ReportError(problem)


def write_runs_csv(runs: list[tuple[Path, dict]], path: Path) -> None:
    """Every record, flattened (``params.mha``), identity columns first."""
    flat = [{"run_dir": str(d), **flatten(r)} for d, r in runs]
    columns = dict.fromkeys(IDENTITY_COLUMNS)
    for row in flat:
        columns.update(dict.fromkeys(row))
    write_csv_atomic(path, flat, list(columns))


def header_md(sweep: Sweep, done: int, select: str, problems: list[Problem]) -> str:
    """The title and the one-paragraph summary of the report."""
    text = (f"# Finetuning report: {sweep.root}\n\n{len(sweep.finetune)} finetuning runs ({done} done); learning "
            f"rate selected by mean {'validation' if select == 'val' else 'test'} accuracy over seeds. "
            f"All runs: [runs.csv](runs.csv).\n")
    if problems:
        text += f"\n**{len(problems)} file(s) could not be used** and enter no table: see Problems at the end.\n"
    return text


def warnings_md(runs: list[tuple[Path, dict]]) -> list[str]:
    """A warning per identity field (model, optimizer) whose several values are pooled in the tables."""
    sections = []
    for key, what in (("model", "models"), ("optimizer", "optimizers")):
        values = sorted({str(r.get(key)) for _, r in runs})
        if len(values) > 1:
            sections.append(f"**Warning:** several {what} are pooled in these tables: {', '.join(values)}.\n")
    return sections


def _write_results(cells: Cells, analysis: list[tuple[Path, dict]], select: str, out: Path,
                   problems: list[Problem]) -> list[str]:
    """Writes the tables and figures of the done runs; returns their report sections. Files found
    corrupt on the way are appended to ``problems``."""
    rows = table6(cells, select)
    sections = _table6(rows, out) + _relative_gain(rows, out) + _table1(rows, out)
    sections += _figures(cells, rows, out, problems)
    plasticity = _plasticity(analysis, problems)
    return sections + _plasticity_vs_accuracy(rows, plasticity, out)


def _table6(rows: list[dict], out: Path) -> list[str]:
    write_csv_atomic(out / "table6.csv", rows, TABLE6_COLUMNS)
    write_text_atomic(out / "table6.md", table6_md(rows))
    chosen = [r for r in rows if r["dataset"] != AVERAGE]
    return ["## Table 6: top-1 test accuracy (%), mean ± std over seeds\n\n" + table6_md(rows),
            "Chosen learning rates:\n\n" + rows_md(chosen, ["dataset", "group", "lr", "n_seeds"])]


def _relative_gain(rows: list[dict], out: Path) -> list[str]:
    gains = relative_gain(rows)
    if not gains:
        return []
    write_csv_atomic(out / "relative_gain.csv", gains, ("dataset", "group", "gain_pct"))
    figures.plot_relative_gain(gains, out / "relative_gain.png")
    avg = [g for g in gains if g["dataset"] == AVERAGE]
    return ["## Relative gain over linear probing (%)\n\n" + rows_md(avg, ["group", "gain_pct"])
            + "\n![relative gain](relative_gain.png)\n"]


def _table1(rows: list[dict], out: Path) -> list[str]:
    t1 = table1(rows)
    if not t1:
        return []
    write_csv_atomic(out / "table1.csv", t1, ("group", "mean_decrease", "p_value", "significant"))
    return ["## Table 1: decrease from MHA (points), Wilcoxon signed-rank over datasets\n\n"
            + rows_md(t1, ["group", "mean_decrease", "p_value", "significant", "n_datasets"])]


def _figures(cells: Cells, rows: list[dict], out: Path, problems: list[Problem]) -> list[str]:
    figures.plot_accuracy(rows, out / "accuracy.png")
    figures.plot_spread(cells, out / "spread.png")
    sections = ["## Figures\n\n![average accuracy](accuracy.png)\n\n![spread over lr and seeds](spread.png)\n"]
    for dataset in sorted({r["dataset"] for r in rows} - {AVERAGE}):
        name = f"curves_{dataset.replace('/', '-')}.png"  # fashion_mnist_c/snow -> one file, no folder
        if figures.plot_curves(curves(cells, rows, dataset, problems), dataset, out / name):
            sections.append(f"![{dataset} curves]({name})\n")
    return sections


def curves(cells: Cells, rows: list[dict], dataset: str, problems: list[Problem]) -> list[dict]:
    """Per group of ``dataset``: gradient norm and validation loss of the first seed at the chosen
    learning rate (the input of :func:`figures.plot_curves`); corrupt metrics files go to ``problems``."""
    found = []
    for row in (r for r in rows if r["dataset"] == dataset):
        group = row["group"]
        run_dir = cells[(dataset, group, row["lr"])][0]["run_dir"]
        series, bad = read_metrics(run_dir, [f"grad_norm/{group}", "val/loss"])
        problems.extend(p for p in bad if p not in problems)
        found.append({"group": group, "lr": row["lr"], "grad_norm": series[f"grad_norm/{group}"],
                      "val_loss": series["val/loss"]})
    return found


def _plasticity(analysis: list[tuple[Path, dict]], problems: list[Problem]) -> dict[str, dict[str, float]]:
    """Dataset -> group -> mean plasticity over the blocks of its analysis runs' ``plasticity.csv``."""
    datasets = sorted({r["dataset"] for _, r in analysis})
    return {d: group_plasticity(group_values(run_dir / "plasticity.csv", "mean", problems=problems)
                                for run_dir, r in analysis if r["dataset"] == d) for d in datasets}


def _plasticity_vs_accuracy(rows: list[dict], plasticity: dict[str, dict[str, float]], out: Path) -> list[str]:
    corr = plasticity_vs_accuracy(rows, plasticity)
    if not corr:
        return []
    write_csv_atomic(out / "plasticity_vs_accuracy.csv", corr, ("dataset", "spearman_rho", "p_value"))
    return ["## Plasticity vs accuracy (Spearman over ln1..fc2)\n\n"
            + rows_md(corr, ["dataset", "spearman_rho", "p_value", "n_groups"])]
