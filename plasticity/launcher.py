"""The SLURM and submitit-local launchers: submit only the runs that are not done.

hydra-submitit-launcher submits every job of a sweep, so a relaunched grid would queue one job per
finished run, each starting Python only to skip itself. Here, before anything is submitted:

- the sweep's plan, checked in this process by :class:`plasticity.sweep.SweepSummary` just before
  the launcher runs (:func:`plasticity.sweep.planned`), says which runs are finished with the same
  config; with ``sweep.skip_done=true`` (the default) those jobs are left out, and the launcher
  prints ``skipped N done runs, submitting M`` (``sweep.dry_run=true`` prints the same split);
- the other jobs go out as one job array, keeping their numbers in the sweep;
- the skipped jobs' records go to the sweep's journal, so the summary lists them as done (skipped);
- a job that ends without a result (``scancel``, a hard kill, a node failure) is recorded as failed,
  naming its logs, instead of stopping the sweep.

Hydra instantiates launchers only from the ``hydra_plugins`` namespace, so the classes that
``conf/hydra/launcher/{slurm,local}.yaml`` name live in ``hydra_plugins/plasticity_launcher``: they
are this module's :class:`SkipDone` mixed into hydra-submitit-launcher's two launchers.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus
from omegaconf import OmegaConf

from plasticity.console import console
from plasticity.sweep import Job, journal, planned, split_line, submission_split

log = logging.getLogger(__name__)
INIT_KEYS = ("submitit_folder", "max_num_timeout")
"""Launcher keys that go to the executor's constructor, not to ``update_parameters``."""


class SkipDone:
    """Mixed in before a hydra-submitit-launcher launcher: its ``launch`` submits only what is not done.

    The launcher's ``__call__`` (what runs on the node) and ``checkpoint`` (the requeue) are the
    base launcher's, unchanged.
    """

    _EXECUTOR: str
    params: dict[str, Any]
    config: Any

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[JobReturn]:
        """Submits the jobs whose run is not done; returns one JobReturn per job, in order.

        Args:
            job_overrides: Each job's overrides (one batch of Hydra's sweeper).
            initial_job_idx: The sweep number of the batch's first job.
        """
        numbered = [(initial_job_idx + i, list(overrides)) for i, overrides in enumerate(job_overrides)]
        plans = {num: planned(overrides) or Job(num, overrides, None) for num, overrides in numbered}
        skipped, todo = submission_split([plans[num] for num, _ in numbered])
        console().print(split_line(len(skipped), len(todo)), highlight=False)
        returns = {job.num: self._skipped(job) for job in skipped}
        if todo:
            returns.update(self._submit([(job.num, plans[job.num]) for job in todo]))
        return [returns[num] for num, _ in numbered]

    def _skipped(self, job: Job) -> JobReturn:
        """The record a done job would have returned, journaled here since no job runs."""
        record = {**job.state.record, "run_dir": str(job.run_dir), "skipped": True}
        journal(self.config.hydra.sweep.dir, job.num, record)
        return _completed(job, record)

    def _executor(self) -> Any:
        """submitit's executor with this launcher's parameters (``<cluster>_<key>`` where submitit
        has no shared key)."""
        import submitit
        from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf

        init = {"folder": self.params["submitit_folder"]}
        if "max_num_timeout" in self.params:
            init[f"{self._EXECUTOR}_max_num_timeout"] = self.params["max_num_timeout"]
        executor = submitit.AutoExecutor(cluster=self._EXECUTOR, **init)
        shared = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(**{key if key in shared else f"{self._EXECUTOR}_{key}": value
                                      for key, value in self.params.items() if key not in INIT_KEYS})
        return executor

    def _submit(self, todo: list[tuple[int, Job]]) -> dict[int, JobReturn]:
        """One job array of ``todo``, each job keeping its sweep number; waits for every result."""
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        if "mode" in self.config.hydra.sweep:
            os.chmod(sweep_dir, mode=int(str(self.config.hydra.sweep.mode), 8))
        state = Singleton.get_state()
        args = [(job.overrides, "hydra.sweep.dir", num, f"job_id_for_{num}", state) for num, job in todo]
        submitted = self._executor().map_array(self, *zip(*args))
        for (num, job), handle in zip(todo, submitted):
            log.info("job %d -> %s %s", num, self._EXECUTOR, handle.job_id)
        return {num: self._result(handle, job) for (num, job), handle in zip(todo, submitted)}

    def _result(self, handle: Any, job: Job) -> JobReturn:
        """The job's JobReturn; a job that ended without one is a failed record (also journaled)."""
        try:
            return handle.results()[0]
        except Exception as err:  # submitit's UncompletedJobError / FailedJobError: the job is gone
            record = ended_without_result(handle, job, err)
            journal(self.config.hydra.sweep.dir, job.num, record, replace=False)
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
    ret = JobReturn(overrides=list(job.overrides), cfg=job.cfg, working_dir=str(job.run_dir),
                    status=JobStatus.COMPLETED)
    ret.return_value = record
    return ret
