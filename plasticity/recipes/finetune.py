"""``task=finetune``: train one component group of a pretrained ViT under the paper's protocol.

Protocol (paper App. C.3): SGD, momentum 0.9, no weight decay, cosine decay over ``max_steps``
(after ``warmup_steps`` of linear warmup), gradient clipping at global norm 1, effective batch
``batch_size`` = micro-batch x processes x accumulation. The reported number is the test accuracy
of the checkpoint with the best validation accuracy.

A run may use several processes (DDP: ``trainer.devices`` x ``trainer.num_nodes``, Lightning's
``ddp`` strategy): ``task.batch_size`` stays the global batch, each process takes its share of
the same epoch-seeded order (:class:`plasticity.data.datamodule.EpochBatchSampler`), and only
rank 0 writes (checkpoints, metrics, weights; the record in :mod:`plasticity.job`).

An interrupted run of the same config resumes from ``checkpoints/last.ckpt``; the metrics the
interrupted part logged stay in ``metrics.part<k>.csv`` (the CSV logger starts a new file).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig

from plasticity.components import (
    AUTO,
    check_blocks,
    check_component,
    component_tag,
    has_adapter,
    parse_component,
    strategy_of,
)
from plasticity.recipes import register
from plasticity.recipes.base import RecipeBase
from plasticity.runs.ranks import announce, num_nodes
from plasticity.runs.record import optimizer_name
from plasticity.validate import (
    Problems,
    check_callbacks,
    check_dataset,
    check_dataset_values,
    check_model,
    check_trainer,
    is_int,
    is_number,
    positive_int,
    positive_number,
    world_size,
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
    sections = ("task", "model", "dataset", "component", "adapter", "optimizer", "trainer", "seed")

    @classmethod
    def validate(cls, cfg: DictConfig, p: Problems, local: bool = True) -> None:
        super().validate(cfg, p, local)
        check_strategy(cfg, p)
        check_model(cfg, p)
        check_dataset(cfg, p, cfg.dataset.name, trains=True)
        check_dataset_values(cfg.dataset, p)
        positive_number(p, "optimizer.lr", cfg.optimizer.get("lr"), "1e-2")
        check_steps(cfg.task, p, world_size(cfg.get("trainer")) or 1)
        check_trainer(cfg, p, local)
        check_callbacks(cfg, p)

    @classmethod
    def identity(cls, cfg: DictConfig) -> dict[str, Any]:
        lr = cfg.optimizer.get("lr")
        return {"task": cfg.task.name, "dataset": cfg.dataset.name, "model": cfg.model.name,
                "component": tag(cfg), "optimizer": optimizer_name(cfg.optimizer.get("_target_", "?")),
                "lr": float(lr) if isinstance(lr, (int, float)) else lr, "seed": cfg.seed}

    follower_resume: str | None = None
    """On a non-zero rank of a DDP run: the checkpoint rank 0 resumes from (set by the job)."""
    is_global_zero: bool = True
    """Whether this process writes the run's files (rank 0); set when training starts."""

    @property
    def world_size(self) -> int:
        """Processes of the run: ``trainer.devices`` x ``trainer.num_nodes``."""
        return world_size(self.cfg.trainer) or 1

    @property
    def accumulation(self) -> int:
        """Micro-batches per optimizer step on each process: global batch / (micro-batch x processes)."""
        return self.cfg.task.batch_size // (self.cfg.task.micro_batch_size * self.world_size)

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

    def setup_selection(self, net: "torch.nn.Module", datamodule: "DataModule") -> tuple["torch.nn.Module", "Selection"]:
        """Resolves and freezes: only the component (its groups and blocks, its LoRA weights with
        an adapter, or what the measurement chose for ``auto``), the head and (by switch) the final
        norm train. Returns the model (LoRA-adapted when configured) and the selection."""
        from plasticity.components import freeze, select

        component, adapter = self.cfg.component, self.adapter
        if adapter:
            from plasticity.adapters import apply_lora

            return apply_lora(net, list(parse_component(component.name)), _blocks(component), rank=adapter["rank"],
                              alpha=adapter["alpha"], dropout=adapter["dropout"],
                              train_final_norm=component.train_final_norm)
        if component.name == AUTO:
            selection = self.auto_selection(net, datamodule)
        else:
            selection = select(net, component.name, component.train_final_norm, _blocks(component))
        freeze(net, selection)
        return net, selection

    @property
    def adapter(self) -> dict | None:
        """The adapter config (``adapter=lora``) as a dict, or None."""
        return _adapter(self.cfg)

    def auto_selection(self, net: "torch.nn.Module", datamodule: "DataModule") -> "Selection":
        """``component=auto``: measures every (group, block) of the pretrained model on (reference
        test, target train) pairs and selects what :func:`plasticity.auto.choose` picks."""
        from plasticity.auto import choose, measure_units, unit_name
        from plasticity.components import select_units
        from plasticity.data import load_splits
        from plasticity.data.augment import DeviceTransform
        from plasticity.measure import pair_batches, pair_indices
        from plasticity.models import image_size

        auto, data = self.cfg.component.auto, self.cfg.dataset
        started = time.perf_counter()
        ref = load_splits(datamodule.spec.replace(name=auto.reference, limit=None, num_classes=None)).test
        target = datamodule.splits.train
        indices = pair_indices(len(ref), len(target), auto.n_pairs, "sequential")
        transform = DeviceTransform(image_size(net), data.mean, data.std, train=False)
        table = measure_units(net, pair_batches(ref.images, target.images, indices, auto.batch_size, transform))
        total = sum(p.numel() for p in net.parameters())
        units = choose(table, auto.budget, total)
        self.auto_record = {"selected": [unit_name(u) for u in units], "auto_table": table,
                            "auto_s": round(time.perf_counter() - started, 2)}
        log.info("component=auto: measured %d (group, block) units on %d pairs in %.1f s; training %s",
                 len(table), auto.n_pairs, self.auto_record["auto_s"], ", ".join(self.auto_record["selected"]))
        return select_units(net, units, self.cfg.component.train_final_norm)

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
            lr_scale=dict(self.cfg.component.get("lr_scale") or {}),
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
        # last.ckpt); Lightning's own auto-requeue would fight it. The environment also gives the
        # ranks of a DDP job from srun's tasks (SLURM_PROCID, SLURM_NTASKS).
        plugins = [SLURMEnvironment(auto_requeue=False)] if SLURMEnvironment.detect() else None
        strategy = self.cfg.trainer.get("strategy", "auto")
        return hydra.utils.instantiate(
            self.cfg.trainer,
            strategy="ddp" if strategy == "auto" and self.world_size > 1 else strategy,
            use_distributed_sampler=False,  # the datamodule shards its own epoch-seeded order
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

        if self.follower_resume is not None or not self.is_global_zero:
            return self.follower_resume  # rank 0 decided (and kept the metrics)
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

        from plasticity.runs.ranks import is_rank_zero

        L.seed_everything(self.cfg.seed, workers=True, verbose=False)
        self.is_global_zero = is_rank_zero()
        net = self.setup_net()
        datamodule = self.setup_data(net)
        datamodule.setup()
        net, selection = self.setup_selection(net, datamodule)
        counts = selection.counts
        log.info("trainable parameters: %s", ", ".join(f"{k} {v:,}" for k, v in counts.items()))
        module = self.setup_module(net, selection, datamodule)
        resume = self.resume_from()
        checkpoint, callbacks = self.setup_callbacks()
        trainer = self.setup_trainer(callbacks, self.setup_loggers())
        self.log_config(trainer, counts, datamodule.split_hash)
        if self.is_global_zero:  # the ranks Lightning starts next (or that srun started) follow this decision
            announce(self.run_dir, "run", resume, num_nodes=num_nodes(self.cfg))
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
            **self.strategy_fields(selection),
        }
        if self.adapter and self.cfg.task.get("export_merged", False) and self.is_global_zero:
            from plasticity.adapters import export_merged

            fields["weights_file"] = str(export_merged(module.net, self.run_dir / "weights.safetensors"))
        return fields, module

    def strategy_fields(self, selection: "Selection") -> dict[str, Any]:
        """What the record says about the configuration: its kind, groups, blocks, adapter and,
        for ``auto``, the choice and the measurement behind it."""
        component = self.cfg.component
        fields: dict[str, Any] = {"strategy": strategy_of(component.name, _blocks(component), self.adapter),
                                  "groups": list(selection.by_group), "blocks": _blocks(component),
                                  "adapter": self.adapter}
        if component.get("lr_scale"):
            fields["lr_scale"] = dict(component.lr_scale)
        return {**fields, **getattr(self, "auto_record", {})}


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
        fix = (f"a task.batch_size divisible by {per_step} (e.g. task.batch_size={per_step * max(1, round(task.batch_size / per_step))}), "
               f"or a process count that divides {task.batch_size}")
    p.add(f"the global batch task.batch_size={task.batch_size} is not divisible by task.micro_batch_size="
          f"{task.micro_batch_size} x {world} processes (trainer.devices x trainer.num_nodes) = {per_step}: every "
          f"optimizer step must be a whole number of micro-batches on each process. Fix: {fix}.")


def _largest_divisor(n: int, below: int) -> int:
    return max(d for d in range(1, min(n, below) + 1) if n % d == 0)


def _blocks(component: DictConfig) -> list[int] | None:
    blocks = component.get("blocks")
    return None if blocks is None else [int(b) for b in blocks]


def _adapter(cfg: DictConfig) -> dict | None:
    """The configured adapter as a plain dict (``{"name": "lora", "rank": 8, ...}``), or None."""
    from omegaconf import OmegaConf

    node = cfg.get("adapter")
    if not has_adapter(node):
        return None
    return OmegaConf.to_container(node, resolve=True)


def tag(cfg: DictConfig) -> str:
    """The configuration's name in the record and run path (:func:`plasticity.components.component_tag`)."""
    auto = cfg.component.get("auto") or {}
    return component_tag(cfg.component.name, _blocks(cfg.component), _adapter(cfg), auto.get("budget"))


def check_strategy(cfg: DictConfig, p: Problems) -> None:
    """``component.name`` (a group, ``+``-joined groups or ``auto``), ``component.blocks``,
    ``component.lr_scale``, ``component.auto`` and the adapter."""
    component = cfg.component
    if not p.check(check_component, component.name):
        return
    parts = parse_component(component.name)
    blocks = component.get("blocks")
    p.check(check_blocks, blocks, model_depth(cfg) if blocks is not None else None)
    scale = component.get("lr_scale") or {}
    for group, value in scale.items():
        p.require(group in parts, f"component.lr_scale has {group!r}, which is not trained by "
                                  f"component.name={component.name!r} (groups: {', '.join(parts)}). "
                                  f"Fix: component.lr_scale={{{parts[0]}: 10}} or drop the key.")
        positive_number(p, f"component.lr_scale.{group}", value, "10")
    if component.name == AUTO:
        check_auto(cfg, p)
    adapter = _adapter(cfg)
    if adapter:
        from plasticity.adapters import check_adapter

        p.require(component.name != AUTO, "component=auto with adapter=lora: the measurement chooses whole "
                                          "weights to train. Fix: adapter=none, or a group with adapter=lora.")
        for problem in check_adapter(list(parts), adapter):
            p.add(problem)


def model_depth(cfg: DictConfig) -> int | None:
    """The model's number of blocks, from its state dict shapes on the meta device (None if unknown)."""
    from omegaconf import OmegaConf

    from plasticity.models import block_layout, model_shapes

    try:
        kwargs = OmegaConf.to_container(cfg.model.get("kwargs") or {}, resolve=True)
        return block_layout(model_shapes(cfg.model.name, kwargs)).get("depth")
    except Exception:  # an unknown model name is reported by check_model
        return None


def check_auto(cfg: DictConfig, p: Problems) -> None:
    """``component.auto``: the reference dataset exists, positive pair counts, a budget in (0, 1]."""
    auto = cfg.component.get("auto")
    if not p.require(auto is not None, "component=auto needs component.auto (reference, n_pairs, batch_size, "
                                       "budget). Fix: component=auto (conf/component/auto.yaml)."):
        return
    check_dataset(cfg, p, auto.reference, key="component.auto.reference")
    positive_int(p, "component.auto.n_pairs", auto.get("n_pairs"))
    positive_int(p, "component.auto.batch_size", auto.get("batch_size"))
    budget = auto.get("budget")
    p.require(budget is None or (is_number(budget) and 0 < budget <= 1),
              f"component.auto.budget={budget!r} must be null (the most plastic whole group) or a fraction of the "
              f"model's parameters in (0, 1]. Fix: e.g. component.auto.budget=0.05.")
    p.require(cfg.component.get("blocks") is None,
              f"component.blocks={cfg.component.blocks!r} with component=auto: the measurement chooses the blocks. "
              f"Fix: component.blocks=null, or a budget (component.auto.budget=0.05).")
