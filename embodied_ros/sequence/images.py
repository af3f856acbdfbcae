"""Camera images -> what SigLIP reads: [3, size, size] float32 in [-1, 1].

As the reference: uint8 / 255 (true division), HWC -> CHW; an image of another size is resized
with its aspect ratio kept (bilinear, half-pixel centres, no antialiasing), clamped to [0, 1] and
zero-padded to the square, centred (top/left get floor(pad / 2)); then x * 2 - 1.
"""

from __future__ import annotations

import numpy as np


def to_unit_chw(image: np.ndarray, camera: str = "camera") -> np.ndarray:
    """(H, W, 3) uint8 RGB -> (3, H, W) float32 in [0, 1]."""
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"{camera}: expected an (H, W, 3) RGB image, got shape {image.shape}")
    if image.dtype != np.uint8:
        raise ValueError(f"{camera}: expected uint8 pixels, got {image.dtype}")
    return np.ascontiguousarray((image.astype(np.float32) / np.float32(255.0)).transpose(2, 0, 1))


def _linear_taps(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Source indices and weights of bilinear resampling along one axis (align_corners=False)."""
    scale = np.float32(in_size) / np.float32(out_size)
    source = scale * (np.arange(out_size, dtype=np.float32) + np.float32(0.5)) - np.float32(0.5)
    source = np.maximum(source, np.float32(0.0))
    low = source.astype(np.int64)
    high = low + (low < in_size - 1)
    w_high = source - low.astype(np.float32)
    return low, high, np.float32(1.0) - w_high, w_high


def resize_bilinear(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """[C, H, W] float32 -> [C, height, width], bilinear with half-pixel centres, no antialiasing."""
    top, bottom, w_top, w_bottom = _linear_taps(image.shape[1], height)
    left, right, w_left, w_right = _linear_taps(image.shape[2], width)
    rows_top, rows_bottom = image[:, top], image[:, bottom]  # [C, height, W]
    upper = rows_top[:, :, left] * w_left + rows_top[:, :, right] * w_right
    lower = rows_bottom[:, :, left] * w_left + rows_bottom[:, :, right] * w_right
    return upper * w_top[:, None] + lower * w_bottom[:, None]


PADDINGS = ("centre", "left_top")


def resize_with_pad(image: np.ndarray, size: int, padding: str = "centre") -> np.ndarray:
    """[3, H, W] in [0, 1] -> [3, size, size] in [0, 1], aspect ratio kept, zero padding around it:
    "centre" (LeRobot's resize_with_pad, pi0 and pi0.5) or "left_top" (SmolVLA: the image in the
    bottom-right corner)."""
    if padding not in PADDINGS:
        raise ValueError(f"padding must be one of {PADDINGS}, got {padding!r}")
    _, height, width = image.shape
    if (height, width) == (size, size):
        return image
    ratio = max(width / size, height / size)
    new_height, new_width = max(1, int(height / ratio)), max(1, int(width / ratio))  # a 1 x 2000 image keeps a row
    resized = np.clip(resize_bilinear(image, new_height, new_width), 0.0, 1.0)
    if padding == "centre":
        top, left = (size - new_height) // 2, (size - new_width) // 2
    else:
        top, left = size - new_height, size - new_width
    out = np.zeros((image.shape[0], size, size), dtype=np.float32)
    out[:, top:top + new_height, left:left + new_width] = resized
    return out


def model_image(image: np.ndarray, size: int, camera: str = "camera", padding: str = "centre") -> np.ndarray:
    """(H, W, 3) uint8 -> (3, size, size) float32 in [-1, 1] (resize_with_pad's padding)."""
    return resize_with_pad(to_unit_chw(image, camera), size, padding) * np.float32(2.0) - np.float32(1.0)
