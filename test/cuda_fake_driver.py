"""A stand-in for `embodied_ros.kernels.cuda.driver` that runs launches in numba's CUDA simulator.

With it the cuda backend's real launch path (`cuda.launch.GpuDevice`) runs without a GPU: device
memory is host memory at made-up addresses, `load_module` keeps the PTX, and `launch` reads the
parameter buffer back at the offsets the PTX entry declares (not the packer's own idea of them),
rebuilds each array from its data pointer, shape and strides, and runs the kernel's Python source in
the simulator. A packer that put any field in the wrong place gives wrong arrays, and so wrong
results. `install()` must run, with NUMBA_ENABLE_CUDASIM=1 set, before anything imports the
launcher or numba.cuda.
"""

from __future__ import annotations

import bisect
import itertools
import sys
import threading

import numpy as np

COMPUTE_CAPABILITY = (9, 0)


class Error(Exception):
    pass


class _Memory:
    """Host buffers at made-up device addresses."""

    def __init__(self) -> None:
        self.bases: list[int] = []
        self.buffers: dict[int, np.ndarray] = {}
        self._next = itertools.count(1)

    def allocate(self, nbytes: int) -> int:
        if nbytes <= 0:
            raise Error("cuMemAlloc: size must be positive")
        base = 0x7F0000000000 + next(self._next) * (1 << 32)  # 4 GiB apart: overruns land nowhere
        bisect.insort(self.bases, base)
        self.buffers[base] = np.zeros(nbytes, np.uint8)
        return base

    def bytes_at(self, address: int, nbytes: int) -> np.ndarray:
        index = bisect.bisect_right(self.bases, address) - 1
        if index < 0:
            raise Error(f"address {address:#x} is not device memory")
        base = self.bases[index]
        buffer = self.buffers[base]
        offset = address - base
        if offset + nbytes > buffer.size:
            raise Error(f"{nbytes} bytes at {address:#x} run past an allocation of {buffer.size} bytes")
        return buffer[offset:offset + nbytes]


_memory = _Memory()
_launches: list[str] = []
_threads = threading.local()  # like CUDA, a GPU is current per thread


def _require_current(call: str) -> None:
    if getattr(_threads, "device", None) is None:
        raise Error(f"{call}: CUDA_ERROR_INVALID_CONTEXT (no GPU is current in this thread)")


def device_count() -> int:
    return 1


def make_current(ordinal: int) -> None:
    if ordinal != 0:
        raise Error(f"cudaSetDevice({ordinal}): invalid device ordinal")
    _threads.device = ordinal


def open_device(ordinal: int) -> tuple[str, tuple[int, int], int]:
    make_current(ordinal)
    return "numba CUDA simulator", COMPUTE_CAPABILITY, 13000


def allocate(nbytes: int):
    _require_current("cudaMalloc")
    if nbytes <= 0:
        raise Error("cudaMalloc: size must be positive")
    pointer = _memory.allocate(nbytes)
    return pointer, pointer


def copy_to_device(pointer: int, array: np.ndarray) -> None:
    _require_current("cudaMemcpy")
    raw = np.ascontiguousarray(array).view(np.uint8).reshape(-1)
    _memory.bytes_at(int(pointer), raw.size)[:] = raw


def copy_to_host(array: np.ndarray, pointer: int) -> None:
    _require_current("cudaMemcpy")
    raw = array.view(np.uint8).reshape(-1)
    raw[:] = _memory.bytes_at(int(pointer), raw.size)


def synchronize() -> None:
    _require_current("cudaDeviceSynchronize")


class Event:
    def __init__(self) -> None:
        _require_current("cudaEventCreate")

    def record(self) -> "Event":
        import time
        self.at = time.perf_counter()
        return self

    def synchronize(self) -> "Event":
        return self

    def time_till(self, other: "Event") -> float:
        return (other.at - self.at) * 1e3


class _Function:
    def __init__(self, ptx: str, name: str) -> None:
        from embodied_ros.kernels.cuda.abi import entry_params
        from embodied_ros.kernels.cuda.compiler import all_kernels
        entry, self.params = entry_params(ptx)
        if entry != name:
            raise Error(f"cuModuleGetFunction: no entry {name!r} (the module has {entry!r})")
        matches = [k for k in all_kernels() if k.ptx(COMPUTE_CAPABILITY) == ptx]
        if len(matches) != 1:
            raise Error(f"the PTX of entry {name} matches {len(matches)} declared kernels")
        self.kernel = matches[0]

    def run(self, grid, block, buffer: bytes, shared_size: int = 0) -> None:
        from embodied_ros.kernels.cuda.abi import param_offsets, unpack_arguments
        _require_current("cuLaunchKernel")
        layout_end = param_offsets(self.params)[-1] + self.params[-1].size
        if len(buffer) != layout_end:
            raise Error(f"parameter buffer of {len(buffer)} bytes; the PTX entry takes {layout_end}")
        values = iter(unpack_arguments(self.params, buffer))
        args = [self._argument(ty, values) for ty in self.kernel.arg_types]
        _launches.append(self.kernel.name)
        self.kernel.simulated()[tuple(grid), tuple(block), 0, shared_size](*args)

    @staticmethod
    def _argument(ty, values):
        from numba.core import types as nbtypes
        if not isinstance(ty, nbtypes.Array):
            return np.dtype(str(ty)).type(next(values))
        meminfo, parent, nitems, itemsize, data = (next(values) for _ in range(5))
        shape = tuple(next(values) for _ in range(ty.ndim))
        strides = tuple(next(values) for _ in range(ty.ndim))
        dtype = np.dtype(str(ty.dtype))
        if (meminfo, parent) != (0, 0) or itemsize != dtype.itemsize or nitems != int(np.prod(shape)):
            raise Error(f"array argument fields do not agree: meminfo={meminfo} parent={parent} "
                        f"nitems={nitems} itemsize={itemsize} shape={shape} strides={strides}")
        if nitems == 0:
            return np.empty(shape, dtype)
        extent = sum((n - 1) * s for n, s in zip(shape, strides)) + itemsize
        raw = _memory.bytes_at(data, extent)
        return np.ndarray(shape, dtype, buffer=raw, strides=strides)


class _Module:
    def __init__(self, buffer: bytes) -> None:
        if not buffer.endswith(b"\0"):
            raise Error("cuModuleLoadData: PTX must be NUL-terminated")
        self.ptx = buffer[:-1].decode()


def load_module(image: bytes) -> _Module:
    _require_current("cuModuleLoadData")
    return _Module(image)


def get_function(module: _Module, name: str) -> _Function:
    return _Function(module.ptx, name)


def launch(function: _Function, grid, block, buffer: bytes, shared_bytes: int = 0) -> None:
    function.run(grid, block, buffer, shared_bytes)


def launched_kernels() -> list[str]:
    """Names of the kernels launched so far, in order."""
    return list(_launches)


def install() -> None:
    """Make `embodied_ros.kernels.cuda.driver` this module."""
    sys.modules["embodied_ros.kernels.cuda.driver"] = sys.modules[__name__]
