"""uint8 bicubic resampling with antialiasing, as torch's CPU uint8 kernel computes it (torchvision's
`resize(..., InterpolationMode.BICUBIC, antialias=True)` on a uint8 tensor), bit for bit: separable
passes of fixed-point weights, the width first. GR00T N1.7's view transform (models/groot/processor.py).
"""

from __future__ import annotations

import numpy as np


def _bicubic(x: np.ndarray) -> np.ndarray:
    """The cubic convolution kernel with a = -0.5, the antialiasing filter's."""
    a = -0.5
    x = np.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = (((x - 5) * x + 8) * x - 4) * a
    return np.where(x < 1, near, np.where(x < 2, far, 0.0))


def _antialias_taps(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(first source index [out], fixed-point weights [out, taps] int64, precision bits) of one axis.

    Weights in float64, normalized per output, then scaled to the most bits that keep the largest
    weight within int16, rounded half away from zero: what the uint8 kernel multiplies with."""
    scale = in_size / out_size
    support = 2.0 * scale if scale >= 1.0 else 2.0
    inverse = 1.0 / scale if scale >= 1.0 else 1.0
    centre = scale * (np.arange(out_size) + 0.5)
    first = np.maximum((centre - support + 0.5).astype(np.int64), 0)
    last = np.minimum((centre + support + 0.5).astype(np.int64), in_size)
    taps = int((last - first).max())
    offsets = np.arange(taps)
    weights = _bicubic((first[:, None] + offsets[None] - centre[:, None] + 0.5) * inverse)
    weights = np.where(offsets[None] < (last - first)[:, None], weights, 0.0)
    total = weights.sum(axis=1, keepdims=True)
    weights = np.where(total != 0.0, weights / np.where(total != 0.0, total, 1.0), weights)
    largest = weights.max()
    precision = 0
    while precision < 22 and int(0.5 + largest * (1 << (precision + 1))) < (1 << 15):
        precision += 1
    scaled = weights * (1 << precision)
    fixed = np.where(scaled < 0, np.trunc(scaled - 0.5), np.trunc(scaled + 0.5)).astype(np.int64)
    return first, fixed, precision


def _resample_axis(image: np.ndarray, out_size: int, axis: int) -> np.ndarray:
    in_size = image.shape[axis]
    if in_size == out_size:
        return image
    first, fixed, precision = _antialias_taps(in_size, out_size)
    moved = np.moveaxis(image, axis, 0)  # [in, ...]
    shape = (out_size,) + (1,) * (moved.ndim - 1)
    # the weights sum to about 2**precision <= 2**22, so 255 times their sum fits in int32
    total = np.full((out_size,) + moved.shape[1:], 1 << (precision - 1), np.int32)
    for tap in range(fixed.shape[1]):
        source = moved[np.minimum(first + tap, in_size - 1)].astype(np.int32)
        total += source * fixed[:, tap].astype(np.int32).reshape(shape)
    out = np.clip(total >> precision, 0, 255).astype(np.uint8)
    return np.moveaxis(out, 0, axis)


def resize_bicubic_uint8(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """(H, W, C) uint8 -> (height, width, C) uint8, bicubic with antialiasing, rounded as torch's
    uint8 CPU kernel rounds (torchvision `resize(..., BICUBIC, antialias=True)` on a uint8 tensor):
    the width pass first, its result kept as uint8, then the height pass."""
    image = np.asarray(image)
    if image.ndim != 3 or image.dtype != np.uint8:
        raise ValueError(f"expected an (H, W, C) uint8 image, got {image.dtype} {image.shape}")
    if height < 1 or width < 1:
        raise ValueError(f"resize target must be positive, got {height} x {width}")
    return _resample_axis(_resample_axis(image, width, 1), height, 0)
