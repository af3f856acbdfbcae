"""A bounds-checked walk over a GGUF header, before gguf's reader trusts it.

gguf's reader believes every count and length it reads: a forged array length makes it loop for
ages, a tensor running past the end of the file fails deep inside numpy. This walk checks each
length against the bytes left, each tensor's type, shape, alignment and extent against the file,
and that no two tensors overlap, raising BundleFormatError / BundleTruncatedError that name the
file and the offending field. It reads no values except sizes; gguf's reader does that afterwards.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from embodied_ros.bundle import layout
from embodied_ros.bundle.errors import BundleFormatError, BundleTruncatedError

_SCALAR_SIZES = {GGUFValueType.UINT8: 1, GGUFValueType.INT8: 1, GGUFValueType.BOOL: 1,
                 GGUFValueType.UINT16: 2, GGUFValueType.INT16: 2,
                 GGUFValueType.UINT32: 4, GGUFValueType.INT32: 4, GGUFValueType.FLOAT32: 4,
                 GGUFValueType.UINT64: 8, GGUFValueType.INT64: 8, GGUFValueType.FLOAT64: 8}
_MAX_DIMS = 4  # ggml's limit
MAGIC = struct.pack("<I", gguf.GGUF_MAGIC)  # b"GGUF": the first bytes of every bundle


@dataclass(frozen=True)
class TensorExtent:
    name: str
    ggml_type: GGMLQuantizationType
    shape: tuple[int, ...]  # numpy order (outermost first)
    start: int  # absolute file offset of the data
    nbytes: int


class _Cursor:
    def __init__(self, data: memoryview, path: Path) -> None:
        self.data, self.path, self.offset = data, path, 0

    def take(self, n: int, what: str) -> memoryview:
        if n > len(self.data) - self.offset:
            raise BundleTruncatedError(
                f"{self.path}: file ends inside the header: {what} at byte {self.offset} needs {n} bytes, "
                f"{len(self.data) - self.offset} remain (truncated or corrupt)")
        chunk = self.data[self.offset:self.offset + n]
        self.offset += n
        return chunk

    def u32(self, what: str) -> int:
        return struct.unpack("<I", self.take(4, what))[0]

    def u64(self, what: str) -> int:
        return struct.unpack("<Q", self.take(8, what))[0]

    def text(self, what: str) -> str:
        raw = bytes(self.take(self.u64(what + " length"), what))
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise BundleFormatError(f"{self.path}: {what} at byte {self.offset - len(raw)} is not UTF-8 text") from None

    def skip_value(self, vtype: int, key: str, nested: bool = False) -> None:
        if vtype == GGUFValueType.STRING:
            self.take(self.u64(f"length of {key!r}"), f"value of {key!r}")
        elif vtype in _SCALAR_SIZES:
            self.take(_SCALAR_SIZES[GGUFValueType(vtype)], f"value of {key!r}")
        elif vtype == GGUFValueType.ARRAY and not nested:
            item_type, count = self.u32(f"item type of {key!r}"), self.u64(f"length of {key!r}")
            if item_type in _SCALAR_SIZES:
                self.take(count * _SCALAR_SIZES[GGUFValueType(item_type)], f"items of {key!r}")
            elif item_type == GGUFValueType.STRING:
                if count * 8 > len(self.data) - self.offset:
                    self.take(count * 8, f"items of {key!r}")  # raises: cannot fit
                for _ in range(count):
                    self.skip_value(item_type, key, nested=True)
            else:
                raise BundleFormatError(f"{self.path}: key {key!r} has unsupported array item type {item_type}")
        else:
            raise BundleFormatError(f"{self.path}: key {key!r} has unknown value type {vtype}")


def scan(buffer: np.ndarray, path: Path) -> tuple[dict[str, int], list[TensorExtent]]:
    """Check the header's structure: -> (key -> value type, tensors in file order)."""
    cursor = _Cursor(memoryview(buffer).cast("B"), path)
    magic = bytes(cursor.take(4, "magic"))
    if magic != MAGIC:
        raise BundleFormatError(f"{path}: not a GGUF bundle (starts with {magic!r}, expected b'GGUF')")
    version = cursor.u32("version")
    if version != layout.GGUF_VERSION:
        byte_swapped = version & 0xFFFF == 0
        raise BundleFormatError(f"{path}: GGUF version {version} is not supported (expected "
                                f"{layout.GGUF_VERSION}{'; file looks big-endian' if byte_swapped else ''})")
    tensor_count, kv_count = cursor.u64("tensor count"), cursor.u64("key count")
    remaining = len(cursor.data) - cursor.offset
    if kv_count * 13 > remaining or tensor_count * 25 > remaining:
        raise BundleTruncatedError(f"{path}: header claims {kv_count} keys and {tensor_count} tensors, which "
                                   f"cannot fit in the {remaining} bytes that follow (truncated or forged)")
    keys: dict[str, int] = {}
    for _ in range(kv_count):
        key = cursor.text("key name")
        if key in keys:
            raise BundleFormatError(f"{path}: key {key!r} appears twice")
        keys[key] = cursor.u32(f"type of {key!r}")
        cursor.skip_value(keys[key], key)
    tensors = [_tensor_info(cursor) for _ in range(tensor_count)]
    if layout.KEY_ALIGNMENT in keys:
        raise BundleFormatError(f"{path}: custom data alignment ({layout.KEY_ALIGNMENT}) is not used by bundles")
    alignment = layout.ALIGNMENT
    data_start = -(-cursor.offset // alignment) * alignment
    return keys, _check_extents(tensors, data_start, alignment, len(cursor.data), path)


def _tensor_info(cursor: _Cursor) -> tuple[str, tuple[int, ...], int, int]:
    name = cursor.text("tensor name")
    n_dims = cursor.u32(f"dimension count of tensor {name!r}")
    if not 1 <= n_dims <= _MAX_DIMS:
        raise BundleFormatError(f"{cursor.path}: tensor {name!r} claims {n_dims} dimensions (1..{_MAX_DIMS} allowed)")
    dims = [cursor.u64(f"dimensions of tensor {name!r}") for _ in range(n_dims)]
    raw_type = cursor.u32(f"type of tensor {name!r}")
    offset = cursor.u64(f"offset of tensor {name!r}")
    return name, tuple(reversed(dims)), raw_type, offset


def _check_extents(infos, data_start: int, alignment: int, file_size: int, path: Path) -> list[TensorExtent]:
    extents, seen = [], set()
    for name, shape, raw_type, offset in infos:
        if name in seen:
            raise BundleFormatError(f"{path}: tensor {name!r} appears twice")
        seen.add(name)
        if raw_type not in layout.TYPE_NAMES:
            raise BundleFormatError(f"{path}: tensor {name!r} has type {raw_type}, not one bundles use "
                                    f"({', '.join(layout.TENSOR_TYPES)})")
        ggml_type = GGMLQuantizationType(raw_type)
        block, block_bytes = GGML_QUANT_SIZES[ggml_type]
        if min(shape) < 1 or shape[-1] % block or float(np.prod(shape, dtype=np.float64)) > 2.0 ** 48:
            raise BundleFormatError(f"{path}: tensor {name!r} has impossible shape {shape} for type "
                                    f"{layout.TYPE_NAMES[ggml_type]}")
        nbytes = int(np.prod(shape, dtype=np.int64)) // block * block_bytes
        if offset % alignment:
            raise BundleFormatError(f"{path}: tensor {name!r} starts at data offset {offset}, not a multiple "
                                    f"of the alignment {alignment}")
        start = data_start + offset
        if start + nbytes > file_size:
            raise BundleTruncatedError(f"{path}: tensor {name!r} needs bytes {start}..{start + nbytes} but the file "
                                       f"has {file_size} bytes (truncated, or its shape/offset is forged)")
        extents.append(TensorExtent(name, ggml_type, shape, start, nbytes))
    ordered = sorted(extents, key=lambda e: e.start)
    for before, after in zip(ordered, ordered[1:]):
        if before.start + before.nbytes > after.start:
            raise BundleFormatError(f"{path}: tensors {before.name!r} and {after.name!r} overlap "
                                    "(a shape or offset in the header is forged or corrupt)")
    return extents


def starts_like_a_bundle(path: str | Path) -> bool:
    """Whether `path` is a readable file beginning with the GGUF magic (a bundle, or a damaged one)."""
    try:
        with open(path, "rb") as file:
            return file.read(len(MAGIC)) == MAGIC
    except OSError:
        return False
