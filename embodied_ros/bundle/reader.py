"""Opening a bundle: check it, then hand out memory-mapped views of its tensors."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from gguf import GGUFValueType

from embodied_ros.bundle import layout, scan
from embodied_ros.bundle.errors import BundleArchitectureError, BundleFormatError, BundleIntegrityError
from embodied_ros.bundle.records import ReferenceRecord, RobotMetadata
from embodied_ros.bundle.writer import file_digest
from embodied_ros.kernels.quant import QuantTensor


@dataclass(frozen=True)
class TensorInfo:
    name: str
    qtype: str  # "f32", "f16", "bf16", "q8_0", "q4_k" (weights); "i8".."i64", "f64" (other arrays)
    shape: tuple[int, ...]  # logical shape, numpy order
    nbytes: int  # bytes in the file
    offset: int  # absolute file offset of the data


def open_bundle(path: str | os.PathLike, architecture: str | None = None, verify_digest: bool = True) -> "Bundle":
    """Open and check a bundle; raise a BundleError subclass naming the file and the problem.

    architecture: refuse (BundleArchitectureError) a bundle of another model family.
    verify_digest: hash the whole file (SHA-256, about 1-2 s per GB, reading every page once) and
    refuse it if it changed since writing. Pass False for huge files opened often; run
    `Bundle.verify_digest()` or `embodied-ros bundle verify` to check them instead.
    """
    return Bundle(Path(path), architecture, verify_digest)


class Bundle:
    """A checked, memory-mapped bundle. Tensors are views into the file, never copies."""

    def __init__(self, path: Path, architecture: str | None = None, verify_digest: bool = True) -> None:
        self.path = path
        try:
            buffer = np.memmap(path, mode="r") if path.stat().st_size else np.zeros(0, np.uint8)
        except OSError as error:
            raise BundleFormatError(f"{path}: cannot read: {error.strerror or error}") from None
        self._keys, extents = scan.scan(buffer, path)
        self._extents = {e.name: e for e in extents}
        try:
            self._reader = gguf.GGUFReader(path)
        except (ValueError, KeyError, IndexError) as error:
            raise BundleFormatError(f"{path}: unreadable GGUF header: {error}") from None
        self.architecture = self._text(layout.KEY_ARCHITECTURE)
        self.format_version = self._number(layout.KEY_FORMAT_VERSION, GGUFValueType.UINT32)
        if self.format_version != layout.FORMAT_VERSION:
            newer = " (written by a newer embodied_ros)" if self.format_version > layout.FORMAT_VERSION else ""
            raise BundleFormatError(f"{path}: bundle format version {self.format_version}{newer}; this runtime "
                                    f"reads version {layout.FORMAT_VERSION}")
        self.digest = self._text(layout.KEY_DIGEST)
        if not (self.digest.startswith(layout.DIGEST_ALGORITHM) and len(self.digest) == len(layout.DIGEST_PLACEHOLDER)):
            raise BundleFormatError(f"{path}: malformed digest {self.digest!r}")
        if architecture is not None and architecture != self.architecture:
            raise BundleArchitectureError(f"{path}: holds a {self.architecture!r} model, not {architecture!r}")
        if verify_digest:
            self.verify_digest()

    # ---- metadata ----------------------------------------------------------------------------

    def value(self, key: str, default: Any = None) -> Any:
        """A metadata value by its full key (str, int, float, bool or list)."""
        field = self._reader.get_field(key)
        return default if field is None else field.contents()

    @cached_property
    def config(self) -> dict[str, Any]:
        """The model configuration as the nested mapping given to BundleWriter.set_config."""
        prefix = self.architecture + "."
        return layout.unflatten({k[len(prefix):]: self.value(k) for k in self._keys if k.startswith(prefix)})

    @cached_property
    def solver(self) -> dict[str, Any]:
        prefix = layout.PREFIX_SOLVER
        return layout.unflatten({k[len(prefix):]: self.value(k) for k in self._keys if k.startswith(prefix)})

    @cached_property
    def robot(self) -> RobotMetadata | None:
        if layout.KEY_ACTION_PERIOD not in self._keys:
            return None
        return RobotMetadata(self.value(layout.KEY_STATE_NAMES, []), self.value(layout.KEY_ACTION_NAMES, []),
                             self.value(layout.KEY_ACTION_PERIOD))

    @property
    def quant_plan(self) -> str:
        return self.value(layout.KEY_QUANT_PLAN, "")

    @property
    def source(self) -> str:
        return self.value(layout.KEY_SOURCE, "")

    # ---- tensors -----------------------------------------------------------------------------

    @property
    def tensor_names(self) -> list[str]:
        return list(self._extents)

    @property
    def weight_names(self) -> list[str]:
        return [n for n in self._extents if not n.startswith(layout.RESERVED_TENSOR_PREFIXES)]

    @cached_property
    def weight_groups(self) -> dict[str, str]:
        """weight name -> its group, as the converter grouped it for the quantization plan."""
        groups = self.value(layout.KEY_WEIGHT_GROUPS, [])
        names = self.weight_names
        if len(groups) != len(names):
            return {name: layout.group_of(name) for name in names}
        return dict(zip(names, groups))

    def tensor_info(self, name: str) -> TensorInfo:
        e = self._extent(name)
        return TensorInfo(e.name, layout.TYPE_NAMES[e.ggml_type], e.shape, e.nbytes, e.start)

    def raw(self, name: str) -> np.ndarray | QuantTensor:
        """The tensor as stored: a read-only memmap view (f32, f16, f64, int) or a QuantTensor over one."""
        e = self._extent(name)
        data = np.asarray(self._reader.data[e.start:e.start + e.nbytes])  # uint8 view of the mapping
        qtype = layout.TYPE_NAMES[e.ggml_type]
        if qtype in layout.PLAIN_DTYPES:
            return data.view(layout.PLAIN_DTYPES[qtype]).reshape(e.shape)
        block, block_bytes = gguf.GGML_QUANT_SIZES[e.ggml_type]
        return QuantTensor(qtype, e.shape, data.reshape(*e.shape[:-1], e.shape[-1] // block * block_bytes))

    def weight(self, name: str) -> np.ndarray | QuantTensor:
        """A weight ready for `ks.linear`, resident once in its stored type: F32 and F16 as read-only
        memmap views, BF16, Q8_0 and Q4_K as a QuantTensor over the mapping. Nothing is upcast: the
        products read 16-bit and block-quantized weights as they are stored."""
        if name.startswith(layout.RESERVED_TENSOR_PREFIXES):
            raise KeyError(f"{self.path}: {name!r} is not a weight")
        return self.raw(name)

    @property
    def weight_bytes(self) -> int:
        """Bytes of every weight as stored: what the weights take resident."""
        return sum(self._extents[name].nbytes for name in self.weight_names)

    def weights(self) -> dict[str, np.ndarray | QuantTensor]:
        """name -> `weight(name)` for every weight."""
        return {name: self.weight(name) for name in self.weight_names}

    @cached_property
    def stats(self) -> dict[str, dict[str, np.ndarray]]:
        """Normalization statistics: quantity -> statistic -> float32 array, e.g. stats["state"]["q01"]."""
        result: dict[str, dict[str, np.ndarray]] = {}
        for name in self._extents:
            if name.startswith(layout.PREFIX_STATS):
                quantity, _, statistic = name[len(layout.PREFIX_STATS):].rpartition(".")
                result.setdefault(quantity, {})[statistic] = self.raw(name)
        return result

    @cached_property
    def tokenizer_model(self) -> bytes | None:
        """The tokenizer model file's bytes (kind in `tokenizer_kind`), or None."""
        if layout.TENSOR_TOKENIZER not in self._extents:
            return None
        return self.raw(layout.TENSOR_TOKENIZER).tobytes()

    @property
    def tokenizer_kind(self) -> str | None:
        return self.value(layout.KEY_TOKENIZER_KIND)

    @cached_property
    def reference(self) -> ReferenceRecord | None:
        if layout.KEY_REFERENCE_TOLERANCE not in self._keys:
            return None
        arrays: dict[str, dict[str, np.ndarray]] = {kind: {} for kind in layout.REFERENCE_KINDS}
        for name in self._extents:
            if name.startswith(layout.PREFIX_REFERENCE):
                kind, _, key = name[len(layout.PREFIX_REFERENCE):].partition(".")
                if kind not in arrays:
                    raise BundleFormatError(f"{self.path}: reference tensor {name!r} has unknown kind {kind!r}")
                arrays[kind][key] = self._reference_array(name, kind, key)
        fields = {k[len(layout.PREFIX_REFERENCE_FIELD):]: self.value(k)
                  for k in self._keys if k.startswith(layout.PREFIX_REFERENCE_FIELD)}
        return ReferenceRecord(inputs=arrays["input"], expected=arrays["expected"], noise=arrays["noise"],
                               tolerance=self.value(layout.KEY_REFERENCE_TOLERANCE), fields=fields)

    # ---- integrity ---------------------------------------------------------------------------

    def verify_digest(self) -> None:
        """Hash the whole file; raise BundleIntegrityError if it differs from the stored digest."""
        start = self._reader.get_field(layout.KEY_DIGEST).offset + 8 + len(layout.KEY_DIGEST) + 4 + 8
        start += len(layout.DIGEST_ALGORITHM)
        actual = file_digest(self._reader.data, (start, start + 64))
        if layout.DIGEST_ALGORITHM + actual != self.digest:
            raise BundleIntegrityError(f"{self.path}: content does not match its digest (changed or damaged "
                                       f"after writing): stored {self.digest}, computed sha256:{actual}")

    # ---- helpers -----------------------------------------------------------------------------

    def _extent(self, name: str) -> scan.TensorExtent:
        try:
            return self._extents[name]
        except KeyError:
            raise KeyError(f"{self.path}: no tensor named {name!r}") from None

    def _field_type(self, key: str) -> GGUFValueType | None:
        field = self._reader.get_field(key)
        return field.types[0] if field is not None and field.types else None

    def _text(self, key: str) -> str:
        if self._field_type(key) != GGUFValueType.STRING:
            raise BundleFormatError(f"{self.path}: not an embodied_ros bundle: text key {key!r} is missing")
        return self.value(key)

    def _number(self, key: str, vtype: GGUFValueType) -> int:
        if self._field_type(key) != vtype:
            raise BundleFormatError(f"{self.path}: not an embodied_ros bundle: key {key!r} is missing or "
                                    f"not {vtype.name}")
        return self.value(key)

    def _reference_array(self, name: str, kind: str, key: str) -> np.ndarray:
        descriptor = self.value(f"{layout.PREFIX_REFERENCE_DTYPE}{kind}.{key}", "")
        dtype, _, scalar = descriptor.partition(":")
        stored = self.raw(name)
        if dtype not in layout.REFERENCE_DTYPES or np.dtype(dtype).itemsize != stored.dtype.itemsize:
            raise BundleFormatError(f"{self.path}: reference array {name!r} has a bad dtype record {descriptor!r}")
        array = stored.view(dtype)
        return array.reshape(()) if scalar == "scalar" else array

    def __repr__(self) -> str:
        return f"Bundle({str(self.path)!r}, architecture={self.architecture!r}, tensors={len(self._extents)})"

