"""The LightningModule that finetunes exactly one component group under the paper's protocol."""

from __future__ import annotations

import math
import random
from typing import Callable, Iterable

import lightning as L
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import get_total_norm
from torch.optim.lr_scheduler import LambdaLR
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from plasticity.components import Selection
from plasticity.runs.checkpoints import CONFIG_HASH_KEY


class Diverged(RuntimeError):
    """The training loss became NaN or infinite."""


def warmup_cosine(max_steps: int, warmup_steps: int) -> Callable[[int], float]:
    """Learning-rate factor: linear warmup to 1 over ``warmup_steps``, then cosine decay to 0 at ``max_steps``."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps  # step 0 already moves (a factor of 0 would waste it); 1 at the end
        progress = (step - warmup_steps) / max(1, max_steps - warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor


class FinetuneModule(L.LightningModule):
    """Trains ``selection.trainable`` of a timm ViT; everything else is frozen.

    Logged every optimizer step (before clipping): ``train/loss`` (mean over the step's
    micro-batches), ``lr`` (the base rate), ``grad_norm/<group>`` (each trained group: one for a
    single group, each of a combination such as ``mha+fc1``), ``grad_norm/head``,
    ``grad_norm/final_norm`` (when it trains) and ``grad_norm/<group>/block_<i>``.
    Logged at each validation: ``val/loss``, ``val/acc``; at test: ``test/loss``, ``test/acc``.
    Accuracies and losses are sample-weighted (micro). Checkpoints hold only trainable parameters.

    Under DDP the numbers are those of one process with the same global batch: ``train/loss`` is
    the mean over the ranks (their micro-batches are equal), the gradient norms are taken after
    DDP's all-reduce (the same on every rank), and the evaluation metrics sum their counts and
    weighted losses over the ranks' disjoint shards.

    Args:
        net: The model; parameters outside ``selection.trainable`` must already be frozen.
        selection: What trains (from :func:`plasticity.components.select`).
        num_classes: Classes of the task.
        optimizer: Builds the optimizer from the trainable parameters (a Hydra partial).
        max_steps: Optimizer steps, the length of the cosine schedule.
        warmup_steps: Linear warmup steps.
        train_transform: Batch transform applied on the device to training batches.
        eval_transform: Batch transform applied on the device to validation and test batches.
        lr_scale: Group -> learning-rate multiplier for the groups of a combination
            (``{"ln1": 10}``: LayerNorms at 10x the base rate; the schedule scales every group alike).
        config_hash: The run's config hash, saved in each checkpoint (a checkpoint of another
            config never resumes the run).
    """

    def __init__(self, net: nn.Module, selection: Selection, num_classes: int,
                 optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer], max_steps: int,
                 warmup_steps: int, train_transform: nn.Module, eval_transform: nn.Module,
                 lr_scale: dict[str, float] | None = None, config_hash: str | None = None) -> None:
        super().__init__()
        self.lr_scale, self.config_hash = dict(lr_scale or {}), config_hash
        self.net, self.selection, self.optimizer_factory = net, selection, optimizer
        self.max_steps, self.warmup_steps = max_steps, warmup_steps
        self.train_transform, self.eval_transform = train_transform, eval_transform
        self.val_acc, self.test_acc = (MulticlassAccuracy(num_classes, average="micro") for _ in range(2))
        self.val_loss, self.test_loss = MeanMetric(), MeanMetric()  # batch-size weighted: the mean over every example
        self.strict_loading = False  # checkpoints omit frozen weights
        self._loss_sum, self._loss_count = torch.zeros(()), 0  # the losses since the last optimizer step
        self._rng_to_restore: dict | None = None  # a resumed run's generator states, set at on_train_start

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.net(images)

    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        images, labels, *sizes = batch  # sizes: original (h, w) of prepared (squashed) train images
        transform = self.train_transform if self.trainer.training else self.eval_transform
        return transform(images, *sizes), labels

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        images, labels = batch
        loss = F.cross_entropy(self(images), labels)
        self._loss_sum = self._loss_sum.to(loss.device) + loss.detach().float()
        self._loss_count += 1
        return loss

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        # Lightning calls this once per optimizer step, after the last micro-batch's backward and
        # before gradient clipping: the logged gradient norms are the unclipped ones.
        loss = self._loss_sum / max(1, self._loss_count)
        self._loss_sum, self._loss_count = torch.zeros((), device=loss.device), 0
        if self.trainer.world_size > 1:  # equal micro-batches on every rank: the mean of means is the mean
            loss = self.trainer.strategy.reduce(loss, reduce_op="mean")
        if not torch.isfinite(loss):
            raise Diverged(f"training loss is {loss.item()} at step {self.global_step}")
        if self.trainer.progress_bar_callback is not None:
            self.log("loss", loss, on_step=True, on_epoch=False, prog_bar=True, logger=False)
        # As Lightning: the first step, every n-th after, and the last one when the run is told to stop.
        if self.global_step % self.trainer.log_every_n_steps == 0 or self.trainer.should_stop:
            # Straight to the loggers, one host sync for all: each self.log costs ~0.6 ms of Lightning's
            # bookkeeping (moving its result state), ~15% of a small group's step at a dozen metrics a step.
            metrics = {"train/loss": loss, **self.grad_norms()}
            values = torch.stack([v.float() for v in metrics.values()]).tolist()
            metrics = dict(zip(metrics, values)) | {"lr": optimizer.param_groups[0]["lr"], "epoch": self.current_epoch}
            for logger in self.loggers:
                logger.log_metrics(metrics, step=self.global_step)

    def grad_norms(self) -> dict[str, torch.Tensor]:
        """L2 norms of the gradients of each trained group (one for a single group; each of a
        combination), the head, the final norm, and each group per block."""
        params, sel = dict(self.net.named_parameters()), self.selection

        def norm(names: Iterable[str]) -> torch.Tensor:
            grads = [params[n].grad for n in names if params[n].grad is not None]
            return get_total_norm(grads) if grads else torch.zeros((), device=self.device)

        norms = {f"grad_norm/{g}": norm(names) for g, names in sel.by_group.items()}
        norms["grad_norm/head"] = norm(sel.head)
        if any(n in sel.trainable for n in sel.final_norm):
            norms["grad_norm/final_norm"] = norm(sel.final_norm)
        for g, names in sel.by_group.items():
            for block, in_block in sel.blocks.items():
                if members := [n for n in in_block if n in set(names)]:
                    norms[f"grad_norm/{g}/block_{block}"] = norm(members)
        return norms

    def _eval_step(self, batch, stage: str, accuracy: MulticlassAccuracy, mean_loss: MeanMetric) -> None:
        images, labels = batch
        logits, batch_size = self(images), labels.shape[0]
        accuracy(logits, labels)
        mean_loss.update(F.cross_entropy(logits, labels).detach(), weight=batch_size)
        self.log(f"{stage}/loss", mean_loss, on_step=False, on_epoch=True, batch_size=batch_size)
        self.log(f"{stage}/acc", accuracy, on_step=False, on_epoch=True, batch_size=batch_size, prog_bar=True)

    def validation_step(self, batch, batch_idx: int) -> None:
        self._eval_step(batch, "val", self.val_acc, self.val_loss)

    def test_step(self, batch, batch_idx: int) -> None:
        self._eval_step(batch, "test", self.test_acc, self.test_loss)

    def param_groups(self) -> list[dict]:
        """The trainable parameters as optimizer groups: one at the base learning rate (first, so
        the logged ``lr`` is the base rate), then one per group of ``lr_scale`` at ``lr x scale``."""
        params = dict(self.net.named_parameters())
        scaled = {g: set(names) for g, names in self.selection.by_group.items() if g in self.lr_scale}
        taken = set().union(*scaled.values())
        groups = [{"params": [p for n, p in params.items() if p.requires_grad and n not in taken]}]
        groups += [{"params": [params[n] for n in params if n in names and params[n].requires_grad],  # the partial's lr
                    "lr": self.optimizer_factory.keywords["lr"] * float(self.lr_scale[g]), "name": g}
                   for g, names in scaled.items()]
        return [group for group in groups if group["params"]]

    def configure_optimizers(self):
        optimizer = self.optimizer_factory(self.param_groups())
        schedule = LambdaLR(optimizer, warmup_cosine(self.max_steps, self.warmup_steps))  # scales every group alike
        # "step": the schedule advances per optimizer step (max_steps long), not per epoch.
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        # Frozen weights are the pretrained model's, rebuilt at load: keep only what trains (see strict_loading).
        trainable = {f"net.{n}" for n in self.selection.trainable}
        checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items()
                                    if not k.startswith("net.") or k in trainable}
        # What the rest of the run draws (the augmentation's crops and flips, dropout): saved at the
        # checkpoint, where the uninterrupted run goes on drawing. Rank 0's state is every rank's: each
        # is seeded alike and draws the same number of values per micro-batch.
        checkpoint[RNG_KEY] = rng_states()
        if self.config_hash is not None:
            checkpoint[CONFIG_HASH_KEY] = self.config_hash

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self._rng_to_restore = checkpoint.get(RNG_KEY)

    def on_train_start(self) -> None:
        # Restored here, not at load: between the load and the first resumed batch Lightning runs the
        # sanity validation and builds the loaders; from here on only the training draws.
        if self._rng_to_restore is not None:
            set_rng_states(self._rng_to_restore)
            self._rng_to_restore = None


RNG_KEY = "rng_states"
"""The checkpoint's entry for the random generators' states (:func:`rng_states`)."""


def rng_states() -> dict:
    """The states of every random generator a run may draw from: Python's, NumPy's, torch's CPU and
    CUDA (when present) generators."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    # NumPy's key as a tensor: a checkpoint holds only what torch's weights-only loader accepts.
    states = {"python": random.getstate(), "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss,
                                                      gauss), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict) -> None:
    """Sets the generators to :func:`rng_states`' ``states``."""
    random.setstate(states["python"])
    kind, keys, pos, has_gauss, gauss = states["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
