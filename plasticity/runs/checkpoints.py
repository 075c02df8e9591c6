"""A training run's files: ``checkpoints/best.ckpt`` (the best validation accuracy: the test runs on
it), ``checkpoints/last.ckpt`` (the latest validation: an interrupted run resumes from it),
``metrics.csv`` (:class:`plasticity.tracking.logger.CSVLogger`, rows appended; a resumed run keeps
the interrupted parts' as ``metrics.part<k>.csv``, k = 0, 1, ... in resume order),
``plasticity_during_training.csv`` and the exported ``weights.safetensors``.

Every checkpoint is written whole or not at all, in the background
(:class:`plasticity.runs.checkpoint_io.BackgroundCheckpointIO`), and holds what an exact resume needs:
the loops' counters, the train loader's place in its epoch, the generators' states and the config
hash. A checkpoint that cannot resume the run never blocks it
(:func:`prepare_resume` moves it aside).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from plasticity.runs.io import atomic_path

if TYPE_CHECKING:
    from plasticity.runs.checkpoint_io import RunCheckpoint

__all__ = ["BEST_CHECKPOINT", "CHECKPOINT_DIR", "CONFIG_HASH_KEY", "DURING_TRAINING",
           "LAST_CHECKPOINT", "METRICS_FILE", "METRICS_PARTS", "WEIGHTS_FILE", "best_and_last", "check_checkpoint",
           "checkpoint_step", "metrics_files", "move_metrics_to_part", "prepare_resume"]

log = logging.getLogger(__name__)

CHECKPOINT_DIR = "checkpoints"
LAST_CHECKPOINT = "last.ckpt"
BEST_CHECKPOINT = "best.ckpt"
CONFIG_HASH_KEY = "config_hash"
"""The checkpoint's entry naming the config that wrote it (:func:`plasticity.runs.config_hash`)."""
METRICS_FILE = "metrics.csv"
METRICS_PARTS = "metrics.part*.csv"
"""The metrics of the interrupted parts of a resumed run (glob), read before ``metrics.csv``."""
WEIGHTS_FILE = "weights.safetensors"
"""A training run's exported weights: a ``model.weights_file`` for later runs."""
DURING_TRAINING = "plasticity_during_training.csv"
"""Written by ``callbacks=plasticity`` into the run directory: one row per (step, group, block) and
per (step, group) with ``block=all`` (the mean over blocks); step 0 of a pretraining run is the
random init."""


def best_and_last(run_dir: str | Path) -> tuple["RunCheckpoint", "RunCheckpoint"]:
    """The two checkpoint callbacks of a training run: ``best.ckpt`` (the best ``val/acc``) and
    ``last.ckpt`` (every validation).

    Two callbacks, because Lightning's ``save_last`` writes ``last.ckpt`` only at a validation that
    also saved a top-k checkpoint: with ``save_top_k=1`` that is an improvement only, and a run
    interrupted after a validation that did not improve would resume from an older step. Both
    overwrite their file in place (no ``-v1`` copies: a run directory holds one run) at each
    validation, the only time ``val/acc`` changes; best comes first, so ``last.ckpt`` holds its
    updated state.
    """
    from plasticity.runs.checkpoint_io import RunCheckpoint

    common = dict(dirpath=Path(run_dir) / CHECKPOINT_DIR, save_top_k=1, enable_version_counter=False,
                  auto_insert_metric_name=False)
    return (RunCheckpoint(filename=BEST_CHECKPOINT.removesuffix(".ckpt"), monitor="val/acc", mode="max", **common),
            # monitor=None: saved at every validation end, the one file replaced each time.
            RunCheckpoint(filename=LAST_CHECKPOINT.removesuffix(".ckpt"), monitor=None, **common))


def checkpoint_step(path: str | Path) -> int | None:
    """The optimizer step a Lightning checkpoint was saved at, read without its tensors: ``mmap``
    maps their bytes instead of reading them (a checkpoint can weigh hundreds of MB)."""
    import torch

    return torch.load(path, map_location="cpu", mmap=True, weights_only=True).get("global_step")


def metrics_files(run_dir: str | Path) -> list[Path]:
    """The run's metric files in the order they were written: ``metrics.part0.csv``,
    ``metrics.part1.csv``, ... (by number: part10 after part9), then ``metrics.csv``."""
    return [*sorted(Path(run_dir).glob(METRICS_PARTS), key=_part_number), Path(run_dir) / METRICS_FILE]


def _part_number(path: Path) -> int:
    number = path.name[len("metrics.part"):-len(".csv")]
    return int(number) if number.isdigit() else -1  # a hand-made name sorts first


def move_metrics_to_part(run_dir: str | Path) -> str:
    """Renames an interrupted run's ``metrics.csv`` to the next ``metrics.part<k>.csv`` (the CSV
    logger of the resumed run would overwrite it); returns the log's note on it (empty if none).

    A row the interruption cut short (the file does not end with a newline) is left out of the part:
    the resumed run logs that step again.
    """
    run_dir = Path(run_dir)
    metrics = run_dir / METRICS_FILE
    if not metrics.is_file():
        return ""
    numbers = [_part_number(p) for p in run_dir.glob(METRICS_PARTS)]
    part = run_dir / f"metrics.part{max(numbers, default=-1) + 1}.csv"
    text = metrics.read_bytes()
    if text and not text.endswith(b"\n"):  # the cut row goes first, in place (atomically), then the rename
        with atomic_path(metrics) as tmp:
            tmp.write_bytes(text[:text.rfind(b"\n") + 1])
    metrics.rename(part)
    return f"; the metrics logged so far stay in {part.name}"


CHECKPOINT_KEYS = ("global_step", "state_dict", "loops", "optimizer_states")
"""What a checkpoint must hold to resume a run."""


def prepare_resume(run_dir: str | Path, max_steps: int, config_hash: str | None = None) -> str | None:
    """Moves files so that an interrupted run in ``run_dir`` can resume: its ``metrics.csv`` to
    the next part (:func:`move_metrics_to_part`), checkpoints that cannot resume it aside. Returns the
    newest complete checkpoint; None when there is none (the run starts at step 0).

    ``last.ckpt`` first, then ``best.ckpt`` (an earlier validation; resuming there replays the
    steps after it exactly). A checkpoint that cannot be read (cut short, garbage), lacks what a
    resume needs, or was written by another config (``config_hash``) is moved aside to
    ``<name>.unreadable-<time>`` (never deleted) and the log says what was done instead. Temporary
    files of a checkpoint write that was killed are removed (they were never complete).
    """
    folder = Path(run_dir) / CHECKPOINT_DIR
    for stale in folder.glob(".*.ckpt"):  # atomic_path's temporaries: a write that never finished
        stale.unlink(missing_ok=True)
    for name in (LAST_CHECKPOINT, BEST_CHECKPOINT):
        path = folder / name
        if not path.is_file():
            continue
        step, problem = check_checkpoint(path, config_hash)
        if problem is None:
            kept = move_metrics_to_part(run_dir)
            log.info("resuming an interrupted run from step %s of %d (%s)%s", step, max_steps, path, kept)
            return str(path)
        aside = path.with_name(f"{name}.unreadable-{time.strftime('%Y%m%d-%H%M%S')}")
        path.rename(aside)
        log.warning("cannot resume from %s (%s): moved it to %s", path, problem, aside.name)
    if any(folder.glob("*.unreadable-*")):
        kept = move_metrics_to_part(run_dir)
        log.warning("no readable checkpoint left in %s: the run restarts from step 0%s", folder, kept)
    return None


def check_checkpoint(path: Path, config_hash: str | None) -> tuple[int | None, str | None]:
    """``(step, problem)``: the checkpoint's step and why it cannot resume this run (None: it can),
    from one read of the file (a checkpoint can weigh hundreds of MB)."""
    import torch

    try:
        # weights_only=False: a Lightning checkpoint also holds the loops', callbacks' and optimizer's state and the
        # generators' states (plain Python objects) that torch's weights-only loader refuses; the file is the run's own.
        checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # truncated zip, pickle garbage, an empty file: all unreadable
        return None, f"not a readable checkpoint: {type(err).__name__}: {(str(err).splitlines() or [''])[0]}"
    if not isinstance(checkpoint, dict) or any(k not in checkpoint for k in CHECKPOINT_KEYS):
        return None, "not a Lightning training checkpoint"
    saved = checkpoint.get(CONFIG_HASH_KEY)
    if config_hash is not None and saved is not None and saved != config_hash:
        return None, f"written by another config (config hash {saved}, this run's {config_hash})"
    return checkpoint["global_step"], None
