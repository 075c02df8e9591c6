"""Lightning's checkpoint plugin for a run's checkpoints: every one written whole or not at all.

Apart from :mod:`plasticity.runs.checkpoints` (the run folder's names, read by launches and
reports without importing Lightning): only a training process needs this one.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from plasticity.runs.io import atomic_path

__all__ = ["AtomicCheckpointIO", "save_atomic"]


class AtomicCheckpointIO(TorchCheckpointIO):
    """Writes each checkpoint to a temporary file beside the target, flushes it to the disk and
    renames it over the old one: ``last.ckpt`` is always the previous complete checkpoint, whatever
    stops the write (a kill, a full disk). Reading is Lightning's own.

    Args:
        run_dir: The run's folder. Deleted while the run goes on, it is not made again for a
            checkpoint (a half-empty run folder would pass for the run): the write raises.
    """

    def __init__(self, run_dir: str | Path) -> None:
        super().__init__()
        self.run_dir = Path(run_dir)

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options (got {storage_options!r})")
        if not self.run_dir.is_dir():
            raise FileNotFoundError(errno.ENOENT, "the run folder vanished", str(self.run_dir))
        save_atomic(checkpoint, path)


def save_atomic(checkpoint: dict[str, Any], path: str | Path) -> None:
    """``torch.save`` to a temporary file (its folder made if needed), fsync, rename over ``path``."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        torch.save(checkpoint, f)
        f.flush()
        os.fsync(f.fileno())  # on the disk before the rename: a crash cannot leave a renamed empty file
