"""Writing a bundle: collect everything, then stream it into one GGUF file.

Weights are encoded one at a time while the file is written, so peak memory is the inputs plus one
encoded tensor. The file is written under a temporary name, its digest patched in, then renamed:
a bundle path never holds a half-written file.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from gguf import GGUFValueType

import embodied_ros
from embodied_ros.bundle import layout
from embodied_ros.bundle.plan import QuantPlan
from embodied_ros.bundle.quantize import quantize
from embodied_ros.bundle.records import ReferenceRecord, RobotMetadata
from embodied_ros.bundle.source import LAZY, release
from embodied_ros.kernels.quant import QUANT_TYPES, QuantTensor


@dataclass
class _Entry:
    name: str
    source: np.ndarray | QuantTensor  # what the caller gave
    qtype: str  # stored type name (layout.TYPE_NAMES value)
    reason: str = ""  # why the plan's type was not used, if it was not

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.source.shape)

    def nbytes(self) -> int:
        n = int(np.prod(self.shape))
        if self.qtype in QUANT_TYPES:
            kind = QUANT_TYPES[self.qtype]
            return n // kind.block_size * kind.block_bytes
        return n * np.dtype(layout.PLAIN_DTYPES[self.qtype]).itemsize


class _GGUFWriter(gguf.GGUFWriter):
    """gguf's writer, also able to store empty arrays (e.g. a config list with no items)."""

    def _pack_val(self, val: Any, vtype: GGUFValueType, add_vtype: bool,
                  sub_type: GGUFValueType | None = None) -> bytes:
        if vtype == GGUFValueType.ARRAY and len(val) == 0:
            head = self._pack("I", vtype) if add_vtype else b""
            return head + self._pack("I", sub_type or GGUFValueType.INT64) + self._pack("Q", 0)
        return super()._pack_val(val, vtype, add_vtype, sub_type)


class BundleWriter:
    """Collects a model's parts; `write(path)` produces the bundle.

    >>> writer = BundleWriter("pi05", quant_plan="lm=q8_0,expert=q4_k")
    >>> writer.set_config({"vision": {"width": 48, "depth": 2}, "chunk_size": 10})
    >>> writer.add_weights({"vision.patch.weight": w0, "lm.layers.0.q.weight": w1})
    >>> writer.set_stats({"state": {"q01": lo, "q99": hi}})
    >>> writer.write("policy.gguf", progress=True)
    """

    def __init__(self, architecture: str, quant_plan: QuantPlan | str | None = None,
                 group_of: Callable[[str], str] = layout.group_of) -> None:
        self.architecture = layout.check_architecture(architecture)
        self.plan = quant_plan if isinstance(quant_plan, QuantPlan) else QuantPlan.parse(quant_plan)
        self.group_of = group_of
        self._weights: dict[str, _Entry] = {}
        self._other: dict[str, _Entry] = {}  # stats, tokenizer, reference arrays
        self._kv: dict[str, tuple[Any, GGUFValueType, GGUFValueType | None]] = {}
        self._config: dict[str, tuple[Any, GGUFValueType, GGUFValueType | None]] = {}

    # ---- content -----------------------------------------------------------------------------

    def set_config(self, config: Mapping[str, Any]) -> None:
        """The model's configuration, a nested mapping; stored as typed keys `<arch>.<a>.<b>`."""
        self._config = layout.flatten(config, self.architecture + ".")

    def add_weight(self, name: str, weight: np.ndarray | QuantTensor, qtype: str | None = None) -> None:
        """One weight; its stored type is `qtype` if given, else the quantization plan's choice.

        A QuantTensor is stored as it is. Arrays are encoded when the file is written.
        """
        if not name or name.startswith(layout.RESERVED_TENSOR_PREFIXES) or name in self._weights:
            raise ValueError(f"weight name {name!r} is empty, reserved ({', '.join(layout.RESERVED_TENSOR_PREFIXES)}) "
                             "or already added")
        if isinstance(weight, QuantTensor):
            self._weights[name] = _Entry(name, weight, weight.qtype)
            return
        if not isinstance(weight, LAZY):
            weight = np.asarray(weight)
        if weight.dtype.kind != "f" or weight.size == 0:
            raise ValueError(f"weight {name!r}: expected a non-empty float array, got {weight.dtype} {weight.shape}")
        if qtype is None:
            choice = self.plan.choose(self.group_of(name), weight.shape)
            self._weights[name] = _Entry(name, weight, choice.qtype, choice.reason)
            return
        block = QUANT_TYPES[qtype].block_size if qtype in QUANT_TYPES else 1
        if qtype not in layout.WEIGHT_TYPES or weight.ndim == 0 or weight.shape[-1] % block:
            raise ValueError(f"weight {name!r} of shape {weight.shape} cannot be stored as {qtype!r} "
                             f"(types: {', '.join(layout.WEIGHT_TYPES)}; block types need a last dimension "
                             "that is a multiple of their block size)")
        self._weights[name] = _Entry(name, weight, qtype)

    def add_weights(self, weights: Mapping[str, np.ndarray | QuantTensor]) -> None:
        for name, weight in weights.items():
            self.add_weight(name, weight)

    def set_stats(self, stats: Mapping[str, Mapping[str, np.ndarray]]) -> None:
        """Normalization statistics, e.g. {"state": {"q01": ..., "q99": ...}, "action": {"mean": ...}}."""
        self._other = {k: v for k, v in self._other.items() if not k.startswith(layout.PREFIX_STATS)}
        for quantity, values in stats.items():
            for statistic, array in values.items():
                if not quantity or not statistic or "." in statistic:
                    raise ValueError(f"statistics {quantity!r}/{statistic!r}: names must be non-empty and the "
                                     "statistic's without dots (e.g. 'state'/'q01')")
                name = f"{layout.PREFIX_STATS}{quantity}.{statistic}"
                array = np.ascontiguousarray(array, dtype=np.float32)
                self._other[name] = _Entry(name, array.reshape(array.shape or (1,)), "f32")

    def set_tokenizer(self, model: bytes, kind: str = "sentencepiece") -> None:
        """The tokenizer model file's bytes (a SentencePiece .model)."""
        if not model:
            raise ValueError("tokenizer model is empty")
        self._other[layout.TENSOR_TOKENIZER] = _Entry(
            layout.TENSOR_TOKENIZER, np.frombuffer(bytes(model), dtype=np.int8), "i8")
        self._kv[layout.KEY_TOKENIZER_KIND] = (kind, GGUFValueType.STRING, None)

    def set_solver(self, settings: Mapping[str, Any]) -> None:
        """Solver settings, e.g. {"method": "euler", "num_inference_steps": 10}."""
        self._kv = {k: v for k, v in self._kv.items() if not k.startswith(layout.PREFIX_SOLVER)}
        self._kv.update(layout.flatten(settings, layout.PREFIX_SOLVER))

    def set_robot(self, robot: RobotMetadata) -> None:
        self._kv[layout.KEY_STATE_NAMES] = (list(robot.state_names), GGUFValueType.ARRAY, GGUFValueType.STRING)
        self._kv[layout.KEY_ACTION_NAMES] = (list(robot.action_names), GGUFValueType.ARRAY, GGUFValueType.STRING)
        self._kv[layout.KEY_ACTION_PERIOD] = (float(robot.action_period_s), GGUFValueType.FLOAT64, None)

    def set_source(self, text: str) -> None:
        """Where the weights came from (checkpoint path or name), shown by `bundle inspect`."""
        self._kv[layout.KEY_SOURCE] = (str(text), GGUFValueType.STRING, None)

    def set_reference(self, record: ReferenceRecord) -> None:
        self._other = {k: v for k, v in self._other.items() if not k.startswith(layout.PREFIX_REFERENCE)}
        self._kv = {k: v for k, v in self._kv.items()
                    if not k.startswith((layout.PREFIX_REFERENCE_FIELD, layout.PREFIX_REFERENCE_DTYPE))}
        self._kv[layout.KEY_REFERENCE_TOLERANCE] = (float(record.tolerance), GGUFValueType.FLOAT64, None)
        for key, value in record.fields.items():
            self._kv[layout.PREFIX_REFERENCE_FIELD + key] = (value, GGUFValueType.STRING, None)
        for kind, arrays in record.arrays().items():
            for key, array in arrays.items():
                name = f"{layout.PREFIX_REFERENCE}{kind}.{key}"
                stored, descriptor = _storable(name, np.asarray(array))
                self._other[name] = _Entry(name, stored, layout.DTYPE_TYPE_NAMES[stored.dtype])
                self._kv[f"{layout.PREFIX_REFERENCE_DTYPE}{kind}.{key}"] = (descriptor, GGUFValueType.STRING, None)

    # ---- output ------------------------------------------------------------------------------

    def plan_report(self) -> list[tuple[str, tuple[int, ...], str, str]]:
        """(name, shape, stored type, fallback reason) of every weight, in writing order."""
        return [(e.name, e.shape, e.qtype, e.reason) for e in self._weights.values()]

    def write(self, path: str | os.PathLike, progress: bool = False) -> Path:
        """Encode and write everything to `path` (replaced if it exists); returns the path."""
        path = Path(path)
        self.plan.check_groups({self.group_of(name) for name, e in self._weights.items() if e.source.ndim >= 2})
        temporary = path.with_name(f".{path.name}.partial")
        try:
            self._write_gguf(temporary, progress)
            _seal_with_digest(temporary)
            os.replace(temporary, path)
        finally:
            temporary.unlink(missing_ok=True)
        return path

    def _write_gguf(self, path: Path, progress: bool) -> None:
        entries = list(self._weights.values()) + list(self._other.values())
        writer = _GGUFWriter(path, self.architecture)
        kv = {layout.KEY_FORMAT_VERSION: (layout.FORMAT_VERSION, GGUFValueType.UINT32, None),
              layout.KEY_DIGEST: (layout.DIGEST_PLACEHOLDER, GGUFValueType.STRING, None),
              layout.KEY_WRITER: (f"embodied_ros {embodied_ros.__version__}", GGUFValueType.STRING, None),
              layout.KEY_QUANT_PLAN: (str(self.plan), GGUFValueType.STRING, None),
              layout.KEY_WEIGHT_GROUPS: ([self.group_of(name) for name in self._weights], GGUFValueType.ARRAY,
                                         GGUFValueType.STRING)}
        for key, (value, vtype, sub_type) in (kv | self._kv | self._config).items():
            writer.add_key_value(key, value, vtype, sub_type)
        for entry in entries:
            writer.add_tensor_info(entry.name, entry.shape, np.dtype(np.float32), entry.nbytes(),
                                   raw_dtype=layout.TENSOR_TYPES[entry.qtype])
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        bar = _progress_bar(progress, sum(e.nbytes() for e in entries))
        try:
            for entry in entries:
                bar.set_postfix_str(f"{entry.name} -> {entry.qtype}", refresh=False)
                writer.write_tensor_data(_encoded(entry))
                release(entry.source.data if isinstance(entry.source, QuantTensor) else entry.source)
                bar.update(entry.nbytes())
        finally:
            bar.close()
            writer.close()


ENCODE_CHUNK_VALUES = 1 << 24  # weights encoded at a time: 64 MiB of float32 and the encoder's temporaries


def _encoded(entry: _Entry) -> np.ndarray:
    source = entry.source
    if isinstance(source, QuantTensor):
        return np.ascontiguousarray(source.data)
    if entry.qtype not in layout.WEIGHT_TYPES:
        return np.ascontiguousarray(source)
    if entry.qtype in QUANT_TYPES and isinstance(source, np.ndarray) and source.ndim >= 2:
        return _encoded_by_rows(source.reshape(-1, source.shape[-1]), entry.qtype)
    stored = quantize(source, entry.qtype)
    return np.ascontiguousarray(stored.data if isinstance(stored, QuantTensor) else stored)


def _encoded_by_rows(rows: np.ndarray, qtype: str) -> np.ndarray:
    """Block types encode each row on its own: a large tensor (e.g. the token embeddings) is
    encoded a slice of rows at a time into its output bytes, never as a whole float32 copy."""
    kind = QUANT_TYPES[qtype]
    out = np.empty((rows.shape[0], rows.shape[1] // kind.block_size * kind.block_bytes), np.uint8)
    step = max(1, ENCODE_CHUNK_VALUES // rows.shape[1])
    for start in range(0, rows.shape[0], step):
        out[start:start + step] = quantize(rows[start:start + step], qtype).data.reshape(-1, out.shape[1])
    return out


def _storable(name: str, array: np.ndarray) -> tuple[np.ndarray, str]:
    """A reference array as a GGUF-storable array of the same bytes, and the descriptor to view it back."""
    dtype = array.dtype.name
    if dtype not in layout.REFERENCE_DTYPES:
        raise ValueError(f"reference array {name!r}: dtype {dtype} is not storable; use one of "
                         f"{', '.join(layout.REFERENCE_DTYPES)}")
    descriptor = dtype + (":scalar" if array.ndim == 0 else "")
    array = np.ascontiguousarray(array).reshape(array.shape or (1,))
    storage = layout.STORAGE_DTYPE.get(dtype) or layout.STORAGE_DTYPE[array.dtype.itemsize]
    return array.view(storage), descriptor


def _progress_bar(enabled: bool, total: int):
    from tqdm import tqdm

    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="encoding and writing",
                disable=not enabled, leave=False)


def digest_span(path: Path) -> tuple[int, int]:
    """Byte range of the digest's hex characters in a bundle file (found through gguf's reader)."""
    field = gguf.GGUFReader(path).get_field(layout.KEY_DIGEST)
    start = field.offset + 8 + len(layout.KEY_DIGEST) + 4 + 8 + len(layout.DIGEST_ALGORITHM)
    return start, start + 64


def file_digest(buffer: np.ndarray, span: tuple[int, int]) -> str:
    """SHA-256 of the whole file with the digest's hex characters read as '0's."""
    view = memoryview(buffer).cast("B")
    sha = hashlib.sha256(view[:span[0]])
    sha.update(b"0" * (span[1] - span[0]))
    sha.update(view[span[1]:])
    return sha.hexdigest()


def _seal_with_digest(path: Path) -> None:
    span = digest_span(path)
    buffer = np.memmap(path, mode="r")
    digest = file_digest(buffer, span)
    del buffer
    with open(path, "r+b") as f:
        f.seek(span[0])
        f.write(digest.encode("ascii"))
