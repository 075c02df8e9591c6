"""``task=finetune``: train one component group of a pretrained ViT under the paper's protocol.

Protocol (paper App. C.3): SGD, momentum 0.9, no weight decay, cosine decay over ``max_steps``
(after ``warmup_steps`` of linear warmup), gradient clipping at global norm 1, effective batch
``batch_size`` = micro-batch x accumulation. The reported number is the test accuracy of the
checkpoint with the best validation accuracy.

An interrupted run of the same config resumes from ``checkpoints/last.ckpt``; the metrics the
interrupted part logged stay in ``metrics.part<k>.csv`` (the CSV logger starts a new file).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig

from plasticity.components import check_component
from plasticity.recipes import register
from plasticity.recipes.base import RecipeBase
from plasticity.runs.record import optimizer_name
from plasticity.validate import (
    Problems,
    check_callbacks,
    check_dataset,
    check_dataset_values,
    check_model,
    check_trainer,
    is_int,
    positive_int,
    positive_number,
)

if TYPE_CHECKING:
    import lightning as L
    import torch

    from plasticity.components import Selection
    from plasticity.data.datamodule import DataModule
    from plasticity.module import FinetuneModule

log = logging.getLogger(__name__)

CHECKPOINT_DIR = "checkpoints"


def precision(trainer_cfg: DictConfig) -> str:
    """``auto`` means bf16-mixed on CUDA and fp32 elsewhere."""
    import torch

    value = str(trainer_cfg.get("precision", "auto"))
    if value != "auto":
        return value
    on_gpu = torch.cuda.is_available() and trainer_cfg.get("accelerator", "auto") in ("auto", "gpu", "cuda")
    return "bf16-mixed" if on_gpu else "32-true"


@register
class Finetune(RecipeBase):
    """Recipe of ``task=finetune``: small setup steps, then :meth:`run`."""

    name = "finetune"
    sections = ("task", "model", "dataset", "component", "optimizer", "trainer", "seed")

    @classmethod
    def validate(cls, cfg: DictConfig, p: Problems, local: bool = True) -> None:
        super().validate(cfg, p, local)
        p.call(check_component, cfg.component.name)
        check_model(cfg, p)
        check_dataset(cfg, p, cfg.dataset.name, trains=True)
        check_dataset_values(cfg.dataset, p)
        positive_number(p, "optimizer.lr", cfg.optimizer.get("lr"), "1e-2")
        check_steps(cfg.task, p)
        check_trainer(cfg, p, local)
        check_callbacks(cfg, p)

    @classmethod
    def identity(cls, cfg: DictConfig) -> dict[str, Any]:
        lr = cfg.optimizer.get("lr")
        return {"task": cfg.task.name, "dataset": cfg.dataset.name, "model": cfg.model.name,
                "component": cfg.component.name, "optimizer": optimizer_name(cfg.optimizer.get("_target_", "?")),
                "lr": float(lr) if isinstance(lr, (int, float)) else lr, "seed": cfg.seed}

    @property
    def accumulation(self) -> int:
        return self.cfg.task.batch_size // self.cfg.task.micro_batch_size

    def setup_net(self) -> "torch.nn.Module":
        """The timm model with its head reset to the dataset's classes."""
        from plasticity.data.splits import expected_classes
        from plasticity.models import create_model

        model, data = self.cfg.model, self.cfg.dataset
        num_classes = expected_classes(data.name, data.get("num_classes"))
        return create_model(model.name, num_classes, pretrained=model.pretrained, weights_file=model.weights_file,
                            **model.kwargs)

    def setup_data(self, net: "torch.nn.Module") -> "DataModule":
        """The datamodule, reading the dataset for the built model's input side."""
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
            augment=data.get("augment", True),
            crop_scale=tuple(data.crop_scale),
            hflip=data.hflip,
        )
        datamodule.check()
        return datamodule

    def setup_selection(self, net: "torch.nn.Module") -> "Selection":
        """Resolves and freezes: only the component, the head and (by switch) the final norm train."""
        from plasticity.components import freeze, select

        component = self.cfg.component
        selection = select(net, component.name, component.train_final_norm)
        freeze(net, selection)
        return selection

    def setup_module(self, net: "torch.nn.Module", selection: "Selection", datamodule: "DataModule") -> "FinetuneModule":
        """The LightningModule; train batches of the JPEG path arrive cropped, so only normalised."""
        import hydra

        from plasticity.data.augment import DeviceTransform
        from plasticity.models import image_size
        from plasticity.module import FinetuneModule

        data, task = self.cfg.dataset, self.cfg.task
        img_size = image_size(net)
        augment_on_device = data.get("augment", True) and not datamodule.cpu_augment

        def transform(train: bool) -> DeviceTransform:
            return DeviceTransform(
                img_size, data.mean, data.std, train=train, crop_scale=tuple(data.crop_scale), hflip=data.hflip
            )

        return FinetuneModule(
            net,
            selection,
            datamodule.num_classes,
            optimizer=hydra.utils.instantiate(self.cfg.optimizer),
            max_steps=task.max_steps,
            warmup_steps=task.warmup_steps,
            train_transform=transform(augment_on_device),
            eval_transform=transform(False),
        )

    def setup_callbacks(self) -> tuple[Any, list]:
        import hydra
        from lightning.pytorch.callbacks import ModelCheckpoint

        from plasticity.progress import StepProgressBar

        checkpoint = ModelCheckpoint(
            dirpath=self.run_dir / CHECKPOINT_DIR,
            filename="best",
            monitor="val/acc",
            mode="max",
            save_last=True,
            save_top_k=1,
            enable_version_counter=False,
            auto_insert_metric_name=False,
        )
        callbacks: list = [checkpoint]
        if self.cfg.trainer.get("enable_progress_bar", True):
            callbacks.append(StepProgressBar())
        callbacks += [hydra.utils.instantiate(c) for c in (self.cfg.get("callbacks") or {}).values() if c]
        return checkpoint, callbacks

    def setup_loggers(self) -> list:
        import hydra

        return [hydra.utils.instantiate(c) for c in self.cfg.logger.values() if c]

    def setup_trainer(self, callbacks: list, loggers: list) -> "L.Trainer":
        import hydra
        from lightning.pytorch.plugins.environments import SLURMEnvironment

        task = self.cfg.task
        # Under SLURM, submitit owns the preemption signal and requeues the job (resuming from
        # last.ckpt); Lightning's own auto-requeue would fight it.
        plugins = [SLURMEnvironment(auto_requeue=False)] if SLURMEnvironment.detect() else None
        return hydra.utils.instantiate(
            self.cfg.trainer,
            precision=precision(self.cfg.trainer),
            max_steps=task.max_steps,
            accumulate_grad_batches=self.accumulation,
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

    def resume_from(self) -> str | None:
        """``last.ckpt`` of an interrupted run of the same config, else ``None``.

        The interrupted run's ``metrics.csv`` is kept as ``metrics.part<k>.csv`` (the CSV logger
        starts a new file).
        """
        import torch

        last = self.run_dir / CHECKPOINT_DIR / "last.ckpt"
        if not (self.cfg.get("resume", True) and last.is_file()):
            return None
        metrics = self.run_dir / "metrics.csv"
        kept = ""
        if metrics.is_file():
            part = self.run_dir / f"metrics.part{len(list(self.run_dir.glob('metrics.part*.csv')))}.csv"
            metrics.rename(part)
            kept = f"; the metrics logged so far stay in {part.name}"
        try:
            step = torch.load(last, map_location="cpu", weights_only=False).get("global_step", "?")
        except Exception as err:
            raise RuntimeError(f"cannot resume: {last} is not a readable checkpoint ({type(err).__name__}: "
                               f"{str(err).splitlines()[0]}). Fix: delete it to restart the run from step 0, or "
                               f"resume=false.") from err
        log.info("resuming an interrupted run from step %s of %d (%s)%s", step, self.cfg.task.max_steps, last, kept)
        return str(last)

    def run(self) -> dict[str, Any]:
        """Trains, tests the best-validation checkpoint and returns the result fields."""
        return self.fit()[0]

    def fit(self) -> tuple[dict[str, Any], "FinetuneModule"]:
        """Trains and tests; returns the result fields and the module holding the best-validation weights."""
        import lightning as L
        import torch

        L.seed_everything(self.cfg.seed, workers=True, verbose=False)
        net = self.setup_net()
        datamodule = self.setup_data(net)
        selection = self.setup_selection(net)
        counts = selection.counts
        log.info("trainable parameters: %s", ", ".join(f"{k} {v:,}" for k, v in counts.items()))
        datamodule.setup()
        module = self.setup_module(net, selection, datamodule)
        resume = self.resume_from()
        checkpoint, callbacks = self.setup_callbacks()
        trainer = self.setup_trainer(callbacks, self.setup_loggers())
        self.log_config(trainer, counts, datamodule.split_hash)
        start = time.perf_counter()
        trainer.fit(module, datamodule=datamodule, ckpt_path=resume)
        train_s = time.perf_counter() - start
        best = checkpoint.best_model_path
        tested = trainer.test(module, datamodule=datamodule, ckpt_path=best, verbose=False)[0]
        best_step = torch.load(best, map_location="cpu", weights_only=False)["global_step"]
        fields = {
            "best_val_acc": float(checkpoint.best_model_score),
            "test_acc": float(tested["test/acc"]),
            "test_loss": float(tested["test/loss"]),
            "best_step": int(best_step),
            "steps": int(trainer.global_step),
            "trainable_params": counts["group"],
            "params": counts,
            "split_hash": datamodule.split_hash,
            "train_s": round(train_s, 2),
            "best_checkpoint": str(Path(best).relative_to(self.run_dir)),
            "resumed": resume is not None,
        }
        return fields, module


def check_steps(task: DictConfig, p: Problems) -> None:
    """Steps, warmup, validation interval and batch sizes of a training task."""
    ok = all([positive_int(p, f"task.{key}", task.get(key)) for key in
              ("max_steps", "val_every", "batch_size", "micro_batch_size", "eval_batch_size")])
    if not ok:
        return
    p.require(is_int(task.warmup_steps) and 0 <= task.warmup_steps < task.max_steps,
              f"task.warmup_steps={task.warmup_steps!r} must be an integer in [0, task.max_steps={task.max_steps}). "
              f"Fix: lower task.warmup_steps or raise task.max_steps.")
    p.require(task.batch_size % task.micro_batch_size == 0,
              f"the effective batch task.batch_size={task.batch_size} is not divisible by "
              f"task.micro_batch_size={task.micro_batch_size}; gradient accumulation needs a whole number of "
              f"micro-batches. Fix: a micro-batch that divides it (e.g. "
              f"task.micro_batch_size={_largest_divisor(task.batch_size, task.micro_batch_size)}).")
    p.require(task.val_every <= task.max_steps,
              f"task.val_every={task.val_every} exceeds task.max_steps={task.max_steps}: no validation would run and "
              f"no best checkpoint could be chosen. Fix: task.val_every<={task.max_steps}.")


def _largest_divisor(n: int, below: int) -> int:
    return max(d for d in range(1, min(n, below) + 1) if n % d == 0)
