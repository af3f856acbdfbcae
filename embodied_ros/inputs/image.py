"""sensor_msgs/Image <-> numpy, honouring `step` (row padding) and `is_bigendian`.

`image_to_array` returns a view of the message buffer when it can (native byte order); the model
side always takes `image_to_rgb8`, an (H, W, 3) uint8 RGB array.
"""

from __future__ import annotations

import array
import sys
from dataclasses import dataclass

import numpy as np
from sensor_msgs.msg import Image

from embodied_ros.inputs.errors import ImageFormatError
from embodied_ros.inputs.stamps import ns_to_time

# encoding -> (element type, channels)
ENCODINGS: dict[str, tuple[np.dtype, int]] = {
    "rgb8": (np.dtype(np.uint8), 3),
    "bgr8": (np.dtype(np.uint8), 3),
    "rgba8": (np.dtype(np.uint8), 4),
    "bgra8": (np.dtype(np.uint8), 4),
    "mono8": (np.dtype(np.uint8), 1),
    "8UC1": (np.dtype(np.uint8), 1),
    "mono16": (np.dtype(np.uint16), 1),
    "16UC1": (np.dtype(np.uint16), 1),
    "32FC1": (np.dtype(np.float32), 1),
}


@dataclass(frozen=True)
class ImageConversion:
    """How single-channel 16-bit and float images (e.g. depth) become 8-bit RGB for the model."""

    mono_max: float | None = None  # value shown as 255; None: 65535 for 16-bit, 1.0 for float

    def __post_init__(self) -> None:
        if self.mono_max is not None and not (self.mono_max > 0 and np.isfinite(self.mono_max)):
            raise ValueError(f"mono_max must be a positive number, got {self.mono_max}")


def image_to_array(msg: Image, name: str = "image") -> np.ndarray:
    """(H, W, C) array, or (H, W) for one channel, in the encoding's own element type."""
    dtype, channels = _layout(msg.encoding, name)
    height, width, step = int(msg.height), int(msg.width), int(msg.step)
    if height <= 0 or width <= 0:
        raise ImageFormatError(f"{name}: image is {width}x{height}; both sides must be positive")
    row_bytes = width * channels * dtype.itemsize
    if step < row_bytes:
        raise ImageFormatError(
            f"{name}: step {step} is smaller than one row of {width} {msg.encoding} pixels ({row_bytes} bytes)"
        )
    if len(msg.data) != step * height:
        raise ImageFormatError(
            f"{name}: {width}x{height} {msg.encoding} image with step {step} needs {step * height} bytes, "
            f"message has {len(msg.data)}"
        )
    rows = np.frombuffer(msg.data, dtype=np.uint8).reshape(height, step)[:, :row_bytes]
    wire_dtype = dtype.newbyteorder(">" if msg.is_bigendian else "<")
    pixels = rows.view(wire_dtype)
    if wire_dtype != dtype.newbyteorder("="):
        pixels = pixels.astype(dtype)
    shape = (height, width) if channels == 1 else (height, width, channels)
    return pixels.reshape(shape)


def image_to_rgb8(msg: Image, name: str = "image", conversion: ImageConversion = ImageConversion()) -> np.ndarray:
    """(H, W, 3) uint8 RGB, C-contiguous, whatever the supported encoding."""
    pixels = image_to_array(msg, name)
    encoding = msg.encoding
    if encoding == "rgb8":
        rgb = pixels
    elif encoding == "bgr8":
        rgb = pixels[..., ::-1]
    elif encoding == "rgba8":
        rgb = pixels[..., :3]
    elif encoding == "bgra8":
        rgb = pixels[..., 2::-1]
    else:
        rgb = np.repeat(mono_to_uint8(pixels, conversion)[..., None], 3, axis=2)
    return np.ascontiguousarray(rgb)


def array_to_image(pixels: np.ndarray, encoding: str, stamp_ns: int = 0, frame_id: str = "") -> Image:
    """An Image message holding `pixels` ((H, W, C) or (H, W)), rows unpadded, native byte order."""
    dtype, channels = _layout(encoding, "array_to_image")
    pixels = np.asarray(pixels)
    expected_ndim = 2 if channels == 1 else 3
    if pixels.ndim == 3 and channels == 1 and pixels.shape[2] == 1:
        pixels = pixels[..., 0]
    if pixels.ndim != expected_ndim or (channels > 1 and pixels.shape[2] != channels):
        raise ImageFormatError(f"{encoding} needs an array of {channels} channel(s), got shape {pixels.shape}")
    if pixels.dtype != dtype:
        raise ImageFormatError(f"{encoding} needs {dtype} pixels, got {pixels.dtype}")
    data = array.array("B")
    data.frombytes(np.ascontiguousarray(pixels).reshape(-1).view(np.uint8))  # one copy, the array's bytes
    msg = Image(height=pixels.shape[0], width=pixels.shape[1], encoding=encoding,
                is_bigendian=int(sys.byteorder == "big"), step=pixels.shape[1] * channels * dtype.itemsize)
    msg.header.stamp = ns_to_time(stamp_ns)
    msg.header.frame_id = frame_id
    msg.data = data
    return msg


def _layout(encoding: str, name: str) -> tuple[np.dtype, int]:
    try:
        return ENCODINGS[encoding]
    except KeyError:
        raise ImageFormatError(
            f"{name}: encoding {encoding!r} is not supported; use one of {', '.join(ENCODINGS)}"
        ) from None


def mono_to_uint8(pixels: np.ndarray, conversion: ImageConversion) -> np.ndarray:
    if pixels.dtype == np.uint8:
        return pixels
    default_max = 1.0 if pixels.dtype.kind == "f" else float(np.iinfo(pixels.dtype).max)
    top = conversion.mono_max or default_max
    values = np.nan_to_num(pixels.astype(np.float32), nan=0.0, posinf=top, neginf=0.0)
    return np.rint(np.clip(values, 0.0, top) * np.float32(255.0 / top)).astype(np.uint8)
