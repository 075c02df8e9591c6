"""Data: every benchmark's on-disk format, the split protocol, prepared arrays, on-device augmentation.

The layers, each depending only on the ones above it (no import cycle):

- :mod:`~plasticity.data.corruptions`: six Cifar10-C corruptions (to build Fashion-MNIST-C);
- :mod:`~plasticity.data.text`: raw texts, their corruptions, token ids (cached) and windows;
- :mod:`~plasticity.data.sources`: one reader per on-disk format, registered by dataset name
  (:func:`modality`: ``"image"`` or ``"text"``), and the user's own (``folder:<root>``, ``table:<path>``);
- :mod:`~plasticity.data.images`: the JPEG path (PIL decode + torchvision transforms);
- :mod:`~plasticity.data.splits`: the paper's train/val/test protocol and the split hash;
- :mod:`~plasticity.data.prepared`: JPEG sets decoded once into memory-mapped arrays;
- :mod:`~plasticity.data.spec`: :class:`DataSpec` (what a run reads) and :func:`load_splits`;
- :mod:`~plasticity.data.augment`: crop, flip and normalisation on the accelerator;
- :mod:`~plasticity.data.datamodule`: the Lightning DataModule.

Importing this package loads NumPy only (validation checks datasets before any compute; the
tokenizer's ``transformers`` loads when a text set is first tokenised); torch,
torchvision and Lightning load with :mod:`~plasticity.data.images`, :mod:`~plasticity.data.augment`
and :mod:`~plasticity.data.datamodule`, which are imported from their modules.

Example:
    >>> spec = DataSpec("fashion_mnist_c/snow", "data", img_size=28)  # doctest: +SKIP
    >>> splits = load_splits(spec)                                    # doctest: +SKIP
    >>> text = DataSpec("text/bbc_news", "data", tokenizer="minilm_l6", max_length=64)  # doctest: +SKIP
    >>> load_splits(text).train.ids.shape                            # doctest: +SKIP
    (1424, 64)
"""

from plasticity.data.text import PAD, TEXT_CORRUPTIONS, TextSet, TokenSet, window_rows, windows
from plasticity.data.sources import (NUM_SEVERITIES, SOURCES, ArraySet, DataError, FileSet, Source, is_dataset,
                                     modality, source, text_problems)
from plasticity.data.splits import DATASETS, Splits, official_splits, split_indices
from plasticity.data.prepared import open_prepared, prepare, prepared_path, prepared_root
from plasticity.data.spec import DataSpec, check_text_spec, load_splits

__all__ = ["DATASETS", "NUM_SEVERITIES", "PAD", "SOURCES", "TEXT_CORRUPTIONS", "ArraySet", "DataError", "DataSpec",
           "FileSet", "Source", "Splits", "TextSet", "TokenSet", "check_text_spec", "is_dataset", "load_splits", "modality",
           "official_splits", "open_prepared", "prepare", "prepared_path", "prepared_root", "source", "split_indices",
           "text_problems", "window_rows", "windows"]
