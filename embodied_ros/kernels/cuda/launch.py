"""The only code of the cuda backend that talks to a GPU, through `cuda.driver` (CuPy's driver calls).

Imported on the first GPU call (`cuda.runtime.gpu()`), never by the registry. A `GpuDevice` holds one
GPU, its memory (CuPy's pool), and the kernels loaded so far: each kernel's PTX for this GPU's compute
capability (`CudaKernel.ptx`) is loaded as a module (the driver JIT-compiles it) and launched with a
parameter buffer in numba's kernel ABI (`cuda/abi.py`). Kernels written in CUDA C
(`cuda.gemm.NativeKernel`) come as a fatbin that nvcc built for this GPU, loaded the same way, and take
a buffer of plain C parameters. Launches go to the default stream, so copies back to the host wait for
them. The GPU is made current per thread before each call, so ops may run in any thread (e.g.
inference beside the ROS executor).
"""

from __future__ import annotations

import re
import threading

import numpy as np

from embodied_ros.kernels.cuda import driver
from embodied_ros.kernels.cuda.abi import entry_params, pack_arguments
from embodied_ros.kernels.cuda.compiler import CudaKernel
from embodied_ros.kernels.cuda.runtime import INSTALL_HINT, CudaUnavailable, DeviceTensor


def _dim3(dims) -> tuple[int, int, int]:
    dims = tuple(int(n) for n in (dims if isinstance(dims, tuple) else (dims,)))
    return dims + (1,) * (3 - len(dims))


class GpuDevice:
    """One GPU: memory, transfers, kernel loading and launches."""

    def __init__(self, ordinal: int = 0) -> None:
        count = driver.device_count()
        if not 0 <= ordinal < count:
            raise CudaUnavailable(f"{INSTALL_HINT}; GPU {ordinal} requested, {count} present")
        self.ordinal = ordinal
        self._threads = threading.local()
        self.name, self.compute_capability, self.driver_version = driver.open_device(ordinal)  # e.g. 12040: CUDA 12.4
        self._threads.current = True
        self._functions: dict[int, object] = {}
        self._native_modules: dict[str, object] = {}  # CUDA C source file -> loaded fatbin

    def _make_current(self) -> None:
        if not getattr(self._threads, "current", False):
            driver.make_current(self.ordinal)
            self._threads.current = True

    # ---- memory ---------------------------------------------------------------------------------

    def empty(self, shape, dtype) -> DeviceTensor:
        self._make_current()
        dtype = np.dtype(dtype)
        shape = tuple(int(n) for n in shape)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if nbytes == 0:  # nothing to point at; kernels never read it
            return DeviceTensor(shape, dtype, 0, None, self)
        pointer, owner = driver.allocate(nbytes)
        return DeviceTensor(shape, dtype, pointer, owner, self)

    def upload(self, array: np.ndarray) -> DeviceTensor:
        array = np.ascontiguousarray(array)
        tensor = self.empty(array.shape, array.dtype)
        if tensor.nbytes:
            driver.copy_to_device(tensor.pointer, array)
        return tensor

    def download(self, tensor: DeviceTensor) -> np.ndarray:
        self._make_current()
        out = np.empty(tensor.shape, tensor.dtype)
        if tensor.nbytes:
            driver.copy_to_host(out, tensor.pointer)
        return out

    # ---- kernels --------------------------------------------------------------------------------

    def launch(self, kernel: CudaKernel, grid, block, args, shared_bytes: int = 0) -> None:
        """Run `kernel` on a (grid, block) launch; array arguments must be DeviceTensors."""
        if int(np.prod(_dim3(block))) > kernel.threads:
            raise ValueError(f"{kernel.name} is built for blocks of at most {kernel.threads} threads, got {block}")
        self._make_current()
        driver.launch(self._function(kernel), _dim3(grid), _dim3(block), pack_arguments(kernel.arg_types, args),
                      shared_bytes)

    def load(self, kernels: list[CudaKernel]) -> None:
        """Compile (or read from the PTX cache) and load kernels now, so that no later call compiles."""
        self._make_current()
        for kernel in kernels:
            self._function(kernel)

    def _function(self, kernel: CudaKernel):
        function = self._functions.get(id(kernel))
        if function is None:
            ptx = kernel.ptx(self.compute_capability)
            name, _ = entry_params(ptx)
            try:
                module = driver.load_module(ptx.encode() + b"\0")  # loaded for the life of the process
            except driver.Error as error:
                raise RuntimeError(self._load_failure(kernel, ptx, error)) from error
            function = driver.get_function(module, name)
            self._functions[id(kernel)] = function
        return function

    def launch_native(self, kernel, grid, block, buffer: bytes, shared_bytes: int = 0) -> None:
        """Run an entry of a CUDA C module (`cuda.gemm.NativeKernel`); buffer: its packed parameters."""
        if int(np.prod(_dim3(block))) > kernel.threads:
            raise ValueError(f"{kernel.name} is built for blocks of at most {kernel.threads} threads, got {block}")
        self._make_current()
        driver.launch(self._native_function(kernel), _dim3(grid), _dim3(block), buffer, shared_bytes)

    def load_native(self, kernels: list) -> None:
        """Build (nvcc, on first use) and load CUDA C kernels now."""
        self._make_current()
        for kernel in kernels:
            self._native_function(kernel)

    def _native_function(self, kernel):
        function = self._functions.get(id(kernel))
        if function is None:
            module = self._native_modules.get(kernel.source)
            if module is None:
                image = kernel.image(self.compute_capability)
                try:
                    module = driver.load_module(image)
                except driver.Error as error:
                    major, minor = divmod(self.driver_version // 10, 100)
                    raise RuntimeError(f"the CUDA driver (CUDA {major}.{minor}) could not load {kernel.source} as "
                                       f"built for sm_{self.compute_capability[0]}{self.compute_capability[1]}: "
                                       f"{error}") from error
                self._native_modules[kernel.source] = module
            function = driver.get_function(module, kernel.entry)
            self._functions[id(kernel)] = function
        return function

    def _load_failure(self, kernel: CudaKernel, ptx: str, error: Exception) -> str:
        found = re.search(r"^\.version\s+(\S+)", ptx, re.MULTILINE)
        version = found.group(1) if found else "unknown"
        major, minor = divmod(self.driver_version // 10, 100)
        return (f"the CUDA driver (CUDA {major}.{minor}) could not load kernel {kernel.name}, PTX ISA {version} "
                f"for sm_{self.compute_capability[0]}{self.compute_capability[1]}: {error}. PTX newer than the "
                "driver needs a CUDA toolkit no newer than the driver for numba to compile with (set "
                "CUDA_HOME), then delete the PTX cache (docs/cuda.md)")

    def synchronize(self) -> None:
        self._make_current()
        driver.synchronize()

    def event(self):
        """A CUDA event (record(), synchronize(), time_till(other) in ms) for timing kernels."""
        self._make_current()
        return driver.Event()
