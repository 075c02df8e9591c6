"""The plan's checks: every job validated and its run directory inspected before any runs, or the dry run.

A multirun's jobs are checked by :class:`plasticity.sweep.PlanSweeper`; a single run by
:class:`RunCheck`, a Hydra callback (``conf/config.yaml``) whose ``on_run_start`` validates it before
Hydra creates its folder (its run directory is inspected once, in the job, under the lock). A SLURM
launch is checked in the launching process; the GPU itself is checked on the node, where each job
validates again (:mod:`plasticity.job`). ``sweep.dry_run=true`` lists every job (run path, status,
whether its data and weights exist) without creating a folder, loading a model or reading data
beyond file headers, and for a plan-running launcher what it would skip and submit.
"""

from __future__ import annotations

import collections
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from rich.markup import escape

from plasticity.console import console, job_overrides, print_config_tree, print_problems
from plasticity.validate import USABLE_WEIGHTS, inputs_status

STATUS = {"new": "to run", "finished": "done (skip)", "resume": "to resume", "failed": "failed (re-run)",
          "running": "running", "conflict": "conflict"}
"""A run directory's state -> the dry run's status column."""


@dataclass
class Job:
    """One job of a launch, as planned.

    Attributes:
        num: Its position in the sweep (Hydra's ``job.num``).
        overrides: Its command-line overrides.
        cfg: Its composed config (with the ``hydra`` node); None when it does not compose.
        run_dir: Its run directory.
        problems: Every problem found before compute.
        state: What its run directory holds (a :class:`plasticity.runs.state.RunState`).
    """

    num: int
    overrides: list[str]
    cfg: DictConfig | None
    run_dir: Path | None = None
    problems: list[str] = field(default_factory=list)
    state: Any = None


class RunCheck(Callback):
    """Validates a single run (rank 0) before Hydra creates its folder; lists it for a dry run."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        from plasticity.recipes import validate
        from plasticity.runs.ranks import is_rank_zero

        if not is_rank_zero():  # a rank Lightning started: rank 0 checked the same config
            return
        started = time.perf_counter()
        # None: a value that does not resolve (validate names its key).
        run_dir = OmegaConf.select(config, "hydra.run.dir", throw_on_resolution_failure=False)
        run_dir = Path(os.path.abspath(str(run_dir))) if run_dir is not None else None
        # Unresolved: an override may hold an interpolation that fails (seed=${oc.env:UNSET}); validate names it.
        job = Job(0, OmegaConf.to_container(config.hydra.overrides.task, resolve=False), config, run_dir)
        if config.sweep.dry_run:
            dry_run([check(job, local=True)], started)
            raise SystemExit(0)
        job.problems += validate(config, local=True)
        stop_on_problems([job], [])


def check(job: Job, local: bool) -> Job:
    """Fills ``job.problems`` (config validation, then a conflict with a finished run) and ``job.state``
    (what its run directory holds, read only; None for a task rebuilt at every launch).

    Args:
        job: A planned job.
        local: The job runs on this machine (False under SLURM: device checks happen on the node).
    """
    from plasticity.recipes import get, validate
    from plasticity.runs.state import conflict_message, inspect_run

    if job.cfg is None:
        return job
    job.problems += validate(job.cfg, local=local)  # an unknown task is one of the problems
    recipe = None if job.problems or job.run_dir is None else get(job.cfg.task.name)
    if recipe is None or recipe.always_run:
        return job
    job.state = inspect_run(job.run_dir, job.cfg, recipe.sections)
    if job.state.kind == "conflict" and not job.cfg.sweep.overwrite:
        job.problems.append(conflict_message(job.run_dir, job.state))
    return job


def stop_on_problems(jobs: list[Job], varying: list[str]) -> None:
    """Prints every problem of every job and exits 1; returns when there is none.

    Raises:
        SystemExit: code 1 when a job has a problem.
    """
    bad = [job for job in jobs if job.problems]
    if not bad:
        return
    if len(jobs) == 1:
        print_problems(bad[0].problems)
    else:
        print_problems([f"job {job.num} ({job_overrides(job.overrides, varying)}): {p}"
                        for job in bad for p in job.problems], header=f"{len(bad)} of {len(jobs)} jobs have")
    raise SystemExit(1)


def is_done(job: Job) -> bool:
    """The job's run is finished (done or diverged) with the same config and ``sweep.skip_done`` is
    true: it is left out."""
    return job.cfg is not None and getattr(job.state, "kind", None) == "finished" and job.cfg.sweep.skip_done


def submission_split(jobs: list[Job]) -> tuple[list[Job], list[Job]]:
    """``(skipped, submitted)``: what a plan-running launcher leaves out and what it runs."""
    return [job for job in jobs if is_done(job)], [job for job in jobs if not is_done(job)]


def print_plan(jobs: list[Job], varying: list[str]) -> None:
    """The config tree once (the first job's), then which keys vary across the jobs."""
    from plasticity.recipes import get, tree_sections

    first = jobs[0].cfg
    if first.print_config:
        print_config_tree(first, tree_sections(get(first.task.name)), title=f"config (job 0 of {len(jobs)})")
    console().print(f"{len(jobs)} jobs" + (f", varying {', '.join(varying)}" if varying else ""), highlight=False)


# ----------------------------------------------------------------------------------- dry run


def dry_run(jobs: list[Job], started: float, submitting: bool = False) -> None:
    """Prints one row per job (run dir, status, data, weights, other problems), each missing input's
    message once, and a count per status; creates nothing.

    Args:
        jobs: The checked jobs.
        started: ``time.perf_counter()`` at the start of the checks.
        submitting: A plan-running launcher would run them: also print its split (what it would skip
            and submit, :func:`plasticity.sweep.submission_split`).
    """
    from rich.table import Table

    table = Table("job", "run dir", "status", "data", "weights", "other problems",
                  title=f"dry run: {len(jobs)} jobs (nothing created, no model or data loaded)")
    counts: collections.Counter = collections.Counter()
    inputs: dict[str, None] = {}  # each missing input's message once, in first-seen order
    for job in jobs:
        data, weights = inputs_of(job)
        missing = [text for text in (data, weights) if text not in (*USABLE_WEIGHTS, "?")]
        inputs.update(dict.fromkeys(missing))
        other = [p for p in job.problems if not any(p in text for text in missing)]
        kind = getattr(job.state, "kind", "")  # a done run is re-run when sweep.skip_done=false
        status = "rejected" if other else "done (re-run)" if kind == "finished" and not is_done(job) else \
            STATUS.get(kind, "to run")
        counts.update({status: 1, "data missing": int(data in missing), "weights unusable": int(weights in missing)})
        table.add_row(str(job.num), str(_relative(job.run_dir)), status, "ok" if data == "ok" else "MISSING",
                      weights if weights in USABLE_WEIGHTS else "BAD", escape("; ".join(other)) or "-")
    con = console()
    con.print(table)
    for text in inputs:
        con.print(f"  - {text}", markup=False, highlight=False)
    todo = sum(counts[k] for k in ("to run", "to resume", "failed (re-run)", "done (re-run)"))
    parts = [f"dry run: {len(jobs)} jobs, {todo} to run"]
    parts += [f"{k} {v}" for k, v in counts.items() if v and k != "to run"]
    con.print(" | ".join(parts + [f"checked in {time.perf_counter() - started:.1f} s"]), highlight=False)
    if submitting:
        skipped, submitted = submission_split(jobs)
        con.print(f"dry run: the launcher would skip {len(skipped)} done runs, submit {len(submitted)}",
                  highlight=False)


def inputs_of(job: Job) -> tuple[str, str]:
    """The job's data and weights status (:func:`plasticity.validate.inputs_status`)."""
    from plasticity.recipes import get, names

    if job.cfg is None:
        return "?", "?"
    task = job.cfg.task.get("name")
    return inputs_status(job.cfg, get(task).sections if task in names() else ())


def _relative(path: Path | None) -> Path | str:
    return "?" if path is None else path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path
