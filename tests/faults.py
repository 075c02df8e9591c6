"""Fault injection for the resume tests: callbacks that stop their own process at a chosen point
of a real run (a stand-in for preemption, ``kill -9``, Ctrl-C and a crash; used by tests only).

Passed on the command line, e.g. ``+callbacks.fault._target_=tests.faults.Kill
+callbacks.fault.signal=KILL +callbacks.fault.at=checkpoint +callbacks.fault.step=6``.
"""

from __future__ import annotations

import io
import os
import signal as signals

from lightning.pytorch.callbacks import Callback


class Kill(Callback):
    """Sends ``signal`` to its own process at step ``step``.

    Args:
        signal: ``KILL``, ``TERM`` or ``INT``.
        at: ``checkpoint``: once the checkpoint of step ``step`` is on the disk (before the next
            batch); ``validation``: in the middle of the validation at step ``step`` (before its
            checkpoint); ``write``: while the checkpoint of step ``step`` is being written, its
            temporary file holding part of the bytes (the earlier checkpoints whole).
        step: The optimizer step.
    """

    def __init__(self, signal: str, at: str, step: int) -> None:
        if at not in ("checkpoint", "validation", "write"):
            raise ValueError(f"at={at!r}")
        self.signum, self.at, self.step = getattr(signals, f"SIG{signal}"), at, step

    def fire(self) -> None:
        os.kill(os.getpid(), self.signum)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.at == "checkpoint" and trainer.global_step == self.step:
            trainer.strategy.checkpoint_io.wait()  # the background writes of the step done
            self.fire()

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        if self.at == "validation" and trainer.global_step == self.step and batch_idx == 0:
            self.fire()

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        if self.at == "write" and trainer.global_step == self.step:
            from plasticity.runs import checkpoint_io

            trainer.strategy.checkpoint_io.wait()  # the earlier checkpoints whole: the next file opened is this one's
            # save_atomic's `open` (a module global shadows the builtin): the checkpoint's temporary file.
            checkpoint_io.open = lambda path, mode: _KillMidFile(path, mode, self.signum)
            self.step = -1  # once


class _KillMidFile(io.FileIO):
    """A file that sends ``signum`` to its process once it holds 1 KiB: torch.save has written its
    header and pickle and is writing the tensors' bytes, unbuffered (they are in the file)."""

    def __init__(self, path, mode: str, signum: int) -> None:
        super().__init__(path, mode)
        self.signum = signum

    def write(self, data) -> int:
        written = super().write(data)
        if self.tell() >= 1024:
            os.kill(os.getpid(), self.signum)
        return written


class Fail(Callback):
    """Raises at the start of training in the run whose ``component`` is ``fail_for`` (a run that
    fails at run time beside others that do not)."""

    def __init__(self, component: str, fail_for: str) -> None:
        self.fails = component == fail_for

    def on_train_start(self, trainer, pl_module) -> None:
        if self.fails:
            raise RuntimeError("injected failure (tests.faults.Fail)")


class Vanish(Callback):
    """Deletes the run folder at step ``step`` (a user's ``rm -r`` while the run goes on)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            import shutil

            shutil.rmtree(trainer.default_root_dir)
            self.step = -1  # once


class ReadOnly(Callback):
    """Makes the run folder read-only at step ``step``: a read-only bind mount over it (what a disk
    that fails over to read-only does to every new write; root only). The test unmounts it."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            import subprocess

            folder = trainer.default_root_dir
            subprocess.run(["mount", "--bind", folder, folder], check=True)
            subprocess.run(["mount", "-o", "remount,bind,ro", folder], check=True)
            self.step = -1  # once
