"""Device memory and the host/device rules of the cuda backend's op wrappers.

Every cuda op accepts numpy arrays, `DeviceTensor`s, or a mix:
  - numpy arguments are copied to the GPU for the call (what tests and one-off calls do);
  - `DeviceTensor` arguments are used in place: upload weights once with `to_device` (a `QuantTensor`
    uploads its blocks and stays a `QuantTensor`) and keep activations on the GPU between ops;
  - the result follows the op's first argument (the activation): a `DeviceTensor` in gives a
    `DeviceTensor` out, a numpy array in gives a numpy array out.
The GPU itself (memory, loaded kernels) is `gpu()`, opened on first use through CuPy's driver calls;
this module imports without CuPy or a driver.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from embodied_ros.kernels.quant import QuantTensor

INSTALL_HINT = ("the cuda backend needs an NVIDIA GPU with its driver and CuPy built for its CUDA version "
                "(pip install cupy-cuda12x or cupy-cuda13x; docs/cuda.md)")


class CudaUnavailable(RuntimeError):
    """No usable GPU: CuPy missing, no driver, or no device."""


@dataclass(frozen=True, eq=False)
class DeviceTensor:
    """A C-contiguous array in GPU memory.

    pointer: device address of element 0; owner: keeps the allocation alive (views share it);
    device: the `GpuDevice` that allocated it.
    """

    shape: tuple[int, ...]
    dtype: np.dtype
    pointer: int
    owner: Any
    device: Any

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def numpy(self) -> np.ndarray:
        """A host copy."""
        return self.device.download(self)

    def reshape(self, *shape) -> "DeviceTensor":
        """Same memory, another shape (one dimension may be -1)."""
        return DeviceTensor(_resolve_shape(shape, self.size), self.dtype, self.pointer, self.owner, self.device)

    def view(self, dtype) -> "DeviceTensor":
        """Same memory read as another dtype of the same item size."""
        dtype = np.dtype(dtype)
        if dtype.itemsize != self.dtype.itemsize:
            raise ValueError(f"cannot view {self.dtype} as {dtype}: item sizes differ")
        return DeviceTensor(self.shape, dtype, self.pointer, self.owner, self.device)

    def rows(self, start: int, stop: int) -> "DeviceTensor":
        """Rows start..stop of the first axis, sharing memory (e.g. the valid part of a K/V cache)."""
        if not 0 <= start <= stop <= self.shape[0]:
            raise IndexError(f"rows {start}:{stop} outside a tensor of {self.shape[0]} rows")
        row_bytes = self.nbytes // max(self.shape[0], 1)
        return DeviceTensor((stop - start, *self.shape[1:]), self.dtype, self.pointer + start * row_bytes,
                            self.owner, self.device)

    def __repr__(self) -> str:
        return f"DeviceTensor(shape={self.shape}, dtype={self.dtype})"


def _resolve_shape(shape: tuple, size: int) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    dims = [int(n) for n in shape]
    known = int(np.prod([n for n in dims if n != -1], dtype=np.int64))
    if dims.count(-1) == 1 and known > 0 and size % known == 0:
        dims[dims.index(-1)] = size // known
    if dims.count(-1) or min(dims, default=0) < 0 or int(np.prod(dims, dtype=np.int64)) != size:
        raise ValueError(f"cannot reshape a tensor of {size} elements to {tuple(shape)}")
    return tuple(dims)


_gpu = None
_gpu_lock = threading.Lock()


def gpu():
    """The process's GPU (a `launch.GpuDevice`), opened on first use."""
    global _gpu
    with _gpu_lock:
        if _gpu is None:
            try:
                from embodied_ros.kernels.cuda import launch
            except ImportError as error:
                raise CudaUnavailable(f"{INSTALL_HINT}; importing the launcher failed: {error}") from error
            _gpu = launch.GpuDevice()
        return _gpu


def prepare_gpu(tensor_cores: bool | None = None):
    """Open the GPU and compile (or read from the PTX cache) and load every cuda kernel: call at start-up,
    so that no op compiles inside a control step. Returns the `GpuDevice`.

    tensor_cores: also build and load the tensor-core products (kernels/gemm.cu): True requires them
    (`TensorCoresUnavailable` if impossible), None loads them when the matmul precision is "bf16" (and
    logs why not, if they cannot be), False leaves them to first use."""
    from embodied_ros.kernels import registry
    from embodied_ros.kernels.cuda import gemm
    from embodied_ros.kernels.cuda.compiler import all_kernels
    registry.ops()  # imports the kernel modules, which declare the kernels
    device = gpu()
    device.load(all_kernels())
    if tensor_cores:
        gemm.require_tensor_cores(device)
    elif tensor_cores is None and gemm.matmul_precision() == "bf16":
        gemm.tensor_cores(device)
    return device


def to_device(value, dtype=None):
    """Copy an array (or a QuantTensor's blocks) to the GPU once; DeviceTensors pass through unchanged.

    Floating-point arrays become float32 unless `dtype` says otherwise; integer arrays keep their type.
    """
    if isinstance(value, DeviceTensor):
        if dtype is not None and value.dtype != np.dtype(dtype):
            raise TypeError(f"expected a {np.dtype(dtype)} device tensor, got {value.dtype}")
        return value
    if isinstance(value, QuantTensor):
        return QuantTensor(value.qtype, value.shape, to_device(value.data, np.uint8))
    array = np.asarray(value)
    if dtype is None and array.dtype.kind == "f":
        dtype = np.float32  # the kernels compute in float32: float16/float64 weights are converted once, here
    return gpu().upload(np.ascontiguousarray(array, dtype=dtype))


def on_device(value, name: str, dtype=np.float32) -> DeviceTensor:
    """An op's array argument on the GPU: uploaded if it is a host array, checked if it is already there."""
    if isinstance(value, DeviceTensor):
        if value.dtype != np.dtype(dtype):
            raise TypeError(f"{name}: expected a {np.dtype(dtype)} device tensor, got {value.dtype}")
        return value
    return gpu().upload(np.ascontiguousarray(value, dtype=dtype))


def nothing(width: int = 0, ndim: int = 1) -> DeviceTensor:
    """An absent optional argument: a tensor with no rows ([0] or [0, width])."""
    shape = (0,) if ndim == 1 else (0, width)
    return gpu().empty(shape, np.float32)


def returned(out: DeviceTensor, like) -> Any:
    """The op's result where its first argument lives: on the GPU if that was a DeviceTensor."""
    return out if isinstance(like, DeviceTensor) else out.numpy()


def blocks_for(items: int, threads: int, limit: int = 65535) -> int:
    """Blocks of `threads` threads covering `items` work items, at most `limit` (kernels stride)."""
    return max(1, min(limit, -(-items // threads)))
