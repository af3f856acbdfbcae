"""Tensor-core matrix products for the cuda backend's `linear` (kernels/gemm.cu, CUDA C).

Precision is a choice, made explicitly:
  "float32" (default)  every product runs in float32 (`cuda.linear.matmul_nt`): the exact path.
  "bf16"               products of at least TENSOR_CORE_MIN_ROWS rows run on the tensor cores: x and W
                       rounded to bf16, float32 accumulation. Per output, |y - y_float32| <= 2^-8 *
                       (|x| @ |W|^T); on real activations about 1e-3..1e-2 of a row's scale.
The process default comes from $EMBODIED_ROS_CUDA_MATMUL ("float32" or "bf16"); a call site picks
its own with `with use_matmul_precision("bf16"): ...` (this thread, this block only). Fewer rows than
TENSOR_CORE_MIN_ROWS stay float32 whatever the setting: below one full 128-row tile the product is
bound by reading W, and the float32 kernel's smaller tiles spread that over more multiprocessors.

Building: nvcc compiles gemm.cu on first use, for the GPU at hand (its machine code, plus PTX), into
the cache directory of the PTX (`$EMBODIED_ROS_CUDA_CACHE`), keyed by a hash of the sources, the
flags and nvcc's version; `cuda.launch.GpuDevice` loads the fatbin. Where that cannot happen (no
nvcc, a GPU older than sm_80, a driver that refuses the module), "bf16" products log one warning
saying why and run in float32: slower, never less exact. `require_tensor_cores` raises instead
(benchmarks/gpu_check.py uses it).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import threading
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from embodied_ros.kernels.cuda.abi import Param, pack_params
from embodied_ros.kernels.cuda.compiler import cache_dir
from embodied_ros.share import share_path

PRECISION_ENV = "EMBODIED_ROS_CUDA_MATMUL"
PRECISIONS = ("float32", "bf16")
TENSOR_CORE_MIN_ROWS = 128
MIN_COMPUTE_CAPABILITY = (8, 0)  # mma.sync with bf16, ldmatrix, cp.async
# What the tests compile for: A100, Jetson Orin, Ada, Hopper.
CHECKED_ARCHITECTURES = ((8, 0), (8, 7), (8, 9), (9, 0))
# Tile and block of gemm.cu (kernels/gemm_tiling.cuh; a test checks that they agree).
BLOCK_M = 128
BLOCK_N = 128
THREADS = 256
MAX_GRID_Y = 65535
NVCC_FLAGS = ("-O3", "-std=c++17")

_POINTER = Param("int", 8)
_INT = Param("int", 4)
_log = logging.getLogger(__name__)


class TensorCoresUnavailable(RuntimeError):
    """The tensor-core kernels cannot be built or loaded here; the message says why."""


# ---- precision setting --------------------------------------------------------------------------

_scoped = threading.local()


def _checked(precision: str, where: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"{where}: matmul precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    return precision


def matmul_precision() -> str:
    """The precision of large cuda products in this thread: the innermost `use_matmul_precision`, else
    $EMBODIED_ROS_CUDA_MATMUL, else "float32"."""
    scoped = getattr(_scoped, "precision", None)
    if scoped is not None:
        return scoped
    return _checked(os.environ.get(PRECISION_ENV, "float32"), f"${PRECISION_ENV}")


@contextmanager
def use_matmul_precision(precision: str) -> Iterator[None]:
    """Within the block, this thread's cuda `linear` products use `precision` ("float32" or "bf16")."""
    previous = getattr(_scoped, "precision", None)
    _scoped.precision = _checked(precision, "use_matmul_precision")
    try:
        yield
    finally:
        _scoped.precision = previous


# ---- kernels and launches -----------------------------------------------------------------------

@dataclass(frozen=True)
class NativeKernel:
    """One entry of a CUDA C source in kernels/: its C parameters (pointers and ints) and block size."""

    entry: str
    source: str
    params: tuple[Param, ...]
    threads: int

    @property
    def name(self) -> str:
        return f"{self.source}:{self.entry}"

    @property
    def buffer_size(self) -> int:
        return len(pack_params(self.params, [0] * len(self.params)))

    def image(self, cc: tuple[int, int]) -> bytes:
        """The module for compute capability cc (a fatbin), built by nvcc on first use."""
        return build(self.source, cc).read_bytes()

    def pack(self, values: Sequence[int | float]) -> bytes:
        return pack_params(self.params, values)


# gemm_bf16_{f32w,bf16w}(const float* x, const W* w, const float* bias, float* y, int M, int N, int K)
_GEMM_PARAMS = (_POINTER, _POINTER, _POINTER, _POINTER, _INT, _INT, _INT)
GEMM_F32_WEIGHT = NativeKernel("gemm_bf16_f32w", "gemm.cu", _GEMM_PARAMS, THREADS)
GEMM_BF16_WEIGHT = NativeKernel("gemm_bf16_bf16w", "gemm.cu", _GEMM_PARAMS, THREADS)
GEMM_KERNELS = (GEMM_F32_WEIGHT, GEMM_BF16_WEIGHT)


@dataclass(frozen=True)
class LaunchPlan:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int  # dynamic shared memory; the kernel's 40 KB are static


def launch_plan(m: int, n: int, k: int) -> LaunchPlan:
    """Grid and block of gemm.cu for y[m, n] = x[m, k] @ W[n, k]^T: one block per 128 x 128 tile of y,
    blockIdx.x along m (the blocks that share a slice of W run together)."""
    if min(m, n) < 1 or k < 0 or max(m, n, k) >= 2 ** 31:
        raise ValueError(f"tensor-core product of [{m}, {k}] by [{n}, {k}]^T: sizes must be at least 1 "
                         "(k at least 0) and below 2^31")
    grid = (-(-m // BLOCK_M), -(-n // BLOCK_N), 1)
    if grid[1] > MAX_GRID_Y:
        raise ValueError(f"tensor-core product with {n} output features needs {grid[1]} blocks along y; "
                         f"the GPU allows {MAX_GRID_Y}")
    return LaunchPlan(grid, (THREADS, 1, 1), 0)


def multiply(device, x, w, bias, y) -> None:
    """y = x @ w^T (+ bias) on the tensor cores. Device tensors: x [M, K] float32; w [N, K] float32, or
    its bf16 copy as uint8 [N, 2K] (a bf16 QuantTensor's blocks); bias [N] float32, empty or None for
    none; y [M, N] float32."""
    (m, k), n = x.shape, w.shape[0]
    if w.dtype == np.float32 and tuple(w.shape) == (n, k):
        kernel = GEMM_F32_WEIGHT
    elif w.dtype == np.uint8 and tuple(w.shape) == (n, 2 * k):
        kernel = GEMM_BF16_WEIGHT
    else:
        raise ValueError(f"tensor-core product: weight {w.dtype} {tuple(w.shape)} does not fit x of shape "
                         f"{tuple(x.shape)} (expected float32 ({n}, {k}) or bf16 bytes, uint8 ({n}, {2 * k}))")
    if x.dtype != np.float32 or tuple(y.shape) != (m, n) or y.dtype != np.float32:
        raise ValueError(f"tensor-core product: x {x.dtype} {tuple(x.shape)} and y {y.dtype} {tuple(y.shape)} "
                         f"must be float32 [{m}, {k}] and [{m}, {n}]")
    has_bias = bias is not None and bias.size > 0
    if has_bias and (tuple(bias.shape) != (n,) or bias.dtype != np.float32):
        raise ValueError(f"tensor-core product: bias {bias.dtype} {tuple(bias.shape)}; expected float32 ({n},)")
    plan = launch_plan(m, n, k)
    buffer = kernel.pack([x.pointer, w.pointer, bias.pointer if has_bias else 0, y.pointer, m, n, k])
    device.launch_native(kernel, plan.grid, plan.block, buffer, plan.shared_bytes)


# ---- availability -------------------------------------------------------------------------------

_ready: "weakref.WeakKeyDictionary[object, bool]" = weakref.WeakKeyDictionary()  # device -> usable
_ready_lock = threading.Lock()


def require_tensor_cores(device) -> None:
    """Build (on first use) and load the tensor-core kernels on `device`, or raise
    TensorCoresUnavailable saying why."""
    cc = tuple(device.compute_capability)
    if cc < MIN_COMPUTE_CAPABILITY:
        raise TensorCoresUnavailable(f"the GPU is sm_{cc[0]}{cc[1]}; bf16 tensor-core products need sm_80 or newer")
    try:
        device.load_native(list(GEMM_KERNELS))
    except RuntimeError as error:  # the driver refused the module (TensorCoresUnavailable passes as it is)
        if isinstance(error, TensorCoresUnavailable):
            raise
        raise TensorCoresUnavailable(str(error)) from error


def tensor_cores(device) -> bool:
    """Whether bf16 products can run on `device`'s tensor cores; the first call per device builds and
    loads the kernels, and when that fails logs one warning with the reason."""
    with _ready_lock:
        if device not in _ready:
            try:
                require_tensor_cores(device)
                _ready[device] = True
            except TensorCoresUnavailable as error:
                _log.warning("bf16 matrix products run in float32 instead: %s", error)
                _ready[device] = False
        return _ready[device]


# ---- building -----------------------------------------------------------------------------------

def find_nvcc() -> str | None:
    """nvcc from PATH, $CUDA_HOME/bin or /usr/local/cuda/bin."""
    homes = (os.environ.get("CUDA_HOME"), "/usr/local/cuda")
    candidates = [os.path.join(home, "bin", "nvcc") for home in homes if home]
    return shutil.which("nvcc") or next((c for c in candidates if os.access(c, os.X_OK)), None)


def gencode_flags(architectures: Sequence[tuple[int, int]], ptx: bool = True) -> list[str]:
    """Machine code for each architecture, plus PTX of the newest (JIT-compiled on newer GPUs)."""
    flags = [f"-gencode=arch=compute_{a}{b},code=sm_{a}{b}" for a, b in architectures]
    if ptx:
        a, b = max(architectures)
        flags.append(f"-gencode=arch=compute_{a}{b},code=compute_{a}{b}")
    return flags


def nvcc_command(nvcc: str, source: Path, output: Path, kind: str, flags: Sequence[str]) -> list[str]:
    """nvcc building `source` into `output`; kind: "fatbin", "cubin" or "ptx"."""
    return [nvcc, f"-{kind}", *NVCC_FLAGS, f"-I{source.parent}", *flags, str(source), "-o", str(output)]


def build(source_name: str, cc: tuple[int, int]) -> Path:
    """The fatbin of kernels/`source_name` for compute capability cc, from the cache or built now."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise TensorCoresUnavailable("nvcc was not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin); install the "
                                     "CUDA toolkit to build the tensor-core kernels")
    try:
        source = share_path("kernels", source_name)
    except FileNotFoundError as error:
        raise TensorCoresUnavailable(f"the CUDA C sources are missing: {error}") from error
    flags = gencode_flags([tuple(cc)])
    path = cache_dir() / f"{source.stem}.sm_{cc[0]}{cc[1]}.{_fingerprint(nvcc, source, flags)}.fatbin"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    result = subprocess.run(nvcc_command(nvcc, source, partial, "fatbin", flags), capture_output=True, text=True)
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        raise TensorCoresUnavailable(f"nvcc could not build {source} for sm_{cc[0]}{cc[1]}:\n{result.stderr[-2000:]}")
    partial.replace(path)
    return path


def _fingerprint(nvcc: str, source: Path, flags: Sequence[str]) -> str:
    """Hash of what the module depends on: the CUDA C sources, nvcc's version and the flags."""
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    digest = hashlib.sha256(version.encode())
    digest.update(" ".join([*NVCC_FLAGS, *flags]).encode())
    for path in sorted(source.parent.glob("*.cu*")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:20]
