"""``task=finetune``: train one component group of a pretrained ViT under the paper's protocol.

Protocol (paper App. C.3): SGD, momentum 0.9, no weight decay, cosine decay over ``max_steps``
(after ``warmup_steps`` of linear warmup), gradient clipping at global norm 1, effective batch
``batch_size`` = micro-batch x accumulation. The reported number is the test accuracy of the
checkpoint with the best validation accuracy.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import hydra
import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint, RichProgressBar
from lightning.pytorch.plugins.environments import SLURMEnvironment
from omegaconf import DictConfig

from plasticity.augment import DeviceTransform
from plasticity.components import Selection, freeze, select
from plasticity.data import DataModule
from plasticity.models import create_model, image_size
from plasticity.module import FinetuneModule

log = logging.getLogger(__name__)

CHECKPOINT_DIR = "checkpoints"


def precision(trainer_cfg: DictConfig) -> str:
    """``auto`` means bf16-mixed on CUDA and fp32 elsewhere."""
    value = str(trainer_cfg.get("precision", "auto"))
    if value != "auto":
        return value
    on_gpu = torch.cuda.is_available() and trainer_cfg.get("accelerator", "auto") in ("auto", "gpu", "cuda")
    return "bf16-mixed" if on_gpu else "32-true"


class Finetune:
    """Recipe of ``task=finetune``: small setup steps, then :meth:`run`.

    Args:
        cfg: The composed job config.
        run_dir: The run's own directory (checkpoints, metrics, result record).
    """

    def __init__(self, cfg: DictConfig, run_dir: Path) -> None:
        self.cfg = cfg
        self.run_dir = Path(run_dir)

    @property
    def accumulation(self) -> int:
        return self.cfg.task.batch_size // self.cfg.task.micro_batch_size

    def setup_data(self) -> DataModule:
        """The datamodule; raises before any compute when the data is missing (``run`` sets its image size)."""
        cfg, data = self.cfg, self.cfg.dataset
        datamodule = DataModule(
            data.name,
            cfg.paths.data_dir,
            micro_batch_size=cfg.task.micro_batch_size,
            eval_batch_size=cfg.task.eval_batch_size,
            severity=data.severity,
            download=data.download,
            limit=data.limit,
            num_workers=data.num_workers,
            seed=cfg.seed,
            num_classes=data.get("num_classes"),
            prepared_dir=cfg.paths.get("prepared_dir"),
            augment=data.get("augment", True),
            crop_scale=tuple(data.crop_scale),
            hflip=data.hflip,
        )
        datamodule.check()
        return datamodule

    def setup_net(self, num_classes: int) -> torch.nn.Module:
        """The timm model with its head reset to ``num_classes``."""
        model = self.cfg.model
        return create_model(
            model.name,
            num_classes,
            pretrained=model.pretrained,
            weights_file=model.weights_file,
            **model.kwargs,
        )

    def setup_selection(self, net: torch.nn.Module) -> Selection:
        """Resolves and freezes: only the component, the head and (by switch) the final norm train."""
        component = self.cfg.component
        selection = select(net, component.name, component.train_final_norm)
        freeze(net, selection)
        return selection

    def setup_module(self, net: torch.nn.Module, selection: Selection, datamodule: DataModule) -> FinetuneModule:
        """The LightningModule; train batches of the JPEG path arrive cropped, so only normalised."""
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

    def setup_callbacks(self) -> tuple[ModelCheckpoint, list[Callback]]:
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
        callbacks: list[Callback] = [checkpoint]
        if self.cfg.trainer.get("enable_progress_bar", True):
            callbacks.append(RichProgressBar(leave=True))
        callbacks += [hydra.utils.instantiate(c) for c in (self.cfg.get("callbacks") or {}).values() if c]
        return checkpoint, callbacks

    def setup_loggers(self) -> list:
        return [hydra.utils.instantiate(c) for c in self.cfg.logger.values() if c]

    def setup_trainer(self, callbacks: list[Callback], loggers: list) -> L.Trainer:
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

    def resume_from(self) -> str | None:
        """``last.ckpt`` of an interrupted run of the same config, else ``None``.

        The interrupted run's ``metrics.csv`` is kept as ``metrics.part<k>.csv`` (the CSV logger
        starts a new file).
        """
        last = self.run_dir / CHECKPOINT_DIR / "last.ckpt"
        if not (self.cfg.get("resume", True) and last.is_file()):
            return None
        metrics = self.run_dir / "metrics.csv"
        if metrics.is_file():
            metrics.rename(self.run_dir / f"metrics.part{len(list(self.run_dir.glob('metrics.part*.csv')))}.csv")
        log.info("resuming from %s", last)
        return str(last)

    def run(self) -> dict[str, Any]:
        """Trains, tests the best-validation checkpoint and returns the result fields."""
        L.seed_everything(self.cfg.seed, workers=True)
        datamodule = self.setup_data()
        net = self.setup_net(datamodule.num_classes)
        selection = self.setup_selection(net)
        counts = selection.counts
        log.info("trainable parameters: %s", counts)
        datamodule.img_size = image_size(net)  # JPEG sets are decoded for the model's input side
        datamodule.setup()
        self.module = module = self.setup_module(net, selection, datamodule)
        resume = self.resume_from()
        checkpoint, callbacks = self.setup_callbacks()
        trainer = self.setup_trainer(callbacks, self.setup_loggers())
        for logger in trainer.loggers:
            logger.log_hyperparams({f"params/{k}": v for k, v in counts.items()})
        start = time.perf_counter()
        trainer.fit(module, datamodule=datamodule, ckpt_path=resume)
        train_s = time.perf_counter() - start
        best = checkpoint.best_model_path
        tested = trainer.test(module, datamodule=datamodule, ckpt_path=best, verbose=False)[0]
        best_step = torch.load(best, map_location="cpu", weights_only=False)["global_step"]
        return {
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
        }
