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
====================  =====================================================================
"""

from __future__ import annotations

import pickle
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from plasticity.data.corruptions import CORRUPTIONS, corrupt
from plasticity.runs.io import atomic_path

__all__ = [
    "NUM_SEVERITIES",
    "SOURCES",
    "ArraySet",
    "DataError",
    "FileSet",
    "Source",
    "generate_fashion_mnist_c",
    "read_c_layout",
    "source",
]

NUM_SEVERITIES = 5
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp")


class DataError(FileNotFoundError):
    """Data missing or corrupt; the message names the dataset, the path and how to get it."""


@dataclass(frozen=True)
class ArraySet:
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

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, idx: np.ndarray) -> ArraySet:
        """The rows ``idx``, copied into memory."""
        sizes = None if self.sizes is None else np.asarray(self.sizes[idx])
        return ArraySet(np.ascontiguousarray(self.images[idx]), np.asarray(self.labels[idx], dtype=np.int64), sizes)


@dataclass(frozen=True)
class FileSet:
    """Encoded image files and their labels.

    Attributes:
        root: Folder the paths are relative to.
        files: Relative paths, in the dataset's canonical order.
        labels: ``int64`` array ``(N,)``.
    """

    root: Path
    files: tuple[str, ...]
    labels: np.ndarray = field(repr=False)

    def __len__(self) -> int:
        return len(self.files)

    def subset(self, idx: np.ndarray) -> FileSet:
        return FileSet(self.root, tuple(self.files[i] for i in idx), np.asarray(self.labels[idx], dtype=np.int64))

    def path(self, i: int) -> Path:
        return self.root / self.files[i]


Part = ArraySet | FileSet


# ----------------------------------------------------------------------------- base class


class Source:
    """One dataset's on-disk format.

    Attributes:
        name: The config name (``dataset.name``).
        num_classes: Number of classes of the full dataset.
        folder: Where the files live, relative to the data directory.
        layout: What is expected inside ``folder`` (for error messages).
        fetch: How to obtain the files when they are missing.
        kind: ``arrays`` (small images read into memory) or ``files`` (encoded images).
        reference_only: True for the plasticity reference (no train split).
    """

    name: str
    num_classes: int
    folder: str
    layout: str
    fetch: str
    kind = "files"
    reference_only = False

    def path(self, data_dir: str | Path) -> Path:
        return Path(data_dir).resolve() / self.folder

    def error(self, data_dir: str | Path, problem: str) -> DataError:
        """A DataError naming the dataset, the problem, the expected path and how to get the data."""
        return DataError(
            f"{self.name}: {problem}. Expected {self.layout} in {self.path(data_dir)}. {self.fetch}"
        )

    @property
    def downloadable(self) -> bool:
        return type(self).download is not Source.download

    def check(self, data_dir: str | Path, *, download: bool = False) -> None:
        """Raise :class:`DataError` unless the files are present and consistent (cheap, no decoding).

        With ``download=True``, files that are merely missing are fine when they can be downloaded.
        """
        try:
            self._check(Path(data_dir))
        except _Missing as missing:
            if download and self.downloadable:
                return
            if download:
                raise self.error(data_dir, f"{missing}; it cannot be downloaded automatically") from None
            raise self.error(data_dir, str(missing)) from None

    def ensure(self, data_dir: str | Path, *, download: bool = False) -> None:
        """Download (if allowed and needed) or generate the files; then check them."""
        self.check(data_dir, download=download)
        try:
            self._check(Path(data_dir))
        except _Missing:
            self.download(Path(data_dir))
            self.check(data_dir)

    def download(self, data_dir: Path) -> None:
        """Fetch the files through torchvision (only sources that torchvision can download)."""
        raise self.error(data_dir, "automatic download is not available for this dataset")

    def read(self, data_dir: str | Path, severity: int = 5) -> dict[str, Part]:
        """The official parts (see the module docstring); raises DataError on a bad file."""
        self.check(data_dir)
        return self._read(Path(data_dir), severity)

    def _check(self, data_dir: Path) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _read(self, data_dir: Path, severity: int) -> dict[str, Part]:  # pragma: no cover - abstract
        raise NotImplementedError


class _Missing(DataError):
    """A required file or folder does not exist (downloadable sources may fetch it)."""


def _require_file(path: Path) -> None:
    if not path.is_file():
        raise _Missing(f"missing {path}")


def _require_dir(path: Path) -> None:
    if not path.is_dir():
        raise _Missing(f"missing folder {path}")


def _torchvision_download(cls_name: str, data_dir: Path, **kwargs) -> None:
    import torchvision.datasets as tvd

    data_dir.mkdir(parents=True, exist_ok=True)
    getattr(tvd, cls_name)(root=str(data_dir), download=True, **kwargs)


# ----------------------------------------------------------------------------- Fashion-MNIST

_FMNIST_RAW = {
    "train-images-idx3-ubyte": 2051,
    "train-labels-idx1-ubyte": 2049,
    "t10k-images-idx3-ubyte": 2051,
    "t10k-labels-idx1-ubyte": 2049,
}


def _idx_problem(path: Path, magic: int) -> str | None:
    """Validate an idx file header against the file size; return the problem or None."""
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


def _read_idx(path: Path) -> np.ndarray:
    ndim = path.read_bytes()[3]
    data = np.fromfile(path, dtype=np.uint8)
    dims = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i].tobytes(), "big") for i in range(ndim)]
    return data[4 + 4 * ndim :].reshape(dims)


class FashionMNIST(Source):
    name, num_classes, kind = "fashion_mnist", 10, "arrays"
    folder = "FashionMNIST/raw"
    layout = f"the Fashion-MNIST idx files ({', '.join(_FMNIST_RAW)})"
    fetch = (
        "Get them with `make data` (installs the Debian package dataset-fashion-mnist and unpacks "
        "/usr/share/datasets/fashion-mnist), or pass dataset.download=true to let torchvision download them."
    )

    def _check(self, data_dir: Path) -> None:
        raw = self.path(data_dir)
        missing = [f for f in _FMNIST_RAW if not (raw / f).is_file()]
        if missing:
            raise _Missing("data not found" if len(missing) == len(_FMNIST_RAW) else f"missing {', '.join(missing)}")
        problems = [p for f, m in _FMNIST_RAW.items() if (p := _idx_problem(raw / f, m))]
        if problems:
            raise self.error(data_dir, "; ".join(problems))

    def download(self, data_dir: Path) -> None:
        _torchvision_download("FashionMNIST", data_dir, train=True)
        _torchvision_download("FashionMNIST", data_dir, train=False)

    def read_split(self, data_dir: Path, prefix: str) -> ArraySet:
        raw = self.path(data_dir)
        images = _read_idx(raw / f"{prefix}-images-idx3-ubyte")[..., None]
        labels = _read_idx(raw / f"{prefix}-labels-idx1-ubyte").astype(np.int64)
        if len(images) != len(labels):
            raise self.error(data_dir, f"{prefix} has {len(images)} images but {len(labels)} labels")
        return ArraySet(np.ascontiguousarray(images), labels)

    def _read(self, data_dir: Path, severity: int) -> dict[str, Part]:
        return {"train": self.read_split(data_dir, "train"), "test": self.read_split(data_dir, "t10k")}


# ----------------------------------------------------------------------------- CIFAR-10-C layout


def _open_npy(path: Path, dataset: str) -> np.ndarray:
    """Memory-map a ``.npy`` file; raise DataError naming it if it cannot be read."""
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except FileNotFoundError as err:
        raise _Missing(f"missing {path}") from err
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


def check_severity(severity: int) -> None:
    if not isinstance(severity, (int, np.integer)) or isinstance(severity, bool) or not 1 <= severity <= NUM_SEVERITIES:
        raise ValueError(
            f"dataset.severity={severity!r} must be an integer in 1..{NUM_SEVERITIES} "
            f"(the paper uses 5). Fix: dataset.severity=5."
        )


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
    fetch = (
        "Download CIFAR-10-C.tar from https://zenodo.org/record/2535967 and extract it into the data "
        "directory (paths.data_dir) so that CIFAR-10-C/<corruption>.npy exists."
    )

    def __init__(self, corruption: str) -> None:
        self.corruption, self.name = corruption, f"cifar10_c/{corruption}"
        self.layout = f"{corruption}.npy (50,000 x 32 x 32 x 3 uint8, severities 1-5) and labels.npy"

    def _check(self, data_dir: Path) -> None:
        directory = self.path(data_dir)
        for name in (f"{self.corruption}.npy", "labels.npy"):
            _require_file(directory / name)
        _c_layout_arrays(directory, self.corruption, self.name)

    def _read(self, data_dir: Path, severity: int) -> dict[str, Part]:
        return {"all": read_c_layout(self.path(data_dir), self.corruption, severity, dataset=self.name)}


class FashionMNISTC(CifarC):
    """Fashion-MNIST test images corrupted like Cifar10-C, generated once by the framework."""

    num_classes, folder = 10, "FashionMNIST-C"

    def __init__(self, corruption: str) -> None:
        self.corruption, self.name = corruption, f"fashion_mnist_c/{corruption}"
        self.layout = f"{corruption}.npy and labels.npy, generated from the clean Fashion-MNIST test set"
        self.fetch = FashionMNIST.fetch + " The corrupted files are generated from that test set on first use."

    def check(self, data_dir: str | Path, *, download: bool = False) -> None:
        try:
            self._check(Path(data_dir))
        except _Missing:  # generated from the clean set: that one must be there
            try:
                FashionMNIST().check(data_dir, download=download)
            except DataError as err:
                raise DataError(f"{self.name}: {err} ({self.path(data_dir) / self.corruption}.npy and "
                                "labels.npy are generated from that test set on first use.)") from None

    def ensure(self, data_dir: str | Path, *, download: bool = False) -> None:
        self.check(data_dir, download=download)
        try:
            self._check(Path(data_dir))
        except _Missing:
            generate_fashion_mnist_c(data_dir, self.corruption, download=download)


def _atomic_save(path: Path, array: np.ndarray) -> None:
    with atomic_path(path) as tmp:
        np.save(tmp, array, allow_pickle=False)


def _generation_seed(corruption: str, severity: int) -> int:
    return zlib.crc32(f"fashion_mnist_c/{corruption}/{severity}".encode())


def generate_fashion_mnist_c(data_dir: str | Path, corruption: str, *, download: bool = False) -> Path:
    """Create ``<data_dir>/FashionMNIST-C/<corruption>.npy`` (+ ``labels.npy``) from the clean test set.

    Deterministic (seeded by corruption name and severity); files are written atomically, so
    concurrent runs produce identical files.

    Args:
        data_dir: Root data folder (holds ``FashionMNIST/raw``).
        corruption: One of :data:`plasticity.data.corruptions.CORRUPTIONS`.
        download: Let torchvision download the clean set if missing.

    Returns:
        The ``FashionMNIST-C`` folder.
    """
    src = source(f"fashion_mnist_c/{corruption}")
    clean = FashionMNIST()
    clean.ensure(data_dir, download=download)
    test = clean.read_split(Path(data_dir), "t10k")
    out_dir = src.path(data_dir)
    all_labels = np.tile(test.labels, NUM_SEVERITIES)
    out_dir.mkdir(parents=True, exist_ok=True)
    lbl_path = out_dir / "labels.npy"
    if not lbl_path.is_file():
        _atomic_save(lbl_path, all_labels)
    elif not np.array_equal(_open_npy(lbl_path, src.name), all_labels):
        raise DataError(f"{src.name}: {lbl_path} does not match the clean test labels; delete {out_dir} and retry")
    stack = [corrupt(test.images, corruption, s, _generation_seed(corruption, s)) for s in range(1, NUM_SEVERITIES + 1)]
    _atomic_save(out_dir / f"{corruption}.npy", np.concatenate(stack))
    return out_dir


# ----------------------------------------------------------------------------- CIFAR-10/100


def _unpickle(path: Path, dataset: str) -> dict:
    try:
        with open(path, "rb") as f:
            return pickle.load(f, encoding="bytes")
    except Exception as err:  # EOFError, UnpicklingError, ...
        raise DataError(f"{dataset}: {path} is truncated or corrupt ({type(err).__name__}: {err}); "
                        "delete the folder and fetch it again") from err


class Cifar(Source):
    """CIFAR-10 / CIFAR-100 python pickles (torchvision's layout), official train/test split."""

    kind = "arrays"

    def __init__(self, num_classes: int) -> None:
        self.num_classes, self.name = num_classes, f"cifar{num_classes}"
        ten = num_classes == 10
        self.folder = "cifar-10-batches-py" if ten else "cifar-100-python"
        self.train_files = tuple(f"data_batch_{i}" for i in range(1, 6)) if ten else ("train",)
        self.test_files = ("test_batch",) if ten else ("test",)
        self.label_key = b"labels" if ten else b"fine_labels"
        self.layout = f"the python pickles {', '.join(self.train_files + self.test_files)}"
        archive = self.folder.replace('-batches-py', '').replace('-python', '')
        self.fetch = ("Pass dataset.download=true to let torchvision download it, or fetch "
                      f"https://www.cs.toronto.edu/~kriz/{archive}-python.tar.gz and extract it into the data "
                      "directory (paths.data_dir).")

    def _check(self, data_dir: Path) -> None:
        for name in self.train_files + self.test_files:
            _require_file(self.path(data_dir) / name)

    def download(self, data_dir: Path) -> None:
        _torchvision_download("CIFAR10" if self.num_classes == 10 else "CIFAR100", data_dir)

    def _batches(self, data_dir: Path, files: tuple[str, ...]) -> ArraySet:
        images, labels = [], []
        for name in files:
            path = self.path(data_dir) / name
            entry = _unpickle(path, self.name)
            data, lbl = entry.get(b"data"), entry.get(self.label_key)
            if data is None or lbl is None or np.asarray(data).shape != (len(lbl), 3072):
                raise DataError(f"{self.name}: {path} is not a CIFAR batch "
                                f"(needs b'data' (N, 3072) and {self.label_key!r})")
            images.append(np.asarray(data, dtype=np.uint8).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
            labels.append(np.asarray(lbl, dtype=np.int64))
        labels_all = np.concatenate(labels)
        if labels_all.min() < 0 or labels_all.max() >= self.num_classes:
            raise DataError(f"{self.name}: labels outside 0..{self.num_classes - 1} in {self.path(data_dir)}")
        return ArraySet(np.ascontiguousarray(np.concatenate(images)), labels_all)

    def _read(self, data_dir: Path, severity: int) -> dict[str, Part]:
        return {"train": self._batches(data_dir, self.train_files), "test": self._batches(data_dir, self.test_files)}


# ----------------------------------------------------------------------------- image folders


def _image_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())


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
        _require_dir(root)
        classes = sorted(p.name for p in root.iterdir() if p.is_dir())
        if not classes:
            raise _Missing(f"no class folder in {root}")
        return classes

    def _check(self, data_dir: Path) -> None:
        self.classes(data_dir)

    def _read(self, data_dir: Path, severity: int) -> dict[str, Part]:
        root = self.path(data_dir)
        files: list[str] = []
        labels: list[int] = []
        for label, cls in enumerate(self.classes(data_dir)):
            names = _image_files(root / cls)
            files += [f"{cls}/{n}" for n in names]
            labels += [label] * len(names)
        if not files:
            raise self.error(data_dir, "the class folders hold no image")
        return {self.split: FileSet(root, tuple(files), np.asarray(labels, dtype=np.int64))}


# ----------------------------------------------------------------------------- Flowers102


class Flowers102(Source):
    """Oxford Flowers102 in torchvision's layout; official train and test splits (val unused)."""

    name, num_classes, folder = "flowers102", 102, "flowers-102"
    layout = "jpg/image_%05d.jpg, imagelabels.mat and setid.mat"
    fetch = ("Pass dataset.download=true to let torchvision download it, or fetch 102flowers.tgz, "
             "imagelabels.mat and setid.mat from https://www.robots.ox.ac.uk/~vgg/data/flowers/102/ "
             "into <data_dir>/flowers-102.")

    def _check(self, data_dir: Path) -> None:
        root = self.path(data_dir)
        _require_dir(root / "jpg")
        for name in ("imagelabels.mat", "setid.mat"):
            _require_file(root / name)

    def download(self, data_dir: Path) -> None:
        _torchvision_download("Flowers102", data_dir)

    def _mat(self, path: Path) -> dict:
        from scipy.io import loadmat

        try:
            return loadmat(path)
        except Exception as err:
            raise DataError(f"{self.name}: {path} is truncated or corrupt ({err}); fetch it again") from err

    def _read(self, data_dir: Path, severity: int) -> dict[str, Part]:
        root = self.path(data_dir)
        labels = self._mat(root / "imagelabels.mat").get("labels")
        setid = self._mat(root / "setid.mat")
        if labels is None or any(k not in setid for k in ("trnid", "tstid")):
            raise self.error(data_dir, "imagelabels.mat needs 'labels' and setid.mat 'trnid' and 'tstid'")
        labels = labels.reshape(-1).astype(np.int64) - 1

        def part(key: str) -> FileSet:
            ids = np.sort(setid[key].reshape(-1).astype(np.int64))
            if ids.min() < 1 or ids.max() > len(labels):
                raise self.error(data_dir, f"setid.mat {key!r} has image ids outside 1..{len(labels)}")
            files = tuple(f"jpg/image_{i:05d}.jpg" for i in ids)
            return FileSet(root, files, labels[ids - 1])

        return {"train": part("trnid"), "test": part("tstid")}


# ----------------------------------------------------------------------------- Oxford-IIIT Pet


class Pets(Source):
    """Oxford-IIIT Pet in torchvision's layout; trainval for training, test for testing."""

    name, num_classes, folder = "pets", 37, "oxford-iiit-pet"
    layout = "images/<image>.jpg and annotations/trainval.txt, annotations/test.txt"
    fetch = ("Pass dataset.download=true to let torchvision download it, or fetch images.tar.gz and "
             "annotations.tar.gz from https://www.robots.ox.ac.uk/~vgg/data/pets/ into <data_dir>/oxford-iiit-pet.")

    def _check(self, data_dir: Path) -> None:
        root = self.path(data_dir)
        _require_dir(root / "images")
        for name in ("trainval.txt", "test.txt"):
            _require_file(root / "annotations" / name)

    def download(self, data_dir: Path) -> None:
        _torchvision_download("OxfordIIITPet", data_dir)

    def _part(self, data_dir: Path, split: str) -> FileSet:
        root = self.path(data_dir)
        path = root / "annotations" / f"{split}.txt"
        files, labels = [], []
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip() or line.startswith("#"):
                continue
            fields = line.split()
            if len(fields) < 2 or not fields[1].isdigit():
                raise DataError(f"{self.name}: {path} line {n} is not '<image> <class_id> ...': {line!r}")
            files.append(f"images/{fields[0]}.jpg")
            labels.append(int(fields[1]) - 1)
        return FileSet(root, tuple(files), np.asarray(labels, dtype=np.int64))

    def _read(self, data_dir: Path, severity: int) -> dict[str, Part]:
        return {"train": self._part(data_dir, "trainval"), "test": self._part(data_dir, "test")}


# ----------------------------------------------------------------------------- registry

_DOMAINNET_FETCH = ("Download {d}.zip from http://ai.bu.edu/M3SDA/ (DomainNet) and extract it into "
                    "<data_dir>/domainnet so that domainnet/{d}/<class>/<image> exists.")
_IMAGENET_FETCH = ("Get ILSVRC2012_img_val.tar from https://image-net.org, extract it into "
                   "<data_dir>/imagenet/val and sort the images into one folder per class (wnid), "
                   "e.g. with the valprep.sh script of the PyTorch ImageNet example.")

SOURCES: dict[str, Source] = {
    s.name: s
    for s in (
        FashionMNIST(),
        *(FashionMNISTC(c) for c in CORRUPTIONS),
        Cifar(10),
        Cifar(100),
        *(CifarC(c) for c in CORRUPTIONS),
        *(ImageFolder(f"domainnet/{d}", f"domainnet/{d}", 345, _DOMAINNET_FETCH.format(d=d))
          for d in ("clipart", "sketch")),
        Flowers102(),
        Pets(),
        ImageFolder("imagenet", "imagenet/val", 1000, _IMAGENET_FETCH, split="test"),
    )
}


def source(name: str) -> Source:
    """The :class:`Source` of a dataset name; unknown names get the choices."""
    if name not in SOURCES:
        from plasticity.errors import did_you_mean

        close = did_you_mean(name, SOURCES, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ValueError(f"unknown dataset {name!r}.{hint} Choices: {', '.join(SOURCES)}.")
    return SOURCES[name]
