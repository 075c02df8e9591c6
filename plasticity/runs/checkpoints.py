"""A training run's files: ``checkpoints/best.ckpt`` (the best validation accuracy: the test runs on
it), ``checkpoints/last.ckpt`` (the latest validation: an interrupted run resumes from it),
``metrics.csv`` (Lightning's CSV logger; a resumed run keeps the interrupted parts' as
``metrics.part<k>.csv``, k = 0, 1, ... in resume order), ``plasticity_during_training.csv`` and the
exported ``weights.safetensors``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lightning.pytorch.callbacks import ModelCheckpoint

__all__ = ["CHECKPOINT_DIR", "DURING_TRAINING", "LAST_CHECKPOINT", "METRICS_FILE", "METRICS_PARTS", "WEIGHTS_FILE",
           "best_and_last", "checkpoint_step", "keep_metrics", "resumable"]

log = logging.getLogger(__name__)

CHECKPOINT_DIR = "checkpoints"
LAST_CHECKPOINT = "last.ckpt"
METRICS_FILE = "metrics.csv"
METRICS_PARTS = "metrics.part*.csv"
"""The metrics of the interrupted parts of a resumed run (glob), read before ``metrics.csv``."""
WEIGHTS_FILE = "weights.safetensors"
"""A training run's exported weights: a ``model.weights_file`` for later runs."""
DURING_TRAINING = "plasticity_during_training.csv"
"""Written by ``callbacks=plasticity`` into the run directory: one row per (step, group, block) and
per (step, group) with ``block=all`` (the mean over blocks); step 0 of a pretraining run is the
random init."""


def best_and_last(run_dir: str | Path) -> "ModelCheckpoint":
    """The checkpoint callback of a training run: ``best.ckpt`` by ``val/acc`` and ``last.ckpt``.

    Both are overwritten in place (no ``-v1`` copies: a run directory holds one run), and saved at
    each validation, the only time ``val/acc`` changes.
    """
    from lightning.pytorch.callbacks import ModelCheckpoint

    return ModelCheckpoint(
        dirpath=Path(run_dir) / CHECKPOINT_DIR,
        filename="best",
        monitor="val/acc",
        mode="max",
        save_last=True,
        save_top_k=1,
        enable_version_counter=False,
        auto_insert_metric_name=False,
    )


def checkpoint_step(path: str | Path) -> int | None:
    """The optimizer step a Lightning checkpoint was saved at.

    ``weights_only=False``: a Lightning checkpoint also holds the loops', callbacks' and optimizer's
    state (plain Python objects) that torch's weights-only loader refuses; the file is this run's own.
    """
    import torch

    return torch.load(path, map_location="cpu", weights_only=False).get("global_step")


def keep_metrics(run_dir: str | Path) -> str:
    """Renames an interrupted run's ``metrics.csv`` to the next ``metrics.part<k>.csv`` (the CSV
    logger of the resumed run would overwrite it); returns the log's note on it (empty if none)."""
    run_dir = Path(run_dir)
    metrics = run_dir / METRICS_FILE
    if not metrics.is_file():
        return ""
    part = run_dir / f"metrics.part{len(list(run_dir.glob(METRICS_PARTS)))}.csv"
    metrics.rename(part)
    return f"; the metrics logged so far stay in {part.name}"


def resumable(run_dir: str | Path, max_steps: int) -> str | None:
    """``last.ckpt`` of an interrupted run in ``run_dir``, its metrics kept aside; None when there is none.

    Raises:
        RuntimeError: ``last.ckpt`` cannot be read (a file cut short by a kill); the message says
            how to restart.
    """
    last = Path(run_dir) / CHECKPOINT_DIR / LAST_CHECKPOINT
    if not last.is_file():
        return None
    kept = keep_metrics(run_dir)
    try:
        step = checkpoint_step(last)
    except Exception as err:
        raise RuntimeError(f"cannot resume: {last} is not a readable checkpoint ({type(err).__name__}: "
                           f"{str(err).splitlines()[0]}). Fix: delete it to restart the run from step 0, or "
                           f"resume=false.") from err
    log.info("resuming an interrupted run from step %s of %d (%s)%s", step, max_steps, last, kept)
    return str(last)
