"""Lightning's checkpoint plugins for a run's checkpoints: every one written whole or not at all,
in the background, off the training step's path.

Apart from :mod:`plasticity.runs.checkpoints` (the run folder's names, read by launches and
reports without importing Lightning): only a training process needs this one.
"""

from __future__ import annotations

import errno
import os
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import AsyncCheckpointIO
from lightning_utilities.core.apply_func import apply_to_collection

from plasticity.runs.io import atomic_path

__all__ = ["AtomicCheckpointIO", "BackgroundCheckpointIO", "RunCheckpoint", "save_atomic"]


class RunCheckpoint(ModelCheckpoint):
    """Lightning's ``ModelCheckpoint`` whose state follows its run folder when that moved (the outputs
    renamed, another mount): Lightning's own keeps none of it on a changed ``dirpath`` but the best path,
    and a resumed run would then end without its best score."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        old = state_dict.get("dirpath", self.dirpath)
        if old != self.dirpath:  # the same files, under the run folder's new place
            def here(path):
                return os.path.join(self.dirpath, os.path.relpath(path, old)) if path else path
            paths = ("best_model_path", "kth_best_model_path", "last_model_path")
            state_dict = {**state_dict, "dirpath": self.dirpath,
                          **{k: here(state_dict[k]) for k in paths if k in state_dict},
                          "best_k_models": {here(k): v for k, v in state_dict.get("best_k_models", {}).items()}}
        super().load_state_dict(state_dict)


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


class BackgroundCheckpointIO(AsyncCheckpointIO):
    """:class:`AtomicCheckpointIO`'s writes on one background thread (Lightning's ``AsyncCheckpointIO``):
    the step goes on while a checkpoint is written, one write at a time, in the order they were asked.

    The checkpoint is copied to the CPU before the step goes on (the optimizer changes the live
    tensors in place). A write that fails is raised at the next save or at the end of training
    (teardown, which waits for the pending writes); once one failed, no later one is written, so
    ``best.ckpt`` and ``last.ckpt`` never come from different validations.

    Args:
        run_dir: The run's folder (see :class:`AtomicCheckpointIO`).
    """

    def __init__(self, run_dir: str | Path) -> None:
        super().__init__(AtomicCheckpointIO(run_dir))
        self._last: Future | None = None
        self._raised = False

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any = None) -> None:
        self._raise_failure()
        # .to(copy=True): a copy on the CPU, taken before the next optimizer step changes the weights.
        snapshot = apply_to_collection(checkpoint, torch.Tensor, lambda t: t.detach().to("cpu", copy=True))
        self._ensure_setup()
        self._last = self._executor.submit(self._write, snapshot, path, storage_options)

    def _write(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any) -> None:
        if self._error is not None:  # a failed write stops the later ones (and the run, at the next save)
            return
        try:
            self.checkpoint_io.save_checkpoint(checkpoint, path, storage_options)
        except BaseException as err:
            self._error = err

    def wait(self) -> None:
        """Returns once every checkpoint asked for is on the disk (or failed: raised here)."""
        if self._last is not None:
            self._last.result()
        self._raise_failure()

    def load_checkpoint(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.wait()  # a file being written is read once it is whole
        return super().load_checkpoint(*args, **kwargs)

    def teardown(self) -> None:
        """Waits for the pending writes, then raises the first that failed (once: Lightning's
        teardown runs again on the way out of the error)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        self._raise_failure()

    def _raise_failure(self) -> None:
        if self._error is not None and not self._raised:  # kept: the writes still queued stay skipped
            self._raised = True
            raise self._error
