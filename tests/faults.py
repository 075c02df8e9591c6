"""Fault injection for the resume tests: callbacks that stop their own process at a chosen point
of a real run (a stand-in for preemption, ``kill -9``, Ctrl-C and a crash; used by tests only).

Passed on the command line, e.g. ``+callbacks.fault._target_=tests.faults.Kill
+callbacks.fault.signal=KILL +callbacks.fault.at=checkpoint +callbacks.fault.step=6``.
"""

from __future__ import annotations

import os
import signal as signals

from lightning.pytorch.callbacks import Callback


class Kill(Callback):
    """Sends ``signal`` to its own process at step ``step``.

    Args:
        signal: ``KILL``, ``TERM`` or ``INT``.
        at: ``checkpoint``: once the checkpoint of step ``step`` is on the disk (before the next
            batch); ``validation``: in the middle of the validation at step ``step`` (before its
            checkpoint); ``write``: while the checkpoint of step ``step`` is being written.
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
            self.fire()

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        if self.at == "validation" and trainer.global_step == self.step and batch_idx == 0:
            self.fire()

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        if self.at == "write" and trainer.global_step == self.step:
            checkpoint["fault"] = _FireWhenWritten(self.signum)  # torch.save pickles it in the middle of the write


class _FireWhenWritten:
    def __init__(self, signum: int) -> None:
        self.signum = signum

    def __reduce__(self):
        os.kill(os.getpid(), self.signum)
        return (int, (0,))


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
