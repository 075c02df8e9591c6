"""The JPEG path: decoding image files and the paper's torchvision transforms on the CPU.

Used for JPEG datasets that have not been prepared (``task=prepare``) and, once, by the
preparation itself, so prepared arrays hold exactly what this path computes:

* eval: ``Resize(img_size) + CenterCrop(img_size)`` (:func:`eval_image`), stored as is;
* train: the whole image squashed to ``size x size`` (:func:`squash_image`) plus its original
  size, from which :class:`plasticity.data.augment.DeviceTransform` samples torchvision's
  ``RandomResizedCrop`` boxes in the original image's coordinates.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset
from torchvision.transforms import v2 as T

from plasticity.data.sources import DataError, FileSet

__all__ = ["EvalImages", "FileDataset", "decode", "eval_image", "eval_transform", "squash_image", "train_transform"]


def decode(path: str | Path) -> Image.Image:
    """Open and fully decode an image as RGB; a corrupt or truncated file raises DataError naming it."""
    try:
        with Image.open(path) as img:
            img.load()
            return img.convert("RGB")
    except FileNotFoundError as err:
        raise DataError(f"missing image file {path}; the dataset folder is incomplete, fetch it again") from err
    except Exception as err:  # PIL.UnidentifiedImageError, OSError("image file is truncated"), ...
        raise DataError(f"{path} is truncated or corrupt ({type(err).__name__}: {err}); "
                        "replace the file (fetch the dataset again)") from err


def eval_transform(img_size: int) -> T.Compose:
    """Paper C.2 eval transform on a PIL image: ``Resize(img_size) + CenterCrop(img_size)``."""
    return T.Compose([T.Resize(img_size, antialias=True), T.CenterCrop(img_size)])


def train_transform(img_size: int, scale: Sequence[float] = (0.08, 1.0), ratio: Sequence[float] = (3 / 4, 4 / 3),
                    hflip: bool = True) -> T.Compose:
    """Paper C.2 train transform on a PIL image: ``RandomResizedCrop(img_size)`` + horizontal flip."""
    steps = [T.RandomResizedCrop(img_size, scale=tuple(scale), ratio=tuple(ratio), antialias=True)]
    return T.Compose(steps + ([T.RandomHorizontalFlip(0.5)] if hflip else []))


def eval_image(path: str | Path, img_size: int) -> np.ndarray:
    """Decode ``path`` and apply the eval transform: ``uint8 (img_size, img_size, 3)``."""
    return np.asarray(eval_transform(img_size)(decode(path)), dtype=np.uint8)


def squash_image(path: str | Path, size: int) -> tuple[np.ndarray, tuple[int, int]]:
    """Decode ``path`` and resize the whole image to ``size x size`` (bilinear, antialiased).

    Returns:
        The ``uint8 (size, size, 3)`` image and the original ``(height, width)``.
    """
    img = decode(path)
    width, height = img.size
    return np.asarray(img.resize((size, size), Image.Resampling.BILINEAR), dtype=np.uint8), (height, width)


class EvalImages:
    """A :class:`FileSet` seen as an ``(N, S, S, 3)`` uint8 array, decoded lazily on indexing.

    Indexing with an int, a slice or an index array decodes those files through
    :func:`eval_image`; this lets analysis code treat unprepared JPEG sets like arrays.
    """

    dtype = np.dtype(np.uint8)
    ndim = 4

    def __init__(self, files: FileSet, img_size: int) -> None:
        self.files, self.img_size = files, int(img_size)

    def __len__(self) -> int:
        return len(self.files)

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (len(self.files), self.img_size, self.img_size, 3)

    def __getitem__(self, index) -> np.ndarray:
        if isinstance(index, (int, np.integer)):
            return eval_image(self.files.path(int(index)), self.img_size)
        idx = np.arange(len(self))[index] if isinstance(index, slice) else np.asarray(index, dtype=np.int64)
        out = np.empty((len(idx), self.img_size, self.img_size, 3), dtype=np.uint8)
        for k, i in enumerate(idx):
            out[k] = eval_image(self.files.path(int(i)), self.img_size)
        return out


class FileDataset(Dataset):
    """Per-image dataset of the JPEG path: ``(uint8 (3, S, S) tensor, label)``.

    An item is an index, or ``(index, seed)`` for a random transform: the crop and flip are then
    drawn from a generator seeded with ``seed`` (:class:`plasticity.data.datamodule.EpochBatchSampler`
    draws one per image and epoch), so they do not depend on which worker process decodes the image,
    or on how many batches a resumed run skipped.

    Args:
        files: The images.
        transform: A PIL -> PIL transform (:func:`train_transform` or :func:`eval_transform`).
    """

    def __init__(self, files: FileSet, transform: T.Compose) -> None:
        self.files, self.transform = files, transform

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, item: int | tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
        i, seed = item if isinstance(item, tuple) else (item, None)
        with torch.random.fork_rng(devices=[], enabled=seed is not None):  # torchvision draws from torch's global RNG
            if seed is not None:
                torch.manual_seed(seed)
            image = np.array(self.transform(decode(self.files.path(i))), dtype=np.uint8)
        return torch.from_numpy(image).permute(2, 0, 1).contiguous(), torch.tensor(self.files.labels[i])
