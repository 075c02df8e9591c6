"""Stages 2 and 3 of a multirun (:mod:`plasticity.job` lists the five): its plan and its launch.

:class:`PlanSweeper` (``hydra/sweeper=plan``, the default in ``conf/config.yaml``) splits the command
line into jobs with Hydra's own ``BasicSweeper.split_arguments`` and composes each job once with
``load_sweep_config``, what Hydra's launchers call (jobs that differ only in plain values share the
composition of their groups). Every job is then validated and its run directory inspected
(:mod:`plasticity.prelaunch`): one bad value in one job stops the launch with every problem listed,
nothing written; ``sweep.dry_run=true`` lists the jobs instead. A launcher of
this module runs the planned jobs that are not done without composing them again;
any other launcher (``hydra/launcher=parallel``) gets the overrides. The keys that vary reach each
job as the override ``hydra.sweeper.varying``. Each job's record is journaled under
``<sweep dir>/.sweeps/<id>/`` and the summary printed, exiting non-zero naming the failed runs.

The sweeper hands a launcher that runs a plan only the jobs that are not done (``run_plan``):

- with Hydra's default ``hydra/launcher=basic`` the sweeper runs each planned config in this process
  itself (:meth:`PlanSweeper.run_plan`): no second composition, no second validation, and the job
  confirms the plan's inspection of its run directory instead of repeating it;
- :class:`Submits`, mixed into hydra-submitit-launcher's SLURM and local launchers
  (``hydra/launcher=slurm|local``), submits them as one job array, each keeping its number in the
  sweep (:func:`plasticity.compat.submit_array`); a job that ends without a result (``scancel``, a
  hard kill, a node failure) is recorded as failed, naming its logs, instead of stopping the sweep.

Hydra instantiates sweepers and launchers only from the ``hydra_plugins`` namespace, so the classes that
``conf/hydra/sweeper/plan.yaml`` and ``conf/hydra/launcher/{slurm,local}.yaml`` name live in
``hydra_plugins/plasticity_launcher``.
"""

from __future__ import annotations

import collections
import functools
import logging
import os
import pickle
import time
import uuid
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import OverrideType
from hydra.core.utils import JobReturn, JobStatus, configure_log, run_job, setup_globals
from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig, OmegaConf, open_dict
from rich.markup import escape

from plasticity.compat import basic_sweeper
from plasticity.console import console, results_table
from plasticity.prelaunch import Job, check, dry_run, print_plan, stop_on_problems, submission_split
from plasticity.runs.io import write_json_atomic

log = logging.getLogger(__name__)


class PlanSweeper(Sweeper):
    """Hydra's basic sweeper's jobs, each planned once before any runs (``hydra/sweeper=plan``)."""

    def __init__(self, params: dict | None = None, varying: Any = None) -> None:
        self.params = params or {}  # varying: read by the jobs, not by the sweeper

    def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        self.hydra_context, self.config = hydra_context, config
        if config.hydra.runtime.choices.get("hydra/launcher") == "basic":  # the planned configs run here as they are
            self.launcher = self  # run_plan
        else:  # an experiment's parallel (joblib), or slurm | local (Submits)
            self.launcher = Plugins.instance().instantiate_launcher(hydra_context=hydra_context,
                                                                    task_function=task_function, config=config)

    def sweep(self, arguments: list[str]) -> list[list[JobReturn]]:
        started = time.perf_counter()
        lists = self.job_lists(self.params, arguments, self.hydra_context.config_loader)
        shared = {o for o in lists[0] if all(o in job for job in lists)}  # in every job; the others' keys vary
        varying = sorted({o.split("=", 1)[0] for job in lists for o in job if o not in shared})
        extra = "hydra.sweeper.varying=[" + ",".join(f"'{key}'" for key in varying) + "]"
        local = "slurm" not in str(self.config.hydra.launcher.get("_target_", "")).lower()  # the devices: on the node
        jobs = [check(job, local) for job in self.plan(lists, extra)]
        if self.config.sweep.dry_run:
            dry_run(jobs, started, submitting=hasattr(self.launcher, "run_plan") and self.launcher is not self)
            raise SystemExit(0)
        stop_on_problems(jobs, varying)
        print_plan(jobs, varying)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")  # as Hydra's basic sweeper does
        returns = self.launch(jobs, extra)
        summarize(sweep_dir, [record_of(ret, job) for job, ret in zip(jobs, returns)])
        return [returns]

    @staticmethod
    def job_lists(params: dict, arguments: list[str], loader: Any = None) -> list[list[str]]:
        """Each job's overrides, numbered as Hydra's basic sweeper numbers them (its params first)."""
        parsed = OverridesParser.create(config_loader=loader).parse_overrides(
            [f"{k}={v}" for k, v in params.items()] + list(arguments))
        # Looked up at each call: Hydra's plugin scan re-executes its module, redefining the class.
        return basic_sweeper().split_arguments(parsed, None)[0]

    def plan(self, lists: list[list[str]], extra: str) -> list[Job]:
        """Each job composed once (with ``extra``), numbered in order."""
        from plasticity.cli import explain

        jobs, shared = [], {}
        for num, overrides in enumerate(map(list, lists)):
            try:
                cfg = self.compose(overrides, extra, shared)
                with open_dict(cfg.hydra):
                    cfg.hydra.overrides.task, cfg.hydra.job.num, cfg.hydra.job.id = overrides, num, num
                run_dir = Path(os.path.abspath(f"{cfg.hydra.sweep.dir}/{cfg.hydra.sweep.subdir}"))
                jobs.append(Job(num, overrides, cfg, run_dir))
            except Exception as err:  # a value that does not fit its key: reported with the others
                jobs.append(Job(num, overrides, None, problems=[explain(err, overrides)]))
        return jobs

    def compose(self, overrides: list[str], extra: str, shared: dict) -> DictConfig:
        """A job's config; the jobs that differ only in plain values (``seed=...``) share one composition of
        their groups (in ``shared``), then get their values set."""
        load, choices = self.hydra_context.config_loader.load_sweep_config, self.config.hydra.runtime.choices
        # A group choice (model=..., +experiment=...) or a key inside a group's package changes what is
        # composed; a plain value is set afterwards on a copy of the shared composition.
        parsed = [(text, o, o.type == OverrideType.CHANGE and o.key_or_group not in choices and "/" not in
                   o.key_or_group) for text, o in zip(overrides, OverridesParser.create().parse_overrides(overrides))]
        groups = tuple(text for text, _, plain in parsed if not plain)
        try:
            if groups not in shared:
                shared[groups] = load(self.config, [*groups, extra])
            # A pickle round trip: the deep copy of DictConfig.copy(), 3x faster (no per-node __deepcopy__).
            cfg = pickle.loads(pickle.dumps(shared[groups]))
            for _, override, plain in parsed:
                if plain:  # as Hydra applies a value override
                    OmegaConf.update(cfg, override.key_or_group, override.value(), merge=True)
            return cfg
        except Exception:  # composed alone, Hydra names what it cannot place ("Could not override ...")
            return load(self.config, [*overrides, extra])

    def launch(self, jobs: list[Job], extra: str) -> list[JobReturn]:
        """Runs the jobs: a launcher with ``run_plan`` (this sweeper, :class:`Submits`) only those not done."""
        if not hasattr(self.launcher, "run_plan"):  # another launcher composes each job itself
            return list(self.launcher.launch([job.overrides + [extra] for job in jobs], initial_job_idx=0))
        skipped, todo = submission_split(jobs)
        console().print(f"skipped {len(skipped)} done runs, submitting {len(todo)}", highlight=False)
        returns = {job.num: completed(job, {**job.state.record, "run_dir": str(job.run_dir), "skipped": True})
                   for job in skipped}
        returns.update(self.launcher.run_plan(todo, extra) if todo else {})
        return [returns[job.num] for job in jobs]

    def run_plan(self, jobs: list[Job], extra: str) -> dict[int, JobReturn]:
        """Hydra's basic launcher's place (which would compose each job again): runs the planned ``jobs`` in
        this process, in order, from their planned configs (which already hold ``extra``); JobReturns by number."""
        from plasticity.job import run_job as task

        setup_globals()
        returns = {}
        for job in jobs:
            configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
            returns[job.num] = run_job(task_function=functools.partial(task, plan=job),
                                       config=job.cfg, job_dir_key="hydra.sweep.dir",
                                       job_subdir_key="hydra.sweep.subdir", hydra_context=self.hydra_context)
        return returns


class Submits:
    """Mixed in before a hydra-submitit-launcher launcher: ``run_plan`` submits the planned jobs.

    The launcher's ``__call__`` (what runs on the node, composing the job from its overrides) and
    ``checkpoint`` (the requeue) are the base launcher's, unchanged.
    """

    def run_plan(self, jobs: list[Job], extra: str) -> dict[int, JobReturn]:
        """One job array of ``jobs`` (each with the override ``extra``), keeping their sweep numbers;
        waits for every result."""
        from plasticity.compat import submit_array

        handles = submit_array(self, [(job.num, job.overrides + [extra]) for job in jobs])
        return {job.num: self.result(handle, job) for job, handle in zip(jobs, handles)}

    def result(self, handle: Any, job: Job) -> JobReturn:
        """The job's JobReturn; a job that ended without one is a failed record: its id, last known state and
        log files."""
        from plasticity.recipes import get

        try:
            return handle.results()[0]  # waits for the job; one result per srun task, task 0 is rank 0 (it records)
        except Exception as err:  # submitit's UncompletedJobError / FailedJobError: the job is gone
            log.debug("job %s: %s", handle.job_id, err)
        identity = get(job.cfg.task.name).identity(job.cfg) if job.cfg is not None else {}
        try:
            state = handle.state
        except Exception:  # the scheduler cannot say: the error says enough
            state = "unknown"
        return completed(job, {
            **identity, "run_dir": str(job.run_dir), "status": "failed", "job_id": str(handle.job_id),
            "error": (f"job {handle.job_id} ended without a result (state {state}: killed, cancelled or its node "
                      f"failed); its logs: {handle.paths.stdout} and {handle.paths.stderr}. Relaunch the same command "
                      f"to resume it from checkpoints/last.ckpt.")})


def completed(job: Job, record: dict[str, Any]) -> JobReturn:
    """A completed JobReturn holding ``record``, for a job that did not return one itself."""
    ret = JobReturn(overrides=list(job.overrides), cfg=job.cfg, working_dir=str(job.run_dir),
                    status=JobStatus.COMPLETED)
    ret.return_value = record
    return ret


def record_of(ret: JobReturn, job: Job) -> dict[str, Any]:
    """The job's record from its JobReturn (``run_job`` records its own failures)."""
    try:
        record = ret.return_value  # re-raises what the task function raised
    except Exception as err:
        record = err
    failed = {"status": "failed", "error": repr(record), "run_dir": str(job.run_dir)}  # not a dict: should not happen
    return record if isinstance(record, dict) else failed


def summarize(sweep_dir: Path, records: list[dict[str, Any]]) -> None:
    """Journals each record under ``<sweep_dir>/.sweeps/<id>/``, prints one row per job and the
    counts; exits 1 naming the runs that failed.

    Raises:
        SystemExit: code 1 when a run failed, was rejected or interrupted.
    """
    sweep_id = uuid.uuid4().hex[:12]
    folder = sweep_dir / ".sweeps" / sweep_id
    for num, record in enumerate(records):
        write_json_atomic(folder / f"{num:06d}.json", record)
    con = console()
    con.print(results_table(records, title=f"sweep {sweep_id}: {len(records)} runs"))
    counts = collections.Counter(r.get("status") for r in records)
    skipped = sum(bool(r.get("skipped")) and r.get("status") != "running" for r in records)
    con.print(f"done {counts['done']} (skipped {skipped}) | diverged {counts['diverged']} | interrupted "
              f"{counts['interrupted']} (relaunch to resume) | failed {counts['failed']} | running elsewhere "
              f"{counts['running']} | rejected {counts['rejected']} | journal {folder}", highlight=False)
    failed = [r for r in records if r.get("status") in ("failed", "rejected", "interrupted")]
    for r in failed:
        con.print(f"[red]{r.get('status')}[/red] " + escape(f"{r.get('run_dir')}: {r.get('error')}"), highlight=False)
    if failed:  # the launch's exit code says a run failed
        raise SystemExit(1)
