"""What a run reads: a :class:`DataSpec` built once from the config, and :func:`load_splits`.

Every place that loads a dataset (the DataModule, the plasticity callback's reference, the
analyses, ``task=inspect_data``) goes through a ``DataSpec``, so the data directory, the prepared
arrays' root, the severity and the class count can never disagree between them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plasticity.data.prepared import open_prepared, prepared_root
from plasticity.data.sources import ArraySet, Source, check_severity, source
from plasticity.data.splits import Splits, apply_limit, check_classes, keep_classes, official_splits

__all__ = ["DataSpec", "load_splits"]


@dataclass(frozen=True)
class DataSpec:
    """One dataset as a run reads it.

    Attributes:
        name: A dataset name (``dataset.name`` or ``task.reference``).
        data_dir: Root data folder (``paths.data_dir``).
        prepared_dir: Root of the ``task=prepare`` arrays (``paths.prepared_dir``; None:
            ``<data_dir>/prepared``).
        severity: Corruption severity ``1..5`` of the ``*_c`` sets.
        download: Let torchvision download missing files where it can.
        limit: Keep only the first ``limit`` training images (None: all).
        num_classes: Expected number of classes (None: the dataset's own; ``len(classes)`` with ``classes``).
        classes: Keep only these class indices, relabelled ``0..k-1`` in this order (None: all).
        img_size: The model's input side (JPEG sets are decoded for it).
    """

    name: str
    data_dir: str
    prepared_dir: str | None = None
    severity: int = 5
    download: bool = False
    limit: int | None = None
    num_classes: int | None = None
    img_size: int = 224
    classes: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        # Paths as strings, so that equal specs compare (and hash) equal whether built from a str or a Path.
        object.__setattr__(self, "data_dir", os.fspath(self.data_dir))
        if self.prepared_dir is not None:
            object.__setattr__(self, "prepared_dir", os.fspath(self.prepared_dir))
        if self.classes is not None:
            object.__setattr__(self, "classes", tuple(int(c) for c in self.classes))

    @classmethod
    def from_config(cls, cfg: Any, name: str | None = None, img_size: int | None = None) -> DataSpec:
        """The spec of ``dataset`` (or of another dataset ``name``, e.g. ``task.reference``, which
        shares the paths and severity but not the training limit, class count or class subset).

        Args:
            cfg: The composed job config (``paths``, ``dataset``, ``model``).
            name: Another dataset than ``cfg.dataset.name``.
            img_size: The model's input side; by default the configured model's (no model is built).
        """
        data = cfg.dataset
        own = name is None or name == data.name
        if img_size is None:
            from plasticity.models import input_size

            img_size = input_size(cfg.model.name, cfg.model.kwargs)
        prepared = cfg.paths.prepared_dir
        return cls(
            name=data.name if name is None else name,
            data_dir=str(cfg.paths.data_dir),
            prepared_dir=None if prepared is None else str(prepared),
            severity=data.severity,
            download=bool(data.download),
            limit=data.limit if own else None,
            num_classes=data.num_classes if own else None,
            img_size=int(img_size),
            classes=tuple(data.classes) if own and data.classes is not None else None,
        )

    def replace(self, **changes: Any) -> DataSpec:
        """A copy with some fields changed (e.g. ``name=`` for the reference, ``img_size=``).

        A class subset names classes of its own dataset: another ``name`` drops it unless
        ``classes=`` is given too.
        """
        if changes.get("name", self.name) != self.name:
            changes.setdefault("classes", None)
        return dataclasses.replace(self, **changes)

    @property
    def source(self) -> Source:
        return source(self.name)

    @property
    def prepared_root(self) -> Path:
        return prepared_root(self.data_dir, self.prepared_dir)

    def check(self) -> None:
        """Raise before any compute when the files are missing (and not downloadable) or corrupt.

        Raises:
            ValueError: Unknown name or bad severity.
            DataError: Files missing or corrupt; the message names the path and the fix.
        """
        check_severity(self.severity)
        self.source.check(self.data_dir, download=self.download)

    def ensure(self) -> None:
        """Download (if allowed) or generate whatever the dataset needs on disk; cheap if present."""
        check_severity(self.severity)
        self.source.ensure(self.data_dir, download=self.download)


def load_splits(spec: DataSpec) -> Splits:
    """Load a dataset's train/val/test splits.

    Small-image sets are read into memory. JPEG sets come from the ``task=prepare`` arrays when
    they exist for ``spec.img_size`` (memory-mapped); otherwise ``train`` is a :class:`FileSet`
    (the JPEG path) and ``val``/``test`` decode lazily through the eval transform.

    Raises:
        ValueError: Unknown name, bad severity or bad limit.
        DataError: Data missing or corrupt, or prepared arrays stale.
    """
    spec.ensure()  # checks first: nothing is fetched for a corrupt set
    problems = check_classes(spec.name, spec.classes, spec.num_classes)
    if problems:
        raise ValueError(problems[0])
    splits = official_splits(spec.name, spec.data_dir, severity=spec.severity,
                             num_classes=None if spec.classes else spec.num_classes)
    subset = False  # whether the class subset is applied already
    if spec.source.kind == "files":
        prepared = open_prepared(spec.name, spec.prepared_root, spec.img_size, splits.split_hash)
        if prepared is not None:
            splits = Splits(prepared["train"], prepared["val"], prepared["test"], splits.num_classes,
                            splits.split_hash, prepared=True)
        else:
            from plasticity.data.images import EvalImages  # torch + torchvision: only on the JPEG path

            if spec.classes:  # subset the file lists before anything decodes
                splits, subset = keep_classes(splits, spec.classes), True
            lazy = lambda s: ArraySet(EvalImages(s, spec.img_size), s.labels)  # noqa: E731
            splits = Splits(splits.train, lazy(splits.val), lazy(splits.test), splits.num_classes, splits.split_hash)
    if spec.classes and not subset:
        splits = keep_classes(splits, spec.classes)
    train = apply_limit(splits.train, spec.limit)
    digest = splits.split_hash
    if len(train) < len(splits.train):  # the run sees fewer examples: its hash says so
        digest = hashlib.sha256(f"{digest}|limit={len(train)}".encode()).hexdigest()[:12]
    return Splits(train, splits.val, splits.test, splits.num_classes, digest, splits.prepared)


