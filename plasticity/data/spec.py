"""What a run reads: a :class:`DataSpec` built once from the config, and :func:`load_splits`.

Every place that loads a dataset (the DataModule, the plasticity callback's reference, the
analyses, ``task=inspect_data``) goes through a ``DataSpec``, so the data directory, the prepared
arrays' root, the severity and the class count can never disagree between them. A text set's spec
also names the tokenizer (a text ``model.name``) and ``max_length``; its splits are token ids.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plasticity.data.prepared import open_prepared, prepared_root
from plasticity.data.sources import ArraySet, Source, check_severity, is_dataset, modality, source
from plasticity.data.splits import Splits, apply_limit, check_classes, keep_classes, official_splits
from plasticity.data.text import check_max_length, token_cache_path, tokenized
from plasticity.text.hub import WHEELS, is_text_model

__all__ = ["DataSpec", "check_text_spec", "load_splits"]


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
        eval_limit: Keep only the first ``eval_limit`` validation and test examples (None: all): quick
            runs on large evaluation splits; the split hash says so.
        num_classes: Expected number of classes (None: the dataset's own; ``len(classes)`` with ``classes``).
        classes: Keep only these class indices, relabelled ``0..k-1`` in this order (None: all).
        img_size: The model's input side (JPEG sets are decoded for it; unused by text sets).
        tokenizer: A text set's tokenizer: a text ``model.name`` (``minilm_l6``, ``smollm2_135m``,
            ``hf:<id>``); None for image sets.
        max_length: A text set's tokens per example, the tokenizer's special tokens included
            (``dataset.max_length``); None for image sets.
    """

    name: str
    data_dir: str
    prepared_dir: str | None = None
    severity: int = 5
    download: bool = False
    limit: int | None = None
    eval_limit: int | None = None
    num_classes: int | None = None
    img_size: int = 224
    classes: tuple[int, ...] | None = None
    tokenizer: str | None = None
    max_length: int | None = None

    def __post_init__(self) -> None:
        # Paths as strings, so that equal specs compare (and hash) equal whether built from a str or a Path.
        object.__setattr__(self, "data_dir", os.fspath(self.data_dir))
        object.__setattr__(self, "prepared_dir", None if self.prepared_dir is None else os.fspath(self.prepared_dir))
        object.__setattr__(self, "classes", None if self.classes is None else tuple(int(c) for c in self.classes))

    @classmethod
    def from_config(cls, cfg: Any, name: str | None = None, img_size: int | None = None) -> DataSpec:
        """The spec of ``dataset`` (or of another dataset ``name``, e.g. ``task.reference``, which
        shares the paths and severity but not the training limit, class count or class subset).

        A text set takes its tokenizer from ``model.name`` (when that names a text model) and
        ``max_length`` from ``dataset.max_length``.

        Args:
            cfg: The composed job config (``paths``, ``dataset``, ``model``).
            name: Another dataset than ``cfg.dataset.name``.
            img_size: The model's input side; by default the configured model's (no model is built;
                a text set needs none).
        """
        data = cfg.dataset
        target = data.name if name is None else name
        own = target == data.name
        text = is_dataset(target) and modality(target) == "text"
        if img_size is None and not text:
            from plasticity.models import input_size

            img_size = input_size(cfg.model.name, cfg.model.kwargs)
        return cls(name=target, data_dir=cfg.paths.data_dir, prepared_dir=cfg.paths.prepared_dir,
                   severity=data.severity, download=bool(data.download), limit=data.limit if own else None,
                   eval_limit=_scalar(data.eval_limit), num_classes=data.num_classes if own else None,
                   classes=data.classes if own else None,
                   tokenizer=cfg.model.name if text and is_text_model(cfg.model.name) else None,
                   max_length=_scalar(data.max_length) if text else None,
                   **({} if img_size is None else {"img_size": int(img_size)}))

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
            ValueError: Unknown name, bad severity; a text set without a text model's tokenizer or with a
                bad ``max_length``.
            DataError: Files missing or corrupt; the message names the path and the fix.
        """
        check_text_spec(self)
        check_severity(self.severity)
        self.source.check(self.data_dir, download=self.download)

    def ensure(self) -> None:
        """Download (if allowed) or generate whatever the dataset needs on disk (cheap if present), after
        the checks of :meth:`check`."""
        self.check()
        self.source.ensure(self.data_dir, download=self.download)


def _scalar(value: Any) -> Any:
    """A config value as a spec field: a list or mapping (a mistake :func:`text_problems` names) as its
    text, so that the spec stays hashable (validation memoises on it)."""
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


def check_text_spec(spec: DataSpec) -> None:
    """Raise ValueError unless a text set's spec names a text model's tokenizer and a valid
    ``max_length`` (nothing to check for an image set).

    Raises:
        ValueError: Naming the field, its value and the fix.
    """
    if modality(spec.name) != "text":
        return
    if not is_text_model(spec.tokenizer):
        raise ValueError(
            f"dataset={spec.name} is a text dataset: it is read as the token ids of a text model's own tokenizer, "
            f"and this one has tokenizer={spec.tokenizer!r}. Fix: a text model, model.name={' or '.join(WHEELS)} "
            f"(or hf:<id or folder>); in code DataSpec(..., tokenizer='minilm_l6', max_length=64).")
    check_max_length(spec.max_length)


def load_splits(spec: DataSpec) -> Splits:
    """Load a dataset's train/val/test splits.

    Small-image sets are read into memory. JPEG sets come from the ``task=prepare`` arrays when
    they exist for ``spec.img_size`` (memory-mapped); otherwise ``train`` is a :class:`FileSet`
    (the JPEG path) and ``val``/``test`` decode lazily through the eval transform. Text sets are
    :class:`~plasticity.data.text.TokenSet` splits of ``spec.tokenizer``'s token ids, tokenised once
    into a cache under the prepared root and memory-mapped from it.

    Raises:
        ValueError: Unknown name, bad severity or bad limit; a text set without a text model's
            tokenizer or with a bad ``max_length``.
        DataError: Data missing or corrupt, or prepared arrays stale.
    """
    spec.ensure()  # checks first: nothing is fetched for a corrupt set
    if problems := check_classes(spec.name, spec.classes, spec.num_classes):
        raise ValueError(problems[0])
    splits = official_splits(spec.name, spec.data_dir, severity=spec.severity,
                             num_classes=None if spec.classes else spec.num_classes)
    files = spec.source.kind == "files"
    if spec.source.kind == "text":  # token ids (cached: whole splits, one cache whatever the class subset or limit)
        corrupted = getattr(spec.source, "corruption", None) is not None
        folder = token_cache_path(spec.prepared_root, spec.name, spec.severity if corrupted else None,
                                  splits.split_hash, spec.tokenizer, spec.max_length)
        splits = dataclasses.replace(splits, **tokenized(splits, folder, spec.tokenizer, spec.max_length))
    elif files and (prepared := open_prepared(spec.name, spec.prepared_root, spec.img_size,
                                              splits.split_hash)) is not None:
        splits = dataclasses.replace(splits, **prepared, prepared=True)
    if spec.classes:  # on the JPEG path: the file lists, before anything decodes
        splits = keep_classes(splits, spec.classes)
    if files and not splits.prepared:
        from plasticity.data.images import EvalImages  # torch + torchvision: only on the JPEG path

        lazy = lambda s: ArraySet(EvalImages(s, spec.img_size), s.labels)  # noqa: E731
        splits = splits.kept(val=lazy(splits.val), test=lazy(splits.test))
    train = apply_limit(splits.train, spec.limit)
    val, test = (apply_limit(part, spec.eval_limit, "dataset.eval_limit") for part in (splits.val, splits.test))
    digest = splits.split_hash
    if len(val) < len(splits.val) or len(test) < len(splits.test):  # evaluated on fewer examples: said by the hash
        digest = hashlib.sha256(f"{digest}|eval_limit={spec.eval_limit}".encode()).hexdigest()[:12]
    if len(train) < len(splits.train):  # the run sees fewer examples: its hash says so
        digest = hashlib.sha256(f"{digest}|limit={len(train)}".encode()).hexdigest()[:12]
    return dataclasses.replace(splits.kept(train=train, val=val, test=test), split_hash=digest)


