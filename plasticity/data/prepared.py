"""Prepared arrays: JPEG datasets decoded once into memory-mappable uint8 arrays (``task=prepare``).

``python launch.py task=prepare dataset=<name>`` decodes a JPEG dataset once into uint8 arrays
under ``<paths.prepared_dir>/<name>/<img_size>/``, memory-mapped at train time so training
reads no JPEG:

* ``val.npy``, ``test.npy``: the eval transform's output, ``(N, S, S, 3)`` with ``S = img_size``
  (exactly what the JPEG path computes);
* ``train.npy``: each whole image squashed to ``train_size x train_size``, with its original
  ``(height, width)`` in ``train_sizes.npy``; the device transform samples torchvision's
  RandomResizedCrop boxes in the original coordinates and maps them onto the square;
* ``<split>_labels.npy`` and ``<split>.json`` (done marker with the split hash); ``info.json``.

Each split is written atomically and skipped when already done for the same split hash, so an
interrupted preparation resumes split by split. Small-image sets (CIFAR, Fashion-MNIST and
their corruptions) are arrays already: ``task=prepare`` only checks them.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np

from plasticity.data.sources import ArraySet, DataError, FileSet
from plasticity.data.splits import official_splits
from plasticity.data.text import SPLITS, save_array
from plasticity.runs.io import atomic_path, read_json, write_json_atomic
from plasticity.runs.stop import STOP_SIGNALS

__all__ = ["open_prepared", "prepare", "prepared_path", "prepared_root"]

log = logging.getLogger(__name__)
VERSION = 1


def prepared_root(data_dir: str | Path, prepared_dir: str | Path | None = None) -> Path:
    """The root of the prepared arrays: ``prepared_dir``, by default ``<data_dir>/prepared``."""
    return Path(prepared_dir) if prepared_dir else Path(data_dir) / "prepared"


def prepared_path(name: str, prepared_dir: str | Path, img_size: int) -> Path:
    """``<prepared_dir>/<name>/<img_size>``: where a dataset's arrays for one input size live."""
    return Path(prepared_dir) / name / str(int(img_size))


def _open(path: Path, name: str, rows: int) -> np.ndarray:
    try:
        array = np.load(path, mmap_mode="r" if rows else None, allow_pickle=False)
    except Exception as err:
        raise DataError(f"{name}: prepared array {path} is missing or corrupt ({err}). "
                        f"Fix: re-run `python launch.py task=prepare dataset={name}`.") from err
    if len(array) != rows:
        raise DataError(f"{name}: prepared array {path} has {len(array)} rows, expected {rows}. "
                        f"Fix: re-run `python launch.py task=prepare dataset={name}`.")
    return array


def open_prepared(name: str, prepared_dir: str | Path, img_size: int, split_hash: str) -> dict[str, ArraySet] | None:
    """Memory-map a dataset's prepared arrays; None if they were never completed.

    Raises:
        DataError: The arrays were made from other files (different split hash) or are corrupt.
    """
    directory = prepared_path(name, prepared_dir, img_size)
    if not (info := read_json(directory / "info.json")):
        return None
    if info.get("split_hash") != split_hash:
        raise DataError(f"{name}: the prepared arrays in {directory} were made from different files (split hash "
                        f"{info.get('split_hash')}, the data on disk gives {split_hash}). Fix: re-run "
                        f"`python launch.py task=prepare dataset={name}` (or delete {directory}).")
    out = {}
    for split in SPLITS:
        rows = info["sizes"][split]
        images = _open(directory / f"{split}.npy", name, rows)
        labels = np.asarray(_open(directory / f"{split}_labels.npy", name, rows), dtype=np.int64)
        sizes = _open(directory / "train_sizes.npy", name, rows) if split == "train" else None
        out[split] = ArraySet(images, labels, sizes)
    return out


# ----------------------------------------------------------------------------- writing


def _decode(args: tuple[str, int, bool]) -> np.ndarray | tuple[np.ndarray, tuple[int, int]]:
    """One file at ``side`` px: squashed with its original size (train), or through the eval transform."""
    from plasticity.data.images import eval_image, squash_image  # torch + torchvision: only when decoding

    path, side, train = args
    return (squash_image if train else eval_image)(path, side)


def _worker_signals() -> None:
    """A decoding worker's signals: SIGTERM kills it, SIGINT (Ctrl-C, sent to the whole group) is the parent's;
    then the signals blocked while it was forked arrive (a SIGTERM sent that early now ends it)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def _map(fn, items: list, workers: int):
    """Ordered map, in worker processes when ``workers > 1``."""
    if workers <= 1:
        yield from map(fn, items)
        return
    # A forked worker would inherit the job's stop handlers (plasticity.runs.stop), under which the pool's closing
    # SIGTERM raises inside the worker instead of ending it, or is lost when it comes before the worker resets
    # them: the pool then waits forever for a worker stuck on its task queue's lock. The stop signals stay
    # blocked (pending, not handled) from the fork until the worker's own handlers are set.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        pool = mp.get_context("fork").Pool(workers, initializer=_worker_signals)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    with pool:
        yield from pool.imap(fn, items, chunksize=16)


def _write_split(files: FileSet, directory: Path, split: str, side: int, train: bool, workers: int) -> None:
    """Decode every file of one split into ``<split>.npy`` (+ labels, + sizes for train), atomically."""
    n, sizes = len(files), np.zeros((len(files), 2), dtype=np.int64)
    if n == 0:  # the reference has no train/val split; a zero-row memory map cannot be created
        save_array(directory / f"{split}.npy", np.zeros((0, side, side, 3), dtype=np.uint8))
    else:
        with atomic_path(directory / f"{split}.npy") as tmp:
            images = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint8, shape=(n, side, side, 3))
            for i, out in enumerate(_map(_decode, [(str(files.path(i)), side, train) for i in range(n)], workers)):
                images[i], sizes[i] = out if train else (out, 0)  # train: squashed, with its original size
            images.flush()
            del images
    save_array(directory / f"{split}_labels.npy", np.asarray(files.labels, dtype=np.int64))
    if train:
        save_array(directory / "train_sizes.npy", sizes)


def prepare(name: str, data_dir: str | Path, prepared_dir: str | Path, img_size: int, *, train_size: int = 256,
            workers: int = 1, num_classes: int | None = None) -> dict[str, Any]:
    """Decode a JPEG dataset's splits into prepared arrays (see the module docstring).

    Args:
        name: A dataset whose source kind is ``files``.
        data_dir: Root data folder.
        prepared_dir: Root of the prepared arrays.
        img_size: The model's input side (eval arrays are ``img_size`` square).
        train_size: Side of the squashed train images (>= ``img_size`` keeps crops sharp).
        workers: Decoding processes.
        num_classes: Expected number of classes (None: the dataset's own).

    Returns:
        ``{"dir", "split_hash", "sizes", "decoded", "seconds", "images_per_s"}``.
    """
    splits = official_splits(name, data_dir, num_classes=num_classes)
    directory = prepared_path(name, prepared_dir, img_size)  # made by the first atomic write
    start, decoded = time.perf_counter(), 0
    for split in SPLITS:
        files = getattr(splits, split)
        marker, side = directory / f"{split}.json", train_size if split == "train" else img_size
        if (done := read_json(marker)) and done.get("split_hash") == splits.split_hash and done.get("side") == side:
            log.info("%s %s: already prepared (%d images)", name, split, len(files))
            continue
        log.info("%s %s: decoding %d images at %d px with %d workers", name, split, len(files), side, workers)
        _write_split(files, directory, split, side, split == "train", workers)
        write_json_atomic(marker, {"split_hash": splits.split_hash, "side": side, "rows": len(files)})
        decoded += len(files)
    seconds = time.perf_counter() - start
    info = {"dataset": name, "version": VERSION, "split_hash": splits.split_hash, "img_size": int(img_size),
            "train_size": int(train_size), "num_classes": splits.num_classes, "sizes": splits.sizes()}
    write_json_atomic(directory / "info.json", info)
    return {"dir": str(directory), "split_hash": splits.split_hash, "sizes": splits.sizes(), "decoded": decoded,
            "seconds": round(seconds, 2), "images_per_s": round(decoded / seconds, 1) if decoded else None}
