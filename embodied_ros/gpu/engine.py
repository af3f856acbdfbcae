"""The GPU engine of the device runtime: CuPy arrays on one GPU, cuBLAS products on the tensor cores,
the kernels of kernels/transformer.cu (compiled by NVRTC on first use), one CUDA stream, and CUDA
graphs captured on it. Its calls are those of `host.HostEngine`, the numpy reference (see there).

Everything a model does runs on the engine's stream inside `with engine.active():` (the GPU made
current in the calling thread, the stream made CuPy's current one); calls from several threads take
turns on one lock, so one engine serves every stage of a process. A product reads bf16 and
accumulates in float32 (CUBLAS_COMPUTE_32F), whatever it writes.

`graph(work)` runs `work()` once under stream capture and returns the CUDA graph: `replay()` then
launches every kernel and product of `work` again with the arguments they had, reading and writing
the same memory. Work to be captured must therefore read only buffers that stay allocated (a model's
static buffers), allocate nothing, and never wait for the host.
"""

from __future__ import annotations

import ctypes
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

import numpy as np

from embodied_ros.bundle.memory import BundleMemoryError
from embodied_ros.gpu.host import ACTIVATIONS, check_matmul
from embodied_ros.kernels.cuda.runtime import INSTALL_HINT, CudaUnavailable
from embodied_ros.share import share_path

CUDA_R_32F, CUDA_R_16BF = 0, 14
CUBLAS_OP_N, CUBLAS_OP_T = 0, 1
CUBLAS_COMPUTE_32F = 68
CUBLAS_GEMM_DEFAULT = -1
WORKSPACE_BYTES = 32 << 20  # cuBLAS's workspace, set explicitly so that captured products allocate nothing
WORKING_BYTES = 2 << 30  # activations, the solve's buffers and the captured graphs' pools of a full-size model
GIB = 1 << 30
THREADS = 256
MAX_BLOCKS = 65535
KERNELS = ("residual_norm", "rope_split", "softmax_rows", "glu", "bias_act", "axpy_cast")  # transformer.cu's entries


def _cupy():
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # ImportError, or CuPy's CUDARuntimeError when no driver or device answers
        raise CudaUnavailable(f"{INSTALL_HINT}; {type(error).__name__}: {error}") from error
    return cupy


def _library_path(name: str) -> str | None:
    """The path of a shared library this process has loaded (the one CuPy uses)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if f"/{name}" in path:
                return path
    return None


class Cublas:
    """The few cuBLAS calls the engine makes, called directly (CuPy's wrappers refuse to run while a
    stream is captured): one handle on the engine's stream, with a workspace of its own so that
    captured products allocate nothing. The library is the one CuPy loaded."""

    def __init__(self, stream_pointer: int, workspace_pointer: int, workspace_bytes: int) -> None:
        from cupy_backends.cuda.libs import cublas  # noqa: F401 - loads CuPy's libcublas into the process
        path = _library_path("libcublas.so")
        if path is None:
            raise CudaUnavailable("CuPy's cuBLAS library is not loaded in this process")
        lib = ctypes.CDLL(path)
        p, i, ll = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
        lib.cublasCreate_v2.argtypes = (ctypes.POINTER(p),)
        lib.cublasSetStream_v2.argtypes = (p, p)
        lib.cublasSetWorkspace_v2.argtypes = (p, p, ctypes.c_size_t)
        lib.cublasGemmEx.argtypes = (p, i, i, i, i, i, p, p, i, i, p, i, i, p, p, i, i, i, i)
        lib.cublasGemmStridedBatchedEx.argtypes = (p, i, i, i, i, i, p, p, i, i, ll, p, i, i, ll, p, p, i, i, ll, i,
                                                   i, i)
        self._lib = lib
        self.handle = p()
        self._check(lib.cublasCreate_v2(ctypes.byref(self.handle)), "cublasCreate")
        self._check(lib.cublasSetStream_v2(self.handle, stream_pointer), "cublasSetStream")
        self._check(lib.cublasSetWorkspace_v2(self.handle, workspace_pointer, workspace_bytes), "cublasSetWorkspace")

    @staticmethod
    def _check(status: int, call: str) -> None:
        if status != 0:
            raise RuntimeError(f"{call} failed with cuBLAS status {status}")

    def gemm(self, *args) -> None:
        self._check(self._lib.cublasGemmEx(self.handle, *args), "cublasGemmEx")

    def gemm_strided_batched(self, *args) -> None:
        self._check(self._lib.cublasGemmStridedBatchedEx(self.handle, *args), "cublasGemmStridedBatchedEx")


class CudaGraph:
    def __init__(self, engine: "CudaEngine", graph) -> None:
        self._engine, self._graph = engine, graph

    def replay(self) -> None:
        with self._engine.active():
            self._graph.launch(self._engine.stream)


class CudaEngine:
    """The device runtime's operations on GPU `ordinal`."""

    product_dtype = np.dtype(np.uint16)  # bf16 bits

    def __init__(self, ordinal: int = 0) -> None:
        cupy = _cupy()
        self.cupy = self.xp = cupy
        self.ordinal = ordinal
        self._lock = threading.RLock()
        with cupy.cuda.Device(ordinal):
            properties = cupy.cuda.runtime.getDeviceProperties(ordinal)
            self.name = properties["name"].decode() if isinstance(properties["name"], bytes) else properties["name"]
            self.compute_capability = (properties["major"], properties["minor"])
            self.stream = cupy.cuda.Stream(non_blocking=True)
            self._module = cupy.RawModule(code=share_path("kernels", "transformer.cu").read_text(),
                                          options=("--std=c++17",))
            self._kernels = {name: self._module.get_function(name) for name in KERNELS}
            self._workspace = cupy.empty(WORKSPACE_BYTES, np.uint8)
            self._cublas = Cublas(self.stream.ptr, self._workspace.data.ptr, WORKSPACE_BYTES)
        self._scalars = {}

    # ---- context and memory -------------------------------------------------------------------

    @contextmanager
    def active(self) -> Iterator[None]:
        with self._lock, self.cupy.cuda.Device(self.ordinal), self.stream:
            yield

    def empty(self, shape, dtype):
        return self.cupy.empty(shape, dtype)

    def zeros(self, shape, dtype):
        return self.cupy.zeros(shape, dtype)

    def upload(self, array, dtype=None):
        return self.cupy.asarray(np.ascontiguousarray(array, dtype=dtype))

    def bf16(self, array):
        """A float array (host or device, any float type) as bf16 bits on the GPU, converted there."""
        values = self.cupy.asarray(array)
        values = values.astype(np.float32) if values.dtype != np.float32 else values
        flat = values.reshape(-1, values.shape[-1]) if values.ndim > 1 else values.reshape(1, -1)
        out = self.cupy.empty(flat.shape, np.uint16)
        self.bias_act(flat, out)
        return out.reshape(values.shape)

    def download(self, array) -> np.ndarray:
        with self.active():
            return self.cupy.asnumpy(array, stream=self.stream, blocking=True)

    def write(self, target, values) -> None:
        """Host values into an existing array (a static buffer a graph reads), ordered on the stream."""
        target.set(np.ascontiguousarray(values, dtype=target.dtype), stream=self.stream)

    def graph(self, work: Callable[[], None]) -> CudaGraph:
        with self.active():
            self.stream.begin_capture()
            try:
                work()
            finally:
                graph = self.stream.end_capture()
            graph.upload(self.stream)
        return CudaGraph(self, graph)

    def reserve(self, nbytes: int, what: str) -> None:
        """Refuse, in one line, to load `nbytes` more than the GPU has free (with room for the activations
        and graphs, WORKING_BYTES), rather than fail an allocation halfway through."""
        with self.active():
            free, total = self.cupy.cuda.runtime.memGetInfo()
        free += self.cupy.get_default_memory_pool().free_bytes()
        if nbytes + WORKING_BYTES > free:
            raise BundleMemoryError(f"{what} need {nbytes / GIB:.1f} GiB of GPU memory (and about {WORKING_BYTES / GIB:.0f} "
                                    f"GiB to compute in); {self.name} has {free / GIB:.1f} of {total / GIB:.1f} GiB free: "
                                    "use a smaller model, or free the GPU")

    def private_pool(self):
        """A memory pool of its own (for a graph's allocations, which must keep their addresses)."""
        return self.cupy.cuda.MemoryPool()

    def allocations_from(self, pool):
        """Within the block, this thread's allocations come from `pool`."""
        return self.cupy.cuda.using_allocator(pool.malloc)

    def synchronize(self) -> None:
        self.stream.synchronize()

    # ---- products -----------------------------------------------------------------------------

    def _scalar(self, value: float) -> int:
        """The address of a float32 holding `value` for cuBLAS (host pointer mode), kept alive."""
        held = self._scalars.get(value)
        if held is None:
            held = self._scalars[value] = np.array([value], np.float32)
        return held.ctypes.data

    def matmul(self, a, b, out, alpha: float = 1.0, beta: float = 0.0, transpose_b: bool = True) -> None:
        """out = alpha * a @ b^T (or a @ b) + beta * out, as cuBLAS's column-major out^T = b^T a^T."""
        check_matmul(a, b, out, transpose_b, self.product_dtype)
        m, k = a.shape[-2:]
        n = out.shape[-1]
        lda, ldb, ldc = (x.strides[-2] // x.itemsize for x in (a, b, out))
        in_type = CUDA_R_32F if a.dtype == np.float32 else CUDA_R_16BF
        out_type = CUDA_R_32F if out.dtype == np.float32 else CUDA_R_16BF
        op_b = CUBLAS_OP_T if transpose_b else CUBLAS_OP_N
        args = (self._scalar(alpha), b.data.ptr, in_type, max(ldb, 1))
        if a.ndim == 2:
            self._cublas.gemm(op_b, CUBLAS_OP_N, n, m, k, *args, a.data.ptr, in_type, max(lda, 1), self._scalar(beta),
                              out.data.ptr, out_type, max(ldc, 1), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)
            return
        stride_a, stride_b, stride_c = (x.strides[0] // x.itemsize for x in (a, b, out))
        self._cublas.gemm_strided_batched(
            op_b, CUBLAS_OP_N, n, m, k, *args, stride_b, a.data.ptr, in_type, max(lda, 1), stride_a, self._scalar(beta),
            out.data.ptr, out_type, max(ldc, 1), stride_c, a.shape[0], CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)

    # ---- kernels ------------------------------------------------------------------------------

    @staticmethod
    def _pointer(array):
        return np.uint64(0) if array is None else array

    @staticmethod
    def _row_stride(array) -> np.int32:
        return np.int32(array.strides[0] // array.itemsize)

    def _grid_stride(self, name: str, items: int, args: tuple) -> None:
        if items >= 2 ** 31:
            raise ValueError(f"{name}: {items} elements; the kernels index below 2^31")
        blocks = max(1, min(MAX_BLOCKS, -(-items // THREADS)))
        self._kernels[name]((blocks,), (THREADS,), args)

    def residual_norm(self, x, h, mul, eps: float, y=None, bias=None, gate=None, add=None,
                      center: bool = False) -> None:
        rows, width = x.shape
        threads = 256 if width >= 1024 else 128
        p = self._pointer
        self._kernels["residual_norm"](
            (rows,), (threads,),
            (x, self._row_stride(x), p(y), self._row_stride(y) if y is not None else np.int32(0), p(bias), p(gate),
             mul, p(add), h, self._row_stride(h), np.int32(width), np.float32(eps), np.int32(center),
             np.int32(h.dtype == np.float32)),
            shared_mem=(width + 32) * 4)

    def rope_split(self, src, q, k, v, heads: tuple[int, int, int], head_dim: int, cos=None, sin=None,
                   rotate_k: bool = True) -> None:
        rows = src.shape[0]
        heads_q, heads_k, heads_v = heads
        if (heads_q or (heads_k and rotate_k)) and cos is None:
            raise ValueError("rope_split: rotating queries or keys needs cos and sin tables")
        outputs = [(q if heads_q else None), (k if heads_k else None), (v if heads_v else None)]
        strides = [self._row_stride(o) if o is not None else np.int32(0) for o in outputs]
        p = self._pointer
        self._grid_stride("rope_split", rows * (heads_q + heads_k + heads_v) * (head_dim // 2), (
            src, self._row_stride(src), np.int32(rows), np.int32(heads_q), np.int32(heads_k), np.int32(heads_v),
            np.int32(head_dim), p(cos), p(sin), p(outputs[0]), strides[0], p(outputs[1]), strides[1],
            p(outputs[2]), strides[2], np.int32(rotate_k)))

    def softmax(self, scores, p, scale: float, bias=None) -> None:
        rows, cols = scores.shape
        warps_per_block = THREADS // 32
        self._kernels["softmax_rows"](
            (-(-rows // warps_per_block),), (THREADS,),
            (scores, self._row_stride(scores), np.int32(rows), np.int32(cols), np.float32(scale),
             self._pointer(bias), np.int32(1 if bias is None else bias.shape[0]),
             np.int32(0) if bias is None else self._row_stride(bias), p, self._row_stride(p)))

    def glu(self, gate_up, out, act: str) -> None:
        rows, width = out.shape
        self._grid_stride("glu", rows * width, (gate_up, self._row_stride(gate_up), out, self._row_stride(out),
                                                np.int32(rows), np.int32(width), np.int32(ACTIVATIONS.index(act))))

    def bias_act(self, y, out, bias=None, act: str = "none") -> None:
        rows, width = out.shape
        self._grid_stride("bias_act", rows * width, (y, self._row_stride(y), self._pointer(bias), out,
                                                     self._row_stride(out), np.int32(rows), np.int32(width),
                                                     np.int32(ACTIVATIONS.index(act)), np.int32(out.dtype == np.float32)))

    def axpy_cast(self, x, out, bias, alpha: float) -> None:
        rows, width = x.shape
        self._grid_stride("axpy_cast", rows * width, (
            x, self._row_stride(x), self._pointer(bias), np.float32(alpha), self._pointer(out),
            np.int32(0) if out is None else self._row_stride(out), np.int32(rows), np.int32(width)))
