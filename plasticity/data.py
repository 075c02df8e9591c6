"""Datasets as in-memory uint8 arrays, deterministic splits and a batch-level DataModule.

Every dataset is loaded into an :class:`ArraySet` (``uint8`` images ``(N, H, W, C)`` and
``int64`` labels); augmentation runs later on the accelerator on whole batches
(:mod:`plasticity.augment`). Splits never depend on the run seed.

Supported datasets (:data:`DATASETS`):

* ``fashion_mnist``: torchvision's FashionMNIST, official train/test split; validation is
  20 % of train (``split_indices(60000, 0.8, 42)``).
* ``fashion_mnist_c/<corruption>``: the 10,000 Fashion-MNIST test images corrupted like
  CIFAR-10-C, stored as ``<data_dir>/FashionMNIST-C/<corruption>.npy`` (5 severities x
  10,000 rows) and ``labels.npy``; generated from the clean test set on first use. One
  severity is split 80/20 into train/test, then the train part 80/20 into train/val.
"""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass
from pathlib import Path

import lightning as L
import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, Sampler, SequentialSampler

from plasticity.corruptions import CORRUPTIONS, corrupt
from plasticity.results import atomic_path

__all__ = [
    "DATASETS",
    "ArrayDataModule",
    "ArraySet",
    "DataError",
    "Splits",
    "check_data",
    "ensure_data",
    "generate_fashion_mnist_c",
    "load_splits",
    "read_c_layout",
    "split_indices",
]

NUM_SEVERITIES = 5
FMNIST_C_DIR = "FashionMNIST-C"
_FMNIST_CLASSES = 10
_FMNIST_C_PREFIX = "fashion_mnist_c/"
_FMNIST_RAW = {
    "train-images-idx3-ubyte": 2051,
    "train-labels-idx1-ubyte": 2049,
    "t10k-images-idx3-ubyte": 2051,
    "t10k-labels-idx1-ubyte": 2049,
}

DATASETS: dict[str, int] = {
    "fashion_mnist": _FMNIST_CLASSES,
    **{f"{_FMNIST_C_PREFIX}{c}": _FMNIST_CLASSES for c in CORRUPTIONS},
}


class DataError(FileNotFoundError):
    """Data missing or corrupt; the message names the dataset, the path and how to get it."""


@dataclass(frozen=True)
class ArraySet:
    """Images and labels of one split.

    Attributes:
        images: ``uint8`` array ``(N, H, W, C)`` with ``C`` in ``{1, 3}``.
        labels: ``int64`` array ``(N,)``.
    """

    images: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)


@dataclass(frozen=True)
class Splits:
    """Train/val/test sets of one dataset.

    Attributes:
        train: Training set (possibly capped by ``limit``).
        val: Validation set.
        test: Test set.
        num_classes: Number of classes.
        split_hash: 12 hex characters hashing the dataset name, severity and every split's
            indices and labels; equal hashes mean two runs saw the same examples.
    """

    train: ArraySet
    val: ArraySet
    test: ArraySet
    num_classes: int
    split_hash: str


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


def _split_hash(name: str, severity: int | None, parts: list[tuple[np.ndarray, np.ndarray]]) -> str:
    """Hash the dataset identity and each split's (indices, labels)."""
    h = hashlib.sha256(f"{name}|{severity}".encode())
    for idx, labels in parts:
        h.update(np.ascontiguousarray(idx, dtype="<i8").tobytes())
        h.update(b"|")
        h.update(np.ascontiguousarray(labels, dtype="<i8").tobytes())
        h.update(b"#")
    return h.hexdigest()[:12]


def _subset(images: np.ndarray, labels: np.ndarray, idx: np.ndarray) -> ArraySet:
    return ArraySet(images=np.ascontiguousarray(images[idx]), labels=labels[idx].astype(np.int64))


# ----------------------------------------------------------------------------- names


def _parse_name(name: str) -> str | None:
    """Validate a dataset name; return the corruption for ``fashion_mnist_c/*``, else None."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose one of: {', '.join(DATASETS)}")
    return name[len(_FMNIST_C_PREFIX) :] if name.startswith(_FMNIST_C_PREFIX) else None


def _check_severity(severity: int) -> None:
    if not isinstance(severity, (int, np.integer)) or not 1 <= severity <= NUM_SEVERITIES:
        raise ValueError(f"severity must be an integer in 1..{NUM_SEVERITIES}, got {severity!r}")


# ----------------------------------------------------------------------------- Fashion-MNIST


def _fmnist_raw_dir(data_dir: Path) -> Path:
    return data_dir.resolve() / "FashionMNIST" / "raw"


def _fmnist_missing_message(name: str, data_dir: Path, problem: str) -> str:
    raw = _fmnist_raw_dir(data_dir)
    return (
        f"{name}: {problem}. Expected the Fashion-MNIST idx files in {raw} "
        f"({', '.join(_FMNIST_RAW)}). Get them with `make data` (installs the Debian package "
        "dataset-fashion-mnist and unpacks /usr/share/datasets/fashion-mnist), or pass "
        "dataset.download=true to let torchvision download them."
    )


def _idx_problem(path: Path, magic: int) -> str | None:
    """Cheaply validate an idx file header against its size; return a problem or None."""
    if not path.is_file():
        return f"missing {path.name}"
    ndim = magic & 0xFF
    with open(path, "rb") as f:
        header = f.read(4 + 4 * ndim)
    if len(header) < 4 + 4 * ndim or int.from_bytes(header[:4], "big") != magic:
        return f"{path} is not an idx file with magic number {magic}"
    dims = [int.from_bytes(header[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    expected = 4 + 4 * ndim + int(np.prod(dims))
    if path.stat().st_size != expected:
        return f"{path} is truncated or corrupt ({path.stat().st_size} bytes, header implies {expected})"
    return None


def _check_fmnist(name: str, data_dir: Path, download: bool) -> None:
    """Raise DataError unless the four raw idx files are present and consistent."""
    raw = _fmnist_raw_dir(data_dir)
    problems = [p for f, m in _FMNIST_RAW.items() if (p := _idx_problem(raw / f, m))]
    missing_only = all(p.startswith("missing") for p in problems)
    if problems and not (download and missing_only):
        if missing_only and len(problems) == len(_FMNIST_RAW):
            problems = ["data not found"]
        raise DataError(_fmnist_missing_message(name, data_dir, "; ".join(problems)))


def _load_fmnist(name: str, data_dir: Path, train: bool, download: bool) -> tuple[np.ndarray, np.ndarray]:
    """Read one official Fashion-MNIST split via torchvision as ``(N, 28, 28, 1)`` uint8 + int64."""
    from torchvision.datasets import FashionMNIST

    _check_fmnist(name, data_dir, download)
    try:
        ds = FashionMNIST(root=str(data_dir), train=train, download=download)
    except Exception as err:  # torchvision raises RuntimeError/AssertionError/URLError...
        raise DataError(_fmnist_missing_message(name, data_dir, f"reading failed ({err})")) from err
    images = ds.data.numpy()[..., None]
    labels = ds.targets.numpy().astype(np.int64)
    return np.ascontiguousarray(images), labels


def _fashion_mnist_splits(data_dir: Path, download: bool, limit: int | None) -> Splits:
    name = "fashion_mnist"
    tr_images, tr_labels = _load_fmnist(name, data_dir, True, download)
    te_images, te_labels = _load_fmnist(name, data_dir, False, download)
    train_idx, val_idx = split_indices(len(tr_labels), 0.8, 42)
    train_idx = _apply_limit(train_idx, limit)
    test_idx = np.arange(len(te_labels), dtype=np.int64)
    parts = [(train_idx, tr_labels[train_idx]), (val_idx, tr_labels[val_idx]), (test_idx, te_labels)]
    return Splits(
        train=_subset(tr_images, tr_labels, train_idx),
        val=_subset(tr_images, tr_labels, val_idx),
        test=ArraySet(images=te_images, labels=te_labels),
        num_classes=DATASETS[name],
        split_hash=_split_hash(name, None, parts),
    )


def _apply_limit(train_idx: np.ndarray, limit: int | None) -> np.ndarray:
    if limit is None:
        return train_idx
    if limit <= 0:
        raise ValueError(f"limit must be a positive number of train images or None, got {limit}")
    return train_idx[:limit]


# ----------------------------------------------------------------------------- CIFAR-10-C layout


def _open_npy(path: Path, dataset: str) -> np.ndarray:
    """Memory-map a ``.npy`` file; raise DataError naming it if it cannot be read."""
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except FileNotFoundError as err:
        raise DataError(f"{dataset}: missing {path}") from err
    except Exception as err:  # ValueError (truncated), OSError, EOFError, ...
        raise DataError(f"{dataset}: {path} is truncated or corrupt ({err}); delete it and retry") from err


def _c_layout_arrays(directory: Path, name: str, dataset: str) -> tuple[np.ndarray, np.ndarray, int]:
    """Open and shape-check ``<directory>/<name>.npy`` and ``labels.npy`` (memory-mapped)."""
    img_path, lbl_path = directory / f"{name}.npy", directory / "labels.npy"
    images, labels = _open_npy(img_path, dataset), _open_npy(lbl_path, dataset)
    if images.ndim != 4 or images.dtype != np.uint8 or images.shape[-1] not in (1, 3):
        raise DataError(f"{dataset}: {img_path} should be uint8 (N, H, W, 1|3), got {images.dtype} {images.shape}")
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise DataError(f"{dataset}: {lbl_path} should be 1-d integer labels, got {labels.dtype} {labels.shape}")
    rows = len(images)
    if rows == 0 or rows % NUM_SEVERITIES or len(labels) != rows:
        raise DataError(
            f"{dataset}: {img_path} has {rows} rows and {lbl_path} {len(labels)}; expected equal counts, "
            f"a multiple of {NUM_SEVERITIES} severities (file truncated or corrupt? delete it and retry)"
        )
    return images, labels, rows // NUM_SEVERITIES


def read_c_layout(directory: str | Path, name: str, severity: int, *, dataset: str | None = None) -> ArraySet:
    """Read one severity of a corruption stored in the CIFAR-10-C layout.

    The layout is ``<directory>/<name>.npy`` (uint8 ``(5 * n, H, W, C)``, severity ``s`` in rows
    ``(s - 1) * n : s * n``) and ``<directory>/labels.npy`` (``5 * n`` integer labels).

    Args:
        directory: Folder holding the ``.npy`` files (e.g. ``data/CIFAR-10-C``).
        name: Corruption name (file stem).
        severity: Integer in ``1..5``.
        dataset: Dataset name used in error messages (defaults to ``name``).

    Returns:
        The ``n`` images (``uint8 (n, H, W, C)``) and labels (``int64``) of that severity.

    Raises:
        DataError: A file is missing, truncated or has inconsistent shapes.
        ValueError: ``severity`` is not in ``1..5``.
    """
    _check_severity(severity)
    images, labels, n = _c_layout_arrays(Path(directory), name, dataset or name)
    rows = slice((severity - 1) * n, severity * n)
    return ArraySet(images=np.array(images[rows]), labels=np.array(labels[rows], dtype=np.int64))


def _atomic_save(path: Path, array: np.ndarray) -> None:
    """Write ``array`` to ``path`` atomically (see :func:`plasticity.results.atomic_path`)."""
    with atomic_path(path) as tmp:
        np.save(tmp, array, allow_pickle=False)


def _generation_seed(corruption: str, severity: int) -> int:
    return zlib.crc32(f"fashion_mnist_c/{corruption}/{severity}".encode())


def generate_fashion_mnist_c(data_dir: str | Path, corruption: str, *, download: bool = False) -> Path:
    """Create ``<data_dir>/FashionMNIST-C/<corruption>.npy`` (+ ``labels.npy``) from the clean test set.

    Deterministic (seeded by corruption name and severity); files are written atomically, so
    concurrent runs produce identical files. Existing, readable files are kept.

    Args:
        data_dir: Root data folder (holds ``FashionMNIST/raw``).
        corruption: One of :data:`plasticity.corruptions.CORRUPTIONS`.
        download: Let torchvision download the clean set if missing.

    Returns:
        The ``FashionMNIST-C`` folder.
    """
    dataset = f"{_FMNIST_C_PREFIX}{corruption}"
    _parse_name(dataset)
    data_dir = Path(data_dir)
    out_dir = data_dir.resolve() / FMNIST_C_DIR
    images, labels = _load_fmnist(dataset, data_dir, False, download)
    all_labels = np.tile(labels, NUM_SEVERITIES)
    out_dir.mkdir(parents=True, exist_ok=True)
    lbl_path = out_dir / "labels.npy"
    if not lbl_path.is_file():
        _atomic_save(lbl_path, all_labels)
    elif not np.array_equal(_open_npy(lbl_path, dataset), all_labels):
        raise DataError(f"{dataset}: {lbl_path} does not match the clean test labels; delete {out_dir} and retry")
    stack = [corrupt(images, corruption, s, _generation_seed(corruption, s)) for s in range(1, NUM_SEVERITIES + 1)]
    _atomic_save(out_dir / f"{corruption}.npy", np.concatenate(stack))
    return out_dir


def _c_files_ok(data_dir: Path, corruption: str, dataset: str) -> bool:
    """True if the corruption files exist and pass the shape checks; False if any is missing."""
    directory = data_dir.resolve() / FMNIST_C_DIR
    if not ((directory / f"{corruption}.npy").is_file() and (directory / "labels.npy").is_file()):
        return False
    _c_layout_arrays(directory, corruption, dataset)
    return True


def _fashion_mnist_c_splits(data_dir: Path, corruption: str, severity: int, limit: int | None) -> Splits:
    dataset = f"{_FMNIST_C_PREFIX}{corruption}"
    data = read_c_layout(data_dir.resolve() / FMNIST_C_DIR, corruption, severity, dataset=dataset)
    trainval_idx, test_idx = split_indices(len(data), 0.8, 42)
    tr, va = split_indices(len(trainval_idx), 0.8, 42)
    train_idx, val_idx = _apply_limit(trainval_idx[tr], limit), trainval_idx[va]
    parts = [(i, data.labels[i]) for i in (train_idx, val_idx, test_idx)]
    train, val, test = (_subset(data.images, data.labels, i) for i in (train_idx, val_idx, test_idx))
    return Splits(train, val, test, DATASETS[dataset], _split_hash(dataset, severity, parts))


# ----------------------------------------------------------------------------- public entry points


def check_data(name: str, data_dir: str | Path, *, severity: int = 5, download: bool = False) -> None:
    """Check that a dataset is present (or obtainable) without loading it.

    Args:
        name: A key of :data:`DATASETS`.
        data_dir: Root data folder.
        severity: Corruption severity (``1..5``), validated for every dataset.
        download: Whether missing files may be downloaded (then missing files are fine).

    Raises:
        ValueError: Unknown name or bad severity.
        DataError: Files missing (and not downloadable) or corrupt.
    """
    corruption = _parse_name(name)
    _check_severity(severity)
    data_dir = Path(data_dir)
    if corruption is None:
        _check_fmnist(name, data_dir, download)
    elif not _c_files_ok(data_dir, corruption, name):
        try:
            _check_fmnist(name, data_dir, download)
        except DataError as err:
            target = data_dir.resolve() / FMNIST_C_DIR / f"{corruption}.npy"
            raise DataError(f"{err} ({target} and labels.npy are generated from that test set on first use.)") from None


def ensure_data(name: str, data_dir: str | Path, *, download: bool = False) -> None:
    """Download (if allowed) and generate whatever ``name`` needs on disk; cheap if present.

    Meant for ``LightningDataModule.prepare_data`` (one process per node).
    """
    corruption = _parse_name(name)
    data_dir = Path(data_dir)
    if corruption is None:
        if download:
            _load_fmnist(name, data_dir, False, True)
            _load_fmnist(name, data_dir, True, True)
        else:
            _check_fmnist(name, data_dir, False)
    elif not _c_files_ok(data_dir, corruption, name):
        generate_fashion_mnist_c(data_dir, corruption, download=download)


def load_splits(
    name: str, data_dir: str | Path, *, severity: int = 5, download: bool = False, limit: int | None = None
) -> Splits:
    """Load a dataset's train/val/test splits into memory.

    Args:
        name: A key of :data:`DATASETS`.
        data_dir: Root data folder.
        severity: Corruption severity ``1..5`` (used by ``fashion_mnist_c/*``).
        download: Let torchvision download missing Fashion-MNIST files.
        limit: Keep only the first ``limit`` training images (after splitting); val/test unchanged.

    Returns:
        The :class:`Splits`.

    Raises:
        ValueError: Unknown name, bad severity or bad limit.
        DataError: Data missing or corrupt.
    """
    check_data(name, data_dir, severity=severity, download=download)
    corruption = _parse_name(name)
    data_dir = Path(data_dir)
    ensure_data(name, data_dir, download=download)
    if corruption is None:
        return _fashion_mnist_splits(data_dir, download, limit)
    return _fashion_mnist_c_splits(data_dir, corruption, severity, limit)


# ----------------------------------------------------------------------------- DataModule


class _BatchDataset(Dataset):
    """Returns a whole batch per index array: ``(uint8 (B, C, H, W), int64 (B,))``."""

    def __init__(self, arrays: ArraySet) -> None:
        self.images = arrays.images
        self.labels = arrays.labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, indices: list[int] | np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        idx = np.asarray(indices, dtype=np.int64)
        images = torch.from_numpy(self.images[idx]).permute(0, 3, 1, 2).contiguous()
        return images, torch.from_numpy(self.labels[idx])


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


class ArrayDataModule(L.LightningDataModule):
    """Serves an in-memory :class:`Splits` as uint8 batches built by fancy indexing.

    Args:
        name: A key of :data:`DATASETS`.
        data_dir: Root data folder.
        micro_batch_size: Training batch size (``drop_last=True``).
        eval_batch_size: Validation/test batch size (default ``micro_batch_size``).
        severity: Corruption severity for ``fashion_mnist_c/*``.
        download: Let torchvision download missing files.
        limit: Cap on the number of training images.
        num_workers: DataLoader worker processes.
        seed: Seed of the training order (a ``torch.Generator``), independent of the splits.
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
        num_workers: int = 0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        _parse_name(name)
        _check_severity(severity)
        if micro_batch_size <= 0 or (eval_batch_size is not None and eval_batch_size <= 0):
            raise ValueError("batch sizes must be positive")
        self.name, self.data_dir = name, str(data_dir)
        self.micro_batch_size = micro_batch_size
        self.eval_batch_size = eval_batch_size or micro_batch_size
        self.severity, self.download, self.limit = severity, download, limit
        self.num_workers, self.seed = num_workers, seed
        self.splits: Splits | None = None

    def check(self) -> None:
        """Raise :class:`DataError` if the data is missing or corrupt (does not load it)."""
        check_data(self.name, self.data_dir, severity=self.severity, download=self.download)

    @property
    def num_classes(self) -> int:
        return DATASETS[self.name]

    @property
    def split_hash(self) -> str:
        return self._splits().split_hash

    def prepare_data(self) -> None:
        ensure_data(self.name, self.data_dir, download=self.download)

    def setup(self, stage: str | None = None) -> None:
        if self.splits is None:
            self.splits = load_splits(
                self.name, self.data_dir, severity=self.severity, download=self.download, limit=self.limit
            )
            if len(self.splits.train) < self.micro_batch_size:
                raise ValueError(
                    f"{self.name}: {len(self.splits.train)} training images < micro_batch_size "
                    f"{self.micro_batch_size}; with drop_last there would be no training batch"
                )

    def _splits(self) -> Splits:
        self.setup()
        assert self.splits is not None
        return self.splits

    def _loader(self, arrays: ArraySet, sampler: Sampler) -> DataLoader:
        accelerated = self.num_workers > 0 and torch.cuda.is_available()
        return DataLoader(
            _BatchDataset(arrays),
            batch_size=None,
            sampler=sampler,
            num_workers=self.num_workers,
            pin_memory=accelerated,
            persistent_workers=accelerated,
        )

    def train_dataloader(self) -> DataLoader:
        train = self._splits().train
        return self._loader(train, EpochBatchSampler(len(train), self.micro_batch_size, self.seed))

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader(self._splits().val)

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader(self._splits().test)

    def _eval_loader(self, arrays: ArraySet) -> DataLoader:
        return self._loader(arrays, BatchSampler(SequentialSampler(range(len(arrays))), self.eval_batch_size, False))
