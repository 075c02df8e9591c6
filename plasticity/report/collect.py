"""Reading a sweep for the report and the summary: run records, training curves, per-block CSVs.

This module owns every file read of :mod:`plasticity.report`, and none of them raises on a bad
file: a file that cannot be used (unreadable, empty, truncated or non-object JSON; a record
without its identity fields or with non-numeric values; a corrupt CSV) becomes a ``(path, reason)``
problem that the caller lists, and the rest of the sweep is still used.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np

from plasticity.components import GROUPS, probe_tag
from plasticity.report.tables import block_means
from plasticity.runs.checkpoints import metrics_files
from plasticity.runs.io import read_record  # re-exported: the report's reader of a record
from plasticity.runs.record import RESULT_FILE, visible_files

__all__ = ["Problem", "Sweep", "analysis_plasticity", "check_sweep_dir", "claim_metrics", "collect", "group_values",
           "pretrain_dir", "probe_dir", "read_during_training", "read_metric", "read_metrics", "read_record",
           "record_problem"]

Problem = tuple[str, str]
"""A file that could not be used: ``(path, reason)``."""

IDENTITY = {"finetune": ("dataset", "model", "component", "lr", "seed", "status"),
            "linear_probe": ("dataset", "model", "component", "seed", "status"),
            "plasticity": ("dataset", "model"),
            "pretrain": ("dataset", "model")}
"""Fields a record of each task the report reads must have (records of other tasks are ignored). A
linear probe (logistic regression on frozen features) has no learning rate: its ``lr`` is null."""
PROBE_TASK = "linear_probe"
TEXT_FIELDS = ("dataset", "component", "status")
ACCURACIES = ("best_val_acc", "test_acc")
PRETRAIN_TASK = "pretrain"
SWEEP_DIR_FIX = "Fix: sweep_dir=<a directory with run records, e.g. outputs/finetune/cifar10>."
Series = tuple[np.ndarray, np.ndarray]
"""(steps, values) of one logged metric."""


@dataclass
class Sweep:
    """The usable records under a sweep directory and the files that could not be used.

    Attributes:
        root: The sweep directory.
        finetune: ``(run_dir, record)`` of every valid finetuning record (any status), sorted by path.
        probe: ``(run_dir, record)`` of every valid linear-probe record (``task=linear_probe``).
        analysis: ``(run_dir, record)`` of every valid plasticity analysis record.
        pretrain: ``(run_dir, record)`` of every valid pretraining record (``task=pretrain``), also
            from the sibling ``pretrain`` folder of a ``finetune`` sweep (see :func:`pretrain_dir`).
        problems: ``(path, reason)`` of every ``result.json`` that could not be used.
        probe_dir: The sibling ``linear_probe`` folder whose probe records were read too (see
            :func:`probe_dir`), or None.
    """

    root: Path
    finetune: list[tuple[Path, dict]] = field(default_factory=list)
    probe: list[tuple[Path, dict]] = field(default_factory=list)
    analysis: list[tuple[Path, dict]] = field(default_factory=list)
    pretrain: list[tuple[Path, dict]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    probe_dir: Path | None = None


def check_sweep_dir(path: str | Path | None, runs: Callable[[Path], Iterator[Path]] | None = None,
                    no_runs: str = f"no {RESULT_FILE} under it (no runs yet?)") -> str | None:
    """The problem with ``path`` as a sweep directory, or None when it is usable.

    Args:
        path: The ``sweep_dir`` given.
        runs: The run files under a directory (default: its ``result.json`` files).
        no_runs: What the message says when there is none.

    Returns:
        A message naming the key, the value and the fix when ``path`` is unset, missing, not a
        directory, or holds no run; None otherwise.
    """
    if path is None or str(path) == "":
        return f"sweep_dir is not set. {SWEEP_DIR_FIX}"
    shown, path = f"sweep_dir={str(path)!r}", Path(path)
    if not path.exists():
        return f"{shown} does not exist. {SWEEP_DIR_FIX}"
    if not path.is_dir():
        return f"{shown} is a file, not a directory. {SWEEP_DIR_FIX}"
    if next(runs(path) if runs else visible_files(path, RESULT_FILE), None) is None:
        return f"{shown} has {no_runs}. {SWEEP_DIR_FIX}"
    return None


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def record_problem(record: dict) -> str | None:
    """Why the report cannot use ``record``, or None: no ``task``, a missing identity field, a
    non-text name, a non-numeric ``lr``/``seed``, or a done run's accuracy not a number in [0, 1]."""
    task = record.get("task")
    if not isinstance(task, str):
        return f"task={task!r}: not a run record of a known task"
    fields = IDENTITY.get(task, ())
    missing = [k for k in fields if record.get(k) is None]
    if missing:
        return f"missing identity field(s): {', '.join(missing)}"
    for key in (k for k in TEXT_FIELDS if k in fields):
        if not isinstance(record[key], str):
            return f"{key}={record[key]!r} is not a string"
    return _finetune_problem(record) if task in ("finetune", PROBE_TASK) else None


def _finetune_problem(record: dict) -> str | None:
    """A finetuning record needs a numeric lr and seed; a linear probe a numeric seed and an lr
    that is null or numeric (its validation accuracy may be null). A done run's accuracies are
    fractions."""
    probe = record["task"] == PROBE_TASK
    for key in ("seed",) if probe else ("lr", "seed"):
        if not _is_number(record[key]):
            return f"{key}={record[key]!r} is not a number"
    if probe and record.get("lr") is not None and not _is_number(record["lr"]):
        return f"lr={record['lr']!r} is neither null nor a number"
    for key in ACCURACIES if record["status"] == "done" else ():
        value = record.get(key)
        if not (_is_number(value) and 0.0 <= value <= 1.0) and not (probe and key == "best_val_acc" and value is None):
            return f"{key}={value!r} is not a number in [0, 1] (status done)"
    return None


def probe_dir(sweep_dir: str | Path) -> Path | None:
    """Where the linear probes of a finetuning sweep live: ``<out>/finetune/<rest>`` ->
    ``<out>/linear_probe/<rest>``, when that folder exists (see :func:`_beside_finetune`)."""
    return _beside_finetune(sweep_dir, lambda rest: Path(PROBE_TASK, *rest))


def pretrain_dir(sweep_dir: str | Path) -> Path | None:
    """Where the pretraining runs of a finetuning sweep live: ``<out>/finetune/<rest>`` ->
    ``<out>/pretrain`` (all of it: the pretraining dataset is not the target's), when that folder
    exists (see :func:`_beside_finetune`)."""
    return _beside_finetune(sweep_dir, lambda rest: Path(PRETRAIN_TASK))


def _beside_finetune(sweep_dir: str | Path, sibling: Callable[[tuple[str, ...]], Path]) -> Path | None:
    """``<out>/<sibling(rest)>`` for a sweep ``<out>/finetune/<rest>`` (its last ``finetune`` folder), when it
    is a folder; None otherwise (a sweep directory above ``finetune``, e.g. ``outputs``, holds both)."""
    parts = Path(sweep_dir).parts
    if "finetune" not in parts:
        return None
    i = len(parts) - 1 - parts[::-1].index("finetune")
    path = Path(*parts[:i]) / sibling(parts[i + 1:])
    return path if path.is_dir() else None


def collect(sweep_dir: str | Path, probes: bool = True) -> Sweep:
    """Reads every ``result.json`` under ``sweep_dir`` (hidden folders skipped); never raises.

    Finetuning, linear-probe and plasticity analysis records go to :attr:`Sweep.finetune`,
    :attr:`Sweep.probe` and :attr:`Sweep.analysis`, records of other tasks are ignored, and every
    file that cannot be used (see :func:`read_record` and :func:`record_problem`) goes to
    :attr:`Sweep.problems`. Pretraining records go to :attr:`Sweep.pretrain`, also those of the
    sibling ``pretrain`` folder (:func:`pretrain_dir`). With ``probes``, the linear-probe records
    of the sibling ``linear_probe`` folder (:func:`probe_dir`) are read too.
    """
    sweep = Sweep(Path(sweep_dir))
    sweep.probe_dir = probe_dir(sweep.root) if probes else None
    lists = {"finetune": sweep.finetune, PROBE_TASK: sweep.probe, "plasticity": sweep.analysis,
             PRETRAIN_TASK: sweep.pretrain}
    # every task from the sweep, then the probes and the pretraining runs of its sibling folders
    for root, tasks in ((sweep.root, tuple(lists)), (sweep.probe_dir, (PROBE_TASK,)),
                        (pretrain_dir(sweep.root), (PRETRAIN_TASK,))):
        for path in sorted(visible_files(root, RESULT_FILE)) if root is not None else ():
            record, problem = read_record(path)
            if problem := problem or record_problem(record):
                sweep.problems.append((str(path), problem))
            elif record["task"] in tasks:
                # a linear probe's configuration from its features and pool (:func:`plasticity.components.probe_tag`;
                # records written before the tag held them say ``probe`` whatever their features)
                if record["task"] == PROBE_TASK and "features" in record:
                    record = {**record, "component": probe_tag(record["features"], record.get("pool"))}
                lists[record["task"]].append((path.parent, record))
    return sweep


def _number(text: str, column: str, line: int) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"line {line}: {column}={text!r} is not a number") from None


def _table(path: Path) -> tuple[list[str], Iterator[tuple[int, list[str]]]]:
    """A CSV's header and its (line number, row) pairs, blank lines skipped; raises ValueError on an
    empty file or a row whose field count differs from the header's (a truncated or corrupt file)."""
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            raise ValueError("empty file")
        rows = [(reader.line_num, row) for row in reader if row]
    return header, _same_length(header, rows)


def _same_length(header: list[str], rows: list[tuple[int, list[str]]]) -> Iterator[tuple[int, list[str]]]:
    for line, row in rows:  # checked as read: a bad cell above a short row is named first
        if len(row) != len(header):
            raise ValueError(f"line {line}: field count differs from the header's (truncated?)")
        yield line, row


def _rows(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, row as a dict: a repeated name, its last column) of a CSV (:func:`_table`)."""
    header, rows = _table(path)
    return ((line, dict(zip(header, row))) for line, row in rows)


def _metric_points(path: Path, columns: Iterable[str]) -> dict[str, tuple[list[float], list[float]]]:
    """(steps, values) per column where both cells are set; the checks and errors of :func:`_table`.

    Reads rows as lists by the header's indices, not as dicts (:func:`_rows`): the report reads every
    chosen run's ``metrics.csv``, thousands in a large sweep, and a dict per row cost 3x the time.
    """
    points: dict[str, tuple[list[float], list[float]]] = {c: ([], []) for c in columns}
    header, rows = _table(path)
    index = {name: i for i, name in enumerate(header)}  # a repeated name: its last column, as in _rows
    step_at = index.get("step")
    wanted = [(index[c], c, points[c]) for c in points if c in index]
    for line, row in rows:
        step = None if step_at is None else row[step_at]
        for i, column, (steps, values) in wanted if step else ():
            if row[i] != "":
                steps.append(_number(step, "step", line))
                values.append(_number(row[i], column, line))
    return points


CSV_ERRORS = (OSError, UnicodeDecodeError, csv.Error, ValueError)


def read_metrics(run_dir: str | Path, columns: Iterable[str],
                 problems: list[Problem] | None = None) -> tuple[dict[str, Series], list[Problem]]:
    """Per column, (steps, values) from the run's ``metrics.csv`` and the earlier
    ``metrics.part*.csv`` of resumed runs, skipping rows where it was not logged (empty arrays when
    absent); and the files skipped as corrupt (truncated rows, non-numeric cells), as problems, also
    appended to ``problems`` when given (once each).

    A resumed run logs again the steps between its checkpoint and the interruption: a step's value
    is the latest file's (the same number, the resume being exact), each step once, in step order.
    """
    columns = list(columns)
    points: dict[str, dict[float, float]] = {c: {} for c in columns}
    found: list[Problem] = []
    for path in (p for p in metrics_files(run_dir) if p.is_file()):  # the interrupted parts in order, then the last
        try:
            read = _metric_points(path, columns)
        except CSV_ERRORS as err:
            _corrupt(path, err, found)
            continue
        for column, (steps, values) in read.items():
            points[column].update(zip(steps, values))
    if problems is not None:
        problems.extend(p for p in found if p not in problems)
    return {c: (np.asarray(sorted(p)), np.asarray([p[s] for s in sorted(p)])) for c, p in points.items()}, found


def read_metric(run_dir: str | Path, column: str, problems: list[Problem] | None = None) -> Series:
    """(steps, values) of one column (see :func:`read_metrics`); corrupt files are skipped and
    appended to ``problems`` when given."""
    return read_metrics(run_dir, [column], problems)[0][column]


def claim_metrics(chosen: dict[tuple[str, str], list[dict]],
                  problems: list[Problem]) -> dict[tuple[str, str], list[dict[str, Series]]]:
    """What the claims read of the chosen runs (:func:`plasticity.report.claims.chosen_runs`): per
    (target, group), per run, ``grad_norm/<group>`` and every ``plasticity/<g>`` (:func:`read_metrics`);
    corrupt files go to ``problems`` (once each)."""
    plasticity = [f"plasticity/{g}" for g in GROUPS]
    return {(target, group): [read_metrics(r["run_dir"], [f"grad_norm/{group}", *plasticity], problems)[0]
                              for r in records] for (target, group), records in chosen.items()}


def analysis_plasticity(analysis: list[tuple[Path, dict]], problems: list[Problem]) -> dict[str, dict[str, float]]:
    """Target -> group -> P(f): the mean over blocks of the ``plasticity.csv`` of its ``task=plasticity``
    records (pooled over them) of one mode: the paper's ``embedding`` mode where a target has it, else
    ``layer`` (the two modes measure different functions and are never averaged together); corrupt
    files go to ``problems``."""
    out = {}
    for target in sorted({r["dataset"] for _, r in analysis}):
        runs = [(d, r) for d, r in analysis if r["dataset"] == target]
        modes = {r.get("mode", "embedding") for _, r in runs}
        mode = "embedding" if "embedding" in modes else sorted(modes)[0]
        out[target] = block_means(group_values(d / "plasticity.csv", "mean", problems=problems)
                                  for d, r in runs if r.get("mode", "embedding") == mode)
    return out


def group_values(path: str | Path | None, column: str, keep: Callable[[dict], bool] = lambda row: True,
                 problems: list[Problem] | None = None) -> dict[str, list[float]]:
    """Values of ``column`` per ``group`` from a per-(group, block) CSV such as ``plasticity.csv``
    or ``bounds.csv``, for the rows ``keep`` accepts.

    Empty cells and a missing file give nothing; a corrupt file (truncated row, non-numeric cell,
    missing ``group`` column) gives nothing and is appended to ``problems`` when given.
    """
    if path is None or not Path(path).is_file():
        return {}
    by: dict[str, list[float]] = {}
    try:
        for line, row in _rows(Path(path)):
            if row.get(column) not in (None, "") and keep(row):
                by.setdefault(row["group"], []).append(_number(row[column], column, line))
    except (KeyError, *CSV_ERRORS) as err:
        return _corrupt(path, err, problems)
    return by


def _corrupt(path: str | Path, err: Exception, problems: list[Problem] | None) -> dict:
    """Nothing from a corrupt CSV, which goes to ``problems`` when given (a KeyError: a missing column)."""
    if problems is not None:
        problems.append((str(path), f"corrupt CSV ({'no column ' if isinstance(err, KeyError) else ''}{err})"))
    return {}


def read_during_training(path: str | Path, problems: list[Problem] | None = None) -> dict[int, dict[str, float]]:
    """Step -> group -> P(f), the mean over blocks, from a ``plasticity_during_training.csv``
    (columns ``step, group, block, mean``): the ``block == "all"`` row where there is one, else the
    mean of the per-block rows of that step and group.

    A missing file gives nothing; a corrupt one (truncated row, non-numeric cell, missing column)
    gives nothing and is appended to ``problems`` when given.
    """
    if not Path(path).is_file():
        return {}
    overall: dict[int, dict[str, float]] = {}
    blocks: dict[int, dict[str, list[float]]] = {}
    try:
        for line, row in _rows(Path(path)):
            step, value = int(_number(row["step"], "step", line)), _number(row["mean"], "mean", line)
            if row["block"].strip() == "all":
                overall.setdefault(step, {})[row["group"]] = value
            else:
                blocks.setdefault(step, {}).setdefault(row["group"], []).append(value)
    except (KeyError, *CSV_ERRORS) as err:
        return _corrupt(path, err, problems)
    out = {s: {g: float(np.mean(v)) for g, v in groups.items()} for s, groups in blocks.items()}
    for step, groups in overall.items():
        out.setdefault(step, {}).update(groups)
    return dict(sorted(out.items()))
