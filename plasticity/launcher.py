"""Stage 3 of a multirun: the launchers that run :class:`plasticity.sweep.PlanSweeper`'s planned jobs.

The sweeper hands them only the jobs that are not done (``run_plan``):

- :class:`InProcess` (Hydra's default ``hydra/launcher=basic``) runs each planned config in this
  process as it is: no second composition, no second validation, and the job confirms the plan's
  inspection of its run directory instead of repeating it;
- :class:`Submits`, mixed into hydra-submitit-launcher's SLURM and local launchers
  (``hydra/launcher=slurm|local``), submits them as one job array, each keeping its number in the
  sweep (:func:`plasticity.compat.submit_array`); a job that ends without a result (``scancel``, a
  hard kill, a node failure) is recorded as failed, naming its logs, instead of stopping the sweep.

Hydra instantiates launchers only from the ``hydra_plugins`` namespace, so the classes that
``conf/hydra/launcher/{slurm,local}.yaml`` name live in ``hydra_plugins/plasticity_launcher``.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from hydra.core.utils import JobReturn, JobStatus, configure_log, run_job, setup_globals

from plasticity.prelaunch import Job

log = logging.getLogger(__name__)


class InProcess:
    """Runs each job in this process, one after the other, from its planned config (what the sweeper
    uses in place of Hydra's basic launcher, ``hydra/launcher=basic``, which would compose each job again)."""

    def __init__(self, hydra_context: Any, config: Any) -> None:
        self.hydra_context, self.config = hydra_context, config

    def run_plan(self, jobs: list[Job], extra: str) -> dict[int, JobReturn]:
        """Runs the planned ``jobs`` in order (their configs already hold ``extra``); JobReturns by number."""
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
        """The job's JobReturn; a job that ended without one is a failed record."""
        try:
            return handle.results()[0]  # waits for the job; one result per srun task, task 0 is rank 0 (it records)
        except Exception as err:  # submitit's UncompletedJobError / FailedJobError: the job is gone
            return completed(job, ended_without_result(handle, job, err))


def ended_without_result(handle: Any, job: Job, err: Exception) -> dict[str, Any]:
    """A failed record for a job that produced no result: its id, last known state and log files."""
    from plasticity.recipes import get

    identity = get(job.cfg.task.name).identity(job.cfg) if job.cfg is not None else {}
    try:
        state = handle.state
    except Exception:  # the scheduler cannot say: the error says enough
        state = "unknown"
    log.debug("job %s: %s", handle.job_id, err)
    return {**identity, "run_dir": str(job.run_dir), "status": "failed", "job_id": str(handle.job_id),
            "error": (f"job {handle.job_id} ended without a result (state {state}: killed, cancelled or its node "
                      f"failed); its logs: {handle.paths.stdout} and {handle.paths.stderr}. Relaunch the same command "
                      f"to resume it from checkpoints/last.ckpt.")}


def completed(job: Job, record: dict[str, Any]) -> JobReturn:
    """A completed JobReturn holding ``record``, for a job that did not return one itself."""
    ret = JobReturn(overrides=list(job.overrides), cfg=job.cfg, working_dir=str(job.run_dir),
                    status=JobStatus.COMPLETED)
    ret.return_value = record
    return ret
