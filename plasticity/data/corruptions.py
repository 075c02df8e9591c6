"""Image corruptions in the style of CIFAR-10-C (Hendrycks & Dietterich, 2019).

The severity constants follow ``make_cifar_c.py`` of the original benchmark. The
implementations are vectorised NumPy re-implementations (no ImageMagick / OpenCV),
so ``motion_blur`` and ``snow`` are close approximations rather than bit-exact copies.
Blur lengths are given for 32 px CIFAR images and scaled to the actual image size.
"""

from __future__ import annotations

import math

import numpy as np

CORRUPTIONS: tuple[str, ...] = ("contrast", "gaussian_noise", "impulse_noise", "motion_blur", "snow", "speckle_noise")
NUM_SEVERITIES = 5

_CIFAR_SIZE = 32

_CONTRAST = (0.75, 0.5, 0.4, 0.3, 0.15)
_GAUSSIAN = (0.04, 0.06, 0.08, 0.09, 0.10)
_SPECKLE = (0.06, 0.1, 0.12, 0.16, 0.2)
_IMPULSE = (0.01, 0.02, 0.03, 0.05, 0.07)
_MOTION = ((10, 1.0), (10, 1.5), (10, 2.0), (10, 2.5), (12, 3.0))
# (loc, scale, zoom, threshold, blur radius, blur sigma, blend)
_SNOW = ((0.1, 0.2, 1.0, 0.6, 8, 3, 0.95), (0.1, 0.2, 1.0, 0.5, 10, 4, 0.9), (0.15, 0.3, 1.75, 0.55, 10, 4, 0.9),
         (0.25, 0.3, 2.25, 0.6, 12, 6, 0.85), (0.3, 0.3, 1.25, 0.65, 14, 12, 0.8))


def check_severity(severity: int) -> None:
    """Raise ValueError unless ``dataset.severity`` is an integer in ``1..5`` (every corrupted set's, image or text)."""
    if not isinstance(severity, (int, np.integer)) or isinstance(severity, bool) or not 1 <= severity <= NUM_SEVERITIES:
        raise ValueError(f"dataset.severity={severity!r} must be an integer in 1..{NUM_SEVERITIES} "
                         f"(the paper uses 5). Fix: dataset.severity=5.")


def corrupt(images: np.ndarray, name: str, severity: int, seed: int) -> np.ndarray:
    """Apply one corruption at one severity to a batch of images.

    Args:
        images: ``uint8`` array of shape ``(N, H, W, C)`` with ``C`` in ``{1, 3}``.
        name: One of :data:`CORRUPTIONS`.
        severity: Integer in ``1..5``; higher is stronger.
        seed: Seed of the NumPy generator; equal inputs and seed give equal outputs.

    Returns:
        The corrupted images, ``uint8`` with the shape of ``images``.

    Raises:
        ValueError: On an unknown corruption, a bad severity or a bad array.
    """
    if name not in CORRUPTIONS:
        raise ValueError(f"unknown corruption {name!r}; choose one of {', '.join(CORRUPTIONS)}")
    check_severity(severity)
    out = _FUNCTIONS[name](images.astype(np.float32) / 255.0, int(severity) - 1, np.random.default_rng(seed))
    return np.rint(np.clip(out, 0.0, 1.0) * 255.0).astype(np.uint8)  # clipped to [0, 1], quantised


def _contrast(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    """Blend every image toward its per-channel mean."""
    means = x.mean(axis=(1, 2), keepdims=True)
    return (x - means) * _CONTRAST[s] + means


def _gaussian_noise(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    """Add i.i.d. Gaussian noise on the ``[0, 1]`` scale."""
    return x + rng.normal(scale=_GAUSSIAN[s], size=x.shape).astype(np.float32)


def _impulse_noise(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    """Salt-and-pepper noise: a share of the values set to 0 or 1, each with probability 1/2."""
    hit = rng.random(x.shape, dtype=np.float32) < _IMPULSE[s]
    salt = rng.random(x.shape, dtype=np.float32) < 0.5
    return np.where(hit, salt.astype(np.float32), x)


def _speckle_noise(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    """Add multiplicative Gaussian noise."""
    return x + x * rng.normal(scale=_SPECKLE[s], size=x.shape).astype(np.float32)


def _motion_blur(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    """Blur every image along a line with a random angle in [-45, 45] degrees."""
    radius, sigma = _MOTION[s]
    angles = rng.uniform(-45.0, 45.0, size=x.shape[0])
    return motion_blur_batch(x, radius * x.shape[1] / _CIFAR_SIZE, sigma * x.shape[1] / _CIFAR_SIZE, angles)


def motion_blur_batch(x: np.ndarray, radius: float, sigma: float, angles: np.ndarray) -> np.ndarray:
    """One-sided Gaussian line blur, like ImageMagick's ``-motion-blur`` (as in ImageNet-C).

    Args:
        x: Float array ``(N, H, W)`` or ``(N, H, W, C)``.
        radius: Kernel half width; the kernel has ``2 * ceil(radius) + 1`` taps.
        sigma: Standard deviation of the Gaussian tap weights (in pixels).
        angles: Blur direction in degrees, one per image.

    Returns:
        The blurred array (float32, same shape), edges replicated.
    """
    n, h, w = x.shape[:3]
    taps = np.arange(2 * math.ceil(radius) + 1)
    weights = np.exp(-(taps**2) / (2.0 * sigma**2))
    weights /= weights.sum()
    rad = np.deg2rad(angles)
    rows, cols, batch = np.arange(h)[None, :, None], np.arange(w)[None, None, :], np.arange(n)[:, None, None]
    out = np.zeros_like(x, dtype=np.float32)
    for tap, weight in zip(taps, weights):
        if weight < 1e-4:
            break
        dy = -np.ceil(np.sin(rad) * tap - 0.5).astype(np.int64)
        dx = -np.ceil(np.cos(rad) * tap - 0.5).astype(np.int64)
        ri = np.clip(rows - dy[:, None, None], 0, h - 1)
        ci = np.clip(cols - dx[:, None, None], 0, w - 1)
        out += weight * x[batch, ri, ci]
    return out / weights[weights >= 1e-4].sum()


def _clipped_zoom(layer: np.ndarray, zoom: float) -> np.ndarray:
    """Zoom the centre of every ``(N, H, W)`` layer by ``zoom`` and crop back to ``H x W``."""
    from scipy import ndimage  # only when generating (keeps `import plasticity.data` light)

    h = layer.shape[1]
    ch = int(math.ceil(h / zoom))
    top = (h - ch) // 2
    zoomed = ndimage.zoom(layer[:, top : top + ch, top : top + ch], (1.0, zoom, zoom), order=1)
    trim = (zoomed.shape[1] - h) // 2
    return zoomed[:, trim : trim + h, trim : trim + h]


def _snow(x: np.ndarray, s: int, rng: np.random.Generator) -> np.ndarray:
    """Thresholded, zoomed, motion-blurred Gaussian snow over a brightened image."""
    loc, scale, zoom, threshold, radius, sigma, blend = _SNOW[s]
    n, h = x.shape[:2]
    layer = _clipped_zoom(rng.normal(loc=loc, scale=scale, size=x.shape[:3]).astype(np.float32), zoom)
    layer[layer < threshold] = 0.0
    layer = np.floor(np.clip(layer, 0.0, 1.0) * 255.0) / 255.0
    angles = rng.uniform(-135.0, -45.0, size=n)
    factor = h / _CIFAR_SIZE
    layer = motion_blur_batch(layer, radius * factor, sigma * factor, angles)[..., None]
    gray = x if x.shape[-1] == 1 else (x @ np.array([0.299, 0.587, 0.114], np.float32))[..., None]
    x = blend * x + (1.0 - blend) * np.maximum(x, gray * 1.5 + 0.5)
    return x + layer + layer[:, ::-1, ::-1]


_FUNCTIONS = {"contrast": _contrast, "gaussian_noise": _gaussian_noise, "impulse_noise": _impulse_noise,
              "motion_blur": _motion_blur, "snow": _snow, "speckle_noise": _speckle_noise}
