"""Prepared arrays against the JPEG path, the DataModule on JPEG sets, crops from original sizes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from plasticity.data import DataError, DataSpec, load_splits, open_prepared, prepare, prepared_path
from plasticity.data.augment import DeviceTransform, sample_crops
from plasticity.data.datamodule import DataModule
from plasticity.data.images import FileDataset, eval_transform, squash_image
from tests.fixtures import write_domainnet, write_flowers102, write_imagenet_val

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
SIZE, TRAIN_SIZE = 32, 40


def resized_center_crop(path: Path, size: int) -> np.ndarray:
    """The eval image by hand with PIL: the shorter side resized to ``size`` (bilinear, the longer side
    truncated to an int as torchvision's ``Resize`` computes it), then the centre ``size x size``
    (offsets rounded, as its ``CenterCrop``)."""
    img = Image.open(path).convert("RGB")
    w, h = img.size
    new_w, new_h = (size, int(size * h / w)) if w <= h else (int(size * w / h), size)
    img = img.resize((new_w, new_h), Image.Resampling.BILINEAR)
    top, left = int(round((new_h - size) / 2)), int(round((new_w - size) / 2))
    return np.asarray(img.crop((left, top, left + size, top + size)))


def squashed(path: Path, size: int) -> np.ndarray:
    """The whole image resized to ``size x size`` by hand with PIL (bilinear, which antialiases)."""
    return np.asarray(Image.open(path).convert("RGB").resize((size, size), Image.Resampling.BILINEAR))


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """DomainNet clipart fixture (24 JPEGs) prepared at 32 px (train squashed to 40 px)."""
    root = tmp_path_factory.mktemp("prep")
    write_domainnet(root, "clipart", per_class=8)
    prepare("domainnet/clipart", root, root / "prepared", SIZE, train_size=TRAIN_SIZE, workers=2, num_classes=3)
    return root


def test_prepared_eval_arrays_equal_the_jpeg_path(prepared: Path) -> None:
    jpeg = load_splits(DataSpec("domainnet/clipart", prepared, img_size=SIZE, num_classes=3, prepared_dir=prepared / "none"))
    arrays = load_splits(DataSpec("domainnet/clipart", prepared, img_size=SIZE, num_classes=3, prepared_dir=prepared / "prepared"))
    assert arrays.prepared and not jpeg.prepared and arrays.split_hash == jpeg.split_hash
    for split in ("val", "test"):
        a, j = getattr(arrays, split), getattr(jpeg, split)
        assert isinstance(a.images, np.memmap) and a.images.shape == (len(j), SIZE, SIZE, 3)
        assert np.array_equal(np.asarray(a.images), j.images[np.arange(len(j))])
        assert np.array_equal(a.labels, j.labels)
    # ... and so the device transform sees identical eval tensors
    t = DeviceTransform(SIZE, MEAN, STD, train=False)
    batch = lambda s: torch.from_numpy(np.array(s.images[np.arange(4)])).permute(0, 3, 1, 2)  # noqa: E731
    assert torch.equal(t(batch(arrays.test)), t(batch(jpeg.test)))
    tv = torch.stack([torch.from_numpy(resized_center_crop(jpeg.test.images.files.path(i), SIZE)).permute(2, 0, 1)
                      for i in range(4)])
    assert torch.equal(batch(arrays.test), tv)


def test_prepared_train_holds_squashed_images_and_original_sizes(prepared: Path) -> None:
    train = load_splits(DataSpec("domainnet/clipart", prepared, img_size=SIZE, num_classes=3)).train
    files = load_splits(DataSpec("domainnet/clipart", prepared, img_size=SIZE, num_classes=3, prepared_dir=prepared / "x")).train
    assert train.images.shape == (len(files), TRAIN_SIZE, TRAIN_SIZE, 3) and train.sizes.shape == (len(files), 2)
    for i in (0, len(files) - 1):
        image, (h, w) = squash_image(files.path(i), TRAIN_SIZE)
        by_hand = squashed(files.path(i), TRAIN_SIZE)
        assert np.array_equal(train.images[i], by_hand) and np.array_equal(image, by_hand)
        with Image.open(files.path(i)) as img:
            assert (h, w) == (img.height, img.width) == tuple(train.sizes[i])
    assert np.array_equal(train.labels, files.labels)


def test_prepare_skips_done_splits_and_rejects_stale_arrays(prepared: Path, tmp_path: Path) -> None:
    again = prepare("domainnet/clipart", prepared, prepared / "prepared", SIZE, train_size=TRAIN_SIZE, num_classes=3)
    assert again["decoded"] == 0
    info = json.loads((prepared_path("domainnet/clipart", prepared / "prepared", SIZE) / "info.json").read_text())
    assert info["sizes"] == {"train": 15, "val": 4, "test": 5} and info["train_size"] == TRAIN_SIZE
    with pytest.raises(DataError, match=r"made from different files .* task=prepare dataset=domainnet/clipart"):
        open_prepared("domainnet/clipart", prepared / "prepared", SIZE, "0" * 12)


def test_truncated_prepared_array_is_an_error(tmp_path: Path) -> None:
    write_flowers102(tmp_path, n=30)
    prepare("flowers102", tmp_path, tmp_path / "p", 16, train_size=16)
    test = prepared_path("flowers102", tmp_path / "p", 16) / "test.npy"
    test.write_bytes(test.read_bytes()[:200])
    with pytest.raises(DataError, match=str(test)):
        load_splits(DataSpec("flowers102", tmp_path, img_size=16, prepared_dir=tmp_path / "p"))


def test_reference_prepares_its_test_split_only(tmp_path: Path) -> None:
    write_imagenet_val(tmp_path, per_class=4)
    result = prepare("imagenet", tmp_path, tmp_path / "p", 16, num_classes=3)
    assert result["sizes"] == {"train": 0, "val": 0, "test": 12} and result["decoded"] == 12
    splits = load_splits(DataSpec("imagenet", tmp_path, img_size=16, num_classes=3, prepared_dir=tmp_path / "p"))
    assert splits.prepared and splits.test.images.shape == (12, 16, 16, 3) and len(splits.train) == 0


# ----------------------------------------------------------------------------- DataModule


def _module(root: Path, **kwargs) -> DataModule:
    spec = DataSpec("domainnet/clipart", str(root), img_size=SIZE, num_classes=3, **kwargs)
    dm = DataModule(spec, micro_batch_size=4, eval_batch_size=3, seed=0, num_workers=0)
    dm.setup()
    return dm


def test_datamodule_prepared_batches_carry_original_sizes(prepared: Path) -> None:
    dm = _module(prepared)
    assert not dm.cpu_augment and dm.num_classes == 3
    images, labels, sizes = next(iter(dm.train_dataloader()))
    assert images.shape == (4, 3, TRAIN_SIZE, TRAIN_SIZE) and images.dtype == torch.uint8
    assert sizes.shape == (4, 2) and (sizes >= 40).all()
    out = DeviceTransform(SIZE, MEAN, STD, train=True)(images, sizes)
    lo, hi = (0 - torch.tensor(MEAN)) / torch.tensor(STD), (1 - torch.tensor(MEAN)) / torch.tensor(STD)
    assert out.shape == (4, 3, SIZE, SIZE)
    assert (out.amin(dim=(0, 2, 3)) >= lo - 1e-5).all() and (out.amax(dim=(0, 2, 3)) <= hi + 1e-5).all()
    val = list(dm.val_dataloader())
    assert [len(b[0]) for b in val] == [3, 1] and all(len(b) == 2 for b in val)


def test_datamodule_jpeg_path_crops_on_the_cpu(prepared: Path) -> None:
    dm = _module(prepared, prepared_dir=str(prepared / "none"))
    assert dm.cpu_augment
    images, labels = next(iter(dm.train_dataloader()))
    assert images.shape == (4, 3, SIZE, SIZE) and images.dtype == torch.uint8 and labels.dtype == torch.int64
    test_images, _ = next(iter(dm.test_dataloader()))
    assert torch.equal(test_images, torch.from_numpy(np.array(_module(prepared).splits.test.images[:3])).permute(0, 3, 1, 2))


def test_reference_dataset_cannot_be_trained_on(tmp_path: Path) -> None:
    write_imagenet_val(tmp_path)
    dm = DataModule(DataSpec("imagenet", str(tmp_path), num_classes=3), micro_batch_size=2, num_workers=0)
    with pytest.raises(DataError, match=r"dataset='imagenet' is the plasticity reference .* Fix: another dataset; use "
                                        r"it as task.reference=imagenet"):
        dm.check()


# ----------------------------------------------------------------------------- crops from original sizes


def test_per_image_sizes_draw_the_same_boxes_as_the_scalar_call() -> None:
    torch.manual_seed(3)
    scalar = sample_crops(64, 50, 80, (0.08, 1.0), (3 / 4, 4 / 3))
    torch.manual_seed(3)
    tensor = sample_crops(64, torch.full((64,), 50), torch.full((64,), 80), (0.08, 1.0), (3 / 4, 4 / 3))
    assert all(torch.equal(a, b) for a, b in zip(scalar, tensor))


def test_mixed_sizes_boxes_fit_their_own_image() -> None:
    torch.manual_seed(0)
    heights = torch.tensor([20, 300, 64, 10] * 50)
    widths = torch.tensor([400, 30, 64, 10] * 50)
    top, left, ch, cw = sample_crops(200, heights, widths, (0.08, 1.0), (3 / 4, 4 / 3))
    assert (top >= 0).all() and (left >= 0).all() and (top + ch <= heights).all() and (left + cw <= widths).all()
    area = (ch * cw).double() / (heights * widths)
    assert area.max() <= 1.0 and (ch > 0).all() and (cw > 0).all()


def test_eval_from_squashed_approximates_the_eval_of_the_original() -> None:
    h, w = 90, 150  # a smooth landscape image, stored squashed to 64 x 64
    yy, xx = np.meshgrid(np.linspace(0, 1, h), np.linspace(0, 1, w), indexing="ij")
    original = np.stack([200 * xx, 200 * yy, 100 * xx * yy], axis=-1).astype(np.uint8)
    pil = Image.fromarray(original)
    squashed = np.asarray(pil.resize((64, 64), Image.Resampling.BILINEAR))
    t = DeviceTransform(32, MEAN, STD, train=False)
    reference = torch.from_numpy(np.asarray(eval_transform(32)(pil))).permute(2, 0, 1)[None]
    got = t(torch.from_numpy(squashed).permute(2, 0, 1)[None].contiguous(), torch.tensor([[h, w]]))
    assert (got - t(reference)).abs().max() * min(STD) < 6 / 255
    # without the sizes the squashed image is wrongly taken whole: a visibly different picture
    assert (t(torch.from_numpy(squashed).permute(2, 0, 1)[None].contiguous()) - t(reference)).abs().max() * min(STD) > 20 / 255


def test_file_dataset_returns_uint8_chw(tmp_path: Path) -> None:
    write_domainnet(tmp_path, "clipart", per_class=2)
    files = load_splits(DataSpec("domainnet/clipart", tmp_path, num_classes=3, img_size=20)).test.images.files
    image, label = FileDataset(files, eval_transform(20))[0]
    assert image.shape == (3, 20, 20) and image.dtype == torch.uint8 and int(label) == int(files.labels[0])


def _signals_here(_: int) -> tuple[bool, bool]:
    import signal

    return signal.getsignal(signal.SIGTERM) == signal.SIG_DFL, signal.getsignal(signal.SIGINT) == signal.SIG_IGN


def test_decoding_workers_end_on_the_pools_sigterm_inside_a_job() -> None:
    """Inside a job the stop handlers are set (plasticity.runs.stop); the pool's workers must not keep them: the
    pool ends its workers with SIGTERM, which under those handlers raised inside a worker and at times hung it."""
    from plasticity.data.prepared import _map
    from plasticity.runs.stop import recording_signals

    with recording_signals():
        seen = list(_map(_signals_here, list(range(8)), workers=2))
    assert seen == [(True, True)] * 8
