"""Sweep bookkeeping: every multirun job is journaled; the launch ends with a summary table.

A Hydra callback (registered in ``conf/config.yaml``). At the start of a multirun it draws a
sweep id, which jobs inherit through the environment (in-process, submitit local or SLURM); each
job's end writes ``<sweep dir>/.sweeps/<id>/<job num>.json`` with its record; the end of the
multirun prints one row per job and exits non-zero naming the failed runs.
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig

from plasticity.console import console, results_table
from plasticity.results import read_json, write_json_atomic

log = logging.getLogger(__name__)
SWEEP_ID = "PLASTICITY_SWEEP_ID"


def journal_dir(sweep_dir: str | Path, sweep_id: str) -> Path:
    return Path(sweep_dir) / ".sweeps" / sweep_id


class SweepSummary(Callback):
    """Journals multirun jobs and prints the sweep's summary at its end."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        os.environ[SWEEP_ID] = uuid.uuid4().hex[:12]

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        sweep_id = os.environ.get(SWEEP_ID)
        hydra_cfg = HydraConfig.get()
        if not sweep_id or hydra_cfg.mode != RunMode.MULTIRUN:
            return
        if job_return.status == JobStatus.COMPLETED and isinstance(job_return.return_value, dict):
            record = job_return.return_value
        else:  # the task function itself raised: should not happen, recorded all the same
            record = {"status": "failed", "error": repr(job_return._return_value),
                      "run_dir": hydra_cfg.runtime.output_dir}
        path = journal_dir(hydra_cfg.sweep.dir, sweep_id) / f"{hydra_cfg.job.num:06d}.json"
        write_json_atomic(path, record)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_id = os.environ.pop(SWEEP_ID, None)
        if not sweep_id:
            return
        folder = journal_dir(config.hydra.sweep.dir, sweep_id)
        records = [r for p in sorted(folder.glob("*.json")) if (r := read_json(p))]
        con = console()
        con.print(results_table(records, title=f"sweep {sweep_id}: {len(records)} runs"))
        if any(r.get("dry_run") for r in records):
            todo = sum(r.get("status") == "to run" for r in records)
            con.print(f"dry run: {len(records)} jobs, {todo} to run, {len(records) - todo} finished | journal {folder}")
            return
        counts = {s: sum(r.get("status") == s for r in records) for s in ("done", "diverged", "failed")}
        skipped = sum(bool(r.get("skipped")) for r in records)
        con.print(f"done {counts['done']} (skipped {skipped}) | diverged {counts['diverged']} | "
                      f"failed {counts['failed']} | journal {folder}")
        failed = [r for r in records if r.get("status") == "failed"]
        for r in failed:
            con.print(f"[red]failed[/red] {r.get('run_dir')}: {r.get('error')}")
        if failed:
            raise SystemExit(1)
