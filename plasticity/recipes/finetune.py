"""``task=finetune``: train one component group of a pretrained ViT under the paper's protocol.

Protocol (paper App. C.3): SGD, momentum 0.9, no weight decay, cosine decay over ``max_steps``
(after ``warmup_steps`` of linear warmup), gradient clipping at global norm 1, effective batch
``batch_size`` = micro-batch x processes x accumulation. The reported number is the test accuracy
of the checkpoint with the best validation accuracy.

A run may use several processes (DDP: ``trainer.devices`` x ``trainer.num_nodes``, Lightning's
``ddp`` strategy): ``task.batch_size`` stays the global batch, each process takes its share of
the same epoch-seeded order (:class:`plasticity.data.datamodule.EpochBatchSampler`), and only
rank 0 writes (checkpoints, metrics, weights; the record in :mod:`plasticity.job`).

An interrupted run of the same config resumes from its newest complete checkpoint
(:func:`plasticity.runs.checkpoints.prepare_resume`) exactly where it stopped: each checkpoint holds the
loops' counters, the train loader's place inside its epoch, the generators' states and the
config hash, so the resumed run computes what the uninterrupted one would have, bit for bit. The
metrics the interrupted part logged stay in ``metrics.part<k>.csv`` (the CSV logger starts a new file).
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import hydra
from omegaconf import DictConfig

from plasticity.adapters import apply_lora, check_job_adapter, export_merged
from plasticity.components import AUTO, adapter_of, blocks_of, check_strategy, parse_component, strategy_of, tag_of
from plasticity.recipes import register
from plasticity.recipes.base import RecipeBase
from plasticity.runs.checkpoints import (CHECKPOINT_DIR, LAST_CHECKPOINT, WEIGHTS_FILE, best_and_last,
                                         checkpoint_step, prepare_resume)
from plasticity.runs.ranks import announce, is_rank_zero, num_nodes
from plasticity.runs.record import config_hash, optimizer_name
from plasticity.validate import Problems, check_callbacks, check_optimizer, check_trainer, world_size

if TYPE_CHECKING:
    import lightning as L
    import torch
    from lightning.pytorch.callbacks import ModelCheckpoint

    from plasticity.components import Selection
    from plasticity.data.datamodule import DataModule
    from plasticity.module import FinetuneModule

log = logging.getLogger(__name__)


@register
class Finetune(RecipeBase):
    """Recipe of ``task=finetune``: :meth:`fit` builds each piece from its config section, trains and tests."""

    name = "finetune"
    sections = ("task", "model", "dataset", "component", "adapter", "optimizer", "trainer", "seed")
    trains = True

    @classmethod
    def validate(cls, cfg: DictConfig, p: Problems, local: bool = True) -> None:
        groups = check_strategy(cfg, p)
        if groups is not None:  # an adapter is checked against the groups it would adapt
            check_job_adapter(cfg, groups, p)
        super().validate(cfg, p, local)
        check_optimizer(cfg, p)
        check_steps(cfg, p)
        check_trainer(cfg, p, local)
        check_callbacks(cfg, p)

    @classmethod
    def identity(cls, cfg: DictConfig) -> dict[str, Any]:
        lr = cfg.optimizer.get("lr")
        # identity() also names a job that validation rejects: an optimizer without _target_ reads "?".
        return super().identity(cfg, component=tag_of(cfg),
                                optimizer=optimizer_name(cfg.optimizer.get("_target_", "?")),
                                lr=float(lr) if isinstance(lr, (int, float)) else lr)

    trainer: "L.Trainer | None" = None
    """The Lightning trainer once built (what :meth:`progress` reads)."""

    def run(self) -> dict[str, Any]:
        """Trains, tests the best-validation checkpoint and returns the result fields (and, with
        ``task.export_merged``, writes the LoRA-merged weights)."""
        fields, module = self.fit()
        if adapter_of(self.cfg) and self.cfg.task.export_merged and self.trainer.is_global_zero:
            fields["weights_file"] = str(export_merged(module.net, self.run_dir / WEIGHTS_FILE))
        return fields

    def fit(self) -> tuple[dict[str, Any], "FinetuneModule"]:
        """The recipe's steps: the model, its data, what trains, the LightningModule and the trainer;
        trains, then tests. Returns the result fields and the module holding the best-validation weights."""
        import lightning as L

        from plasticity.data.sources import recorded_classes
        from plasticity.data.splits import expected_classes
        from plasticity.tracking.logger import run_config

        cfg, rank_zero, chash = self.cfg, is_rank_zero(), config_hash(self.cfg, self.sections)
        # Seeded before anything draws from torch's RNG: a random init, the new head, LoRA's lora_A (and the workers).
        L.seed_everything(cfg.seed, workers=True, verbose=False)
        net = self.create_net(expected_classes(cfg.dataset.name, cfg.dataset.num_classes))
        datamodule = build_datamodule(cfg, net)
        net, selection, strategy = build_selection(cfg, net, datamodule)
        module = build_module(cfg, net, selection, datamodule, chash)
        # The other ranks take rank 0's checkpoint (passed in), so every rank restarts at the same step; rank 0
        # (resume=true) readies the run directory for it.
        resume = self.resume if self.resume is not None or not rank_zero else (
            prepare_resume(self.run_dir, cfg.task.max_steps, chash) if cfg.resume else None)
        checkpoint, last = best_and_last(self.run_dir)
        trainer = self.trainer = build_trainer(cfg, self.run_dir, [checkpoint, last])
        # Every logger gets the resolved config, the run identity, split_hash and the parameter counts:
        # W&B filters and groups runs by any of them (component.name, ...).
        config = run_config(cfg, self.identity(cfg), self.run_dir, split_hash=datamodule.split_hash,
                            params=selection.counts)
        for logger in trainer.loggers:
            logger.log_hyperparams(config)
        if rank_zero:  # the ranks Lightning starts next (or that srun started) follow this decision
            announce(self.run_dir, "run", resume, num_nodes=num_nodes(cfg))
        start = time.perf_counter()
        trainer.fit(module, datamodule=datamodule, ckpt_path=resume)
        train_s = time.perf_counter() - start
        best = checkpoint.best_model_path  # the paper's protocol: the test runs on the best validation's weights
        tested = trainer.test(module, datamodule=datamodule, ckpt_path=best, verbose=False)[0]
        return {"best_val_acc": float(checkpoint.best_model_score), "test_acc": float(tested["test/acc"]),
                "test_loss": float(tested["test/loss"]), "majority_acc": majority_share(datamodule.splits.test.labels),
                "best_step": int(checkpoint_step(best)), "steps": int(trainer.global_step),
                "trainable_params": selection.counts["group"], "params": selection.counts,
                "split_hash": datamodule.split_hash, **recorded_classes(cfg.dataset.name), "train_s": round(train_s, 2),
                "best_checkpoint": str(Path(best).relative_to(self.run_dir)) if cfg.task.keep_checkpoints else None,
                "resumed": resume is not None,
                **strategy}, module

    def delete_checkpoints(self) -> None:
        """With ``task.keep_checkpoints=false``, removes the checkpoints (the record is written): a study
        of hundreds of runs keeps its records, not tens of gigabytes of weights."""
        if not self.cfg.task.keep_checkpoints and is_rank_zero():
            shutil.rmtree(self.run_dir / CHECKPOINT_DIR, ignore_errors=True)

    def progress(self) -> dict[str, Any]:
        """Where an interrupted run stopped: the optimizer steps done (``step``) and the step of its
        newest checkpoint (``checkpoint_step``, where a relaunch resumes)."""
        if self.trainer is None:
            return {}
        last = self.run_dir / CHECKPOINT_DIR / LAST_CHECKPOINT
        return {"step": int(self.trainer.global_step),
                **({"checkpoint_step": checkpoint_step(last)} if last.is_file() else {})}


def majority_share(labels) -> float:
    """The test accuracy of always predicting the most common class: a run at it has learnt nothing."""
    import numpy as np

    return float(np.bincount(np.asarray(labels)).max() / max(len(labels), 1))


# ---------------------------------------------------------------------- the steps, in fit's order


def build_datamodule(cfg: DictConfig, net: "torch.nn.Module") -> "DataModule":
    """The datamodule, reading the dataset for the built model's input side, its splits loaded."""
    from plasticity.data import DataSpec
    from plasticity.data.datamodule import DataModule
    from plasticity.models import image_size

    data = cfg.dataset
    datamodule = DataModule(DataSpec.from_config(cfg, img_size=image_size(net)),
                            micro_batch_size=cfg.task.micro_batch_size, eval_batch_size=cfg.task.eval_batch_size,
                            num_workers=data.num_workers, seed=cfg.seed, augment=data.augment,
                            crop_scale=tuple(data.crop_scale), hflip=data.hflip)
    datamodule.check()
    datamodule.setup()  # the splits: component=auto measures on train before the trainer exists
    return datamodule


def build_selection(cfg: DictConfig, net: "torch.nn.Module",
                    datamodule: "DataModule") -> tuple["torch.nn.Module", "Selection", dict[str, Any]]:
    """Resolves and freezes: only the component (its groups and blocks, its LoRA weights with an
    adapter, or what the measurement chose for ``auto``), the head and (by switch) the final norm
    train. Returns the model (LoRA-adapted when configured), the selection and the record's fields
    on it (kind, groups, blocks, adapter, and for ``auto`` the choice and the measurement behind it)."""
    from plasticity.auto import auto_select
    from plasticity.components import freeze, select

    # component.train_final_norm (default true): the official code trains the final norm in every configuration.
    component, adapter, blocks = cfg.component, adapter_of(cfg), blocks_of(cfg.component)
    chosen: dict[str, Any] = {}
    if adapter:
        net, selection = apply_lora(net, list(parse_component(component.name)), blocks, rank=adapter["rank"],
                                    alpha=adapter["alpha"], dropout=adapter["dropout"],
                                    train_final_norm=component.train_final_norm)
    else:
        selection, chosen = (auto_select(cfg, net, datamodule) if component.name == AUTO else
                             (select(net, component.name, component.train_final_norm, blocks), {}))
        freeze(net, selection)
    log.info("trainable parameters: %s", ", ".join(f"{k} {v:,}" for k, v in selection.counts.items()))
    lr_scale = {"lr_scale": dict(component.lr_scale)} if component.lr_scale else {}
    return net, selection, {"strategy": strategy_of(tag_of(cfg)), "groups": list(selection.by_group), "blocks": blocks,
                            "adapter": adapter, **lr_scale, **chosen}


def build_module(cfg: DictConfig, net: "torch.nn.Module", selection: "Selection", datamodule: "DataModule",
                 chash: str) -> "FinetuneModule":
    """The LightningModule: the optimizer from ``optimizer`` (a partial), the schedule from ``task``."""
    from plasticity.data.augment import input_transform
    from plasticity.module import FinetuneModule

    # The JPEG path crops and flips in its loader workers: its train batches arrive augmented, only normalised here.
    augment_on_device = cfg.dataset.augment and not datamodule.cpu_augment
    return FinetuneModule(net, selection, datamodule.num_classes, optimizer=hydra.utils.instantiate(cfg.optimizer),
                          max_steps=cfg.task.max_steps, warmup_steps=cfg.task.warmup_steps,
                          train_transform=input_transform(net, cfg.dataset, train=True, augment=augment_on_device),
                          eval_transform=input_transform(net, cfg.dataset),
                          lr_scale=dict(cfg.component.lr_scale or {}), config_hash=chash)


def build_trainer(cfg: DictConfig, run_dir: Path, checkpoints: list["ModelCheckpoint"]) -> "L.Trainer":
    """The Lightning trainer of ``trainer``, its callbacks (the checkpoints, the step progress bar,
    ``callbacks``) and loggers (``logger``), and what the task owns: steps, accumulation, validation."""
    from lightning.pytorch.plugins.environments import SLURMEnvironment

    from plasticity.devices import precision, trainer_on_cuda
    from plasticity.progress import StepProgressBar
    from plasticity.runs.checkpoint_io import BackgroundCheckpointIO

    task, trainer, world = cfg.task, cfg.trainer, world_size(cfg.trainer) or 1
    accumulation = task.batch_size // (task.micro_batch_size * world)  # micro-batches per optimizer step, per process
    callbacks = [*checkpoints, *([StepProgressBar()] if trainer.enable_progress_bar else []),
                 *instantiate_each(cfg.callbacks)]
    # Under SLURM, submitit owns the preemption signal and requeues the job (resuming from
    # last.ckpt); Lightning's own auto-requeue would fight it. The environment also gives the
    # ranks of a DDP job from srun's tasks (SLURM_PROCID, SLURM_NTASKS).
    slurm = [SLURMEnvironment(auto_requeue=False)] if SLURMEnvironment.detect() else []
    return hydra.utils.instantiate(
        trainer, strategy="ddp" if trainer.strategy == "auto" and world > 1 else trainer.strategy,
        use_distributed_sampler=False,  # the datamodule shards its own epoch-seeded order
        precision=precision(trainer.precision, trainer_on_cuda(trainer)),
        max_steps=task.max_steps, accumulate_grad_batches=accumulation,
        # Lightning counts the validation interval in micro-batches, across epochs (no per-epoch check).
        val_check_interval=task.val_every * accumulation, check_val_every_n_epoch=None,
        callbacks=callbacks, logger=instantiate_each(cfg.logger), default_root_dir=str(run_dir),
        plugins=[BackgroundCheckpointIO(run_dir), *slurm])


def instantiate_each(group: DictConfig) -> list:
    """One object per entry of a config group that holds several (``logger``, ``callbacks``); an
    entry set to null (an override that removes it) is skipped."""
    return [hydra.utils.instantiate(node) for node in group.values() if node]


def check_steps(cfg: DictConfig, p: Problems) -> None:
    """The warmup and validation interval within the steps, and a global batch of whole micro-batches on
    each of the run's processes (``trainer.devices`` x ``trainer.num_nodes``)."""
    task, world = cfg.task, world_size(cfg.trainer)
    if world is None or p.names("task"):  # their types and ranges first (check_distributed names the processes)
        return
    p.require(task.warmup_steps < task.max_steps, f"task.warmup_steps={task.warmup_steps!r} must be an integer in "
              f"[0, task.max_steps={task.max_steps}). Fix: lower task.warmup_steps or raise task.max_steps.")
    p.require(task.val_every <= task.max_steps,
              f"task.val_every={task.val_every} exceeds task.max_steps={task.max_steps}: no validation would run and "
              f"no best checkpoint could be chosen. Fix: task.val_every<={task.max_steps}.")
    per_step = task.micro_batch_size * world
    if task.batch_size % per_step == 0:
        return
    if task.batch_size % world == 0:  # the largest micro-batch under the asked one that divides each process's share
        share = task.batch_size // world
        fix = f"task.micro_batch_size={max(d for d in range(1, task.micro_batch_size + 1) if share % d == 0)}"
    else:
        nearest = per_step * max(1, round(task.batch_size / per_step))
        fix = (f"a task.batch_size divisible by {per_step} (e.g. task.batch_size={nearest}), "
               f"or a process count that divides {task.batch_size}")
    processes = f" x {world} processes (trainer.devices x trainer.num_nodes) = {per_step}" if world > 1 else ""
    p.add(f"the global batch task.batch_size={task.batch_size} is not divisible by task.micro_batch_size="
          f"{task.micro_batch_size}{processes}: every optimizer step must be a whole number of micro-batches on "
          f"each process. Fix: {fix}.")
