"""How the cuda backend's kernels are defined and compiled.

A GPU kernel is written once, in Python for numba.cuda, and declared with `@cuda_kernel(signature)`:
the signature fixes every argument's type (float32 C-contiguous arrays of a given rank, scalars), so
each kernel has exactly one compiled form per GPU architecture. Nothing is compiled at import:
`CudaKernel.ptx(cc)` runs numba's `compile_ptx` for compute capability `cc` on first use and keeps
the PTX in memory and in a disk cache (`cache_dir()`), so a robot compiles each kernel once, ever.
The PTX is loaded and launched through CuPy's driver calls (`cuda/launch.py`); numba's own driver is
never used.

In numba's CUDA simulator (`NUMBA_ENABLE_CUDASIM=1`, set before numba.cuda is imported) the same
Python functions run on the CPU, which is how the kernels are tested on machines without a GPU.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import numba
import numpy as np

try:  # numba.cuda imports without a GPU or driver; the guard keeps kernel modules importable regardless
    from numba import cuda
except ImportError:  # pragma: no cover - numba built without its CUDA target
    cuda = None

if not hasattr(np, "row_stack"):  # numpy >= 2.5 dropped it; numba-cuda releases before that overload it when compiling
    np.row_stack = np.vstack

CACHE_ENV = "EMBODIED_ROS_CUDA_CACHE"
# Architectures the kernels are checked for: Jetson Orin (sm_87) and Hopper (sm_90); PTX for a lower
# architecture is JIT-compiled by the driver for newer GPUs (sm_80, sm_89 load the same way).
CHECKED_ARCHITECTURES = ((8, 7), (9, 0))

_KERNELS: list["CudaKernel"] = []
_COMPILE_LOCK = threading.Lock()


def cuda_simulator_enabled() -> bool:
    return bool(numba.config.ENABLE_CUDASIM)


def device_function(fn: Callable) -> Callable:
    """A helper callable from kernels (numba.cuda device function)."""
    if cuda is None:  # pragma: no cover - see the import guard
        return fn
    return cuda.jit(device=True)(fn)


@dataclass(eq=False)
class CudaKernel:
    """A numba.cuda kernel with one fixed signature; compiled to PTX per architecture on demand.

    threads: the largest block it is launched with (the launcher refuses more; tests check that the
    compiled kernel's registers fit that many threads on one multiprocessor).
    """

    fn: Callable
    signature: str
    threads: int
    _ptx: dict[tuple[int, int], str] = field(default_factory=dict, repr=False)
    _simulated: Callable | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return f"{self.fn.__module__}.{self.fn.__name__}"

    @property
    def arg_types(self) -> tuple:
        """numba types of the arguments, in order."""
        args, _ = numba.core.sigutils.normalize_signature(self.signature)
        return tuple(args)

    @property
    def arg_names(self) -> tuple[str, ...]:
        return tuple(inspect.signature(self.fn).parameters)

    def ptx(self, cc: tuple[int, int]) -> str:
        """PTX of this kernel for compute capability cc, from memory, the disk cache, or numba."""
        cc = (int(cc[0]), int(cc[1]))
        if cc not in self._ptx:
            path = _cache_path(self, cc)
            if path.is_file():
                self._ptx[cc] = path.read_text()
            else:
                self._ptx[cc] = self._compile(cc)
                _write_atomically(path, self._ptx[cc])
        return self._ptx[cc]

    def _compile(self, cc: tuple[int, int]) -> str:
        if cuda is None or cuda_simulator_enabled():
            raise RuntimeError(f"cannot compile CUDA kernel {self.name} for sm_{cc[0]}{cc[1]}: numba's CUDA "
                               "compiler is unavailable (numba without its CUDA target, or the CUDA simulator "
                               f"is on) and the PTX is not in the cache {cache_dir()}")
        with _COMPILE_LOCK, _device_functions_compiled_for(cc):
            ptx, _ = cuda.compile_ptx(self.fn, self.signature, cc=cc)
        return ptx

    def simulated(self) -> Callable:
        """The kernel as numba.cuda.jit gives it; in the simulator, launch it with kernel[grid, block](...)."""
        if self._simulated is None:
            self._simulated = cuda.jit(self.fn)
        return self._simulated


def cuda_kernel(signature: str, threads: int) -> Callable[[Callable], CudaKernel]:
    """Declare a numba.cuda kernel with a fixed numba signature, e.g. "void(float32[:, ::1], float32)",
    launched with blocks of at most `threads` threads."""

    def declare(fn: Callable) -> CudaKernel:
        kernel = CudaKernel(fn, signature, threads)
        if len(kernel.arg_types) != len(kernel.arg_names):
            raise TypeError(f"{kernel.name}: signature {signature!r} does not match its "
                            f"{len(kernel.arg_names)} parameters")
        _KERNELS.append(kernel)
        return kernel

    return declare


@contextmanager
def _device_functions_compiled_for(cc: tuple[int, int]):
    """numba compiles the device functions a kernel calls for "the current device", which it asks its
    own driver for: there is none without a GPU, and with one it would open a context of its own.
    The architecture is known here, so answer with it while compiling."""
    from numba.cuda import dispatcher
    original = dispatcher.get_current_device
    dispatcher.get_current_device = lambda: SimpleNamespace(compute_capability=cc)
    try:
        yield
    finally:
        dispatcher.get_current_device = original


def all_kernels() -> list[CudaKernel]:
    """Every declared CUDA kernel (after the kernel modules are imported, e.g. by `registry.ops()`)."""
    return list(_KERNELS)


# ---- disk cache ---------------------------------------------------------------------------------

def cache_dir() -> Path:
    """Where compiled PTX is kept: $EMBODIED_ROS_CUDA_CACHE, else ~/.cache/embodied_ros/cuda."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "embodied_ros" / "cuda"


def _backend_fingerprint() -> str:
    """Hash of what a kernel's PTX depends on besides its architecture: the cuda backend's source files
    (kernels and the device functions they call) and numba's version. The CUDA toolkit is not part of
    it (numba's simulator cannot name it): after changing the toolkit, delete `cache_dir()`."""
    digest = hashlib.sha256(numba.__version__.encode())
    package = Path(__file__).resolve().parent
    for path in sorted(package.glob("cuda_*.py")) + sorted(package.glob("_cuda_*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:20]


_fingerprint: str | None = None


def _cache_path(kernel: CudaKernel, cc: tuple[int, int]) -> Path:
    global _fingerprint
    if _fingerprint is None:
        _fingerprint = _backend_fingerprint()
    return cache_dir() / _fingerprint / f"{kernel.name}.sm_{cc[0]}{cc[1]}.ptx"


def _write_atomically(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(text)
        partial.replace(path)
    except OSError:  # a read-only home directory only costs recompilation
        pass
