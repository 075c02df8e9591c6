"""The split protocol (paper App. C.2): a dataset's official parts -> train / val / test.

A dataset's on-disk format is read by its :class:`plasticity.data.sources.Source`; this module
turns the official parts into train/val/test, independent of the run seed:

* sets with an official test split (CIFAR, Fashion-MNIST, Flowers102, Pets): the test split is
  kept; validation is 20 % of the training part (``split_indices(n, 0.8, 42)``);
* sets without one (Cifar10-C, DomainNet, Fashion-MNIST-C, the text corpora and their
  corruptions): ``RandomState(42).permutation``, first 80 % train+val, the rest test; then
  validation is 20 % of that train part (a corrupted corpus keeps its clean corpus's split);
* the plasticity reference (ImageNet val): everything is ``test``, in class-folder order;
* the user's own splits (``dataset=folder``'s ``train/``, ``val/``, ``test/`` folders, ``dataset=table``'s split
  column): kept as given; without a ``val`` split, validation is 20 % of ``train`` as above.

Every split set gets a ``split_hash``: equal hashes mean two runs saw the same examples. Text sets
are split as raw texts (:class:`~plasticity.data.text.TextSet`), their hash covering the texts.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from plasticity.data.sources import SOURCES, ArraySet, DataError, FileSet, ImageFolder, check_severity, source
from plasticity.data.text import TextSet, TokenSet

__all__ = ["DATASETS", "Splits", "apply_limit", "check_classes", "expected_classes", "keep_classes", "official_splits",
           "split_indices"]

DATASETS: dict[str, int] = {name: src.num_classes for name, src in SOURCES.items()}
"""Every dataset name and its number of classes."""


@dataclass(frozen=True)
class Splits:
    """Train/val/test sets of one dataset.

    Attributes:
        train: Training set: an :class:`ArraySet` (in memory, or prepared and memory-mapped with
            original sizes) or a :class:`FileSet` (JPEG path); for a text set a :class:`TokenSet`
            (:func:`plasticity.data.load_splits`) or a :class:`TextSet` (:func:`official_splits`).
        val: Validation set (an :class:`ArraySet` whose images may decode lazily; a text set's likewise).
        test: Test set (likewise).
        num_classes: Number of classes.
        split_hash: 12 hex characters hashing the dataset name, severity and every split's
            indices and labels (and file names, or raw texts); equal hashes mean two runs saw the
            same examples.
        prepared: Whether the images come from ``task=prepare`` arrays.
        examples: Split -> the identity of its examples: the list they come from (:func:`example_list`)
            and their indices in it; two sets share an example when both hold the same (list, index).
    """

    train: ArraySet | FileSet | TextSet | TokenSet
    val: ArraySet | FileSet | TextSet | TokenSet
    test: ArraySet | FileSet | TextSet | TokenSet
    num_classes: int
    split_hash: str
    prepared: bool = False
    examples: dict[str, tuple[str, np.ndarray]] = dataclasses.field(default_factory=dict)

    def kept(self, **parts: ArraySet | FileSet | TextSet | TokenSet) -> "Splits":
        """These splits with some parts replaced by their first rows (a limit), or by lazily decoded
        copies of themselves; each example keeps its identity."""
        examples = {k: (where, ids[:len(parts.get(k, getattr(self, k)))]) for k, (where, ids) in self.examples.items()}
        return dataclasses.replace(self, **parts, examples=examples)

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


def _split_hash(name: str, severity: int | None, parts: list[tuple[ArraySet | FileSet | TextSet, np.ndarray]]) -> str:
    """Hash the dataset identity and each split's (indices, labels[, file names or texts])."""
    h = hashlib.sha256(f"{name}|{severity}".encode())
    for part, idx in parts:
        h.update(np.ascontiguousarray(idx, dtype="<i8").tobytes() + b"|")
        h.update(np.ascontiguousarray(part.labels, dtype="<i8").tobytes())
        if isinstance(part, FileSet):
            h.update("\n".join(part.files).encode())
        if isinstance(part, TextSet):  # NUL separated: the texts hold line breaks
            h.update("\0".join(part.texts).encode())
        h.update(b"#")
    return h.hexdigest()[:12]


def expected_classes(name: str, num_classes: int | None) -> int:
    """The class count a run expects: ``num_classes`` when set, else the dataset's own
    (``dataset.num_classes`` is checked by :func:`plasticity.validate.check_dataset_values`)."""
    return num_classes or source(name).num_classes


def _check_classes(name: str, data_dir: Path, labels: np.ndarray, expected: int) -> None:
    src = source(name)
    if isinstance(src, ImageFolder):
        found = len(src.classes(data_dir))
        if found != expected and not src.reference_only:  # the reference's labels are never used
            raise DataError(f"{name}: found {found} class folders in {src.path(data_dir)}, expected {expected} "
                            f"(an incomplete extraction?). Fix: fetch the whole dataset ({src.fetch}), or set "
                            f"dataset.num_classes={found} to use these classes only.")
    elif len(labels) and (labels.min() < 0 or labels.max() >= expected):
        raise DataError(f"{name}: labels span {labels.min()}..{labels.max()}, outside 0..{expected - 1} "
                        f"(dataset.num_classes={expected}); the files in {src.path(data_dir)} are corrupt.")


def example_list(name: str, part: str) -> str:
    """The list an example of ``name``'s ``part`` (``all``, ``train`` or ``test`` as the source reads it) comes
    from: a corrupted set holds its clean source's examples (``text/bbc_news_c/word_drop``: the BBC News
    corpus, text by text; ``cifar10_c/fog``: CIFAR-10's test images, in order), so it names the clean one's."""
    if (identity := getattr(source(name), "identity", None)) is not None:  # the user's: its absolute path
        return f"{identity}/{part}"
    clean, corrupted, _ = name.partition("_c/")
    if not corrupted:
        return f"{name}/{part}"
    return f"{clean}/{'all' if source(name).kind == 'text' else 'test'}"


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
    expected = expected_classes(name, num_classes)
    parts = src.read(data_dir, severity)
    # Each split's origin: the part it is drawn from and its indices there.
    if "all" in parts:
        trainval, test = split_indices(len(parts["all"]), 0.8, 42)
        train, val = (trainval[i] for i in split_indices(len(trainval), 0.8, 42))
        origin = {"train": ("all", train), "val": ("all", val), "test": ("all", test)}
    else:  # the official test split; the reference has no train part (its test split only, in order)
        train, val = split_indices(len(parts["train"]), 0.8, 42) if "train" in parts else (np.zeros(0, np.int64),) * 2
        origin = {"train": ("train", train), "val": ("train", val), "test": ("test", _every(parts["test"]))}
    if "val" in parts:  # the user's own validation split (a folder's val/, a table's): kept whole
        origin.update(train=("train", _every(parts["train"])), val=("val", _every(parts["val"])))
    sets = {k: parts[part if part in parts else "test"].subset(idx) for k, (part, idx) in origin.items()}
    _check_classes(name, Path(data_dir), np.concatenate([s.labels for s in sets.values()]), expected)
    corrupted = getattr(src, "corruption", None) is not None  # the *_c sets: each severity is another set
    digest = _split_hash(name, severity if corrupted else None, [(sets[k], idx) for k, (_, idx) in origin.items()])
    examples = {k: (example_list(name, part), idx) for k, (part, idx) in origin.items()}
    return Splits(**sets, num_classes=expected, split_hash=digest, examples=examples)


def _every(part: ArraySet | FileSet | TextSet) -> np.ndarray:
    """Every row of a part, in order."""
    return np.arange(len(part), dtype=np.int64)


def apply_limit(train: ArraySet | FileSet | TokenSet, limit: int | None,
                key: str = "dataset.limit") -> ArraySet | FileSet | TokenSet:
    """The first ``limit`` examples of a split (``key`` names the option in the error)."""
    if limit is None:
        return train
    if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
        raise ValueError(f"{key}={limit!r} must be a positive number of examples or null (all).")
    return train.head(limit)


def check_classes(name: str, classes, num_classes: int | None) -> list[str]:
    """Problems of ``dataset.classes`` (a subset of the dataset's class indices) with its
    ``dataset.num_classes``; empty when they fit.

    Args:
        name: The dataset name.
        classes: The class indices to keep (None: all).
        num_classes: The configured class count (must equal ``len(classes)`` when ``classes`` is set).
    """
    if classes is None:
        return []
    total = source(name).num_classes
    values = list(classes) if not isinstance(classes, (str, int)) and hasattr(classes, "__iter__") else None
    if not values or not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c < total for c in values) \
            or len(set(values)) != len(values):
        return [f"dataset.classes={classes!r} must be distinct class indices in 0..{total - 1} of {name} "
                f"(kept in this order as labels 0..k-1). Fix: e.g. dataset.classes=[5,6,7,8,9] "
                f"dataset.num_classes=5, or dataset.classes=null (all classes)."]
    if num_classes != len(values):
        return [f"dataset.classes keeps {len(values)} classes but dataset.num_classes={num_classes!r}: the "
                f"model's head must have one output per kept class. Fix: dataset.num_classes={len(values)}."]
    return []


def keep_classes(splits: Splits, classes: tuple[int, ...]) -> Splits:
    """Every split restricted to ``classes``, relabelled ``0..k-1`` in the order given.

    The split itself is untouched (an image is in the same split as without the subset), so a
    model pretrained on some classes and finetuned on the held-out ones never sees a test image
    of either during training. The split hash records the subset.
    """
    relabel = {c: i for i, c in enumerate(classes)}

    rows = {k: np.flatnonzero(np.isin(np.asarray(getattr(splits, k).labels, dtype=np.int64), classes))
            for k in ("train", "val", "test")}

    def subset(k: str) -> ArraySet | FileSet | TextSet | TokenSet:
        kept = getattr(splits, k).subset(rows[k])
        return dataclasses.replace(kept, labels=np.array([relabel[int(c)] for c in kept.labels], dtype=np.int64))

    digest = hashlib.sha256(f"{splits.split_hash}|classes={','.join(map(str, classes))}".encode()).hexdigest()[:12]
    examples = {k: (where, ids[rows[k]]) for k, (where, ids) in splits.examples.items()}
    return Splits(subset("train"), subset("val"), subset("test"), len(classes), digest, splits.prepared, examples)
