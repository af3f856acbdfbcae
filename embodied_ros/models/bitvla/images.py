"""A camera image as OFT's evaluation hands it to BitVLA, as pure functions on uint8 arrays:

    1. an image that is not INPUT_SIZE (224) square is resized to it. The evaluation JPEG-encodes it and
       resizes with TensorFlow's antialiased Lanczos-3; here it is the antialiased bicubic resize of
       sequence/resample.py: close, not bit for bit (records use 224 x 224 cameras).
    2. with `center_crop` (models fine-tuned with image augmentation): TensorFlow's
       crop_and_resize of the central 0.9 of the area (sqrt(0.9) of each side) back to 224 x 224,
       bilinear, on the image as float32 in [0, 1], clipped, then back to uint8 by truncating x * 255.5
       (tf.image.convert_image_dtype with saturation)
    3. the SigLIP image processor: Pillow's bicubic resize to the tower's size (a copy when it already is),
       x / 255 in float64 rounded to float32, (x - 0.5) / 0.5
    4. the evaluation casts the pixel values to bfloat16 (round to nearest even), whatever the model's dtype

Output: [3, S, S] float32 in [-1, 1].
"""

from __future__ import annotations

import numpy as np

from embodied_ros.sequence.resample import resize_bicubic_uint8

CROP_AREA = 0.9
_PIL_PRECISION = 22  # Pillow's fixed-point bits for 8-bit resampling (32 - 8 - 2)


def center_crop(image: np.ndarray, area: float = CROP_AREA) -> np.ndarray:
    """uint8 [H, W, 3] -> uint8 [H, W, 3]: TensorFlow's crop_and_resize of the central `area`, bilinear."""
    height, width = image.shape[:2]
    pixels = image.astype(np.float32) * np.float32(1.0 / 255.0)
    side = np.float32(np.sqrt(np.float32(area)))
    offset = (np.float32(1.0) - side) / np.float32(2.0)
    rows = _crop_positions(offset, offset + side, height, height)
    cols = _crop_positions(offset, offset + side, width, width)
    top, bottom, row_lerp = _lerp_taps(rows)
    left, right, col_lerp = _lerp_taps(cols)
    upper = pixels[top][:, left] + (pixels[top][:, right] - pixels[top][:, left]) * col_lerp[None, :, None]
    lower = pixels[bottom][:, left] + (pixels[bottom][:, right] - pixels[bottom][:, left]) * col_lerp[None, :, None]
    cropped = upper + (lower - upper) * row_lerp[:, None, None]
    scaled = np.clip(cropped, 0.0, 1.0).astype(np.float32) * np.float32(255.5)
    return np.clip(scaled, 0.0, 255.0).astype(np.uint8)  # truncation toward zero, as TF's saturate_cast


def _crop_positions(start: np.float32, stop: np.float32, size: int, out: int) -> np.ndarray:
    """Source coordinates of `out` samples between normalized start and stop (float32, TF's order)."""
    last = np.float32(size - 1)
    scale = (stop - start) * last / np.float32(out - 1)
    return (start * last + np.arange(out, dtype=np.float32) * scale).astype(np.float32)


def _lerp_taps(positions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    low = np.floor(positions).astype(np.int64)
    high = np.ceil(positions).astype(np.int64)
    return low, high, (positions - low.astype(np.float32)).astype(np.float32)


def _bicubic(x: np.ndarray) -> np.ndarray:
    a = -0.5
    x = np.abs(x)
    return np.where(x < 1.0, ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0,
                    np.where(x < 2.0, (((x - 5.0) * x + 8.0) * x - 4.0) * a, 0.0))


def _pil_taps(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(first source index [out], fixed-point weights [out, taps]) of Pillow's bicubic resampling."""
    scale = in_size / out_size
    filter_scale = max(scale, 1.0)
    support = 2.0 * filter_scale
    centre = (np.arange(out_size) + 0.5) * scale
    first = np.maximum(np.trunc(centre - support + 0.5).astype(np.int64), 0)
    last = np.minimum(np.trunc(centre + support + 0.5).astype(np.int64), in_size)
    taps = int((last - first).max())
    offsets = np.arange(taps)
    weights = _bicubic((first[:, None] + offsets[None] - centre[:, None] + 0.5) * (1.0 / filter_scale))
    weights = np.where(offsets[None] < (last - first)[:, None], weights, 0.0)
    total = weights.sum(axis=1, keepdims=True)
    weights = np.where(total != 0.0, weights / np.where(total != 0.0, total, 1.0), weights)
    scaled = weights * (1 << _PIL_PRECISION)
    return first, np.where(scaled < 0, np.trunc(scaled - 0.5), np.trunc(scaled + 0.5)).astype(np.int64)


def _pil_axis(image: np.ndarray, out_size: int, axis: int) -> np.ndarray:
    in_size = image.shape[axis]
    if in_size == out_size:
        return image
    first, fixed = _pil_taps(in_size, out_size)
    moved = np.moveaxis(image, axis, 0).astype(np.int64)
    shape = (out_size,) + (1,) * (moved.ndim - 1)
    total = np.full((out_size,) + moved.shape[1:], 1 << (_PIL_PRECISION - 1), np.int64)
    for tap in range(fixed.shape[1]):
        total += moved[np.minimum(first + tap, in_size - 1)] * fixed[:, tap].reshape(shape)
    return np.moveaxis(np.clip(total >> _PIL_PRECISION, 0, 255).astype(np.uint8), 0, axis)


def pil_bicubic(image: np.ndarray, size: int) -> np.ndarray:
    """uint8 [H, W, 3] -> [size, size, 3], Pillow's Image.resize(..., BICUBIC): the width first."""
    return _pil_axis(_pil_axis(image, size, 1), size, 0)


def to_bfloat16(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), as float32."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return rounded.view(np.float32)


def model_pixels(image: np.ndarray, size: int, input_size: int, center_crop_image: bool, bf16: bool) -> np.ndarray:
    """One camera's uint8 [H, W, 3] -> [3, size, size] float32 pixel values (module doc)."""
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise ValueError(f"expected a uint8 [H, W, 3] image, got {image.dtype} {image.shape}")
    if image.shape[:2] != (input_size, input_size):
        image = resize_bicubic_uint8(image, input_size, input_size)
    if center_crop_image:
        image = center_crop(image)
    image = pil_bicubic(image, size)
    pixels = (image.astype(np.float64) * (1.0 / 255.0)).astype(np.float32)
    pixels = (pixels - np.float32(0.5)) / np.float32(0.5)
    if bf16:
        pixels = to_bfloat16(pixels)
    return np.ascontiguousarray(pixels.transpose(2, 0, 1))
