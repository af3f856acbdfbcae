"""The CUDA calls of the op-level cuda backend, through CuPy (binary wheels: cupy-cuda12x, cupy-cuda13x).

`cuda.launch.GpuDevice` is the only user. Imported on the first GPU call; importing it without CuPy or
a driver raises CudaUnavailable. Launches go to the legacy default stream, which orders them with the
synchronous copies. test/cuda_fake_driver.py stands in for this module on machines without a GPU.
"""

from __future__ import annotations

import ctypes

import numpy as np

from embodied_ros.kernels.cuda.runtime import INSTALL_HINT, CudaUnavailable

try:
    import cupy
    from cupy.cuda import driver as _driver
    from cupy.cuda import runtime as _runtime
except ImportError as error:  # CuPy missing, or its CUDA libraries (or the driver's libcuda) missing
    raise CudaUnavailable(f"{INSTALL_HINT}; importing CuPy failed: {error}") from error

Error = (_driver.CUDADriverError, _runtime.CUDARuntimeError)
_HOST_TO_DEVICE, _DEVICE_TO_HOST = 1, 2
# cuLaunchKernel's `extra`: the parameters as one buffer
_BUFFER_POINTER, _BUFFER_SIZE, _END = 1, 2, 0


def device_count() -> int:
    try:
        return _runtime.getDeviceCount()
    except Error as error:
        raise CudaUnavailable(f"{INSTALL_HINT}; the CUDA driver did not start: {error}") from error


def open_device(ordinal: int) -> tuple[str, tuple[int, int], int]:
    """(name, compute capability, driver version) of GPU `ordinal`, made current in this thread."""
    make_current(ordinal)
    properties = _runtime.getDeviceProperties(ordinal)
    name = properties["name"]
    return (name.decode() if isinstance(name, bytes) else name, (properties["major"], properties["minor"]),
            _runtime.driverGetVersion())


def make_current(ordinal: int) -> None:
    """The GPU's primary context current in the calling thread (what the driver calls need)."""
    _runtime.setDevice(ordinal)
    _runtime.free(0)  # initializes the primary context if this is the process's first call


def allocate(nbytes: int):
    """Device memory of CuPy's pool: (address, owner); it returns to the pool when the owner is dropped."""
    owner = cupy.cuda.alloc(nbytes)
    return owner.ptr, owner


def copy_to_device(pointer: int, array: np.ndarray) -> None:
    _runtime.memcpy(pointer, array.ctypes.data, array.nbytes, _HOST_TO_DEVICE)


def copy_to_host(array: np.ndarray, pointer: int) -> None:
    _runtime.memcpy(array.ctypes.data, pointer, array.nbytes, _DEVICE_TO_HOST)


def load_module(image: bytes):
    """A module from PTX (NUL-terminated) or a fatbin/cubin; the driver JIT-compiles PTX for this GPU."""
    return _driver.moduleLoadData(image)


def get_function(module, name: str):
    return _driver.moduleGetFunction(module, name)


def launch(function, grid: tuple[int, int, int], block: tuple[int, int, int], buffer: bytes,
           shared_bytes: int = 0) -> None:
    """One launch whose parameters are `buffer`, laid out as the kernel's entry declares them."""
    parameters = ctypes.create_string_buffer(buffer, len(buffer))
    size = ctypes.c_size_t(len(buffer))
    extra = (ctypes.c_void_p * 5)(_BUFFER_POINTER, ctypes.addressof(parameters), _BUFFER_SIZE,
                                  ctypes.addressof(size), _END)
    _driver.launchKernel(function, *grid, *block, shared_bytes, 0, 0, ctypes.addressof(extra))


def synchronize() -> None:
    _runtime.deviceSynchronize()


class Event:
    """A CUDA event on the default stream, for timing kernels."""

    def __init__(self) -> None:
        self._event = cupy.cuda.Event()

    def record(self) -> "Event":
        self._event.record(cupy.cuda.Stream.null)
        return self

    def synchronize(self) -> "Event":
        self._event.synchronize()
        return self

    def time_till(self, other: "Event") -> float:
        """Milliseconds from this event to `other`."""
        return cupy.cuda.get_elapsed_time(self._event, other._event)
