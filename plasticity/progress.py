"""The training progress bar, counted in optimizer steps (``step 150/1000``), not epochs.

On a terminal it is a live rich bar with elapsed and remaining time, the training loss and the
last validation accuracy; in a log file (SLURM, a pipe) it prints one plain line per validation
instead of redrawing a bar.
"""

from __future__ import annotations

from lightning.pytorch.callbacks import ProgressBar
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from plasticity.console import console

__all__ = ["StepProgressBar"]


class StepProgressBar(ProgressBar):
    """Progress of a step-based run: ``step <global step>/<max steps>`` plus loss and val/acc."""

    def __init__(self) -> None:
        super().__init__()
        self._progress: Progress | None = None  # a live bar on a terminal, its task in _task
        self._enabled, self._task, self._console = True, None, console()

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def _text(self, trainer) -> str:
        metrics = trainer.progress_bar_metrics
        parts = [f"step {trainer.global_step}/{trainer.max_steps}",
                 f"loss {float(metrics['loss']):.4f}" if "loss" in metrics else "",
                 f"val/acc {100 * float(metrics['val/acc']):.2f}%" if "val/acc" in metrics else ""]
        return "  ".join(p for p in parts if p)

    def on_train_start(self, trainer, pl_module) -> None:
        if not self._enabled or not self._console.is_terminal:
            return
        self._progress = Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                                  TextColumn("left"), TimeRemainingColumn(), console=self._console)
        self._progress.start()
        self._task = self._progress.add_task(self._text(trainer), total=trainer.max_steps,
                                             completed=trainer.global_step)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=trainer.global_step, description=self._text(trainer))

    def on_validation_end(self, trainer, pl_module) -> None:
        if not self._enabled or trainer.sanity_checking or trainer.state.fn != "fit":
            return
        if self._progress is not None:
            self._progress.update(self._task, description=self._text(trainer))
        else:
            self._console.print(self._text(trainer), highlight=False)

    def on_train_end(self, *args) -> None:
        """Stops the live bar (also after an exception, ``on_exception``): the terminal is the run's again."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    on_exception = on_train_end
