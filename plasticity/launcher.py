"""The SLURM and submitit-local launchers: submit only the runs that are not done.

hydra-submitit-launcher submits every job of a sweep, so a relaunched grid would queue one job per
finished run, each starting Python only to skip itself. Here, before anything is submitted:

- the launcher plans its jobs again (:func:`plasticity.sweep.plan`, then
  :func:`plasticity.sweep.inspect_job`: their run directories, not a full validation, which the
  pre-launch check did just before) and, with ``sweep.skip_done=true`` (the default), leaves out
  the runs finished with the same config, printing ``skipped N done runs, submitting M``
  (``sweep.dry_run=true`` prints the same split);
- the other jobs go out as one job array, keeping their numbers in the sweep
  (:func:`plasticity.compat.submit_array`);
- the skipped jobs' records go to the sweep's journal, so the summary lists them as done (skipped);
- a job that ends without a result (``scancel``, a hard kill, a node failure) is recorded as failed,
  naming its logs, instead of stopping the sweep.

Hydra instantiates launchers only from the ``hydra_plugins`` namespace, so the classes that
``conf/hydra/launcher/{slurm,local}.yaml`` name live in ``hydra_plugins/plasticity_launcher``: they
are this module's :class:`SkipDone` mixed into hydra-submitit-launcher's two launchers.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

from hydra.core.utils import JobReturn, JobStatus

from plasticity.console import console
from plasticity.sweep import Job, inspect_job, journal, plan, split_line, submission_split

log = logging.getLogger(__name__)


class SkipDone:
    """Mixed in before a hydra-submitit-launcher launcher: its ``launch`` submits only what is not done.

    The launcher's ``__call__`` (what runs on the node) and ``checkpoint`` (the requeue) are the
    base launcher's, unchanged.
    """

    config: Any

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[JobReturn]:
        """Submits the jobs whose run is not done; returns one JobReturn per job, in order.

        Args:
            job_overrides: Each job's overrides (one batch of Hydra's sweeper).
            initial_job_idx: The sweep number of the batch's first job.
        """
        jobs = self.plan_batch(job_overrides, initial_job_idx)
        skipped, todo = submission_split(jobs)
        console().print(split_line(len(skipped), len(todo)), highlight=False)
        returns = {job.num: self.skip(job) for job in skipped}
        if todo:
            returns.update(self.submit(todo))
        return [returns[job.num] for job in jobs]

    def plan_batch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[Job]:
        """The batch's jobs, numbered from ``initial_job_idx``, with what their run directories hold."""
        return [inspect_job(job) for job in plan(self.config, job_overrides, initial_job_idx)]

    def skip(self, job: Job) -> JobReturn:
        """The record a done job would have returned, journaled here since no job runs."""
        record = {**job.state.record, "run_dir": str(job.run_dir), "skipped": True}
        journal(self.config.hydra.sweep.dir, job.num, record)
        return _completed(job, record)

    def submit(self, jobs: list[Job]) -> dict[int, JobReturn]:
        """One job array of ``jobs``, each keeping its sweep number; waits for every result."""
        from plasticity.compat import submit_array

        handles = submit_array(self, [(job.num, job.overrides) for job in jobs])
        return {job.num: self.result(handle, job) for job, handle in zip(jobs, handles)}

    def result(self, handle: Any, job: Job) -> JobReturn:
        """The job's JobReturn; a job that ended without one is a failed record (also journaled)."""
        try:
            return handle.results()[0]  # waits for the job; one result per srun task, task 0 is rank 0 (it records)
        except Exception as err:  # submitit's UncompletedJobError / FailedJobError: the job is gone
            record = ended_without_result(handle, job, err)
            journal(self.config.hydra.sweep.dir, job.num, record, replace=False)  # keep what the job wrote itself
            return _completed(job, record)


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


def _completed(job: Job, record: dict[str, Any]) -> JobReturn:
    """A completed JobReturn holding ``record`` (Hydra's sweeper re-raises any other status)."""
    ret = JobReturn(overrides=list(job.overrides), cfg=job.cfg, working_dir=str(job.run_dir),
                    status=JobStatus.COMPLETED)
    ret.return_value = record
    return ret
