"""The real-format dataset writers of tests/fixtures.py, checked against torchvision and by hand."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torchvision.datasets as tvd
from PIL import Image
from scipy.io import loadmat

from tests import fixtures
from tests.fixtures import (
    corrupt_file,
    write_cifar10,
    write_cifar10_c,
    write_cifar100,
    write_domainnet,
    write_flowers102,
    write_imagenet_val,
    write_pets,
)


def _unpickle(path: Path, encoding: str = "bytes") -> dict:
    with open(path, "rb") as f:
        return pickle.load(f, encoding=encoding)


def _nhwc(rows: np.ndarray) -> np.ndarray:
    return np.asarray(rows).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)


def _jpeg_size(path: Path) -> tuple[int, int]:
    """``(height, width)`` of a JPEG, checking it decodes as RGB."""
    with Image.open(path) as image:
        assert image.format == "JPEG" and image.mode == "RGB"
        image.load()
        return image.height, image.width


def _skip_md5(monkeypatch, module) -> None:
    """Let a torchvision dataset module accept files whose md5 differs from the real ones."""
    monkeypatch.setattr(module, "check_integrity", lambda *args, **kwargs: True)


# ----------------------------------------------------------------------------- CIFAR


def test_cifar10_layout_and_pickles(tmp_path):
    out = write_cifar10(tmp_path, n_train=50, n_test=20, seed=3)
    folder = tmp_path / "cifar-10-batches-py"
    batches = [_unpickle(folder / f"data_batch_{b}") for b in range(1, 6)]
    assert [len(b[b"labels"]) for b in batches] == [10] * 5
    for batch in batches:
        assert set(batch) == {b"batch_label", b"labels", b"data", b"filenames"}
        assert batch[b"data"].dtype == np.uint8 and batch[b"data"].shape == (10, 3072)
        assert all(type(label) is int for label in batch[b"labels"])
        assert all(isinstance(name, bytes) for name in batch[b"filenames"])
    np.testing.assert_array_equal(_nhwc(np.concatenate([b[b"data"] for b in batches])), out["train_images"])
    assert sum((b[b"labels"] for b in batches), []) == out["train_labels"].tolist()
    test = _unpickle(folder / "test_batch")
    np.testing.assert_array_equal(_nhwc(test[b"data"]), out["test_images"])
    assert test[b"labels"] == out["test_labels"].tolist()
    meta = _unpickle(folder / "batches.meta")
    assert meta[b"label_names"] == [c.encode() for c in fixtures.CIFAR10_CLASSES]
    assert meta[b"num_vis"] == 3072 and meta[b"num_cases_per_batch"] == 10
    assert out["train_images"].shape == (50, 32, 32, 3) and out["train_labels"].dtype == np.int64


def test_cifar10_data_rows_are_planar_rgb(tmp_path):
    out = write_cifar10(tmp_path, n_train=5, n_test=1)
    row = _unpickle(tmp_path / "cifar-10-batches-py" / "test_batch")[b"data"][0]
    image = out["test_images"][0]
    np.testing.assert_array_equal(row[:1024], image[..., 0].ravel())  # R plane, row-major
    np.testing.assert_array_equal(row[1024:2048], image[..., 1].ravel())
    np.testing.assert_array_equal(row[2048:], image[..., 2].ravel())


def test_cifar_pickles_read_like_python2_files(tmp_path):
    """latin1 (torchvision's encoding) gives str keys and str names, as with the real files."""
    write_cifar10(tmp_path, n_train=5, n_test=2)
    batch = _unpickle(tmp_path / "cifar-10-batches-py" / "test_batch", encoding="latin1")
    assert set(batch) == {"batch_label", "labels", "data", "filenames"}
    assert batch["batch_label"] == "testing batch 1 of 1" and isinstance(batch["filenames"][0], str)


def test_cifar10_torchvision_reads_it(tmp_path, monkeypatch):
    out = write_cifar10(tmp_path, n_train=50, n_test=20, seed=1)
    _skip_md5(monkeypatch, tvd.cifar)
    train, test = tvd.CIFAR10(tmp_path, train=True), tvd.CIFAR10(tmp_path, train=False)
    np.testing.assert_array_equal(train.data, out["train_images"])
    assert train.targets == out["train_labels"].tolist() and test.targets == out["test_labels"].tolist()
    np.testing.assert_array_equal(test.data, out["test_images"])
    assert train.classes == list(fixtures.CIFAR10_CLASSES)


def test_cifar100_layout_and_pickles(tmp_path, monkeypatch):
    out = write_cifar100(tmp_path, n_train=50, n_test=20, seed=2)
    folder = tmp_path / "cifar-100-python"
    for split in ("train", "test"):
        batch = _unpickle(folder / split)
        assert set(batch) == {b"filenames", b"batch_label", b"fine_labels", b"coarse_labels", b"data"}
        np.testing.assert_array_equal(_nhwc(batch[b"data"]), out[f"{split}_images"])
        assert batch[b"fine_labels"] == out[f"{split}_labels"].tolist()
        assert batch[b"coarse_labels"] == fixtures.CIFAR100_COARSE_OF_FINE[out[f"{split}_labels"]].tolist()
    meta = _unpickle(folder / "meta")
    assert len(meta[b"fine_label_names"]) == 100 and len(meta[b"coarse_label_names"]) == 20
    assert meta[b"fine_label_names"][:3] == [b"apple", b"aquarium_fish", b"baby"]
    assert out["train_labels"].min() >= 0 and out["train_labels"].max() <= 99
    _skip_md5(monkeypatch, tvd.cifar)
    train = tvd.CIFAR100(tmp_path, train=True)
    assert train.targets == out["train_labels"].tolist() and len(train.classes) == 100


def test_cifar10_rejects_uneven_batches(tmp_path):
    with pytest.raises(ValueError, match="divisible by 5"):
        write_cifar10(tmp_path, n_train=12)


def test_cifar10_c_layout(tmp_path):
    out = write_cifar10_c(tmp_path, corruptions=("snow", "contrast"), n=40, seed=0)
    folder = tmp_path / "CIFAR-10-C"
    labels = np.load(folder / "labels.npy")
    assert labels.dtype == np.uint8 and labels.shape == (200,)
    np.testing.assert_array_equal(labels, out["labels"])
    np.testing.assert_array_equal(labels, np.tile(labels[:40], 5))
    for name in ("snow", "contrast"):
        images = np.load(folder / f"{name}.npy")
        assert images.dtype == np.uint8 and images.shape == (200, 32, 32, 3)
        np.testing.assert_array_equal(images, out["images"][name])
    assert not np.array_equal(out["images"]["snow"][:40], out["images"]["snow"][160:])  # severities differ


# ----------------------------------------------------------------------------- JPEG class folders


@pytest.mark.parametrize(
    ("writer", "folder"),
    [(write_domainnet, "domainnet/clipart"), (write_imagenet_val, "imagenet/val")],
)
def test_class_folders_read_by_imagefolder(tmp_path, writer, folder):
    out = writer(tmp_path, seed=4)
    dataset = tvd.ImageFolder(tmp_path / folder)
    assert dataset.classes == sorted(out["classes"])
    assert [Path(path).relative_to(tmp_path / folder).as_posix() for path, _ in dataset.samples] == out["files"]
    class_of = {name: i for i, name in enumerate(out["classes"])}
    assert [class_of[dataset.classes[target]] for target in dataset.targets] == out["labels"]
    assert [_jpeg_size(tmp_path / folder / file) for file in out["files"]] == out["sizes"]


def test_domainnet_file_names(tmp_path):
    out = write_domainnet(tmp_path, domain="sketch", per_class=3)
    assert out["files"][0] == "aircraft_carrier/sketch_001_000001.jpg"
    assert out["files"][-1] == "alarm_clock/sketch_003_000003.jpg"
    assert out["labels"] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert len({size for size in out["sizes"]}) > 1


def test_imagenet_val_numbers_unique_and_interleaved(tmp_path):
    out = write_imagenet_val(tmp_path, per_class=6, seed=0)
    numbers = [int(Path(file).stem.rsplit("_", 1)[1]) for file in out["files"]]
    assert sorted(numbers) == list(range(1, 19))
    assert all(Path(file).name.startswith("ILSVRC2012_val_") and file.endswith(".JPEG") for file in out["files"])
    first_class = numbers[:6]
    assert max(first_class) - min(first_class) > 5  # not one contiguous block per class


# ----------------------------------------------------------------------------- Flowers102


def test_flowers102_layout_and_mat_files(tmp_path):
    out = write_flowers102(tmp_path, n=30, num_classes=5, seed=0)
    folder = tmp_path / "flowers-102"
    labels = loadmat(folder / "imagelabels.mat")["labels"]
    assert labels.dtype == np.uint8 and labels.shape == (1, 30)
    np.testing.assert_array_equal(labels[0].astype(np.int64) - 1, out["labels"])
    assert set(labels[0]) == {1, 2, 3, 4, 5}
    setid = loadmat(folder / "setid.mat")
    parts = [setid[key] for key in ("trnid", "valid", "tstid")]
    for part, key in zip(parts, ("trnid", "valid", "tstid")):
        assert part.dtype == np.uint16 and part.shape == (1, 10)
        assert np.all(np.diff(part[0].astype(int)) > 0)
        np.testing.assert_array_equal(part[0], out[key])
    assert sorted(np.concatenate([p[0] for p in parts]).tolist()) == list(range(1, 31))
    sizes = [_jpeg_size(folder / "jpg" / f"image_{i:05d}.jpg") for i in range(1, 31)]
    assert sizes == out["sizes"]


def test_flowers102_torchvision_reads_it(tmp_path, monkeypatch):
    out = write_flowers102(tmp_path, n=30, num_classes=5, seed=1)
    _skip_md5(monkeypatch, tvd.flowers102)
    for split, key in (("train", "trnid"), ("val", "valid"), ("test", "tstid")):
        dataset = tvd.Flowers102(tmp_path, split=split)
        assert dataset._labels == out["labels"][out[key] - 1].tolist()
        assert [f.name for f in dataset._image_files] == [f"image_{i:05d}.jpg" for i in out[key]]


# ----------------------------------------------------------------------------- Oxford-IIIT Pet


def test_pets_annotations(tmp_path):
    out = write_pets(tmp_path, seed=0)
    folder = tmp_path / "oxford-iiit-pet"
    assert out["classes"] == ["Abyssinian", "american_bulldog", "beagle", "Bengal"]
    assert (folder / "annotations" / "trimaps").is_dir() and (folder / "annotations" / "xmls").is_dir()
    expected = {"Abyssinian": "1 1 1", "american_bulldog": "2 2 1", "beagle": "3 2 2", "Bengal": "4 1 2"}
    for split, n in (("trainval", 20), ("test", 16)):
        lines = (folder / "annotations" / f"{split}.txt").read_text().splitlines()
        assert len(lines) == n == len(out[split])
        for line, (image_id, label) in zip(lines, out[split]):
            stem, ids = line.split(" ", 1)
            assert stem == image_id and ids == expected[out["classes"][label]]
            assert image_id.rsplit("_", 1)[0] == out["classes"][label]
            assert _jpeg_size(folder / "images" / f"{image_id}.jpg") == out["sizes"][image_id]
    trainval_ids = {i for i, _ in out["trainval"]}
    assert trainval_ids.isdisjoint(i for i, _ in out["test"])
    assert len(list((folder / "images").iterdir())) == 36


@pytest.mark.parametrize("split", ["trainval", "test"])
def test_pets_torchvision_reads_it(tmp_path, split):
    out = write_pets(tmp_path, seed=5)
    dataset = tvd.OxfordIIITPet(tmp_path, split=split, target_types=["category", "binary-category"])
    assert [path.stem for path in dataset._images] == [i for i, _ in out[split]]
    assert dataset._labels == [label for _, label in out[split]]
    cats = [out["classes"][label][0].isupper() for _, label in out[split]]
    assert dataset._bin_labels == [0 if cat else 1 for cat in cats]
    assert dataset.classes == ["Abyssinian", "American Bulldog", "Beagle", "Bengal"]
    image, (label, _) = dataset[0]
    assert image.size[::-1] == out["sizes"][out[split][0][0]] and label == out[split][0][1]


# ----------------------------------------------------------------------------- content and determinism


def test_images_are_class_dependent(tmp_path):
    """Per-class mean colours differ more between classes than within (a model can learn them)."""
    out = write_cifar10(tmp_path, n_train=50, n_test=0)
    means = out["train_images"].reshape(50, -1, 3).mean(axis=1)
    labels = out["train_labels"]
    spread_within = max(means[labels == c].std(axis=0).max() for c in range(10))
    class_means = np.stack([means[labels == c].mean(axis=0) for c in range(10)])
    gaps = np.abs(class_means[:, None] - class_means[None]).max(axis=-1)[~np.eye(10, dtype=bool)]
    assert gaps.min() > 5 * spread_within


@pytest.mark.parametrize(
    ("writer", "file"),
    [
        (write_cifar10, "cifar-10-batches-py/data_batch_3"),
        (write_cifar100, "cifar-100-python/train"),
        (write_cifar10_c, "CIFAR-10-C/snow.npy"),
        (write_domainnet, "domainnet/clipart/airplane/clipart_002_000004.jpg"),
        (write_flowers102, "flowers-102/jpg/image_00007.jpg"),
        (write_pets, "oxford-iiit-pet/annotations/test.txt"),
        (write_imagenet_val, "imagenet/val/n01443537"),
    ],
)
def test_writers_are_deterministic(tmp_path, writer, file):
    first, second = writer(tmp_path / "a", seed=7), writer(tmp_path / "b", seed=7)
    other = writer(tmp_path / "c", seed=8)
    path_a, path_b = tmp_path / "a" / file, tmp_path / "b" / file
    if path_a.is_dir():  # compare the first file of the folder (its name depends on the seed)
        path_a, path_b = sorted(path_a.iterdir())[0], sorted(path_b.iterdir())[0]
        assert path_a.name == path_b.name
    assert path_a.read_bytes() == path_b.read_bytes()
    assert repr(first) == repr(second) and repr(first) != repr(other)


def test_flowers102_mat_contents_are_deterministic(tmp_path):
    """The .mat bytes embed a creation time; their arrays do not change."""
    write_flowers102(tmp_path / "a", seed=3)
    write_flowers102(tmp_path / "b", seed=3)
    for name, keys in (("imagelabels.mat", {"labels"}), ("setid.mat", {"trnid", "valid", "tstid"})):
        a, b = loadmat(tmp_path / "a" / "flowers-102" / name), loadmat(tmp_path / "b" / "flowers-102" / name)
        assert {k for k in a if not k.startswith("__")} == keys  # torchvision's Flowers102 reads these
        for key in (k for k in a if not k.startswith("__")):
            np.testing.assert_array_equal(a[key], b[key])


# ----------------------------------------------------------------------------- corrupt_file


def test_corrupt_file_truncate_and_garbage(tmp_path):
    path = tmp_path / "blob.bin"
    path.write_bytes(bytes(range(200)))
    corrupt_file(path, mode="truncate")
    assert path.read_bytes() == bytes(range(100))
    corrupt_file(path, mode="garbage")
    garbage = path.read_bytes()
    assert len(garbage) == 100 and garbage != bytes(range(100))
    with pytest.raises(ValueError, match="unknown mode"):
        corrupt_file(path, mode="shred")


def test_corrupted_files_fail_to_read(tmp_path):
    write_cifar10_c(tmp_path, n=10)
    write_cifar10(tmp_path, n_train=5, n_test=2)
    npy, batch = tmp_path / "CIFAR-10-C" / "snow.npy", tmp_path / "cifar-10-batches-py" / "test_batch"
    corrupt_file(npy, mode="truncate")
    with pytest.raises(ValueError):
        np.load(npy)
    corrupt_file(batch, mode="garbage")
    with pytest.raises(Exception):  # noqa: B017 (pickle raises several types on garbage)
        _unpickle(batch)
