"""Lightning callbacks of the framework."""

from __future__ import annotations

import time

import lightning as L
import numpy as np
import torch

from plasticity.components import GROUPS
from plasticity.data import load_splits
from plasticity.measure import measure, pair_indices


class PlasticityCallback(L.Callback):
    """Measures the plasticity of each group during finetuning, on a fixed set of pairs.

    Every ``every_n_steps`` optimizer steps (and before the first), the model being finetuned is
    put in eval mode and P(f) of ``groups`` is measured on the same ``n_pairs`` pairs (reference
    test image, downstream validation image), on the model's device. Logged to every logger:
    ``plasticity/<group>`` (mean over blocks), ``plasticity/<group>/block_<i>`` and
    ``plasticity/cost``, the fraction of the training wall time spent measuring.

    Args:
        reference: Dataset of the reference images (the pretraining distribution).
        data_dir: Where the reference dataset lives.
        every_n_steps: Optimizer steps between measurements.
        n_pairs: Number of fixed pairs.
        batch_size: Pairs per forward (2 x batch_size images).
        mode: ``embedding`` (the paper's) or ``layer``.
        groups: Groups to measure.
        severity: Severity of a corrupted reference dataset.
    """

    def __init__(self, reference: str, data_dir: str, every_n_steps: int = 100, n_pairs: int = 256,
                 batch_size: int = 128, mode: str = "embedding", groups: tuple[str, ...] = GROUPS,
                 severity: int = 5) -> None:
        self.reference, self.data_dir, self.severity = reference, data_dir, severity
        self.every_n_steps, self.n_pairs, self.batch_size = every_n_steps, n_pairs, batch_size
        self.mode, self.groups = mode, tuple(groups)
        self.pairs: tuple[torch.Tensor, torch.Tensor] | None = None
        self.measure_s = 0.0
        self._start = 0.0
        self._last_step = -1

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit" or self.pairs is not None:
            return
        ref = load_splits(self.reference, self.data_dir, severity=self.severity,
                          img_size=pl_module.eval_transform.img_size).test
        down = trainer.datamodule.splits.val
        ri, di = pair_indices(len(ref), len(down), self.n_pairs, "sequential")
        as_tensor = lambda a: torch.from_numpy(np.ascontiguousarray(a)).permute(0, 3, 1, 2)  # noqa: E731
        self.pairs = as_tensor(ref.images[ri]), as_tensor(down.images[di])

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start = time.perf_counter()
        self._measure(trainer, pl_module)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step != self._last_step and step % self.every_n_steps == 0:
            self._measure(trainer, pl_module)

    def _batches(self, pl_module: L.LightningModule):
        x, y = self.pairs
        for start in range(0, self.n_pairs, self.batch_size):
            stop = start + self.batch_size
            images = torch.cat([x[start:stop], y[start:stop]]).to(pl_module.device)
            yield pl_module.eval_transform(images)

    @torch.no_grad()
    def _measure(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._last_step = trainer.global_step
        started = time.perf_counter()
        net = pl_module.net
        was_training = net.training
        net.eval()
        rows = measure(net, self._batches(pl_module), self.mode, self.groups).summary()
        net.train(was_training)
        metrics = {f"plasticity/{r['group']}/block_{r['block']}": r["mean"] for r in rows}
        for group in self.groups:
            metrics[f"plasticity/{group}"] = float(np.mean([r["mean"] for r in rows if r["group"] == group]))
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize()
        self.measure_s += time.perf_counter() - started
        metrics["plasticity/cost"] = self.measure_s / max(time.perf_counter() - self._start, 1e-9)
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=trainer.global_step)
