"""PTX of every cuda kernel, compiled once per test session into a temporary cache directory.

The PTX tests read it, and the simulator test hands the directory to its subprocess (numba's CUDA
compiler is off while the simulator is on, so the launcher there finds each kernel's PTX in the cache).
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
from pathlib import Path

from embodied_ros.kernels import registry
from embodied_ros.kernels.cuda.compiler import CACHE_ENV, CHECKED_ARCHITECTURES, CudaKernel, all_kernels


@functools.lru_cache(maxsize=1)
def compiled_cache() -> Path:
    """A fresh cache directory holding the PTX of every kernel for every checked architecture."""
    directory = Path(tempfile.mkdtemp(prefix="embodied_ros_ptx_"))
    atexit.register(shutil.rmtree, directory, True)
    previous = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(directory)
    try:
        registry.ops()  # imports every kernel module, which declares the kernels
        for kernel in all_kernels():
            for cc in CHECKED_ARCHITECTURES:
                kernel._ptx.pop(cc, None)  # compile here, not from another cache or memory
                kernel.ptx(cc)
    finally:
        if previous is None:
            del os.environ[CACHE_ENV]
        else:
            os.environ[CACHE_ENV] = previous
    return directory


def kernels() -> list[CudaKernel]:
    registry.ops()
    return all_kernels()
