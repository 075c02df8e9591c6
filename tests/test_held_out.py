"""Held-out classes (``dataset.classes``) and the impulse-noise corruption: what the quickstart's
transfer setting stands on (pretraining on some classes, finetuning on the others)."""

from pathlib import Path

import numpy as np
import pytest

from plasticity.data import DataSpec, load_splits
from plasticity.data.corruptions import corrupt
from plasticity.data.splits import check_classes
from tests.fixtures import write_fashion_mnist


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_fashion_mnist(tmp_path_factory.mktemp("held_out"), n_train=200, n_test=150)


def test_a_class_subset_keeps_its_images_in_their_split_and_relabels_them(data_dir: Path) -> None:
    name = "fashion_mnist_c/impulse_noise"
    full = load_splits(DataSpec(name, data_dir))
    kept = load_splits(DataSpec(name, data_dir, classes=(7, 5, 9), num_classes=3))
    assert kept.num_classes == 3 and kept.split_hash != full.split_hash
    for split in ("train", "val", "test"):
        a, b = getattr(full, split), getattr(kept, split)
        rows = np.isin(a.labels, [7, 5, 9])
        assert np.array_equal(b.images, a.images[rows])  # same images, same split, same order
        assert b.labels.tolist() == [{7: 0, 5: 1, 9: 2}[int(c)] for c in a.labels[rows]]
    assert sum(kept.sizes().values()) == int(np.isin(np.concatenate(
        [full.train.labels, full.val.labels, full.test.labels]), [5, 7, 9]).sum())
    # the complement: a model pretrained on 0-4 never sees a held-out image in any split
    other = load_splits(DataSpec(name, data_dir, classes=(0, 1, 2, 3, 4), num_classes=5))
    assert not set(map(bytes, other.train.images)) & set(map(bytes, kept.train.images))


def test_another_dataset_never_inherits_the_subset(data_dir: Path) -> None:
    spec = DataSpec("fashion_mnist", data_dir, classes=[5, 6], num_classes=2)
    assert spec.classes == (5, 6)
    assert spec.replace(name="fashion_mnist_c/snow", num_classes=None).classes is None
    assert spec.replace(limit=10).classes == (5, 6)


@pytest.mark.parametrize("classes, num_classes, message", [
    ([5, 5], 2, "must be distinct class indices in 0..9"),
    ([3, 10], 2, "must be distinct class indices in 0..9"),
    ([], 0, "must be distinct class indices"),
    ([5, 6, 7], None, "dataset.classes keeps 3 classes but dataset.num_classes=None"),
    ([5, 6, 7], 5, "Fix: dataset.num_classes=3"),
])
def test_bad_class_subsets_name_the_fix(data_dir: Path, classes, num_classes, message) -> None:
    problems = check_classes("fashion_mnist", classes, num_classes)
    assert len(problems) == 1 and message in problems[0]
    with pytest.raises(ValueError, match="dataset.classes"):
        load_splits(DataSpec("fashion_mnist", data_dir, classes=classes, num_classes=num_classes))
    assert check_classes("fashion_mnist", None, None) == [] == check_classes("fashion_mnist", [9, 0], 2)


def test_impulse_noise_sets_the_cifar_c_share_of_values_to_black_or_white() -> None:
    images = np.full((400, 28, 28, 1), 128, np.uint8)
    for severity, share in enumerate((0.01, 0.02, 0.03, 0.05, 0.07), start=1):
        out = corrupt(images, "impulse_noise", severity, seed=0)
        hit = out != 128
        assert set(np.unique(out[hit]).tolist()) <= {0, 255}
        assert hit.mean() == pytest.approx(share, rel=0.05)
        assert (out[hit] == 255).mean() == pytest.approx(0.5, abs=0.03)
