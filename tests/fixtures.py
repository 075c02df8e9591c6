"""Test data helpers: tiny, learnable Fashion-MNIST look-alikes in the real idx format."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

FMNIST_SHAPE = (28, 28)
NUM_CLASSES = 10


def _write_idx(path: Path, array: np.ndarray) -> None:
    """Write a uint8 array as an uncompressed idx file (magic 2049/2051, big-endian dims)."""
    magic = 0x0800 | array.ndim  # 0x08 = unsigned byte
    header = struct.pack(">I", magic) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(header + np.ascontiguousarray(array, dtype=np.uint8).tobytes())


def fake_fashion_mnist(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random labelled 28x28 uint8 images: a fixed per-class template plus noise.

    Classes are separable (each class has its own template of bright squares), so a
    small model can learn them; labels cycle through all classes before being shuffled.
    """
    templates = np.random.default_rng(1234).random((NUM_CLASSES, *FMNIST_SHAPE)) > 0.7
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(n) % NUM_CLASSES).astype(np.uint8)
    noise = rng.integers(0, 80, size=(n, *FMNIST_SHAPE))
    images = np.where(templates[labels], 175, 0) + noise
    return images.astype(np.uint8), labels


def write_fashion_mnist(root: str | Path, n_train: int = 200, n_test: int = 100, seed: int = 0) -> Path:
    """Write tiny Fashion-MNIST idx files under ``root/FashionMNIST/raw/`` (torchvision layout).

    Args:
        root: The data directory to create (the ``data_dir`` to pass to the loaders).
        n_train: Number of training images.
        n_test: Number of test images.
        seed: Seed of the images and labels (train and test use different streams).

    Returns:
        ``root`` as a ``Path``.
    """
    root = Path(root)
    raw = root / "FashionMNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for prefix, n, offset in (("train", n_train, 0), ("t10k", n_test, 1)):
        images, labels = fake_fashion_mnist(n, seed * 2 + offset)
        _write_idx(raw / f"{prefix}-images-idx3-ubyte", images)
        _write_idx(raw / f"{prefix}-labels-idx1-ubyte", labels)
    return root
