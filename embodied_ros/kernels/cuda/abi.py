"""numba's kernel calling convention, packed into the parameter buffer the CUDA driver takes.

A kernel compiled by numba takes its arguments flattened into scalar parameters:
  array of rank n  ->  meminfo ptr, parent ptr, nitems, itemsize, data ptr, shape[n], strides[n]
                       (2n + 5 parameters of 8 bytes; meminfo and parent are unused on the device: 0)
  float32 / float64, int32 / int64, uint32 / uint64  ->  one parameter of that width
`pack_arguments` lays them out as a C struct (each parameter at an offset aligned to its size), which
is what cuLaunchKernel reads from a CU_LAUNCH_PARAM_BUFFER_POINTER buffer. `entry_params` reads the
parameter list of a PTX entry so tests can check that both agree for every kernel.
Kernels written in CUDA C (kernels/*.cu) take plain scalars and pointers: `pack_params` lays out such
a list the same way, and `module_entries` reads every entry of their PTX.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from numba.core import types


@dataclass(frozen=True)
class Param:
    """One scalar kernel parameter: its kind ("int" or "float") and size in bytes."""

    kind: str
    size: int


_SCALARS = {  # numba type -> (struct code, parameter)
    types.float32: ("f", Param("float", 4)),
    types.float64: ("d", Param("float", 8)),
    types.int32: ("i", Param("int", 4)),
    types.int64: ("q", Param("int", 8)),
    types.uint32: ("I", Param("int", 4)),
    types.uint64: ("Q", Param("int", 8)),
}
_WORD = Param("int", 8)  # pointers, intp counts, shapes and strides


def _array_fields(rank: int) -> int:
    return 5 + 2 * rank


def abi_params(arg_types: Sequence[types.Type]) -> list[Param]:
    """The scalar parameters numba's kernel ABI gives a list of argument types."""
    params: list[Param] = []
    for ty in arg_types:
        if isinstance(ty, types.Array):
            params.extend([_WORD] * _array_fields(ty.ndim))
        elif ty in _SCALARS:
            params.append(_SCALARS[ty][1])
        else:
            raise TypeError(f"kernel argument type {ty} is not supported by the cuda launcher "
                            f"(arrays and {', '.join(str(t) for t in _SCALARS)} are)")
    return params


def struct_format(arg_types: Sequence[types.Type]) -> str:
    """Native-aligned struct format of the parameter buffer (`struct.calcsize` gives its size)."""
    codes = []
    for ty in arg_types:
        codes.append("q" * _array_fields(ty.ndim) if isinstance(ty, types.Array) else _SCALARS[ty][0])
    abi_params(arg_types)  # rejects unsupported types with a clear message
    return "@" + "".join(codes)


def buffer_size(arg_types: Sequence[types.Type]) -> int:
    return struct.calcsize(struct_format(arg_types))


def pack_arguments(arg_types: Sequence[types.Type], values: Sequence[Any]) -> bytes:
    """The parameter buffer for one launch.

    Array arguments are device tensors (anything with `pointer`, `shape`, `dtype`, C-contiguous);
    scalars are Python or numpy numbers, converted to the declared type.
    """
    if len(values) != len(arg_types):
        raise TypeError(f"kernel takes {len(arg_types)} arguments, got {len(values)}")
    fields: list[int | float] = []
    for position, (ty, value) in enumerate(zip(arg_types, values)):
        if isinstance(ty, types.Array):
            fields.extend(_array_words(ty, value, position))
        else:
            fields.append(float(value) if _SCALARS[ty][1].kind == "float" else int(value))
    return struct.pack(struct_format(arg_types), *fields)


def _array_words(ty: types.Array, tensor: Any, position: int) -> list[int]:
    dtype = np.dtype(str(ty.dtype))
    if not hasattr(tensor, "pointer"):
        raise TypeError(f"argument {position}: expected a device tensor for {ty}, got {type(tensor).__name__}")
    if tensor.dtype != dtype or len(tensor.shape) != ty.ndim:
        raise TypeError(f"argument {position}: expected {ty}, got a {len(tensor.shape)}-d {tensor.dtype} tensor")
    shape = [int(n) for n in tensor.shape]
    strides = [int(s) for s in _contiguous_strides(shape, dtype.itemsize)]
    nitems = int(np.prod(shape, dtype=np.int64))
    return [0, 0, nitems, dtype.itemsize, int(tensor.pointer), *shape, *strides]


def _contiguous_strides(shape: Sequence[int], itemsize: int) -> list[int]:
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(int(n), 1)
    return strides[::-1]


def param_offsets(params: Sequence[Param]) -> list[int]:
    """Byte offset of each parameter in the buffer: aligned to its own size, in order."""
    offsets, position = [], 0
    for param in params:
        position = -(-position // param.size) * param.size
        offsets.append(position)
        position += param.size
    return offsets


# ---- PTX ----------------------------------------------------------------------------------------

_PTX_KINDS = {"f": "float", "u": "int", "s": "int", "b": "int"}
_ENTRY = re.compile(r"\.entry\s+([\w$]+)\s*\(([^)]*)\)")
_PARAM = re.compile(r"\.param\s+(?:\.align\s+\d+\s+)?\.([fusb])(\d+)\s+[\w$]+(?:\[(\d+)\])?")


def entry_params(ptx: str) -> tuple[str, list[Param]]:
    """Name and parameters of the single kernel entry of a PTX module."""
    entries = module_entries(ptx)
    if len(entries) != 1:
        raise ValueError(f"expected one .entry in the PTX, found {len(entries)}")
    return next(iter(entries.items()))


def module_entries(ptx: str) -> dict[str, list[Param]]:
    """Every kernel entry of a PTX module: name -> parameters, in order."""
    return {name: _params(param_text) for name, param_text in _ENTRY.findall(ptx)}


def _params(param_text: str) -> list[Param]:
    params = []
    for declaration in filter(None, (part.strip() for part in param_text.split(","))):
        match = _PARAM.fullmatch(declaration)
        if not match:
            raise ValueError(f"unexpected PTX parameter declaration {declaration!r}")
        kind, bits, count = match.groups()
        if count is not None:
            raise ValueError(f"PTX parameter {declaration!r} is an aggregate; numba passes scalars only")
        params.append(Param(_PTX_KINDS[kind], int(bits) // 8))
    return params


_CODES = {("int", 4): "i", ("int", 8): "q", ("float", 4): "f", ("float", 8): "d"}


def pack_params(params: Sequence[Param], values: Sequence[int | float]) -> bytes:
    """The parameter buffer of a CUDA C kernel: each value (pointers as integers) at its aligned offset."""
    if len(values) != len(params):
        raise TypeError(f"kernel takes {len(params)} parameters, got {len(values)}")
    buffer = bytearray(param_offsets(params)[-1] + params[-1].size if params else 0)
    for param, offset, value in zip(params, param_offsets(params), values):
        struct.pack_into("<" + _CODES[(param.kind, param.size)], buffer, offset,
                         float(value) if param.kind == "float" else int(value))
    return bytes(buffer)


def unpack_arguments(params: Sequence[Param], buffer: bytes) -> list[int | float]:
    """Values of the parameters in a buffer, read at the offsets the PTX layout implies."""
    codes = {("int", 4): "<i", ("int", 8): "<q", ("float", 4): "<f", ("float", 8): "<d"}
    return [struct.unpack_from(codes[(p.kind, p.size)], buffer, offset)[0]
            for p, offset in zip(params, param_offsets(params))]
