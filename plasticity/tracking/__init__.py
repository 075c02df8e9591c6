"""W&B for runs a researcher can slice: what each run logs, the report and dashboard in W&B, and
the offline path of compute nodes without internet.

- :mod:`~plasticity.tracking.logger`: the ``WandbLogger`` of ``logger=wandb`` (the run's resolved
  config as a nested dict, the summary, metric definitions, analysis tables and figures);
- :mod:`~plasticity.tracking.dashboard`: ``task=dashboard``, a W&B workspace built with
  wandb-workspaces (saved online, or written as JSON to push later);
- :mod:`~plasticity.tracking.report_run`: ``task=report logger=wandb``, the report of a sweep as
  one W&B run;
- :mod:`~plasticity.tracking.sync`: one command that uploads every offline run under a sweep
  directory (``wandb sync`` underneath);
- :mod:`~plasticity.tracking.runfile`: a reader of W&B's own ``run-<id>.wandb`` files.

Nothing here imports wandb until it is used.
"""

from __future__ import annotations

__all__ = ["STEP_METRIC", "SUMMARY_KEYS", "wandb_enabled"]

STEP_METRIC = "trainer/global_step"
"""The x-axis of every logged metric and dashboard curve: the optimizer step Lightning logs with each row."""

SUMMARY_KEYS = ("status", "best_val_acc", "test_acc", "best_step", "trainable_params", "wall_s")
"""The record fields every training run writes into its W&B summary (present ones only)."""


def wandb_enabled(cfg) -> bool:
    """The job config has ``logger=wandb``."""
    return bool((cfg.get("logger") or {}).get("wandb"))
