"""A reader of W&B's own run files (``run-<id>.wandb``), offline runs included.

:func:`read_run` folds the records of a run file (:func:`plasticity.compat.run_file_records`: wandb
has no public reader) into what W&B shows for the run: its id, group, job type, tags, config
(``config.update`` items, nested dicts unpacked), summary (``summary.update``), the history rows
(``history.item``) and the exit code.

Example:
    >>> run = read_run(next(Path("outputs").rglob("run-*.wandb")))  # doctest: +SKIP
    >>> run.config["component"]["name"], run.summary["test_acc"]    # doctest: +SKIP
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from plasticity.compat import run_file_records
from plasticity.runs.record import visible_files

__all__ = ["RunFile", "read_run", "run_files"]


@dataclass
class RunFile:
    """What one run file holds, as W&B shows it."""

    path: Path
    id: str = ""
    project: str = ""
    group: str = ""
    job_type: str = ""
    name: str = ""
    tags: list[str] = field(default_factory=list)
    resumed: bool = False
    config: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, dict] = field(default_factory=dict)
    artifacts: list[str] = field(default_factory=list)
    exit_code: int | None = None

    def history_keys(self) -> set[str]:
        """Every key any history row has (``_step``, ``_runtime``, ``_timestamp`` left out)."""
        return {k for row in self.history for k in row if not k.startswith("_")}

    def column(self, key: str) -> list[Any]:
        """The values of one history key in row order (rows without it skipped)."""
        return [row[key] for row in self.history if key in row]


def _items(items, into: dict) -> None:
    for item in items:
        keys = list(item.nested_key) or [item.key]
        target = into
        for key in keys[:-1]:
            target = target.setdefault(key, {})
        target[keys[-1]] = json.loads(item.value_json)


def read_run(path: str | Path) -> RunFile:
    """Folds a run file's records into a :class:`RunFile`."""
    run = RunFile(Path(path))
    for record in run_file_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            r = record.run
            run.id, run.project, run.group, run.job_type = r.run_id, r.project, r.run_group, r.job_type
            run.name, run.tags, run.resumed = r.display_name, list(r.tags), r.resumed
            _items(r.config.update, run.config)
            _items(r.summary.update, run.summary)
        elif kind in ("config", "summary"):
            _items(getattr(record, kind).update, getattr(run, kind))
        elif kind == "history":
            row: dict[str, Any] = {}
            _items(record.history.item, row)
            if record.history.HasField("step"):
                row.setdefault("_step", record.history.step.num)
            run.history.append(row)
        elif kind == "metric":
            m = record.metric
            summary = [s for s in ("min", "max", "mean", "last", "best") if getattr(m.summary, s, False)]
            run.metrics[m.name or m.glob_name] = {"step_metric": m.step_metric, "summary": summary}
        elif kind == "artifact":
            run.artifacts.append(record.artifact.name)
        elif kind == "exit":
            run.exit_code = record.exit.exit_code
    # W&B stores each top-level config key as {"value": ..., "desc": ...} in some records: the plain value is what
    # users filter on
    run.config = {k: (v["value"] if isinstance(v, dict) and set(v) <= {"value", "desc"} and "value" in v else v)
                  for k, v in run.config.items() if k != "_wandb"}
    return run


def run_files(root: str | Path) -> list[Path]:
    """Every run file under ``root`` in start order (hidden folders, e.g. replaced runs, skipped)."""
    # the folder is <run|offline-run>-<start>-<id>
    return sorted(visible_files(root, "run-*.wandb"), key=lambda p: (p.parent.name.split("-")[-2], str(p)))
