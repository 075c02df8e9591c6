"""``write_report``: the paper's Section 5.2 tables and figures from a sweep, written into one folder.

Reads every finetuning and linear-probe ``result.json`` under the sweep directory (and the linear
probes of the sibling ``linear_probe`` folder of a ``finetune`` sweep, see
:func:`~plasticity.report.collect.probe_dir`) and writes into ``<sweep>/report/``:

- ``runs.csv``: every usable record, flattened, whatever its status.
- ``table6.csv`` / ``table6.md``: per dataset and configuration (each ``component`` tag: the
  paper's groups, then combinations, LoRA, auto, the probe), its strategy, label and median
  trainable parameters, the learning rate chosen by mean validation (``select="val"``) or test
  (``select="test"``, the paper's choice) accuracy over seeds, and the mean and sample std of the
  test accuracy (%) over seeds at that rate, plus an ``average`` row (Table 6). The linear probe has
  no learning rate: its seeds are averaged.
- ``relative_gain.csv`` / ``.png``: improvement (%) over linear probing (Fig. 2, right): the
  logistic-regression probe (``task=linear_probe``) when the sweep has it, else SGD on the head;
  report.md says which.
- ``strategies.csv`` and ``pareto_<dataset>.png``: every configuration's accuracy against its
  trainable parameters, with the Pareto front (beyond the paper).
- ``table1.csv``: mean decrease from MHA to each other group and its Wilcoxon signed-rank p-value
  over datasets (Table 1).
- ``accuracy.png`` (average accuracy with pooled standard error, Fig. 17), ``spread.png``
  (accuracy over learning rates and seeds, Figs. 4 left and 18), ``curves_<dataset>.png`` (``/``
  in the name becomes ``-``) (gradient norm and validation loss at the chosen learning rate and
  first seed, Fig. 4 middle and right).
- ``plasticity_vs_accuracy.csv``: Spearman correlation between per-group plasticity and accuracy
  where plasticity analysis runs exist.
- ``claims.csv``: the paper's claims C1..C5 tested on the sweep, one verdict row per claim and its
  detail rows (:mod:`plasticity.report.claims`, which states every rule); the Claims section opens
  report.md.
- ``pretraining_ranking.csv`` and ``plasticity_during_pretraining.png``: from the
  ``plasticity_during_training.csv`` of the ``task=pretrain`` runs (in the sweep or the sibling
  ``pretrain`` folder of a ``finetune`` sweep), per measured step the ranking of the groups' P(f),
  its Kendall tau and distance to the paper's, and the curves (:mod:`plasticity.report.pretraining`).
- ``report.md``: the claims first, then all of the above, every run that is not ``done``, every missing run, and every
  file that could not be used (truncated ``result.json`` or ``metrics.csv``, non-numeric fields),
  by path. Such files enter no table; the rest of the report is still written.

Only ``done`` runs enter the numbers; the others are listed, never silently dropped. A missing,
empty or non-directory ``sweep_dir`` is a :class:`ReportError` before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from plasticity.components import is_probe, parse_tag
from plasticity.report import figures
from plasticity.report.claims import COLUMNS as CLAIM_COLUMNS
from plasticity.report.claims import chosen_runs, claim_inputs, edge_notes, evaluate_claims, screen
from plasticity.report.collect import (Problem, Sweep, analysis_plasticity, check_sweep_dir, claim_metrics, collect,
                                       read_during_training, read_metrics)
from plasticity.report.markdown import claims_md, fmt_params, probe_note, problems_md, rows_md, table6_md
from plasticity.report.pretraining import PAPER_TEXT, RANKING_COLUMNS, ranking_rows, sentence
from plasticity.report.tables import (AVERAGE, SELECT_KEYS, STRATEGIES_COLUMNS, TABLE6_COLUMNS, Cells, done_cells,
                                      missing_runs, plasticity_vs_accuracy, relative_gain, shared_seeds, strategies,
                                      table1, table6)
from plasticity.runs.checkpoints import DURING_TRAINING
from plasticity.runs.io import write_csv_atomic, write_text_atomic
from plasticity.runs.record import flatten

__all__ = ["ReportError", "ReportResult", "report_folder", "sweep_claims", "write_report"]

IDENTITY_COLUMNS = ("run_dir", "task", "dataset", "model", "component", "optimizer", "lr", "seed", "status")
"""The first columns of ``runs.csv``; the other record fields follow in first-seen order."""


def report_folder(optimizer: str | None = None) -> str:
    """The report's folder name in the sweep directory: ``report``, or ``report_<optimizer>`` for the
    runs of one optimizer (so the AdamW report never overwrites the whole sweep's). Also the
    ``${report_dir:}`` resolver of ``task=report``'s output folder."""
    return "report" if optimizer is None else f"report_{optimizer}"


class ReportError(ValueError):
    """The report cannot be written (bad ``sweep_dir`` or ``select``); raised before any file is."""


@dataclass
class ReportResult:
    """What :func:`write_report` wrote.

    Attributes:
        path: The ``report.md`` file.
        runs: Number of usable finetuning and linear-probe records (any status).
        done: How many of them are ``done`` (those enter the tables).
        problems: ``(path, reason)`` of every file that could not be used, as listed in report.md.
    """

    path: Path
    runs: int
    done: int
    problems: list[Problem] = field(default_factory=list)


def write_report(sweep_dir: str | Path, select: str = "val", out_dir: str | Path | None = None,
                 optimizer: str | None = None) -> ReportResult:
    """Writes the Section 5.2 tables, figures and ``report.md`` for the finetuning runs under
    ``sweep_dir`` (see the module docstring).

    Args:
        sweep_dir: Directory searched recursively for ``result.json`` files (hidden folders skipped).
        select: ``"val"`` picks each (dataset, configuration)'s learning rate by mean validation
            accuracy over seeds; ``"test"`` by mean test accuracy (the paper's choice).
        out_dir: Where to write; ``<sweep_dir>/report`` by default (``report_<optimizer>`` with
            ``optimizer``).
        optimizer: Only the finetuning runs of this optimizer (``sgd``, ``adamw``: the paper's grid
            and its AdamW ablation share a sweep folder); linear probes are always kept.

    Returns:
        The path of ``report.md``, the run counts and the problems it lists.

    Raises:
        ReportError: ``select`` is not ``val``/``test``, ``sweep_dir`` is unset, missing, a file,
            or holds no ``result.json`` (see :func:`check_sweep_dir`), or no finetuning run has
            ``optimizer``; nothing is written.
    """
    if select not in SELECT_KEYS:
        raise ReportError(f"select={select!r} is not one of {', '.join(SELECT_KEYS)}. Fix: select=val (learning "
                          f"rate by mean validation accuracy) or select=test (by mean test accuracy, the paper's).")
    if problem := check_sweep_dir(sweep_dir):
        raise ReportError(problem)
    sweep = collect(sweep_dir)
    if optimizer is not None:  # only its finetuning runs; a ReportError when none is left
        found = sorted({str(r.get("optimizer")) for _, r in sweep.finetune})
        sweep.finetune = [(d, r) for d, r in sweep.finetune if r.get("optimizer") == optimizer]
        if not sweep.finetune:
            raise ReportError(f"optimizer={optimizer!r}: no finetuning run under {sweep.root} used it (found: "
                              f"{', '.join(found) or 'none'}). Fix: one of those, or no optimizer filter.")
    out = Path(out_dir) if out_dir is not None else sweep.root / report_folder(optimizer)
    runs = sweep.finetune + sweep.probe
    flat = [{"run_dir": str(d), **flatten(r)} for d, r in runs]  # runs.csv: every record, identity columns first
    write_csv_atomic(out / "runs.csv", flat, dict.fromkeys([*IDENTITY_COLUMNS, *(k for row in flat for k in row)]))
    cells, plasticity, claims, problems = claims_of(sweep, select)
    write_csv_atomic(out / "claims.csv", claims, CLAIM_COLUMNS)
    body = [claims_md(claims)] + warnings_md(sweep.finetune) + shared_seeds_md(cells)
    if cells:
        body += _write_results(cells, table6(cells, select), plasticity, out, problems)
    body += _pretraining(sweep, out, problems)
    body.append(problems_md(runs, missing_runs(runs), problems))
    done = sum(r.get("status") == "done" for _, r in runs)
    # last and atomically: report.md appears once every file it links to is written
    write_text_atomic(out / "report.md", "\n".join([header_md(sweep, done, select, problems, optimizer)] + body))
    return ReportResult(out / "report.md", len(runs), done, problems)


def header_md(sweep: Sweep, done: int, select: str, problems: list[Problem], optimizer: str | None = None) -> str:
    """The title and the one-paragraph summary of the report."""
    probes = f" and {len(sweep.probe)} linear-probe records" if sweep.probe else ""
    only = f" (optimizer {optimizer} only)" if optimizer else ""
    text = (f"# Finetuning report: {sweep.root}\n\n{len(sweep.finetune)} finetuning runs{only}{probes} ({done} "
            f"done); learning rate selected by mean {'validation' if select == 'val' else 'test'} accuracy over "
            f"seeds. All runs: [runs.csv](runs.csv).\n")
    if sweep.probe_dir is not None:
        text += f"\nLinear probes read from {sweep.probe_dir}.\n"
    if problems:
        text += f"\n**{len(problems)} file(s) could not be used** and enter no table: see Problems at the end.\n"
    return text


def warnings_md(runs: list[tuple[Path, dict]]) -> list[str]:
    """A warning per identity field (model, optimizer) whose several values are pooled in the tables."""
    hints = {"model": "", "optimizer": " Report one at a time: `python launch.py task=report "
                                       "sweep_dir=<sweep_dir> task.optimizer=NAME`."}
    values = {key: sorted({str(r.get(key)) for _, r in runs}) for key in hints}
    return [f"**Warning:** several {key}s are pooled in these tables: {', '.join(values[key])}.{hint}\n"
            for key, hint in hints.items() if len(values[key]) > 1]


def shared_seeds_md(cells: Cells) -> list[str]:
    """A warning listing the cells where several records share a seed (they are averaged as seeds)."""
    shared = shared_seeds(cells)
    if not shared:
        return []
    rows = [{**c, "seeds": ", ".join(map(str, c["seeds"]))} for c in shared]
    return ["**Warning:** several records share a seed in these cells (e.g. linear probes on other features, or "
            "several models) and are averaged as if they were seeds:\n\n"
            + rows_md(rows, ["dataset", "group", "lr", "seeds"])]


def _write_results(cells: Cells, rows: list[dict], plasticity: dict[str, dict[str, float]], out: Path,
                   problems: list[Problem]) -> list[str]:
    """Writes the tables and figures of the done runs (``rows``: their Table 6); returns their report
    sections. Files found corrupt on the way are appended to ``problems``."""
    sections = _table6(rows, out) + _relative_gain(rows, out)
    sections += _csv_section(out, "table1.csv", table1(rows),
                             "## Table 1: decrease from MHA (points), Wilcoxon signed-rank over datasets\n\n",
                             ["group", "mean_decrease", "p_value", "significant", "n_datasets"])
    sections += _strategies(rows, out) + _figures(cells, rows, out, problems)
    return sections + _csv_section(out, "plasticity_vs_accuracy.csv", plasticity_vs_accuracy(rows, plasticity),
                                   "## Plasticity vs accuracy (Spearman over ln1..fc2)\n\n",
                                   ["dataset", "spearman_rho", "p_value", "n_groups"])


def _csv_section(out: Path, name: str, rows: list[dict], heading: str, shown: list[str]) -> list[str]:
    """Writes ``rows`` as ``out/name`` (the ``shown`` columns but the last, a count); returns their section (none
    without rows)."""
    if not rows:
        return []
    write_csv_atomic(out / name, rows, shown[:-1])
    return [heading + rows_md(rows, shown)]


def claims_of(sweep: Sweep, select: str = "val") -> tuple[Cells, dict[str, dict], list[dict], list[Problem]]:
    """The done cells of the sweep's finetuning and probe records, the analyses' P(f), the rows of ``claims.csv``
    and the files that could not be used (the sweep's, then corrupt CSVs met on the way). The claims compare the
    screened cells (one grid, no target stuck at the majority class), their Table 6, the analyses' P(f) and the
    chosen runs' metrics."""
    problems = list(sweep.problems)
    cells = done_cells(sweep.finetune + sweep.probe)
    plasticity = analysis_plasticity(sweep.analysis, problems)  # before the metrics: problems in this order
    kept, notes = screen(cells)
    rows = table6(kept, select) if kept else []
    left = {d for d, _, _ in cells} - {d for d, _, _ in kept}  # stuck at the majority class: out of P(f)'s too
    metrics = claim_metrics(chosen_runs(rows, kept), problems)
    inputs = claim_inputs(rows, kept, {t: p for t, p in plasticity.items() if t not in left}, metrics)
    inputs.notes = notes + edge_notes(rows, kept)
    return cells, plasticity, evaluate_claims(inputs), problems


def sweep_claims(sweep_dir: str | Path, select: str = "val") -> tuple[list[dict], list[Problem]]:
    """The rows of ``claims.csv`` for the sweep under ``sweep_dir`` (as :func:`write_report` computes
    them, writing nothing) and the files that could not be used."""
    return claims_of(collect(sweep_dir), select)[2:]


def _pretraining(sweep: Sweep, out: Path, problems: list[Problem]) -> list[str]:
    """Writes ``pretraining_ranking.csv`` and ``plasticity_during_pretraining.png`` from the
    ``plasticity_during_training.csv`` of the pretraining runs (of the sweep's models, when it has
    finetuning runs); returns the "Plasticity through pretraining" section (none without
    pretraining runs)."""
    models = {r["model"] for _, r in sweep.finetune}
    runs = [(d, r) for d, r in sweep.pretrain if not models or r["model"] in models]
    if not runs:
        return []
    heading = "## Plasticity through pretraining\n\n"
    panels, rows, lines = [], [], []
    for run_dir, record in runs:
        curves = read_during_training(run_dir / DURING_TRAINING, problems)
        if curves:
            mine = ranking_rows(curves, str(run_dir))
            rows += mine
            short = run_dir.relative_to(sweep.root) if run_dir.is_relative_to(sweep.root) else run_dir
            panels.append((f"{record['dataset']} / {record['model']}: {short}", curves))
            lines.append(f"- {run_dir}: {sentence(mine)}.\n")
    if not rows:
        return [heading + f"{len(runs)} pretraining run(s), none with {DURING_TRAINING} (pretrain with "
                "callbacks=plasticity to measure P(f) of every group from the random init).\n"]
    write_csv_atomic(out / "pretraining_ranking.csv", rows, RANKING_COLUMNS)
    figures.plot_during_training(panels, out / "plasticity_during_pretraining.png")
    return [heading + "P(f) of each group (mean over blocks) against the pretraining step (0: random init); per "
            f"step the ranking, its Kendall tau against the paper's {PAPER_TEXT} and the Kendall "
            "distance (pairs of groups out of the paper's order: the rank swaps left). All: "
            "[pretraining_ranking.csv](pretraining_ranking.csv).\n\n" + "".join(lines) + "\n"
            + rows_md(rows, ["run", "step", "ranking", "kendall_tau", "kendall_distance", "matches_paper"])
            + "\n![plasticity during pretraining](plasticity_during_pretraining.png)\n"]


def _table6(rows: list[dict], out: Path) -> list[str]:
    write_csv_atomic(out / "table6.csv", rows, TABLE6_COLUMNS)
    note = probe_note(r["group"] for r in rows)
    write_text_atomic(out / "table6.md", table6_md(rows) + f"\n{note}\n")
    chosen = [{**r, "params": fmt_params(r["params"])} for r in rows if r["dataset"] != AVERAGE]
    return ["## Table 6: top-1 test accuracy (%), mean ± std over seeds (one seed: the mean)\n\n" + table6_md(rows)
            + "\nColumns: each configuration with its median trainable parameters; " + note + ".\n",
            "Chosen learning rates (none for the linear probe: its seeds are averaged):\n\n"
            + rows_md(chosen, ["dataset", "group", "strategy", "params", "lr", "n_seeds"])]


def _relative_gain(rows: list[dict], out: Path) -> list[str]:
    gains = relative_gain(rows)
    if not gains:
        return []
    write_csv_atomic(out / "relative_gain.csv", gains, ("dataset", "group", "baseline", "gain_pct"))
    figures.plot_relative_gain(gains, out / "relative_gain.png")
    baseline = gains[0]["baseline"]
    lacking = sorted({r["dataset"] for r in rows if r["dataset"] != AVERAGE}
                     - {r["dataset"] for r in rows if r["group"] == baseline})
    text = f"## Relative gain over linear probing (%)\n\n{probe_note([baseline])}.\n"
    if lacking:
        text += f"\nNo {baseline} records, hence no gain, for: {', '.join(lacking)}.\n"
    labels = {r["group"]: r["label"] for r in rows}
    avg = [{**g, "label": labels.get(g["group"], g["group"])} for g in gains if g["dataset"] == AVERAGE]
    return [text + "\n" + rows_md(avg, ["group", "label", "gain_pct"]) + "\n![relative gain](relative_gain.png)\n"]


def _strategies(rows: list[dict], out: Path) -> list[str]:
    points = strategies(rows)
    write_csv_atomic(out / "strategies.csv", points, STRATEGIES_COLUMNS)
    shown = [{**p, "trainable_params": fmt_params(p["trainable_params"]), "pareto": "yes" if p["pareto"] else ""}
             for p in points]
    text = ("## Strategies: test accuracy against trainable parameters\n\nEvery configuration at its chosen "
            "learning rate (mean ± std over seeds, %), against its trainable parameters; on the Pareto front when no "
            "other has at least its accuracy with at most its parameters. All: [strategies.csv](strategies.csv).\n\n"
            + rows_md(shown, ["dataset", "label", "strategy", "trainable_params", "lr", "mean", "std", "n_seeds",
                              "pareto"]))
    for dataset in sorted({p["dataset"] for p in points}):
        name = f"pareto_{dataset.replace('/', '-')}.png"
        if figures.save(figures.pareto_figure([p for p in points if p["dataset"] == dataset], dataset), out / name):
            text += f"\n![{dataset}: accuracy against trainable parameters]({name})\n"
    return [text]


def _figures(cells: Cells, rows: list[dict], out: Path, problems: list[Problem]) -> list[str]:
    figures.save(figures.accuracy_figure(rows), out / "accuracy.png")
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
    for row in (r for r in rows if r["dataset"] == dataset and not is_probe(r["group"])):  # probes log no curves
        record = cells[(dataset, row["group"], row["lr"])][0]
        columns = grad_columns(row["group"], record)
        series = read_metrics(record["run_dir"], columns + ["val/loss"], problems)[0]
        found.append({"group": row["group"], "label": row["label"], "lr": row["lr"],
                      "grad_norm": combined_grad_norm([series[c] for c in columns]), "val_loss": series["val/loss"]})
    return found


def grad_columns(tag: str, record: dict) -> list[str]:
    """The ``metrics.csv`` columns of a configuration's gradient norm: ``grad_norm/<tag>`` (a single
    group), then one per trained group (a combination logs ``grad_norm/mha`` and ``grad_norm/fc1``;
    ``auto`` the groups of its ``selected`` units, ``mha`` or ``fc1@3``)."""
    parts = parse_tag(tag)
    groups = parts["groups"] if parts else []
    if groups == ["auto"]:
        units = record.get("selected") or []
        groups = [str(u[0] if isinstance(u, (list, tuple)) else u).split("@")[0] for u in units]
    return list(dict.fromkeys([f"grad_norm/{tag}"] + [f"grad_norm/{g}" for g in groups]))


def combined_grad_norm(series: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The first series with points (``grad_norm/<tag>``) if it has any; else the per-group norms
    combined as sqrt(sum of squares) when they were logged at the same steps; else empty."""
    first, rest = series[0], series[1:]
    if len(first[0]) or not rest:
        return first
    steps = rest[0][0]
    if not len(steps) or any(len(s[0]) != len(steps) or not np.array_equal(s[0], steps) for s in rest):
        return np.asarray([]), np.asarray([])
    return steps, np.sqrt(sum(np.asarray(v, dtype=float) ** 2 for _, v in rest))
