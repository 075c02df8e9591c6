"""What the recipes share: the base class with the default identity and checks, and the setup of
the two analyses (the model on its device and the stream of image pairs)."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, ContextManager, Iterator

from omegaconf import DictConfig

from plasticity.data import ArraySet, DataSpec, FileSet, Splits, load_splits
from plasticity.devices import autocast, check_device, device, precision
from plasticity.validate import Problems, check_dataset, check_dataset_values, check_model

if TYPE_CHECKING:
    import numpy as np
    import torch

__all__ = ["AnalysisRecipe", "RecipeBase", "SweepRecipe", "eval_set", "paired_inputs"]


class RecipeBase:
    """What every recipe implements (the four questions of :mod:`plasticity.recipes`), with its defaults.

    Args:
        cfg: The composed job config.
        run_dir: The run's own directory.
        resume: On a non-zero rank of a DDP run: the checkpoint rank 0 resumes from (its decision).
    """

    name: ClassVar[str]
    sections: ClassVar[tuple[str, ...]] = ("task", "model", "dataset", "seed")
    always_run: ClassVar[bool] = False
    trains: ClassVar[bool] = False
    """Whether it reads the dataset's train split (checked to have one)."""
    checks: ClassVar[tuple[str, ...]] = ()
    """The ``task`` keys its :meth:`validate` checks too: ``reference`` (a second dataset), ``device``."""
    named_by: ClassVar[tuple[str, ...]] = ()
    """The ``task`` keys that name the run in its record too, after the seed (as in its path: conf/task/<name>.yaml)."""

    def __init__(self, cfg: DictConfig, run_dir: Path, resume: str | None = None) -> None:
        self.cfg, self.run_dir, self.resume = cfg, Path(run_dir), resume

    @cached_property
    def device(self) -> "torch.device":
        """``task.device`` resolved (:func:`plasticity.devices.device`): where the analyses and the probe run."""
        return device(self.cfg.task.device)

    @classmethod
    def validate(cls, cfg: DictConfig, p: Problems, local: bool = True) -> None:
        """Adds the problems between keys and of what they name (each key's own: :mod:`plasticity.schema`):
        the model, the dataset and the task keys of :attr:`checks`."""
        check_model(cfg, p)
        check_dataset(cfg, p, cfg.dataset.name, trains=cls.trains)
        if "reference" in cls.checks:
            check_dataset(cfg, p, cfg.task.reference, key="task.reference")
        check_dataset_values(cfg.dataset, p)
        if "device" in cls.checks and not p.names("task.device"):
            check_device(cfg.task.device, p, local)

    @classmethod
    def identity(cls, cfg: DictConfig, **fields: Any) -> dict[str, Any]:
        """The fields that name the run in its record (``fields``: a recipe's own, before the seed; then the task
        keys of :attr:`named_by`)."""
        return {"task": cfg.task.name, "dataset": cfg.dataset.name, "model": cfg.model.name, **fields, "seed": cfg.seed,
                **{key: cfg.task[key] for key in cls.named_by}}

    def run(self) -> dict[str, Any]:  # pragma: no cover - every recipe overrides it
        raise NotImplementedError

    def delete_checkpoints(self) -> None:
        """Called once a finished run's record is written: what a recipe keeps only to resume goes."""

    def create_net(self, num_classes: int) -> "torch.nn.Module":
        """The configured model (``model``: timm name, pretrained weights or file, architecture
        arguments) with a new ``num_classes`` head."""
        from plasticity.models import create_model

        model = self.cfg.model
        return create_model(model.name, num_classes, pretrained=model.pretrained, weights_file=model.weights_file,
                            **model.kwargs)

    def log_analysis(self, tables: dict[str, list[dict]], images: dict[str, Any], summary: dict[str, Any]) -> None:
        """An analysis' tables, figures and summary to W&B under the run's identity when the job has
        ``logger=wandb``; a no-op otherwise (:func:`plasticity.tracking.logger.log_analysis`)."""
        from plasticity.tracking.logger import log_analysis

        log_analysis(self.cfg, self.identity(self.cfg), self.run_dir, tables, images, summary)

    def setup_net(self, num_classes: int = 10) -> "torch.nn.Module":
        """The model, frozen, in eval mode on the task's device (the analyses and the probe never use its head)."""
        return self.create_net(num_classes).requires_grad_(False).to(self.device).eval()

    @property
    def precision(self) -> str:
        """``task.precision`` with ``auto`` resolved for the task's device (:func:`plasticity.devices.precision`)."""
        return precision(self.cfg.task.precision, self.device.type == "cuda")

    def autocast(self) -> ContextManager:
        """:attr:`precision` on the task's device (:func:`plasticity.devices.autocast`)."""
        return autocast(self.precision, self.device)


class SweepRecipe(RecipeBase):
    """Shared by ``task=report`` and ``task=dashboard``: read the runs under ``sweep_dir``, rebuilt at every
    launch (from the current records, code and filters), named by their task alone."""

    sections = ("task", "sweep_dir")
    always_run = True

    @classmethod
    def identity(cls, cfg: DictConfig) -> dict[str, Any]:
        return {"task": cls.name}


class AnalysisRecipe(RecipeBase):
    """Shared by ``task=plasticity`` and ``task=bounds``: pairs (reference test image, downstream
    test image) streamed through the pretrained model on its device."""

    checks = ("reference", "device")
    named_by = ("reference", "n_pairs", "batch_size")  # the pairs and their batch

    def setup_images(self) -> tuple["np.ndarray", "np.ndarray"]:
        """What the pairs are drawn from in the reference and downstream test splits
        (:func:`plasticity.measure.pair_inputs`): images decoded for the model's input side, or
        token windows of ``dataset.window`` tokens; never an example with its own copy
        (:func:`plasticity.measure.disjoint`, said by :attr:`pairs_from`)."""
        down = DataSpec.from_config(self.cfg)
        ref = down.replace(name=self.cfg.task.reference, limit=None, num_classes=None)
        for spec in (ref, down):  # every problem reported before anything is generated or loaded
            spec.check()
        ref, down, self.pairs_from = paired_inputs(load_splits(ref), load_splits(down), self.cfg.dataset.get("window"))
        return ref, down

    def pairs(self, net: "torch.nn.Module", ref: "np.ndarray", down: "np.ndarray") -> Iterator["torch.Tensor"]:
        """Batches of 2B model inputs on the device: B reference inputs, then B downstream
        (transformed images, or token windows)."""
        from plasticity.data.augment import input_transform
        from plasticity.measure import pair_batches, pair_indices

        task = self.cfg.task
        indices = pair_indices(len(ref), len(down), task.n_pairs, task.pairing, task.pairing_seed)
        transform = input_transform(net, self.cfg.dataset).to(self.device)  # token ids pass as they are
        return pair_batches(ref, down, indices, task.batch_size, transform, self.device)


def eval_set(arrays: Any, img_size: int | None) -> Any:
    """A split as the analyses read it: a JPEG train split (a :class:`plasticity.data.FileSet`, no
    prepared arrays) decoded lazily through the evaluation transform, as val and test are; else as it is."""
    from plasticity.data.images import EvalImages  # torchvision: loaded already by the input transforms

    return ArraySet(EvalImages(arrays, img_size), arrays.labels) if isinstance(arrays, FileSet) else arrays


def paired_inputs(ref: "Splits", down: "Splits", window: int | None, split: str = "test",
                  img_size: int | None = None) -> tuple["np.ndarray", "np.ndarray", str]:
    """What pairs are drawn from (:func:`plasticity.measure.pair_inputs`) in the reference's test split and the
    downstream ``split`` (:func:`eval_set`): images, or token windows of ``window`` tokens; never an example
    with its own copy (:func:`plasticity.measure.disjoint`). Returns both and how the pairs are formed."""
    from plasticity.measure import disjoint, pair_inputs

    ref_rows, down_rows, pairs_from = disjoint(ref, down, split)
    down_set = eval_set(getattr(down, split), img_size)
    return pair_inputs(ref.test, window, ref_rows), pair_inputs(down_set, window, down_rows), pairs_from
