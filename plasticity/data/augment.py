"""The paper's image transforms, applied on the accelerator to whole uint8 batches.

Train: ``RandomResizedCrop(img_size) + RandomHorizontalFlip(0.5)``; eval:
``Resize(img_size) + CenterCrop(img_size)``; both followed by per-channel normalisation.
The train path samples crop boxes with torchvision's ``RandomResizedCrop`` distribution,
per image and vectorised, and resizes every crop with the same antialiased bilinear
filter as ``torch.nn.functional.interpolate(..., antialias=True)`` (what torchvision uses),
expressed as two batched matrix products: ``out = Wy @ image @ Wx^T``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torchvision.transforms.v2 import functional as TF

_ATTEMPTS = 10


class DeviceTransform(torch.nn.Module):
    """Batch transform: uint8 ``(B, C, H, W)`` -> normalised float32 ``(B, 3, S, S)``.

    Args:
        img_size: Output side ``S``.
        mean: Per-channel mean (3 values) on the ``[0, 1]`` scale.
        std: Per-channel standard deviation (3 values).
        train: Random resized crop + flip if True, else resize + centre crop.
        crop_scale: Range of the crop area as a fraction of the image area.
        crop_ratio: Range of the crop aspect ratio (width / height).
        hflip: Flip horizontally with probability 0.5 (train only).
        per_image: Resample crops one image at a time with ``F.interpolate`` (True) or as two
            batched matrix products (False); None picks per image on a CPU, matrices elsewhere.
            Both give the same result.
    """

    def __init__(self, img_size: int, mean: Sequence[float], std: Sequence[float], *, train: bool,
                 crop_scale: tuple[float, float] = (0.08, 1.0), crop_ratio: tuple[float, float] = (3 / 4, 4 / 3),
                 hflip: bool = True, per_image: bool | None = None) -> None:
        super().__init__()
        self.img_size, self.train_mode, self.hflip, self.per_image = int(img_size), train, hflip, per_image
        self.crop_scale, self.crop_ratio = tuple(map(float, crop_scale)), tuple(map(float, crop_ratio))
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, 3, 1, 1), persistent=False)

    def extra_repr(self) -> str:
        if not self.train_mode:
            return f"img_size={self.img_size}, eval"
        return f"img_size={self.img_size}, train, scale={self.crop_scale}, ratio={self.crop_ratio}, hflip={self.hflip}"

    @torch.no_grad()
    def forward(self, images: torch.Tensor, sizes: torch.Tensor | None = None) -> torch.Tensor:
        """Transform a uint8 batch (grayscale is repeated to 3 channels).

        Args:
            images: ``uint8 (B, 1|3, H, W)``.
            sizes: Original ``(height, width)`` per image, ``int (B, 2)``, when the images were
                stored squashed to ``H x W`` (prepared train sets): crop boxes are then drawn in
                the original coordinates and mapped onto the stored pixels. None: each image is of its
                own original size.
        """
        if images.dtype != torch.uint8 or images.ndim != 4 or images.shape[1] not in (1, 3):
            raise ValueError(f"expected uint8 (B, 1|3, H, W), got {images.dtype} {tuple(images.shape)}")
        x = images.float().div_(255.0)
        if sizes is None and self.train_mode:  # the images as they are: each of its own original size
            sizes = torch.tensor(x.shape[-2:]).expand(len(x), 2)
        x = self._eval(x) if sizes is None else self._from_sizes(x, sizes.to(x.device).long())
        x = x.expand(-1, 3, -1, -1)
        return (x - self.mean.to(x.device)) / self.std.to(x.device)

    def _eval(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-2:] == (self.img_size, self.img_size):  # prepared eval images, JPEG-path batches
            return x
        return TF.center_crop(TF.resize(x, [self.img_size], antialias=True), [self.img_size, self.img_size])

    def _resample(self, x: torch.Tensor, top, left, ch, cw) -> torch.Tensor:
        """Resize each image's box to ``img_size`` (antialiased bilinear), flipping in train mode."""
        b, _, h, w = x.shape
        flip = torch.rand(b, device=x.device) < 0.5 if self.train_mode and self.hflip else None
        per_image = x.device.type == "cpu" if self.per_image is None else self.per_image
        if per_image:
            return _resample_per_image(x, top, left, ch, cw, self.img_size, flip)
        rows = resize_weights(h, top, ch, self.img_size)
        cols = resize_weights(w, left, cw, self.img_size)
        if flip is not None:
            cols = torch.where(flip[:, None, None], cols.flip(1), cols)
        return rows.unsqueeze(1) @ x @ cols.transpose(1, 2).unsqueeze(1)

    def _from_sizes(self, x: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
        """Boxes in original coordinates (random crops, or the eval centre square) mapped onto ``x``."""
        b, _, h, w = x.shape
        height, width = sizes[:, 0], sizes[:, 1]
        if self.train_mode:
            top, left, ch, cw = sample_crops(b, height, width, self.crop_scale, self.crop_ratio, device=x.device)
        else:  # Resize(img_size) + CenterCrop(img_size) keeps the centre square of the shorter side
            side = torch.minimum(height, width)
            top, left, ch, cw = (height - side) // 2, (width - side) // 2, side, side
        top, ch = _to_stored(top, ch, height, h)
        left, cw = _to_stored(left, cw, width, w)
        return self._resample(x, top, left, ch, cw)


def _resample_per_image(x, top, left, ch, cw, size: int, flip: torch.Tensor | None) -> torch.Tensor:
    """The same resampling one image at a time with ``F.interpolate`` (cheaper than dense matrices on a CPU)."""
    out = torch.empty(x.shape[0], x.shape[1], size, size, dtype=x.dtype, device=x.device)
    for i, (t, l, hh, ww) in enumerate(zip(top.tolist(), left.tolist(), ch.tolist(), cw.tolist())):
        crop = x[i : i + 1, :, t : t + hh, l : l + ww]
        out[i] = F.interpolate(crop, size=(size, size), mode="bilinear", align_corners=False, antialias=True)[0]
    return out if flip is None else torch.where(flip[:, None, None, None], out.flip(-1), out)


def _to_stored(start: torch.Tensor, length: torch.Tensor, original: torch.Tensor, stored: int):
    """Map an integer interval of an axis of ``original`` pixels onto ``stored`` pixels (rounded)."""
    scale = stored / original.double()
    first = torch.round(start * scale).long().clamp(0, stored - 1)
    last = torch.round((start + length) * scale).long().clamp(1, stored)
    length = (last - first).clamp_min(1)
    return first.clamp_max(stored - length), length


def sample_crops(batch: int, height: int | torch.Tensor, width: int | torch.Tensor, scale: tuple[float, float],
                 ratio: tuple[float, float], *, device: torch.device | str = "cpu") -> tuple[torch.Tensor, ...]:
    """Sample one crop box per image like ``torchvision.transforms.RandomResizedCrop.get_params``.

    Ten candidate (area, log aspect ratio) pairs per image; the first that fits is used with
    a uniform position; images without a fitting candidate get the central crop, clamped to
    the ratio bounds. Uses the global torch RNG of ``device``.

    Args:
        batch: Number of images.
        height: Image height, one int for all or an int tensor ``(batch,)``.
        width: Image width, likewise.
        scale: Range of the crop area as a fraction of the image area.
        ratio: Range of the crop aspect ratio (width / height).
        device: Where to sample.

    Returns:
        ``(top, left, crop_height, crop_width)``, int64 tensors of shape ``(batch,)``.
    """
    height, width = (torch.as_tensor(side, device=device).long().expand(batch) for side in (height, width))
    area = (height * width).double()[:, None]
    target = area * torch.empty(batch, _ATTEMPTS, device=device).uniform_(scale[0], scale[1])
    aspect = torch.exp(torch.empty(batch, _ATTEMPTS, device=device).uniform_(math.log(ratio[0]), math.log(ratio[1])))
    cw = torch.round(torch.sqrt(target * aspect)).long()
    ch = torch.round(torch.sqrt(target / aspect)).long()
    ok = (cw > 0) & (cw <= width[:, None]) & (ch > 0) & (ch <= height[:, None])
    first = ok.int().argmax(dim=1, keepdim=True)
    found = ok.any(dim=1)
    # No candidate fits: torchvision's fallback, the whole image clamped to the aspect ratio bounds.
    in_ratio, lo, hi = width.double() / height.double(), min(ratio), max(ratio)
    fh = torch.where(in_ratio < lo, torch.round(width / lo).long(), height)
    fw = torch.where(in_ratio > hi, torch.round(height * hi).long(), width)
    ch = torch.where(found, ch.gather(1, first).squeeze(1), fh)
    cw = torch.where(found, cw.gather(1, first).squeeze(1), fw)
    u = torch.rand(2, batch, device=device)
    top = torch.where(found, torch.minimum((u[0] * (height - ch + 1)).long(), height - ch), (height - fh) // 2)
    left = torch.where(found, torch.minimum((u[1] * (width - cw + 1)).long(), width - cw), (width - fw) // 2)
    return top, left, ch, cw


def resize_weights(size: int, start: torch.Tensor, length: torch.Tensor, out: int) -> torch.Tensor:
    """Per-image 1-d resampling matrices for crop ``[start, start + length)`` resized to ``out``.

    Reproduces ``F.interpolate(mode="bilinear", align_corners=False, antialias=True)`` on the
    cropped pixels (triangle filter widened by the scale when downsampling, edge weights
    renormalised), which for upsampling equals plain bilinear interpolation.

    Args:
        size: Input length along this axis.
        start: Crop start per image, int tensor ``(B,)``.
        length: Crop length per image, int tensor ``(B,)``.
        out: Output length.

    Returns:
        Float32 tensor ``(B, out, size)``; row ``i`` holds the weights of output pixel ``i``.
    """
    length = length.to(torch.float32)[:, None, None]
    scale = length / out
    support = scale.clamp_min(1.0)
    centre = scale * (torch.arange(out, device=start.device, dtype=torch.float32)[None, :, None] + 0.5)
    src = torch.arange(size, device=start.device)[None, None, :] - start[:, None, None]
    inside = (src >= 0) & (src < length)
    weights = (1.0 - ((src + 0.5 - centre) / support).abs()).clamp_min(0.0) * inside
    return weights / weights.sum(dim=2, keepdim=True)


class TokenIds(torch.nn.Module):
    """The device transform of a text model's inputs: token ids pass unchanged (no augmentation)."""

    def forward(self, ids: torch.Tensor, sizes: torch.Tensor | None = None) -> torch.Tensor:
        return ids


def input_transform(net: torch.nn.Module, data, train: bool = False, augment: bool = True) -> torch.nn.Module:
    """The batch transform of ``net``'s inputs: :class:`DeviceTransform` at the model's input side with
    ``dataset``'s normalisation (crops and flips when ``train`` and ``augment``), or :class:`TokenIds`
    for a text model.

    Args:
        net: The model (a timm ViT, or a :class:`~plasticity.text.models.TextTransformer`).
        data: The ``dataset`` config (``mean``, ``std``, ``crop_scale``, ``hflip``).
        train: The training transform.
        augment: Crop and flip in training (false: the JPEG path already did).
    """
    from plasticity.components import TEXT_FAMILIES, family_of
    from plasticity.models import image_size

    if family_of(net) in TEXT_FAMILIES:
        return TokenIds()
    mean, std = getattr(net, "processor_stats", None) or (data.mean, data.std)  # a transformers folder's processor
    return DeviceTransform(image_size(net), mean, std, train=train and augment,
                           crop_scale=tuple(data.crop_scale), hflip=data.hflip)
