"""Deterministic splits of every dataset and the DataModule that serves them.

A dataset's on-disk format is read by its :class:`plasticity.sources.Source`; this module turns
the official parts into train/val/test with the paper's protocol (App. C.2), independent of the
run seed:

* sets with an official test split (CIFAR, Fashion-MNIST, Flowers102, Pets): the test split is
  kept; validation is 20 % of the training part (``split_indices(n, 0.8, 42)``);
* sets without one (Cifar10-C, DomainNet, Fashion-MNIST-C): ``RandomState(42).permutation``,
  first 80 % train+val, the rest test; then validation is 20 % of that train part;
* the plasticity reference (ImageNet val): everything is ``test``, in class-folder order.

Small-image sets live in memory. JPEG sets are served from the arrays written once by
``task=prepare`` (memory-mapped; see :mod:`plasticity.prepare`) when they exist, else read
through the JPEG path (:mod:`plasticity.images`) with a warning.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import lightning as L
import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, Sampler, SequentialSampler

from plasticity.images import EvalImages, FileDataset, eval_transform, train_transform
from plasticity.sources import (
    SOURCES,
    ArraySet,
    DataError,
    FileSet,
    ImageFolder,
    check_severity,
    generate_fashion_mnist_c,
    read_c_layout,
    source,
)

__all__ = [
    "DATASETS",
    "ArraySet",
    "DataError",
    "DataModule",
    "EpochBatchSampler",
    "FileSet",
    "Splits",
    "check_data",
    "ensure_data",
    "generate_fashion_mnist_c",
    "load_splits",
    "official_splits",
    "read_c_layout",
    "split_indices",
]

log = logging.getLogger(__name__)

DATASETS: dict[str, int] = {name: src.num_classes for name, src in SOURCES.items()}
"""Every dataset name and its number of classes."""


@dataclass(frozen=True)
class Splits:
    """Train/val/test sets of one dataset.

    Attributes:
        train: Training set: an :class:`ArraySet` (in memory, or prepared and memory-mapped with
            original sizes) or a :class:`FileSet` (JPEG path).
        val: Validation set (an :class:`ArraySet` whose images may decode lazily).
        test: Test set (likewise).
        num_classes: Number of classes.
        split_hash: 12 hex characters hashing the dataset name, severity and every split's
            indices and labels (and file names); equal hashes mean two runs saw the same examples.
        prepared: Whether the images come from ``task=prepare`` arrays.
    """

    train: ArraySet | FileSet
    val: ArraySet | FileSet
    test: ArraySet | FileSet
    num_classes: int
    split_hash: str
    prepared: bool = False

    def sizes(self) -> dict[str, int]:
        return {"train": len(self.train), "val": len(self.val), "test": len(self.test)}


# ----------------------------------------------------------------------------- splits


def split_indices(n: int, fraction: float = 0.8, seed: int = 42) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic two-way split, the official code's 80/20 convention.

    Args:
        n: Number of items.
        fraction: Share of the first part, in ``(0, 1)``.
        seed: Seed of ``np.random.RandomState``; fixed so splits never depend on the run.

    Returns:
        ``(first, second)`` index arrays (int64): the first ``round(fraction * n)`` entries of
        ``RandomState(seed).permutation(n)`` and the rest.
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction must be in (0, 1), got {fraction}")
    perm = np.random.RandomState(seed).permutation(n).astype(np.int64)
    k = int(round(fraction * n))
    return perm[:k], perm[k:]


def _split_hash(name: str, severity: int | None, parts: list[tuple[ArraySet | FileSet, np.ndarray]]) -> str:
    """Hash the dataset identity and each split's (indices, labels[, file names])."""
    h = hashlib.sha256(f"{name}|{severity}".encode())
    for part, idx in parts:
        h.update(np.ascontiguousarray(idx, dtype="<i8").tobytes())
        h.update(b"|")
        h.update(np.ascontiguousarray(part.labels, dtype="<i8").tobytes())
        if isinstance(part, FileSet):
            h.update("\n".join(part.files).encode())
        h.update(b"#")
    return h.hexdigest()[:12]


def _expected_classes(name: str, num_classes: int | None) -> int:
    if num_classes is not None and (not isinstance(num_classes, int) or num_classes < 1):
        raise ValueError(f"dataset.num_classes={num_classes!r} must be a positive integer or null (the dataset's own).")
    return num_classes or source(name).num_classes


def _check_classes(name: str, data_dir: Path, labels: np.ndarray, expected: int) -> None:
    src = source(name)
    if isinstance(src, ImageFolder):
        found = len(src.classes(data_dir))
        if found != expected and not src.reference_only:  # the reference's labels are never used
            raise DataError(
                f"{name}: found {found} class folders in {src.path(data_dir)}, expected {expected} "
                f"(an incomplete extraction?). Fix: fetch the whole dataset ({src.fetch}), or set "
                f"dataset.num_classes={found} to use these classes only."
            )
    elif len(labels) and (labels.min() < 0 or labels.max() >= expected):
        raise DataError(f"{name}: labels span {labels.min()}..{labels.max()}, outside 0..{expected - 1} "
                        f"(dataset.num_classes={expected}); the files in {src.path(data_dir)} are corrupt.")


def official_splits(name: str, data_dir: str | Path, *, severity: int = 5, num_classes: int | None = None) -> Splits:
    """Apply the split protocol (module docstring) to a dataset's official parts.

    JPEG datasets come back as :class:`FileSet` splits (nothing is decoded).

    Args:
        name: A key of :data:`DATASETS`.
        data_dir: Root data folder.
        severity: Corruption severity ``1..5`` (``*_c`` sets).
        num_classes: Expected number of classes (None: the dataset's own).

    Raises:
        ValueError: Unknown name, bad severity or bad ``num_classes``.
        DataError: Data missing or corrupt, or class count different from ``num_classes``.
    """
    src = source(name)
    check_severity(severity)
    expected = _expected_classes(name, num_classes)
    parts = src.read(data_dir, severity)
    if "all" in parts:
        whole = parts["all"]
        trainval_idx, test_idx = split_indices(len(whole), 0.8, 42)
        tr, va = split_indices(len(trainval_idx), 0.8, 42)
        base, train_idx, val_idx = whole, trainval_idx[tr], trainval_idx[va]
        test, test_src = whole.subset(test_idx), test_idx
    elif "train" in parts:
        base = parts["train"]
        train_idx, val_idx = split_indices(len(base), 0.8, 42)
        test = parts["test"]
        test_src = np.arange(len(test), dtype=np.int64)
    else:  # the reference: test only, in order
        test = parts["test"]
        base, train_idx, val_idx = test, np.zeros(0, np.int64), np.zeros(0, np.int64)
        test_src = np.arange(len(test), dtype=np.int64)
    train, val = base.subset(train_idx), base.subset(val_idx)
    all_labels = np.concatenate([train.labels, val.labels, test.labels])
    _check_classes(name, Path(data_dir), all_labels, expected)
    corrupted = name.startswith(("cifar10_c/", "fashion_mnist_c/"))
    digest = _split_hash(name, severity if corrupted else None,
                         [(train, train_idx), (val, val_idx), (test, test_src)])
    return Splits(train, val, test, expected, digest)


def _apply_limit(train: ArraySet | FileSet, limit: int | None) -> ArraySet | FileSet:
    if limit is None:
        return train
    if not isinstance(limit, int) or limit <= 0:
        raise ValueError(f"dataset.limit={limit!r} must be a positive number of train images or null (all).")
    if isinstance(train, ArraySet):
        sizes = None if train.sizes is None else train.sizes[:limit]
        return ArraySet(train.images[:limit], train.labels[:limit], sizes)
    return train.subset(np.arange(min(limit, len(train))))


# ----------------------------------------------------------------------------- public entry points


def check_data(name: str, data_dir: str | Path, *, severity: int = 5, download: bool = False) -> None:
    """Check that a dataset is present (or downloadable) without loading it.

    Raises:
        ValueError: Unknown name or bad severity.
        DataError: Files missing (and not downloadable) or corrupt.
    """
    src = source(name)
    check_severity(severity)
    src.check(data_dir, download=download)


def ensure_data(name: str, data_dir: str | Path, *, download: bool = False) -> None:
    """Download (if allowed) or generate whatever ``name`` needs on disk; cheap if present.

    Meant for ``LightningDataModule.prepare_data`` (one process per node).
    """
    source(name).ensure(data_dir, download=download)


def load_splits(
    name: str,
    data_dir: str | Path,
    *,
    severity: int = 5,
    download: bool = False,
    limit: int | None = None,
    img_size: int = 224,
    num_classes: int | None = None,
    prepared_dir: str | Path | None = None,
) -> Splits:
    """Load a dataset's train/val/test splits.

    Small-image sets are read into memory. JPEG sets come from the ``task=prepare`` arrays in
    ``prepared_dir`` when they exist for ``img_size`` (memory-mapped); otherwise ``train`` is a
    :class:`FileSet` (the JPEG path) and ``val``/``test`` decode lazily through the eval transform.

    Args:
        name: A key of :data:`DATASETS`.
        data_dir: Root data folder.
        severity: Corruption severity ``1..5`` (used by ``*_c`` sets).
        download: Let torchvision download missing files where it can.
        limit: Keep only the first ``limit`` training images (after splitting); val/test unchanged.
        img_size: The model's input side (JPEG sets are decoded for it).
        num_classes: Expected number of classes (None: the dataset's own).
        prepared_dir: Where ``task=prepare`` writes (default ``<data_dir>/prepared``).

    Raises:
        ValueError: Unknown name, bad severity or bad limit.
        DataError: Data missing or corrupt, or prepared arrays stale.
    """
    from plasticity.prepare import open_prepared, prepared_root

    check_severity(severity)
    ensure_data(name, data_dir, download=download)  # checks first: nothing is fetched for a corrupt set
    splits = official_splits(name, data_dir, severity=severity, num_classes=num_classes)
    if source(name).kind == "files":
        prepared = open_prepared(name, prepared_root(data_dir, prepared_dir), img_size, splits.split_hash)
        if prepared is not None:
            splits = Splits(prepared["train"], prepared["val"], prepared["test"], splits.num_classes,
                            splits.split_hash, prepared=True)
        else:
            lazy = lambda s: ArraySet(EvalImages(s, img_size), s.labels)  # noqa: E731
            splits = Splits(splits.train, lazy(splits.val), lazy(splits.test), splits.num_classes, splits.split_hash)
    train = _apply_limit(splits.train, limit)
    digest = splits.split_hash
    if len(train) < len(splits.train):  # the run sees fewer examples: its hash says so
        digest = hashlib.sha256(f"{digest}|limit={len(train)}".encode()).hexdigest()[:12]
    return Splits(train, splits.val, splits.test, splits.num_classes, digest, splits.prepared)


# ----------------------------------------------------------------------------- DataModule


class _BatchDataset(Dataset):
    """Returns a whole batch per index array: ``(uint8 (B, C, H, W), int64 (B,)[, int64 (B, 2)])``.

    The third element, the images' original sizes, is present for prepared (squashed) train sets.
    """

    def __init__(self, arrays: ArraySet) -> None:
        self.images, self.labels, self.sizes = arrays.images, arrays.labels, arrays.sizes

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, indices: list[int] | np.ndarray) -> tuple[torch.Tensor, ...]:
        idx = np.asarray(indices, dtype=np.int64)
        order = np.argsort(idx, kind="stable")  # sorted reads are sequential in a memory map
        images = np.empty((len(idx), *self.images.shape[1:]), dtype=np.uint8)
        images[order] = self.images[idx[order]]
        batch = (torch.from_numpy(images).permute(0, 3, 1, 2).contiguous(), torch.from_numpy(np.asarray(self.labels[idx])))
        return batch if self.sizes is None else (*batch, torch.from_numpy(np.asarray(self.sizes[idx])))


class EpochBatchSampler(Sampler):
    """Shuffled batches of indices (last partial batch dropped), the order a function of (seed, epoch).

    Lightning calls :meth:`set_epoch` at the start of every epoch, so a run resumed at an epoch
    boundary sees exactly the batches an uninterrupted run would.
    """

    def __init__(self, n: int, batch_size: int, seed: int) -> None:
        self.n, self.batch_size, self.seed, self.epoch = n, batch_size, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        order = torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch))
        for start in range(0, len(self) * self.batch_size, self.batch_size):
            yield order[start:start + self.batch_size].tolist()

    def __len__(self) -> int:
        return self.n // self.batch_size


def resolve_workers(num_workers: int | str) -> int:
    """``auto``: 0 without CUDA (two busy processes on a small CPU slow torch down), else up to 8."""
    if num_workers == "auto":
        return min(8, max(1, (os.cpu_count() or 2) - 1)) if torch.cuda.is_available() else 0
    if not isinstance(num_workers, int) or num_workers < 0:
        raise ValueError(f"dataset.num_workers={num_workers!r} must be a non-negative integer or 'auto'.")
    return num_workers


class DataModule(L.LightningDataModule):
    """Serves a dataset's splits as uint8 batches; the augmentation runs on the device.

    Array and prepared sets are served as whole batches built by fancy indexing. Unprepared
    JPEG sets use the torchvision JPEG path in worker processes (train crops and flips there;
    the device transform then only normalises, see :attr:`cpu_augment`).

    Args:
        name: A key of :data:`DATASETS`.
        data_dir: Root data folder.
        micro_batch_size: Training batch size (``drop_last=True``).
        eval_batch_size: Validation/test batch size (default ``micro_batch_size``).
        severity: Corruption severity for ``*_c`` sets.
        download: Let torchvision download missing files.
        limit: Cap on the number of training images.
        num_workers: DataLoader worker processes, or ``auto``.
        seed: Seed of the training order (a ``torch.Generator``), independent of the splits.
        img_size: The model's input side.
        num_classes: Expected number of classes (None: the dataset's own).
        prepared_dir: Where ``task=prepare`` wrote (default ``<data_dir>/prepared``).
        augment: Train with RandomResizedCrop + flip (else the eval transform) on the JPEG path.
        crop_scale: RandomResizedCrop scale range on the JPEG path.
        hflip: Horizontal flips on the JPEG path.
    """

    def __init__(
        self,
        name: str,
        data_dir: str,
        *,
        micro_batch_size: int,
        eval_batch_size: int | None = None,
        severity: int = 5,
        download: bool = False,
        limit: int | None = None,
        num_workers: int | str = 0,
        seed: int = 0,
        img_size: int = 224,
        num_classes: int | None = None,
        prepared_dir: str | None = None,
        augment: bool = True,
        crop_scale: tuple[float, float] = (0.08, 1.0),
        hflip: bool = True,
    ) -> None:
        super().__init__()
        source(name)
        check_severity(severity)
        if micro_batch_size <= 0 or (eval_batch_size is not None and eval_batch_size <= 0):
            raise ValueError("batch sizes must be positive")
        self.name, self.data_dir = name, str(data_dir)
        self.micro_batch_size = micro_batch_size
        self.eval_batch_size = eval_batch_size or micro_batch_size
        self.severity, self.download, self.limit = severity, download, limit
        self.num_workers, self.seed = resolve_workers(num_workers), seed
        self.img_size, self.expected_classes = int(img_size), _expected_classes(name, num_classes)
        self.prepared_dir, self.augment = prepared_dir, augment
        self.crop_scale, self.hflip = tuple(crop_scale), hflip
        self.splits: Splits | None = None

    def check(self) -> None:
        """Raise before any compute if the data is missing or corrupt or cannot be trained on."""
        check_data(self.name, self.data_dir, severity=self.severity, download=self.download)
        if source(self.name).reference_only:
            raise DataError(
                f"{self.name} is the plasticity reference (its test split only) and has no training split. "
                f"Fix: finetune on another dataset; use it as task.reference=... of task=plasticity."
            )

    @property
    def num_classes(self) -> int:
        return self.expected_classes

    @property
    def split_hash(self) -> str:
        return self._splits().split_hash

    @property
    def cpu_augment(self) -> bool:
        """True when train batches arrive already cropped and flipped (the JPEG path)."""
        return isinstance(self._splits().train, FileSet)

    def prepare_data(self) -> None:
        ensure_data(self.name, self.data_dir, download=self.download)

    def setup(self, stage: str | None = None) -> None:
        if self.splits is not None:
            return
        self.splits = load_splits(
            self.name, self.data_dir, severity=self.severity, download=self.download, limit=self.limit,
            img_size=self.img_size, num_classes=self.expected_classes, prepared_dir=self.prepared_dir,
        )
        if len(self.splits.train) < self.micro_batch_size:
            raise ValueError(
                f"{self.name}: {len(self.splits.train)} training images < micro_batch_size "
                f"{self.micro_batch_size}; with drop_last there would be no training batch"
            )
        if source(self.name).kind == "files" and not self.splits.prepared:
            log.warning("%s: reading JPEG files (no prepared arrays for img_size %d). Run `python launch.py "
                        "task=prepare dataset=%s` once to decode them ahead of training.", self.name,
                        self.img_size, self.name)

    def _splits(self) -> Splits:
        self.setup()
        assert self.splits is not None
        return self.splits

    def _loader(self, dataset: Dataset, **kwargs) -> DataLoader:
        return DataLoader(
            dataset,
            num_workers=self.num_workers,
            pin_memory=torch.cuda.is_available(),
            persistent_workers=self.num_workers > 0,
            **kwargs,
        )

    def train_dataloader(self) -> DataLoader:
        train = self._splits().train
        sampler = EpochBatchSampler(len(train), self.micro_batch_size, self.seed)
        if isinstance(train, FileSet):
            transform = (train_transform(self.img_size, self.crop_scale, hflip=self.hflip) if self.augment
                         else eval_transform(self.img_size))
            return self._loader(FileDataset(train, transform), batch_sampler=sampler)
        return self._loader(_BatchDataset(train), batch_size=None, sampler=sampler)

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader(self._splits().val)

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader(self._splits().test)

    def _eval_loader(self, arrays: ArraySet) -> DataLoader:
        batches = BatchSampler(SequentialSampler(range(len(arrays))), self.eval_batch_size, False)
        return self._loader(_BatchDataset(arrays), batch_size=None, sampler=batches)
