"""Key names, tensor names and value typing of the bundle layout (described in bundle/__init__.py)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType

FORMAT_VERSION = 1
GGUF_VERSION = 3
ALIGNMENT = 32

KEY_ARCHITECTURE = "general.architecture"
KEY_ALIGNMENT = "general.alignment"
KEY_FORMAT_VERSION = "embodied_ros.format_version"
KEY_DIGEST = "embodied_ros.digest"
KEY_WRITER = "embodied_ros.writer"
KEY_SOURCE = "embodied_ros.source"
KEY_QUANT_PLAN = "embodied_ros.quant_plan"
KEY_WEIGHT_GROUPS = "embodied_ros.weight_groups"
KEY_TOKENIZER_KIND = "embodied_ros.tokenizer.kind"
KEY_STATE_NAMES = "embodied_ros.robot.state_names"
KEY_ACTION_NAMES = "embodied_ros.robot.action_names"
KEY_ACTION_PERIOD = "embodied_ros.robot.action_period_s"
KEY_REFERENCE_TOLERANCE = "embodied_ros.reference.tolerance"
PREFIX_SOLVER = "embodied_ros.solver."
PREFIX_REFERENCE_FIELD = "embodied_ros.reference.field."
PREFIX_REFERENCE_DTYPE = "embodied_ros.reference.dtype."

DIGEST_ALGORITHM = "sha256:"
DIGEST_PLACEHOLDER = DIGEST_ALGORITHM + "0" * 64

TENSOR_TOKENIZER = "tokenizer.model"
PREFIX_STATS = "stats."
PREFIX_REFERENCE = "reference."
REFERENCE_KINDS = ("input", "noise", "expected")
RESERVED_TENSOR_PREFIXES = (PREFIX_STATS, PREFIX_REFERENCE, "tokenizer.")

WEIGHT_TYPES = {
    "f32": GGMLQuantizationType.F32,
    "f16": GGMLQuantizationType.F16,
    "bf16": GGMLQuantizationType.BF16,
    "q8_0": GGMLQuantizationType.Q8_0,
    "q4_k": GGMLQuantizationType.Q4_K,
    "tq2_0": GGMLQuantizationType.TQ2_0,  # ternary (BitVLA); written only by its converter, never by a plan
}
TENSOR_TYPES = WEIGHT_TYPES | {  # every type a bundle may contain: weights + plain arrays
    "f64": GGMLQuantizationType.F64,
    "i8": GGMLQuantizationType.I8,
    "i16": GGMLQuantizationType.I16,
    "i32": GGMLQuantizationType.I32,
    "i64": GGMLQuantizationType.I64,
}
TYPE_NAMES = {ggml: name for name, ggml in TENSOR_TYPES.items()}
PLAIN_DTYPES = {"f32": np.float32, "f16": np.float16, "f64": np.float64,
                "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64}  # stored as numpy arrays
DTYPE_TYPE_NAMES = {np.dtype(dtype): name for name, dtype in PLAIN_DTYPES.items()}
# reference arrays are stored as the supported type of the same item size and viewed back
REFERENCE_DTYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64",
                    "uint8", "uint16", "uint32", "uint64", "bool")
STORAGE_DTYPE = {"float16": np.float16, "float32": np.float32, "float64": np.float64,
                 1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}

_ARCHITECTURE = re.compile(r"[a-z][a-z0-9_]*")
_KEY_PART = re.compile(r"[A-Za-z0-9_\-]+")


def check_architecture(name: str) -> str:
    if not isinstance(name, str) or not _ARCHITECTURE.fullmatch(name):
        raise ValueError(f"architecture must be a lowercase identifier like 'pi05', got {name!r}")
    return name


def group_of(name: str) -> str:
    """A weight's group for quantization plans and size reports: its name up to the first dot."""
    return name.split(".", 1)[0]


def flatten(values: Mapping[str, Any], prefix: str) -> dict[str, tuple[Any, GGUFValueType, GGUFValueType | None]]:
    """Nested mapping -> {prefix + "a.b.c": (value, gguf type, array item type)}.

    Leaves: bool, int, float, str, or a list/tuple of one of those (ints and floats may mix: stored
    as floats). Empty mappings store nothing. Anything else raises ValueError naming the key.
    """
    flat: dict[str, tuple[Any, GGUFValueType, GGUFValueType | None]] = {}
    for key, value in values.items():
        if not isinstance(key, str) or not _KEY_PART.fullmatch(key):
            raise ValueError(f"{prefix}{key}: keys must be non-empty names of letters, digits, '_' or '-'")
        path = prefix + key
        if isinstance(value, Mapping):
            flat.update(flatten(value, path + "."))
        elif isinstance(value, (list, tuple, np.ndarray)):
            flat[path] = _typed_list(path, list(np.asarray(value).tolist() if isinstance(value, np.ndarray) else value))
        else:
            flat[path] = (*_typed_scalar(path, value), None)
    return flat


def _typed_scalar(path: str, value: Any) -> tuple[Any, GGUFValueType]:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool):
        return value, GGUFValueType.BOOL
    if isinstance(value, int):
        return value, GGUFValueType.INT64
    if isinstance(value, float):
        return value, GGUFValueType.FLOAT64
    if isinstance(value, str):
        return value, GGUFValueType.STRING
    raise ValueError(f"{path}: cannot store {type(value).__name__} {value!r} (use bool, int, float, str, "
                     "a list of those, or a nested mapping)")


def _typed_list(path: str, items: list) -> tuple[list, GGUFValueType, GGUFValueType]:
    typed = [_typed_scalar(f"{path}[{i}]", item) for i, item in enumerate(items)]
    kinds = {kind for _, kind in typed}
    if not kinds:
        return [], GGUFValueType.ARRAY, GGUFValueType.INT64
    if kinds == {GGUFValueType.INT64, GGUFValueType.FLOAT64}:
        return [float(v) for v, _ in typed], GGUFValueType.ARRAY, GGUFValueType.FLOAT64
    if len(kinds) > 1:
        raise ValueError(f"{path}: list items must all have one type, got {sorted(k.name for k in kinds)}")
    return [v for v, _ in typed], GGUFValueType.ARRAY, kinds.pop()


def unflatten(flat: Mapping[str, Any]) -> dict[str, Any]:
    """{"a.b": 1, "a.c": 2} -> {"a": {"b": 1, "c": 2}}."""
    nested: dict[str, Any] = {}
    for path, value in flat.items():
        node = nested
        *parents, leaf = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested
