"""Data: every benchmark's on-disk format, the split protocol, prepared arrays, on-device augmentation.

The layers, each depending only on the ones above it (no import cycle):

- :mod:`~plasticity.data.corruptions`: six Cifar10-C corruptions (to build Fashion-MNIST-C);
- :mod:`~plasticity.data.sources`: one reader per on-disk format, registered by dataset name;
- :mod:`~plasticity.data.images`: the JPEG path (PIL decode + torchvision transforms);
- :mod:`~plasticity.data.splits`: the paper's train/val/test protocol and the split hash;
- :mod:`~plasticity.data.prepared`: JPEG sets decoded once into memory-mapped arrays;
- :mod:`~plasticity.data.spec`: :class:`DataSpec` (what a run reads) and :func:`load_splits`;
- :mod:`~plasticity.data.augment`: crop, flip and normalisation on the accelerator;
- :mod:`~plasticity.data.datamodule`: the Lightning DataModule.

Importing this package loads NumPy only (validation checks datasets before any compute); torch,
torchvision and Lightning load with :mod:`~plasticity.data.images`, :mod:`~plasticity.data.augment`
and :mod:`~plasticity.data.datamodule`, which are imported from their modules.

Example:
    >>> spec = DataSpec("fashion_mnist_c/snow", "data", img_size=28)  # doctest: +SKIP
    >>> splits = load_splits(spec)                                    # doctest: +SKIP
"""

from plasticity.data.sources import NUM_SEVERITIES, SOURCES, ArraySet, DataError, FileSet, Source, source
from plasticity.data.splits import DATASETS, Splits, official_splits, split_indices
from plasticity.data.prepared import open_prepared, prepare, prepared_path, prepared_root
from plasticity.data.spec import DataSpec, load_splits

__all__ = [
    "DATASETS", "NUM_SEVERITIES", "SOURCES", "ArraySet", "DataError", "DataSpec", "FileSet", "Source", "Splits",
    "load_splits", "official_splits", "open_prepared", "prepare", "prepared_path", "prepared_root", "source",
    "split_indices",
]
