"""The pre-launch check: every job of a launch checked before the first one runs, or the dry run.

A Hydra callback, registered first in ``conf/config.yaml``. Its ``on_run_start`` (a single run)
and ``on_multirun_start`` (a sweep) run before Hydra creates any folder, so:

- every job's config is validated, and its run directory inspected for a finished run of another
  config: one bad value in one job of an 84-job grid stops the launch with every problem listed,
  and nothing is written. A SLURM launch is checked in the launching process; the GPU itself is
  checked on the node, where each job validates again (:mod:`plasticity.job`);
- ``sweep.dry_run=true`` lists every job (run path, status, whether its data and weights exist)
  without creating a folder, loading a model or reading data beyond file headers, and for a
  submitting launcher (:mod:`plasticity.launcher`) what it would skip and submit.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from rich.markup import escape

from plasticity.console import console, job_overrides, print_config_tree, print_problems
from plasticity.sweep import VARYING, Job, inspect_job, is_done, plan, split_line, submission_split, varying_keys
from plasticity.validate import USABLE_WEIGHTS

SUBMITTING = "hydra_plugins.plasticity_launcher."
"""Where the launchers that submit only what is not done live (Hydra loads launchers only from there)."""
STATUS = {"new": "to run", "finished": "done (skip)", "resume": "to resume", "failed": "failed (re-run)",
          "running": "running", "conflict": "conflict"}
"""A run directory's state -> the dry run's status column."""


class PreLaunchCheck(Callback):
    """Checks every job of a launch before Hydra creates a folder; lists them for a dry run."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        started = time.perf_counter()
        try:
            run_dir = Path(os.path.abspath(str(config.hydra.run.dir)))
        except Exception:  # a value that does not resolve: check() names its key (validate.check_resolves)
            run_dir = None
        # Unresolved: an override may hold an interpolation that fails (seed=${oc.env:UNSET}); check() names it.
        job = Job(0, OmegaConf.to_container(config.hydra.overrides.task, resolve=False), config, run_dir)
        check(job, local=True)
        if config.sweep.get("dry_run", False):
            dry_run([job], started)
            raise SystemExit(0)
        stop_on_problems([job])

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        started = time.perf_counter()
        jobs = [check(job, local=not launches_on_slurm(config)) for job in plan(config)]
        if config.sweep.get("dry_run", False):
            dry_run(jobs, started, submitting=submits(config))
            raise SystemExit(0)
        stop_on_problems(jobs)
        varying = varying_keys(jobs)
        print_plan(jobs, varying)
        os.environ[VARYING] = ",".join(varying)  # for the jobs, which may be other processes (see sweep.VARYING)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        os.environ.pop(VARYING, None)  # a later launch in this process is another sweep


def launches_on_slurm(config: DictConfig) -> bool:
    return "slurm" in str(config.hydra.launcher.get("_target_", "")).lower()


def submits(config: DictConfig) -> bool:
    """The launch goes through one of :mod:`plasticity.launcher`'s submitting launchers."""
    return str(config.hydra.launcher.get("_target_", "")).startswith(SUBMITTING)


def check(job: Job, local: bool) -> Job:
    """Fills ``job.problems`` (config validation, then a conflict with a finished run) and ``job.state``.

    Args:
        job: A planned job.
        local: The job runs on this machine (False under SLURM: device checks happen on the node).
    """
    from plasticity.recipes import validate
    from plasticity.runs.state import conflict_message

    if job.cfg is None:
        return job
    job.problems += validate(job.cfg, local=local)  # an unknown task is one of the problems
    if job.problems:
        return job
    inspect_job(job)
    if getattr(job.state, "kind", None) == "conflict" and not job.cfg.sweep.get("overwrite", False):
        job.problems.append(conflict_message(job.run_dir, job.state))
    return job


def stop_on_problems(jobs: list[Job]) -> None:
    """Prints every problem of every job and exits 1; returns when there is none.

    Raises:
        SystemExit: code 1 when a job has a problem.
    """
    bad = [job for job in jobs if job.problems]
    if not bad:
        return
    if len(jobs) == 1:
        print_problems(bad[0].problems)
        raise SystemExit(1)
    varying = varying_keys(jobs)
    lines = [f"job {job.num} ({job_overrides(job.overrides, varying)}): {p}" for job in bad for p in job.problems]
    print_problems(lines, header=f"{len(bad)} of {len(jobs)} jobs have")
    raise SystemExit(1)


def print_plan(jobs: list[Job], varying: list[str]) -> None:
    """The config tree once (the first job's), then which keys vary across the jobs."""
    from plasticity.recipes import get, tree_sections

    first = jobs[0].cfg
    if first.get("print_config", True):
        print_config_tree(first, tree_sections(get(first.task.name)), title=f"config (job 0 of {len(jobs)})")
    console().print(f"{len(jobs)} jobs" + (f", varying {', '.join(varying)}" if varying else ""), highlight=False)


# ----------------------------------------------------------------------------------- dry run


def status_of(job: Job) -> str:
    """The job's row status in the dry run (a done run is re-run when ``sweep.skip_done=false``)."""
    kind = getattr(job.state, "kind", "")
    if kind == "finished" and not is_done(job):
        return "done (re-run)"
    return STATUS.get(kind, "to run")


def inputs_of(job: Job) -> tuple[str, str]:
    """The job's data and weights status (:func:`plasticity.validate.inputs_status`)."""
    from plasticity.recipes import get, names
    from plasticity.validate import inputs_status

    if job.cfg is None:
        return "?", "?"
    task = job.cfg.task.get("name")
    return inputs_status(job.cfg, get(task).sections if task in names() else ())


def dry_run(jobs: list[Job], started: float, submitting: bool = False) -> None:
    """Prints one row per job (run dir, status, data, weights, other problems), each missing input's
    message once, and a count per status; creates nothing.

    Args:
        jobs: The checked jobs.
        started: ``time.perf_counter()`` at the start of the checks.
        submitting: A submitting launcher would run them: also print its split (what it would skip
            and submit, :func:`plasticity.sweep.submission_split`).
    """
    from rich.table import Table

    table = Table(title=f"dry run: {len(jobs)} jobs (nothing created, no model or data loaded)")
    for column in ("job", "run dir", "status", "data", "weights", "other problems"):
        table.add_column(column)
    counts: dict[str, int] = {}
    inputs: dict[str, None] = {}  # each missing input's message once, in first-seen order
    for job in jobs:
        data, weights = inputs_of(job)
        missing = [text for text in (data, weights) if text not in (*USABLE_WEIGHTS, "?")]
        inputs.update(dict.fromkeys(missing))
        other = [p for p in job.problems if not any(p in text for text in missing)]
        status = "rejected" if other else status_of(job)
        counts[status] = counts.get(status, 0) + 1
        for name, text in (("data missing", data), ("weights unusable", weights)):
            counts[name] = counts.get(name, 0) + (text in missing)
        table.add_row(str(job.num), str(_relative(job.run_dir)), status, "ok" if data == "ok" else "MISSING",
                      weights if weights in USABLE_WEIGHTS else "BAD", escape("; ".join(other)) or "-")
    con = console()
    con.print(table)
    for text in inputs:
        con.print(f"  - {text}", markup=False, highlight=False)
    todo = sum(counts.get(k, 0) for k in ("to run", "to resume", "failed (re-run)", "done (re-run)"))
    parts = [f"dry run: {len(jobs)} jobs, {todo} to run"]
    parts += [f"{k} {v}" for k, v in counts.items() if v and k != "to run"]
    con.print(" | ".join(parts + [f"checked in {time.perf_counter() - started:.1f} s"]), highlight=False)
    if submitting:
        skipped, submitted = submission_split(jobs)
        con.print(f"dry run: the launcher {split_line(len(skipped), len(submitted), dry=True)}", highlight=False)


def _relative(path: Path | None) -> Path | str:
    if path is None:
        return "?"
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path
