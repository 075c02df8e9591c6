"""Device-side batch transforms against torchvision's reference transforms."""

from __future__ import annotations

import pytest
import torch
from torchvision.transforms import RandomResizedCrop
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as TF

from plasticity.data.augment import DeviceTransform, resize_weights, sample_crops

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _images(b: int, c: int, h: int, w: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (b, c, h, w), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize(("c", "h", "w", "size"), [(1, 28, 28, 28), (1, 28, 28, 64), (3, 32, 40, 24)])
def test_shape_dtype_and_constant_image(train: bool, c: int, h: int, w: int, size: int) -> None:
    t = DeviceTransform(size, MEAN, STD, train=train)
    out = t(_images(5, c, h, w))
    assert out.shape == (5, 3, size, size) and out.dtype == torch.float32
    lo, hi = (0 - torch.tensor(MEAN)) / torch.tensor(STD), (1 - torch.tensor(MEAN)) / torch.tensor(STD)
    assert (out.amin(dim=(0, 2, 3)) >= lo - 1e-5).all() and (out.amax(dim=(0, 2, 3)) <= hi + 1e-5).all()
    const = t(torch.full((4, c, h, w), 200, dtype=torch.uint8))
    expected = (200 / 255 - torch.tensor(MEAN)) / torch.tensor(STD)
    assert torch.allclose(const, expected.view(1, 3, 1, 1).expand_as(const), atol=1e-5)


def test_grayscale_is_repeated_before_normalising() -> None:
    out = DeviceTransform(28, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5), train=False)(_images(2, 1, 28, 28))
    assert torch.equal(out[:, 0], out[:, 1]) and torch.equal(out[:, 1], out[:, 2])
    assert out.std() > 0.3


@pytest.mark.parametrize("uint8_first", [True, False])
@pytest.mark.parametrize(
    ("c", "h", "w", "size"), [(3, 40, 30, 24), (3, 32, 32, 224), (1, 28, 28, 40), (3, 300, 200, 224)]
)
def test_eval_matches_torchvision(c: int, h: int, w: int, size: int, uint8_first: bool) -> None:
    images = _images(3, c, h, w)
    geometry = [v2.Resize(size, antialias=True), v2.CenterCrop(size)]
    to_float = [v2.ToDtype(torch.float32, scale=True)]
    norm = [v2.Normalize(MEAN if c == 3 else MEAN[:1], STD if c == 3 else STD[:1])]
    reference = v2.Compose(geometry + to_float + norm if uint8_first else to_float + geometry + norm)
    expected = torch.stack([reference(img) for img in images])
    out = DeviceTransform(size, MEAN, STD, train=False)(images)
    if c == 1:
        expected = torch.cat([(expected * STD[0] + MEAN[0] - m) / s for m, s in zip(MEAN, STD)], dim=1)
    # torchvision's uint8 resize rounds to whole grey levels; its float resize is what we compute.
    tolerance = 1.01 / 255 / min(STD) if uint8_first else 1e-5
    assert (out - expected).abs().max() < tolerance


@pytest.mark.parametrize(("h", "w", "size"), [(28, 28, 28), (32, 32, 224), (300, 200, 64)])
def test_crop_resize_matches_torchvision_resized_crop(h: int, w: int, size: int) -> None:
    torch.manual_seed(1)
    x = torch.rand(6, 3, h, w)
    top, left, ch, cw = sample_crops(6, h, w, (0.08, 1.0), (3 / 4, 4 / 3))
    rows, cols = resize_weights(h, top, ch, size), resize_weights(w, left, cw, size)
    out = rows.unsqueeze(1) @ x @ cols.transpose(1, 2).unsqueeze(1)
    for i in range(6):
        ref = TF.resized_crop(x[i], int(top[i]), int(left[i]), int(ch[i]), int(cw[i]), [size, size], antialias=True)
        assert torch.allclose(out[i], ref, atol=1e-5)


@pytest.mark.parametrize(
    ("h", "w", "scale", "ratio", "fallback"),
    [(28, 28, (0.08, 1.0), (3 / 4, 4 / 3), (28, 28)), (20, 40, (0.3, 1.0), (0.9, 1.1), (20, 22))],
)
def test_crop_parameters_follow_torchvision_distribution(
    h: int, w: int, scale: tuple, ratio: tuple, fallback: tuple[int, int]
) -> None:
    n = 6000
    torch.manual_seed(0)
    top, left, ch, cw = sample_crops(n, h, w, scale, ratio)
    assert (top >= 0).all() and (left >= 0).all() and (top + ch <= h).all() and (left + cw <= w).all()
    assert (ch > 0).all() and (cw > 0).all()
    ref = torch.tensor([RandomResizedCrop.get_params(torch.empty(1, h, w), list(scale), list(ratio)) for _ in range(n)])
    ours = torch.stack([top, left, ch, cw], 1)

    def stats(p: torch.Tensor) -> torch.Tensor:
        p = p.double()
        area = p[:, 2] * p[:, 3] / (h * w)
        centre_y, centre_x = p[:, 0] + p[:, 2] / 2, p[:, 1] + p[:, 3] / 2
        central = ((p[:, 2] == fallback[0]) & (p[:, 3] == fallback[1])).double()  # torchvision's fallback box
        aspect = p[:, 3] / p[:, 2]
        centre = (centre_y.mean() / h, centre_x.mean() / w)
        return torch.stack([area.mean(), area.std(), aspect.mean(), *centre, central.mean()])

    assert torch.allclose(stats(ours), stats(ref), atol=0.02), (stats(ours), stats(ref))


def test_fallback_is_clamped_central_crop() -> None:
    torch.manual_seed(0)
    # A square of area ~400 never fits a 10x40 image: always the (clamped) central crop.
    top, left, ch, cw = sample_crops(50, 10, 40, (0.99, 1.0), (1.0, 1.0))
    assert set(ch.tolist()) == {10} and set(cw.tolist()) == {10}
    assert set(top.tolist()) == {0} and set(left.tolist()) == {15}
    assert RandomResizedCrop.get_params(torch.empty(1, 10, 40), [0.99, 1.0], [1.0, 1.0]) == (0, 15, 10, 10)


def _ramp_batch(n: int) -> torch.Tensor:
    ramp = torch.arange(16, dtype=torch.uint8).mul(16).view(1, 1, 1, 16)
    return ramp.expand(n, 1, 16, 16).contiguous()


@pytest.mark.parametrize("hflip", [True, False])
def test_flip_rate(hflip: bool) -> None:
    torch.manual_seed(0)
    t = DeviceTransform(16, (0, 0, 0), (1, 1, 1), train=True, crop_scale=(1.0, 1.0), crop_ratio=(1.0, 1.0), hflip=hflip)
    out = t(_ramp_batch(2000))[:, 0]
    plain = _ramp_batch(1)[0, 0].float() / 255
    is_plain = torch.isclose(out, plain, atol=1e-6).flatten(1).all(1)
    is_flipped = torch.isclose(out, plain.flip(-1), atol=1e-6).flatten(1).all(1)
    assert (is_plain | is_flipped).all()
    rate = is_flipped.double().mean().item()
    assert (0.45 < rate < 0.55) if hflip else rate == 0.0


def test_train_is_random_but_reproducible() -> None:
    t = DeviceTransform(28, MEAN, STD, train=True)
    images = _images(8, 1, 28, 28)
    torch.manual_seed(3)
    a = t(images)
    torch.manual_seed(3)
    b = t(images)
    c = t(images)
    assert torch.equal(a, b) and not torch.equal(b, c)
    assert not torch.equal(a[0], a[1])


def test_rejects_float_input() -> None:
    with pytest.raises(ValueError, match="uint8"):
        DeviceTransform(28, MEAN, STD, train=False)(torch.zeros(2, 1, 28, 28))


def test_no_state_dict_entries() -> None:
    """The transform lives inside the LightningModule; it must not change its checkpoints."""
    t = DeviceTransform(28, MEAN, STD, train=False)
    assert t.state_dict() == {} and torch.allclose(t.std.flatten(), torch.tensor(STD))


@pytest.mark.gpu
def test_cuda_matches_cpu_eval() -> None:
    images = _images(4, 3, 32, 32)
    t = DeviceTransform(64, MEAN, STD, train=False)
    assert torch.allclose(t.cuda()(images.cuda()).cpu(), t.cpu()(images), atol=1e-4)
    out = DeviceTransform(64, MEAN, STD, train=True).cuda()(images.cuda())
    assert out.device.type == "cuda" and out.shape == (4, 3, 64, 64)


@pytest.mark.parametrize("train", [True, False])
def test_per_image_and_matrix_resampling_agree(train: bool) -> None:
    images = _images(6, 3, 45, 70, seed=2)
    sizes = torch.tensor([[90, 140], [45, 70], [300, 100], [100, 300], [45, 45], [64, 80]])
    outs = []
    for per_image in (True, False):
        torch.manual_seed(5)
        t = DeviceTransform(32, MEAN, STD, train=train, per_image=per_image)
        outs.append((t(images), t(images, sizes)))
    assert all((a - b).abs().max() < 1e-4 for a, b in zip(*outs))
