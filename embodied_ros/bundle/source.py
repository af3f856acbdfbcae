"""Checkpoint tensors read lazily, so that conversion holds one tensor at a time.

`map_safetensors` maps a .safetensors file and hands out read-only views of it (nothing is read
until a tensor is encoded); a BF16 tensor, which numpy cannot view, is a `Widened` view of its bits,
made float32 only when the array is asked for; `Stacked` is a concatenation along the first axis made
only when the array is asked for (`np.asarray`). The bundle writer encodes and writes one tensor at a time and
then hands back the mapped pages it read (`release`), so a conversion's peak is about the largest
tensor and its encoding, not the checkpoint.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from embodied_ros.kernels import release_pages

_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
           "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def map_safetensors(path: str | Path) -> dict[str, "np.ndarray | Widened"]:
    """name -> read-only view of the file's tensor (a `Widened` one for BF16)."""
    path = Path(path)
    with path.open("rb") as file:
        (header_size,) = struct.unpack("<Q", file.read(8))
        header = json.loads(file.read(header_size))
    header.pop("__metadata__", None)
    unknown = sorted({entry["dtype"] for entry in header.values()} - set(_DTYPES) - {"BF16"})
    if unknown:
        raise ValueError(f"{path}: tensor types {unknown} are not read (known: {', '.join(_DTYPES)}, BF16)")
    mapped = np.memmap(path, mode="r")
    tensors = {}
    for name, entry in header.items():
        start, stop = entry["data_offsets"]
        data = mapped[8 + header_size + start:8 + header_size + stop]
        if entry["dtype"] == "BF16":
            tensors[name] = Widened(data.view(np.uint16).reshape(entry["shape"]))
        else:
            tensors[name] = data.view(_DTYPES[entry["dtype"]]).reshape(entry["shape"])
    return tensors


class _Unread:
    """A tensor known by its dtype and shape, made when `np.asarray` asks for it."""

    dtype: np.dtype
    shape: tuple[int, ...]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))


class Widened(_Unread):
    """A BF16 tensor's bits [..] (uint16), float32 when `np.asarray` asks for it: bf16 is the top half
    of a float32, so the widening is exact."""

    dtype = np.dtype(np.float32)

    def __init__(self, bits: np.ndarray) -> None:
        self.bits = bits
        self.shape = bits.shape

    def reshape(self, *shape) -> "Widened":
        return Widened(self.bits.reshape(*shape))

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        wide = (self.bits.astype(np.uint32) << np.uint32(16)).view(np.float32)
        return wide if dtype is None else wide.astype(dtype, copy=False)


class Stacked(_Unread):
    """parts concatenated along axis 0, made when `np.asarray` asks for it."""

    def __init__(self, parts: list[np.ndarray]) -> None:
        self.parts = parts
        self.dtype = np.result_type(*(part.dtype for part in parts))
        self.shape = (sum(p.shape[0] for p in parts), *parts[0].shape[1:])

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        stacked = np.concatenate(self.parts)
        return stacked if dtype is None else stacked.astype(dtype, copy=False)


def release(tensor) -> None:
    """Hand back the mapped pages a tensor (or the parts of a Stacked) was read from."""
    for part in tensor.parts if isinstance(tensor, Stacked) else [tensor]:
        part = part.bits if isinstance(part, Widened) else part
        if isinstance(part, np.ndarray):
            release_pages(part)


LAZY = _Unread  # what the bundle writer keeps unread until it encodes it
