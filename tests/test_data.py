"""Data loading, splits, Fashion-MNIST-C generation, corruptions and the DataModule."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from plasticity.data import DATASETS, DataError, DataSpec, load_splits, split_indices
from plasticity.data.corruptions import CORRUPTIONS, corrupt
from plasticity.data.datamodule import DataModule
from plasticity.data.sources import read_c_layout
from tests.fixtures import fake_fashion_mnist, write_fashion_mnist

N_TRAIN, N_TEST = 250, 120


@pytest.fixture(scope="module")
def fmnist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_fashion_mnist(tmp_path_factory.mktemp("fm"), n_train=N_TRAIN, n_test=N_TEST, seed=3)


@pytest.fixture(scope="module")
def fmnist_c(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 10,000-image test set (like the real one) with gaussian_noise generated."""
    root = write_fashion_mnist(tmp_path_factory.mktemp("fmc"), n_train=20, n_test=10_000, seed=5)
    load_splits(DataSpec("fashion_mnist_c/gaussian_noise", root))
    return root


# ----------------------------------------------------------------------------- split_indices


def test_split_indices_is_the_seed_42_permutation() -> None:
    first, second = split_indices(10, 0.8, 42)
    perm = np.random.RandomState(42).permutation(10)
    assert first.tolist() == perm[:8].tolist() and second.tolist() == perm[8:].tolist()
    assert first.dtype == np.int64


@pytest.mark.parametrize("n", [7, 100, 60_000])
def test_split_indices_disjoint_and_covering(n: int) -> None:
    first, second = split_indices(n)
    assert len(first) == round(0.8 * n) and len(first) + len(second) == n
    assert np.array_equal(np.sort(np.concatenate([first, second])), np.arange(n))


def test_split_indices_rejects_bad_fraction() -> None:
    with pytest.raises(ValueError, match="fraction"):
        split_indices(10, 1.0)


# ----------------------------------------------------------------------------- fashion_mnist


def test_fashion_mnist_sizes_types_and_content(fmnist: Path) -> None:
    s = load_splits(DataSpec("fashion_mnist", fmnist))
    assert (len(s.train), len(s.val), len(s.test)) == (200, 50, N_TEST)
    assert s.num_classes == 10 == DATASETS["fashion_mnist"]
    for part in (s.train, s.val, s.test):
        assert part.images.dtype == np.uint8 and part.images.shape[1:] == (28, 28, 1)
        assert part.labels.dtype == np.int64 and part.labels.shape == (len(part.images),)
    images, labels = fake_fashion_mnist(N_TRAIN, 6)  # the fixture's train stream for seed 3
    train_idx, val_idx = split_indices(N_TRAIN, 0.8, 42)
    assert np.array_equal(s.train.images[..., 0], images[train_idx])
    assert np.array_equal(s.val.labels, labels[val_idx])
    test_images, test_labels = fake_fashion_mnist(N_TEST, 7)
    assert np.array_equal(s.test.images[..., 0], test_images) and np.array_equal(s.test.labels, test_labels)


def test_split_hash_stable_and_sensitive(fmnist: Path, tmp_path: Path) -> None:
    a, b = load_splits(DataSpec("fashion_mnist", fmnist)), load_splits(DataSpec("fashion_mnist", fmnist))
    assert len(a.split_hash) == 12 and re.fullmatch(r"[0-9a-f]{12}", a.split_hash)
    # recomputed by hand from the fixture's labels and the seed-42 80/20 split: sha256 of the name and
    # severity, then each split's int64 indices and labels (train, val, test), first 12 hex digits
    _, labels = fake_fashion_mnist(N_TRAIN, 6)  # the fixture's train stream for seed 3
    _, test_labels = fake_fashion_mnist(N_TEST, 7)
    perm = np.random.RandomState(42).permutation(N_TRAIN)
    h = hashlib.sha256(b"fashion_mnist|None")
    for idx, lab in ((perm[:200], labels[perm[:200]]), (perm[200:], labels[perm[200:]]),
                     (np.arange(N_TEST), test_labels)):
        h.update(idx.astype("<i8").tobytes() + b"|" + lab.astype("<i8").tobytes() + b"#")
    assert a.split_hash == h.hexdigest()[:12]
    assert a.split_hash == b.split_hash
    bigger = write_fashion_mnist(tmp_path, n_train=N_TRAIN + 1, n_test=N_TEST, seed=3)
    assert load_splits(DataSpec("fashion_mnist", bigger)).split_hash != a.split_hash
    assert load_splits(DataSpec("fashion_mnist", fmnist, limit=50)).split_hash != a.split_hash


def test_limit_caps_train_only(fmnist: Path) -> None:
    full, small = load_splits(DataSpec("fashion_mnist", fmnist)), load_splits(DataSpec("fashion_mnist", fmnist, limit=30))
    assert len(small.train) == 30 and np.array_equal(small.train.images, full.train.images[:30])
    assert np.array_equal(small.val.labels, full.val.labels) and len(small.test) == N_TEST
    with pytest.raises(ValueError, match="limit"):
        load_splits(DataSpec("fashion_mnist", fmnist, limit=0))


def test_missing_fashion_mnist_raises_data_error(tmp_path: Path) -> None:
    expected = str((tmp_path / "FashionMNIST" / "raw").resolve())
    for call in (
        lambda: load_splits(DataSpec("fashion_mnist", tmp_path)),
        lambda: DataSpec("fashion_mnist", tmp_path).check(),
        lambda: DataModule(DataSpec("fashion_mnist", str(tmp_path)), micro_batch_size=4, num_workers=0).check(),
        lambda: load_splits(DataSpec("fashion_mnist_c/snow", tmp_path)),
    ):
        with pytest.raises(DataError) as err:
            call()
        assert expected in str(err.value) and "dataset.download" in str(err.value) and "make data" in str(err.value)
    with pytest.raises(DataError, match="FashionMNIST-C/snow.npy"):
        load_splits(DataSpec("fashion_mnist_c/snow", tmp_path))
    assert issubclass(DataError, FileNotFoundError)
    DataSpec("fashion_mnist", tmp_path, download=True).check()  # downloadable: not an error


def test_truncated_idx_file_raises_data_error(tmp_path: Path) -> None:
    root = write_fashion_mnist(tmp_path, n_train=30, n_test=10)
    path = root / "FashionMNIST" / "raw" / "train-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(DataError, match="train-images-idx3-ubyte"):
        load_splits(DataSpec("fashion_mnist", root))


def test_unknown_name_and_bad_severity(fmnist: Path) -> None:
    with pytest.raises(ValueError, match="fashion_mnist_c/contrast") as err:
        load_splits(DataSpec("cifar11", fmnist))
    assert "cifar11" in str(err.value) and not isinstance(err.value, DataError)
    for severity in (0, 6):
        with pytest.raises(ValueError, match="severity"):
            load_splits(DataSpec("fashion_mnist_c/contrast", fmnist, severity=severity))


# ----------------------------------------------------------------------------- fashion_mnist_c


def test_fashion_mnist_c_layout(fmnist_c: Path) -> None:
    directory = fmnist_c / "FashionMNIST-C"
    images = np.load(directory / "gaussian_noise.npy")
    labels = np.load(directory / "labels.npy")
    assert images.shape == (50_000, 28, 28, 1) and images.dtype == np.uint8
    assert labels.shape == (50_000,) and labels.dtype == np.int64
    clean_images, clean_labels = fake_fashion_mnist(10_000, 11)
    assert np.array_equal(labels, np.tile(clean_labels, 5))
    blocks = images[..., 0].reshape(5, 10_000, 28, 28).astype(float)
    diffs = [np.abs(block - clean_images).mean() for block in blocks]
    assert all(a < b for a, b in zip(diffs, diffs[1:])) and diffs[0] > 1.0
    assert sorted(p.name for p in directory.iterdir()) == ["gaussian_noise.npy", "labels.npy"]  # no temp files left


@pytest.mark.parametrize("severity", [1, 3, 5])
def test_fashion_mnist_c_splits_take_the_severity_rows(fmnist_c: Path, severity: int) -> None:
    s = load_splits(DataSpec("fashion_mnist_c/gaussian_noise", fmnist_c, severity=severity))
    assert (len(s.train), len(s.val), len(s.test)) == (6_400, 1_600, 2_000)
    rows = np.load(fmnist_c / "FashionMNIST-C" / "gaussian_noise.npy")[(severity - 1) * 10_000 : severity * 10_000]
    trainval, test = split_indices(10_000, 0.8, 42)
    tr, va = split_indices(8_000, 0.8, 42)
    assert np.array_equal(s.test.images, rows[test])
    assert np.array_equal(s.train.images, rows[trainval[tr]])
    assert np.array_equal(s.val.images, rows[trainval[va]])
    all_idx = np.concatenate([trainval[tr], trainval[va], test])
    assert len(np.unique(all_idx)) == 10_000


def test_fashion_mnist_c_hash_depends_on_severity(fmnist_c: Path) -> None:
    hashes = {load_splits(DataSpec("fashion_mnist_c/gaussian_noise", fmnist_c, severity=s)).split_hash for s in (4, 5)}
    assert len(hashes) == 2


def test_fashion_mnist_c_is_reused_not_regenerated(fmnist_c: Path) -> None:
    path = fmnist_c / "FashionMNIST-C" / "gaussian_noise.npy"
    before = path.stat().st_mtime_ns
    load_splits(DataSpec("fashion_mnist_c/gaussian_noise", fmnist_c))
    assert path.stat().st_mtime_ns == before


def test_fashion_mnist_c_generation_is_deterministic(tmp_path: Path) -> None:
    roots = [write_fashion_mnist(tmp_path / d, n_train=10, n_test=60, seed=1) for d in ("a", "b")]
    for name in CORRUPTIONS:
        for root in roots:
            s = load_splits(DataSpec(f"fashion_mnist_c/{name}", root, severity=2))
            assert (len(s.train), len(s.val), len(s.test)) == (38, 10, 12)
        a, b = (r / "FashionMNIST-C" / f"{name}.npy" for r in roots)
        assert a.read_bytes() == b.read_bytes()
    assert (roots[0] / "FashionMNIST-C" / "labels.npy").read_bytes() == (
        roots[1] / "FashionMNIST-C" / "labels.npy"
    ).read_bytes()


def test_fashion_mnist_c_works_without_clean_data_once_generated(tmp_path: Path) -> None:
    root = write_fashion_mnist(tmp_path, n_train=10, n_test=50)
    first = load_splits(DataSpec("fashion_mnist_c/contrast", root))
    for f in (root / "FashionMNIST" / "raw").iterdir():
        f.unlink()
    second = load_splits(DataSpec("fashion_mnist_c/contrast", root))
    assert first.split_hash == second.split_hash and np.array_equal(first.test.images, second.test.images)


def test_truncated_or_malformed_npy_raises_data_error(tmp_path: Path) -> None:
    root = write_fashion_mnist(tmp_path, n_train=10, n_test=50)
    load_splits(DataSpec("fashion_mnist_c/contrast", root))
    path = root / "FashionMNIST-C" / "contrast.npy"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    name = "fashion_mnist_c/contrast"
    for call in (lambda: load_splits(DataSpec(name, root)), lambda: DataSpec(name, root).check()):
        with pytest.raises(DataError, match="contrast.npy"):
            call()
    np.save(path, np.zeros((249, 28, 28, 1), np.uint8))  # wrong row count
    with pytest.raises(DataError, match="249 rows"):
        load_splits(DataSpec("fashion_mnist_c/contrast", root))


def test_read_c_layout_generic_rgb(tmp_path: Path) -> None:
    images = np.random.default_rng(0).integers(0, 256, (5 * 4, 32, 32, 3), dtype=np.uint8)
    np.save(tmp_path / "fog.npy", images)
    np.save(tmp_path / "labels.npy", np.arange(20) % 10)
    part = read_c_layout(tmp_path, "fog", 3)
    assert np.array_equal(part.images, images[8:12]) and part.labels.tolist() == [8, 9, 0, 1]
    assert part.labels.dtype == np.int64
    with pytest.raises(DataError, match="snow.npy"):
        read_c_layout(tmp_path, "snow", 1)


# ----------------------------------------------------------------------------- corruptions


@pytest.mark.parametrize("name", CORRUPTIONS)
def test_corruption_degrades_monotonically(name: str) -> None:
    images = fake_fashion_mnist(300, 0)[0][..., None]
    outs = [corrupt(images, name, s, seed=0) for s in range(1, 6)]
    assert all(o.dtype == np.uint8 and o.shape == images.shape for o in outs)
    diffs = [np.abs(o.astype(float) - images).mean() for o in outs]
    assert all(a < b for a, b in zip(diffs, diffs[1:])), diffs
    assert diffs[0] > 0.5
    assert np.array_equal(corrupt(images, name, 3, seed=7), corrupt(images, name, 3, seed=7))


def test_corruption_rgb_and_errors() -> None:
    images = np.random.default_rng(0).integers(0, 256, (4, 32, 32, 3), dtype=np.uint8)
    assert corrupt(images, "snow", 5, seed=0).shape == images.shape
    assert not np.array_equal(corrupt(images, "gaussian_noise", 1, 0), corrupt(images, "gaussian_noise", 1, 1))
    with pytest.raises(ValueError, match="fog"):
        corrupt(images, "fog", 1, 0)
    with pytest.raises(ValueError, match="severity"):
        corrupt(images, "contrast", 6, 0)


def test_contrast_matches_cifar_c_formula() -> None:
    images = np.random.default_rng(1).integers(0, 256, (3, 28, 28, 1), dtype=np.uint8)
    x = images / 255.0
    means = x.mean(axis=(1, 2), keepdims=True)
    expected = np.rint(np.clip((x - means) * 0.4 + means, 0, 1) * 255)
    assert np.abs(corrupt(images, "contrast", 3, 0).astype(float) - expected).max() <= 1


# ----------------------------------------------------------------------------- DataModule


def _train_labels(dm: DataModule) -> list[int]:
    return torch.cat([labels for _, labels in dm.train_dataloader()]).tolist()


def test_datamodule_batches(fmnist: Path) -> None:
    dm = DataModule(DataSpec("fashion_mnist", str(fmnist)), micro_batch_size=32, eval_batch_size=20, seed=1,
                    num_workers=0)
    dm.check()
    dm.prepare_data()
    dm.setup("fit")
    assert dm.num_classes == 10 and dm.split_hash == load_splits(DataSpec("fashion_mnist", fmnist)).split_hash
    train = list(dm.train_dataloader())
    assert len(train) == 200 // 32
    images, labels = train[0]
    assert images.dtype == torch.uint8 and images.shape == (32, 1, 28, 28)
    assert labels.dtype == torch.int64 and labels.shape == (32,)
    seen = torch.cat([lbl for _, lbl in train])
    assert len(seen) == 192
    val = list(dm.val_dataloader())
    assert [len(lbl) for _, lbl in val] == [20, 20, 10]
    assert torch.equal(torch.cat([lbl for _, lbl in val]), torch.from_numpy(dm.splits.val.labels))
    assert torch.equal(val[0][0][:, 0], torch.from_numpy(dm.splits.val.images[:20, ..., 0]))
    test_batches = list(dm.test_dataloader())
    assert sum(len(lbl) for _, lbl in test_batches) == N_TEST


def test_datamodule_train_batch_images_match_labels(fmnist: Path) -> None:
    dm = DataModule(DataSpec("fashion_mnist", str(fmnist)), micro_batch_size=16, num_workers=0)
    images, labels = next(iter(dm.train_dataloader()))
    table = {dm.splits.train.images[i].tobytes(): dm.splits.train.labels[i] for i in range(len(dm.splits.train))}
    assert [table[img.permute(1, 2, 0).numpy().tobytes()] for img in images] == labels.tolist()


def test_datamodule_order_reproducible_by_seed(fmnist: Path) -> None:
    spec = DataSpec("fashion_mnist", str(fmnist))
    make = lambda seed: DataModule(spec, micro_batch_size=10, seed=seed, num_workers=0)  # noqa: E731
    a, b, c = make(0), make(0), make(1)
    assert _train_labels(a) == _train_labels(b)
    assert _train_labels(a) != _train_labels(c)
    assert a.split_hash == c.split_hash
    loader = a.train_dataloader()

    def epoch(k: int) -> torch.Tensor:
        loader.sampler.set_epoch(k)  # what Lightning calls at the start of every epoch
        return torch.cat([img for img, _ in loader])

    first, second = epoch(0), epoch(1)
    assert not torch.equal(first, second)  # a new order every epoch
    assert torch.equal(epoch(1), second)  # ... that a resumed run replays exactly
    assert torch.equal(make(0).train_dataloader().__iter__().__next__()[0], first[:10])


def test_datamodule_rejects_too_small_train_set(fmnist: Path) -> None:
    dm = DataModule(DataSpec("fashion_mnist", str(fmnist), limit=40), micro_batch_size=64, num_workers=0)
    with pytest.raises(ValueError, match="micro_batch_size"):
        dm.setup("fit")
