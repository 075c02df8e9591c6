"""The loggers of a run: ``metrics.csv`` (:class:`CSVLogger`, whose earlier rows are never rewritten
in place), Lightning's ``WandbLogger`` made sliceable, and the tables, figures and summary every
task leaves in W&B.

What a run stores in W&B (``logger=wandb``):

- **config**: the resolved Hydra config as a nested dict (``dataset.name``, ``model.name``,
  ``component.name``, ``optimizer.name``, ``optimizer.lr``, ``seed``, ``task.*`` filter and group),
  the run identity under ``run`` (the record's fields, ``run.name``, ``run.dir``), ``split_hash``
  and the parameter counts under ``params``;
- **history**: every metric against ``trainer/global_step`` (``define_metric``: the x-axis of
  ``train/*``, ``val/*``, ``test/*``, ``grad_norm/*``, ``plasticity/*``, ``lr``); the max of
  ``val/acc`` is kept in the summary. A resumed run (same run directory) continues the same W&B run:
  its id comes from the run path and its history goes on from the checkpoint's step; offline, each
  part is its own ``offline-run-*`` folder and ``wandb sync`` uploads the parts of one run in order;
- **summary**: ``status``, ``best_val_acc``, ``test_acc``, ``best_step``, ``trainable_params``,
  ``wall_s`` and ``config_hash``, written when the job ends (:func:`finish`), failed and diverged runs
  included (a failed run's exit code is 1).

With ``osh=true`` the logger triggers a wandb-osh sync after every validation and at the end:
compute nodes without internet write a command file that ``wandb-osh`` on a login node turns into
``wandb sync``.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.loggers import CSVLogger as LightningCSVLogger
from lightning.pytorch.loggers import WandbLogger as LightningWandbLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from plasticity.compat import run_started, without_anonymous
from plasticity.tracking import STEP_METRIC, SUMMARY_KEYS, wandb_enabled

__all__ = ["CSVLogger", "STEP_METRIC", "WandbLogger", "finish", "log_analysis", "open_run", "run_config",
           "wandb_enabled"]

log = logging.getLogger(__name__)

STEPPED = ("train/*", "val/*", "test/*", "grad_norm/*", "plasticity/*", "lr")
"""Metric families plotted against :data:`STEP_METRIC`."""
OSH_DIR = "~/.wandb_osh_command_dir"


class CSVLogger(LightningCSVLogger):
    """Lightning's ``CSVLogger`` writing ``metrics.csv`` with :class:`MetricsWriter`: a full disk or a
    kill can cost the rows being written, never the earlier ones."""

    @property
    @rank_zero_experiment
    def experiment(self) -> "MetricsWriter":  # noqa: D102 - Lightning's, with the writer below
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = MetricsWriter(log_dir=self.log_dir)
        return self._experiment


class MetricsWriter(ExperimentWriter):
    """Appends each row to ``metrics.csv``; a new column (Lightning rewrites the file in place, where a
    full disk can leave it half-written) writes the whole new file beside the old one and renames it over."""

    def _rewrite_with_new_header(self, fieldnames: list[str]) -> None:
        from plasticity.runs.io import read_csv, write_csv_atomic

        write_csv_atomic(self.metrics_file_path, read_csv(self.metrics_file_path), fieldnames)


class WandbLogger(LightningWandbLogger):
    """Lightning's ``WandbLogger`` with the metric definitions of :mod:`plasticity.tracking.logger`
    and the wandb-osh trigger.

    Args:
        osh: Trigger a wandb-osh sync after every validation and when the run ends.
        osh_dir: wandb-osh's command directory (shared with the login node's ``wandb-osh``).
        **kwargs: Lightning's ``WandbLogger`` arguments (``project``, ``id``, ``group``, ...).
    """

    def __init__(self, *args: Any, osh: bool = False, osh_dir: str = OSH_DIR, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        without_anonymous(self)  # deprecated in wandb: it only printed a warning
        self._osh_dir = str(Path(osh_dir).expanduser()) if osh else None
        self._defined = False

    @property
    def experiment(self):  # noqa: D102 - Lightning's, plus the metric definitions once
        run = super().experiment
        if not self._defined and rank_zero_only.rank == 0 and hasattr(run, "define_metric"):
            self._defined = True  # trainer/global_step: the x-axis of every metric family; the max of val/acc kept
            run.define_metric(STEP_METRIC)
            for family in STEPPED:
                run.define_metric(family, step_metric=STEP_METRIC)
            run.define_metric("val/acc", step_metric=STEP_METRIC, summary="max,last")
        return run

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Lightning's (every row carries ``trainer/global_step``), plus a wandb-osh trigger after
        each validation when ``osh`` is on."""
        super().log_metrics(metrics, step)
        if self._osh_dir and "val/acc" in metrics:
            trigger_sync(self._osh_dir)

    @rank_zero_only
    def finalize(self, status: str) -> None:  # noqa: D102 - Lightning's, plus a last osh trigger
        super().finalize(status)
        if self._osh_dir and run_started(self):
            trigger_sync(self._osh_dir)


def trigger_sync(osh_dir: str) -> None:
    """Asks the login node's ``wandb-osh`` to sync the current run (writes its command file)."""
    from wandb_osh.hooks import TriggerWandbSyncHook

    TriggerWandbSyncHook(communication_dir=osh_dir)()


def run_config(cfg: DictConfig, identity: dict[str, Any], run_dir: str | Path, **extra: Any) -> dict[str, Any]:
    """The W&B config of a run: the resolved config (nested), ``optimizer.name``, the identity
    under ``run`` and any ``extra`` top-level fields (``split_hash``, ``params``)."""
    from plasticity.runs.record import optimizer_name
    from plasticity.validate import model_modality

    config = OmegaConf.to_container(cfg, resolve=True)
    optimizer = config.get("optimizer")
    if isinstance(optimizer, dict) and "_target_" in optimizer:
        optimizer["name"] = optimizer_name(optimizer["_target_"])
    run = {**identity, "modality": model_modality(cfg), "name": cfg.get("run_name"), "dir": str(run_dir)}
    return {**config, "run": run, **extra}


def open_run(cfg: DictConfig, identity: dict[str, Any], run_dir: str | Path, **init: Any):
    """Starts (or continues) the W&B run of a job that has no Lightning trainer, with the logger
    config's settings overridden by ``init`` (``job_type``, ``group``, ``tags``, ``id``).

    Returns:
        The ``wandb`` run.
    """
    import hydra

    logger = hydra.utils.instantiate(cfg.logger.wandb, **init)
    run = logger.experiment
    run.config.update(run_config(cfg, identity, run_dir), allow_val_change=True)
    return run


def log_analysis(cfg: DictConfig, identity: dict[str, Any], run_dir: str | Path, tables: dict[str, list[dict]],
                 images: dict[str, str | Path], summary: dict[str, Any] | None = None) -> None:
    """Logs an analysis task's tables (``wandb.Table``) and figures (``wandb.Image``, under
    ``figures/<name>``) when the job has ``logger=wandb``; a no-op otherwise.

    Args:
        cfg: The job config.
        identity: The recipe's identity fields (logged under ``run``).
        run_dir: The run directory.
        tables: Name -> rows (dicts with the same keys).
        images: Name -> image file.
        summary: Extra summary fields.
    """
    if not wandb_enabled(cfg):
        return
    import wandb

    tags = [str(identity.get("task")), *(f"{k}={identity[k]}" for k in ("reference", "mode") if k in identity)]
    run = open_run(cfg, identity, run_dir, tags=tags)
    run.log({name: table(rows) for name, rows in tables.items() if rows}
            | {f"figures/{name}": wandb.Image(str(path)) for name, path in images.items() if Path(path).is_file()})
    if summary:
        run.summary.update(summary)


def table(rows: list[dict]):
    """A ``wandb.Table`` of dict rows (columns: the union of keys, in first-seen order)."""
    import wandb

    columns = list(dict.fromkeys(k for row in rows for k in row))
    plain = lambda v: v if v is None or isinstance(v, (int, float, str, bool)) else str(v)  # noqa: E731
    return wandb.Table(columns=columns, data=[[plain(row.get(c)) for c in columns] for row in rows],
                       allow_mixed_types=True)


def finish(record: dict[str, Any], cfg: DictConfig | None = None) -> None:
    """Ends the process's W&B run with the job's outcome in its summary (``status``, accuracies,
    ``wall_s``, ...), so the next job of a multirun starts its own run. A failed run ends with exit
    code 1; one that failed before its W&B run started gets a run holding its status and error."""
    wandb = sys.modules.get("wandb")
    run = getattr(wandb, "run", None) if wandb is not None else None
    failed = record.get("status") == "failed"
    if run is None and failed and cfg is not None and wandb_enabled(cfg):
        try:
            run = open_run(cfg, {k: v for k, v in record.items() if k not in ("error", "run_dir")},
                           record.get("run_dir", "."))
        except Exception as err:  # the record on disk is what counts; W&B is best effort here
            log.warning("could not open the W&B run to record the failure: %s", err)
            return
        wandb = sys.modules["wandb"]
    if run is None:
        return
    run.summary.update({k: record[k] for k in (*SUMMARY_KEYS, "config_hash", "error") if record.get(k) is not None})
    wandb.finish(exit_code=1 if failed else 0)
