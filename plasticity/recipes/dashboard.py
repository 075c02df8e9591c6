"""``task=dashboard``: the paper's panels as a W&B workspace (:mod:`plasticity.tracking.dashboard`).

The workspace is always written to ``<sweep_dir>/dashboard/workspace.json``. With ``task.online``
``true``, or ``auto`` when W&B can be reached, it is also saved to W&B and its URL printed;
otherwise the run prints the one command that pushes it later. A panel reading a key that none of
the sweep's W&B run files logs gets a warning.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Iterator

from omegaconf import DictConfig

from plasticity.recipes import register
from plasticity.recipes.base import SweepRecipe
from plasticity.runs.io import read_record, write_text_atomic
from plasticity.runs.record import RESULT_FILE, visible_files
from plasticity.tracking import dashboard as dash
from plasticity.validate import Problems

log = logging.getLogger(__name__)

OUT_DIR = "dashboard"
SPEC_FILE = "workspace.json"


def run_paths(root: Path) -> Iterator[Path]:
    """Every ``result.json`` and ``run-*.wandb`` under ``root``, lazily, outside hidden folders and the
    dashboard's own output folder ``root/dashboard``."""
    for pattern in (RESULT_FILE, "run-*.wandb"):
        for path in visible_files(root, pattern):
            if path.relative_to(root).parts[:-1][:1] != (OUT_DIR,):
                yield path


def only_value(root: Path, field: str) -> str | None:
    """The sweep's one ``field`` (``dataset``, ``model``) when all its finetuning records share it
    (unreadable records skipped); else None."""
    # None: unreadable, not an object
    records = (read_record(path)[0] or {} for path in run_paths(root) if path.name == "result.json")
    values = {str(r[field]) for r in records if r.get("task") == "finetune" and r.get(field)}
    return values.pop() if len(values) == 1 else None


@register
class Dashboard(SweepRecipe):
    """Recipe of ``task=dashboard``: builds the workspace, saves it online or writes it to push later."""

    name = "dashboard"

    @classmethod
    def validate(cls, cfg: DictConfig, p: Problems, local: bool = True) -> None:
        from plasticity.report.collect import check_sweep_dir

        # a sweep holds runs: a result.json or a W&B run file (run_paths)
        problem = check_sweep_dir(cfg.sweep_dir, run_paths, "no runs under it (no result.json, no W&B run file)")
        p.require(not problem, problem)
        if cfg.task.online is True and not dash.has_credentials():
            p.add("task.online=true but there is no W&B API key (WANDB_API_KEY unset, no netrc entry). "
                  "Fix: wandb login (or export WANDB_API_KEY=<key>), or task.online=auto to write "
                  "workspace.json and push it later.")

    def run(self) -> dict[str, Any]:
        task, sweep = self.cfg.task, Path(self.cfg.sweep_dir)
        # unset: the sweep's one dataset (model) when all its runs share it, else every dataset
        filters = {key: task[key] or only_value(sweep, key) for key in ("dataset", "model")}
        name = task.workspace or "paper panels: " + "/".join(sweep.resolve().parts[-2:])
        ws = dash.build_workspace(task.project, task.entity, name, group=task.group, **filters)
        path = self.run_dir / SPEC_FILE
        write_text_atomic(path, dash.spec_json(ws))
        panels = sum(len(s.panels) for s in ws.sections)
        shown = [f"project {task.project}"] + [f"{k} {v}" for k, v in {**filters, "group": task.group}.items() if v]
        print(f"dashboard {name!r}: {len(ws.sections)} sections, {panels} panels ({', '.join(shown)}) -> {path}")
        self.warn_unlogged(sweep, dash.panel_keys(ws))
        url = self.save(path)
        return {"workspace_json": str(path), "url": url, "panels": panels, "sections": [s.name for s in ws.sections],
                "sweep_dir": str(sweep), **{k: v for k, v in filters.items() if v}}

    def save(self, path: Path) -> str | None:
        """Saves the spec online when ``task.online`` says so; prints the URL or the push command."""
        online = self.cfg.task.online
        reason = "task.online=false" if online is False else dash.offline_reason()
        if reason is None or online is True:
            try:
                url = dash.push(path, self.cfg.task.entity)
                print(f"dashboard saved: {url}")
                return url
            except dash.DashboardError as err:
                if online is True:
                    raise
                reason = str(err)
        print(f"offline ({reason}): push it later with\n  {dash.push_command(path)}")
        return None

    def warn_unlogged(self, sweep: Path, keys: set) -> None:
        """Warns about panel keys that none of the sweep's W&B run files logs."""
        from plasticity.tracking.runfile import read_run, run_files

        runs = []
        for path in run_files(sweep):
            try:
                runs.append(read_run(path))
            except (OSError, ValueError) as err:
                log.warning("skipped W&B run file %s: %s", path, err)
        for message in dash.missing_keys(keys, runs) if runs else ():
            log.warning("%s (under %s)", message, sweep)
