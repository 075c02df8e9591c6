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
(:func:`plasticity.runs.checkpoints.resumable`) exactly where it stopped: each checkpoint holds the
loops' counters, the train loader's place inside its epoch, the generators' states and the
config hash, so the resumed run computes what the uninterrupted one would have, bit for bit. The
metrics the interrupted part logged stay in ``metrics.part<k>.csv`` (the CSV logger starts a new file).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig

from plasticity.adapters import apply_lora, check_job_adapter, export_merged
from plasticity.components import (
    AUTO,
    GROUPS,
    adapter_of,
    blocks_of,
    check_strategy,
    parse_component,
    strategy_of,
    tag_of,
)
from plasticity.recipes import register
from plasticity.recipes.base import RecipeBase
from plasticity.runs.checkpoints import (
    CHECKPOINT_DIR,
    LAST_CHECKPOINT,
    WEIGHTS_FILE,
    best_and_last,
    checkpoint_step,
    resumable,
)
from plasticity.runs.ranks import announce, is_rank_zero, num_nodes
from plasticity.runs.record import config_hash, optimizer_name
from plasticity.validate import (
    Problems,
    check_callbacks,
    check_dataset,
    check_dataset_values,
    check_model,
    check_optimizer,
    check_trainer,
    is_int,
    positive_int,
    world_size,
)

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

    @classmethod
    def validate(cls, cfg: DictConfig, p: Problems, local: bool = True) -> None:
        from plasticity.measure import MODES  # here: measure loads torch, a launch's check does not need it at import

        super().validate(cfg, p, local)
        groups = check_strategy(cfg, p)
        if groups is not None:  # an adapter is checked against the groups it would adapt
            check_job_adapter(cfg, groups, p)
        check_model(cfg, p)
        check_dataset(cfg, p, cfg.dataset.name, trains=True)
        check_dataset_values(cfg.dataset, p)
        check_optimizer(cfg, p)
        check_steps(cfg.task, p, world_size(cfg.get("trainer")) or 1)
        check_trainer(cfg, p, local)
        check_callbacks(cfg, p, GROUPS, MODES)

    @classmethod
    def identity(cls, cfg: DictConfig) -> dict[str, Any]:
        lr = cfg.optimizer.get("lr")
        # identity() also names a job that validation rejects: an optimizer without _target_ reads "?".
        return {"task": cfg.task.name, "dataset": cfg.dataset.name, "model": cfg.model.name,
                "component": tag_of(cfg), "optimizer": optimizer_name(cfg.optimizer.get("_target_", "?")),
                "lr": float(lr) if isinstance(lr, (int, float)) else lr, "seed": cfg.seed}

    follower_resume: str | None = None
    """On a non-zero rank of a DDP run: the checkpoint rank 0 resumes from (set by the job)."""
    is_global_zero: bool = True
    """Whether this process writes the run's files (rank 0); set when training starts."""

    def __init__(self, cfg: DictConfig, run_dir: Path) -> None:
        super().__init__(cfg, run_dir)
        self.auto_record: dict[str, Any] = {}
        """``component=auto``: the units chosen and the measurement behind them (empty otherwise)."""
        self.trainer: "L.Trainer | None" = None
        """The Lightning trainer once built (what :meth:`progress` reads)."""
        self.config_hash = config_hash(cfg, self.sections)
        """Saved in every checkpoint: a checkpoint of another config never resumes this run."""

    @property
    def world_size(self) -> int:
        """Processes of the run: ``trainer.devices`` x ``trainer.num_nodes``."""
        return world_size(self.cfg.trainer) or 1

    @property
    def accumulation(self) -> int:
        """Micro-batches per optimizer step on each process: global batch / (micro-batch x processes)."""
        return self.cfg.task.batch_size // (self.cfg.task.micro_batch_size * self.world_size)

    @property
    def adapter(self) -> dict | None:
        """The adapter config (``adapter=lora``) as a dict, or None."""
        return adapter_of(self.cfg)

    # ------------------------------------------------------------------ the run

    def run(self) -> dict[str, Any]:
        """Trains, tests the best-validation checkpoint and returns the result fields (and, with
        ``task.export_merged``, writes the LoRA-merged weights)."""
        fields, module = self.fit()
        if self.adapter and self.cfg.task.export_merged and self.is_global_zero:
            fields["weights_file"] = str(export_merged(module.net, self.run_dir / WEIGHTS_FILE))
        return fields

    def fit(self) -> tuple[dict[str, Any], "FinetuneModule"]:
        """Trains and tests; returns the result fields and the module holding the best-validation weights."""
        import lightning as L

        # Seeded before anything draws from torch's RNG: a random init, the new head, LoRA's lora_A (and the workers).
        L.seed_everything(self.cfg.seed, workers=True, verbose=False)
        self.is_global_zero = is_rank_zero()
        net = self.setup_net()
        datamodule = self.setup_data(net)
        net, selection = self.setup_selection(net, datamodule)
        module = self.setup_module(net, selection, datamodule)
        resume = self.resume_from()
        checkpoint, last = best_and_last(self.run_dir)
        trainer = self.trainer = self.setup_trainer([checkpoint, last])
        self.log_config(trainer, selection.counts, datamodule.split_hash)
        train_s = self.train(trainer, module, datamodule, resume)
        fields = {
            **self.test(trainer, module, datamodule, checkpoint),
            "trainable_params": selection.counts["group"],
            "params": selection.counts,
            "split_hash": datamodule.split_hash,
            "train_s": round(train_s, 2),
            "best_checkpoint": str(Path(checkpoint.best_model_path).relative_to(self.run_dir)),
            "resumed": resume is not None,
            **self.strategy_fields(selection),
        }
        return fields, module

    def train(self, trainer: "L.Trainer", module: "FinetuneModule", datamodule: "DataModule",
              resume: str | None) -> float:
        """Rank 0 announces the run to the other ranks, then every rank trains; returns the seconds it took."""
        if self.is_global_zero:  # the ranks Lightning starts next (or that srun started) follow this decision
            announce(self.run_dir, "run", resume, num_nodes=num_nodes(self.cfg))
        start = time.perf_counter()
        trainer.fit(module, datamodule=datamodule, ckpt_path=resume)
        return time.perf_counter() - start

    def test(self, trainer: "L.Trainer", module: "FinetuneModule", datamodule: "DataModule",
             checkpoint: "ModelCheckpoint") -> dict[str, Any]:
        """Tests the best-validation checkpoint (the paper's protocol); its accuracy fields."""
        best = checkpoint.best_model_path
        tested = trainer.test(module, datamodule=datamodule, ckpt_path=best, verbose=False)[0]
        return {"best_val_acc": float(checkpoint.best_model_score), "test_acc": float(tested["test/acc"]),
                "test_loss": float(tested["test/loss"]), "best_step": int(checkpoint_step(best)),
                "steps": int(trainer.global_step)}

    def resume_from(self) -> str | None:
        """The checkpoint to resume from: rank 0 asks the run directory (``resume=true``), the other
        ranks take rank 0's, so every rank restarts at the same step."""
        if self.follower_resume is not None or not self.is_global_zero:
            return self.follower_resume  # rank 0 decided (and kept the metrics)
        return resumable(self.run_dir, self.cfg.task.max_steps, self.config_hash) if self.cfg.resume else None

    def progress(self) -> dict[str, Any]:
        """Where an interrupted run stopped: the optimizer steps done (``step``) and the step of its
        newest checkpoint (``checkpoint_step``, where a relaunch resumes)."""
        if self.trainer is None:
            return {}
        last = self.run_dir / CHECKPOINT_DIR / LAST_CHECKPOINT
        return {"step": int(self.trainer.global_step),
                **({"checkpoint_step": checkpoint_step(last)} if last.is_file() else {})}

    def strategy_fields(self, selection: "Selection") -> dict[str, Any]:
        """What the record says about the configuration: its kind, groups, blocks, adapter and,
        for ``auto``, the choice and the measurement behind it."""
        component = self.cfg.component
        fields: dict[str, Any] = {"strategy": strategy_of(tag_of(self.cfg)),
                                  "groups": list(selection.by_group), "blocks": blocks_of(component),
                                  "adapter": self.adapter}
        if component.lr_scale:
            fields["lr_scale"] = dict(component.lr_scale)
        return {**fields, **self.auto_record}

    # ------------------------------------------------------------------ setup, in fit's order

    def setup_net(self) -> "torch.nn.Module":
        """The timm model with its head reset to the dataset's classes."""
        from plasticity.data.splits import expected_classes

        data = self.cfg.dataset
        return self.create_net(expected_classes(data.name, data.num_classes))

    def setup_data(self, net: "torch.nn.Module") -> "DataModule":
        """The datamodule, reading the dataset for the built model's input side, its splits loaded."""
        from plasticity.data import DataSpec
        from plasticity.data.datamodule import DataModule
        from plasticity.models import image_size

        cfg, data = self.cfg, self.cfg.dataset
        datamodule = DataModule(
            DataSpec.from_config(cfg, img_size=image_size(net)),
            micro_batch_size=cfg.task.micro_batch_size,
            eval_batch_size=cfg.task.eval_batch_size,
            num_workers=data.num_workers,
            seed=cfg.seed,
            augment=data.augment,
            crop_scale=tuple(data.crop_scale),
            hflip=data.hflip,
        )
        datamodule.check()
        datamodule.setup()  # the splits: component=auto measures on train before the trainer exists
        return datamodule

    def setup_selection(self, net: "torch.nn.Module",
                        datamodule: "DataModule") -> tuple["torch.nn.Module", "Selection"]:
        """Resolves and freezes: only the component (its groups and blocks, its LoRA weights with
        an adapter, or what the measurement chose for ``auto``), the head and (by switch) the final
        norm train. Returns the model (LoRA-adapted when configured) and the selection."""
        from plasticity.components import freeze, select

        # component.train_final_norm (default true): the official code trains the final norm in every configuration.
        component, adapter = self.cfg.component, self.adapter
        if adapter:
            net, selection = apply_lora(net, list(parse_component(component.name)), blocks_of(component),
                                        rank=adapter["rank"], alpha=adapter["alpha"], dropout=adapter["dropout"],
                                        train_final_norm=component.train_final_norm)
        else:
            selection = (self.auto_selection(net, datamodule) if component.name == AUTO else
                         select(net, component.name, component.train_final_norm, blocks_of(component)))
            freeze(net, selection)
        log.info("trainable parameters: %s", ", ".join(f"{k} {v:,}" for k, v in selection.counts.items()))
        return net, selection

    def auto_selection(self, net: "torch.nn.Module", datamodule: "DataModule") -> "Selection":
        """``component=auto``: measures every (group, block) of the pretrained model on (reference
        test, target train) pairs and selects what :func:`plasticity.auto.choose` picks."""
        from plasticity.auto import choose, measure_units, unit_name
        from plasticity.components import select_units
        from plasticity.data import load_splits
        from plasticity.data.augment import input_transform
        from plasticity.measure import pair_batches, pair_indices, pair_inputs

        auto, data = self.cfg.component.auto, self.cfg.dataset
        started = time.perf_counter()
        ref = load_splits(datamodule.spec.replace(name=auto.reference, limit=None, num_classes=None)).test
        window = data.get("window")  # text: tokens per pair window
        ref, target = pair_inputs(ref, window), pair_inputs(datamodule.splits.train, window)
        indices = pair_indices(len(ref), len(target), auto.n_pairs, "sequential")
        transform = input_transform(net, data)  # token ids pass as they are
        table = measure_units(net, pair_batches(ref, target, indices, auto.batch_size, transform))
        total = sum(p.numel() for p in net.parameters())
        units = choose(table, auto.budget, total)
        self.auto_record = {"selected": [unit_name(u) for u in units], "auto_table": table,
                            "auto_s": round(time.perf_counter() - started, 2)}
        log.info("component=auto: measured %d (group, block) units on %d pairs in %.1f s; training %s",
                 len(table), auto.n_pairs, self.auto_record["auto_s"], ", ".join(self.auto_record["selected"]))
        return select_units(net, units, self.cfg.component.train_final_norm)

    def setup_module(self, net: "torch.nn.Module", selection: "Selection",
                     datamodule: "DataModule") -> "FinetuneModule":
        """The LightningModule: the optimizer from ``optimizer`` (a partial), the schedule from ``task``."""
        import hydra

        from plasticity.data.augment import input_transform
        from plasticity.module import FinetuneModule

        data, task = self.cfg.dataset, self.cfg.task
        # The JPEG path crops and flips in its loader workers: its train batches arrive augmented, only normalised here.
        augment_on_device = data.augment and not datamodule.cpu_augment

        module = FinetuneModule(
            net,
            selection,
            datamodule.num_classes,
            optimizer=hydra.utils.instantiate(self.cfg.optimizer),
            max_steps=task.max_steps,
            warmup_steps=task.warmup_steps,
            train_transform=input_transform(net, data, train=True, augment=augment_on_device),
            eval_transform=input_transform(net, data),
            lr_scale=dict(self.cfg.component.lr_scale or {}),
        )
        module.config_hash = self.config_hash
        return module

    def setup_trainer(self, checkpoints: list["ModelCheckpoint"]) -> "L.Trainer":
        """The Lightning trainer of ``trainer``, its callbacks (the checkpoints, the step progress bar,
        ``callbacks``) and loggers (``logger``), and what the task owns: steps, accumulation, validation."""
        import hydra
        from lightning.pytorch.plugins.environments import SLURMEnvironment

        from plasticity.devices import precision, trainer_on_cuda
        from plasticity.progress import StepProgressBar
        from plasticity.runs.checkpoint_io import AtomicCheckpointIO

        task, trainer = self.cfg.task, self.cfg.trainer
        callbacks = [*checkpoints, *([StepProgressBar()] if trainer.enable_progress_bar else []),
                     *instantiate_each(self.cfg.callbacks)]
        loggers = instantiate_each(self.cfg.logger)
        # Under SLURM, submitit owns the preemption signal and requeues the job (resuming from
        # last.ckpt); Lightning's own auto-requeue would fight it. The environment also gives the
        # ranks of a DDP job from srun's tasks (SLURM_PROCID, SLURM_NTASKS).
        plugins = [AtomicCheckpointIO(self.run_dir),
                   *([SLURMEnvironment(auto_requeue=False)] if SLURMEnvironment.detect() else [])]
        return hydra.utils.instantiate(
            trainer,
            strategy="ddp" if trainer.strategy == "auto" and self.world_size > 1 else trainer.strategy,
            use_distributed_sampler=False,  # the datamodule shards its own epoch-seeded order
            precision=precision(trainer.precision, trainer_on_cuda(trainer)),
            max_steps=task.max_steps,
            accumulate_grad_batches=self.accumulation,
            # Lightning counts the validation interval in micro-batches, across epochs (no per-epoch check).
            val_check_interval=task.val_every * self.accumulation,
            check_val_every_n_epoch=None,
            callbacks=callbacks,
            logger=loggers,
            default_root_dir=str(self.run_dir),
            plugins=plugins,
        )

    def log_config(self, trainer: "L.Trainer", counts: dict[str, int], split_hash: str) -> None:
        """Every logger gets the resolved config (nested), the run identity, ``split_hash`` and the
        parameter counts: W&B filters and groups runs by any of them (``component.name``, ...)."""
        from plasticity.tracking.logger import run_config

        config = run_config(self.cfg, self.identity(self.cfg), self.run_dir, split_hash=split_hash, params=counts)
        for logger in trainer.loggers:
            logger.log_hyperparams(config)


def instantiate_each(group: DictConfig) -> list:
    """One object per entry of a config group that holds several (``logger``, ``callbacks``); an
    entry set to null (an override that removes it) is skipped."""
    import hydra

    return [hydra.utils.instantiate(node) for node in group.values() if node]


def check_steps(task: DictConfig, p: Problems, world: int = 1) -> None:
    """Steps, warmup, validation interval and batch sizes of a training task (``world``: its
    processes, ``trainer.devices`` x ``trainer.num_nodes``)."""
    ok = all([positive_int(p, f"task.{key}", task.get(key)) for key in
              ("max_steps", "val_every", "batch_size", "micro_batch_size", "eval_batch_size")])
    if not ok:
        return
    p.require(is_int(task.warmup_steps) and 0 <= task.warmup_steps < task.max_steps,
              f"task.warmup_steps={task.warmup_steps!r} must be an integer in [0, task.max_steps={task.max_steps}). "
              f"Fix: lower task.warmup_steps or raise task.max_steps.")
    if world == 1:
        p.require(task.batch_size % task.micro_batch_size == 0,
                  f"the effective batch task.batch_size={task.batch_size} is not divisible by "
                  f"task.micro_batch_size={task.micro_batch_size}; gradient accumulation needs a whole number of "
                  f"micro-batches. Fix: a micro-batch that divides it (e.g. "
                  f"task.micro_batch_size={_largest_divisor(task.batch_size, task.micro_batch_size)}).")
    else:
        check_global_batch(task, p, world)
    p.require(task.val_every <= task.max_steps,
              f"task.val_every={task.val_every} exceeds task.max_steps={task.max_steps}: no validation would run and "
              f"no best checkpoint could be chosen. Fix: task.val_every<={task.max_steps}.")


def check_global_batch(task: DictConfig, p: Problems, world: int) -> None:
    """The global batch of a run of ``world`` processes is a whole number of micro-batches on each."""
    per_step = task.micro_batch_size * world
    if task.batch_size % per_step == 0:
        return
    if task.batch_size % world == 0:
        fix = f"task.micro_batch_size={_largest_divisor(task.batch_size // world, task.micro_batch_size)}"
    else:
        nearest = per_step * max(1, round(task.batch_size / per_step))
        fix = (f"a task.batch_size divisible by {per_step} (e.g. task.batch_size={nearest}), "
               f"or a process count that divides {task.batch_size}")
    p.add(f"the global batch task.batch_size={task.batch_size} is not divisible by task.micro_batch_size="
          f"{task.micro_batch_size} x {world} processes (trainer.devices x trainer.num_nodes) = {per_step}: every "
          f"optimizer step must be a whole number of micro-batches on each process. Fix: {fix}.")


def _largest_divisor(n: int, below: int) -> int:
    return max(d for d in range(1, min(n, below) + 1) if n % d == 0)
