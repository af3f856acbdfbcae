"""The BLAS library's threads, chosen per product: up to the process's limit where a product is
large enough to split, one below that.

OpenBLAS splits every product above 2^18 multiply-adds over all its threads, and its worker then
spins on a core until the next job comes or about 0.1 s pass. On two cores the small products of
LingBot-VA's small world stage (16 x 128 x 256, about 10 us each) lost 10% of the stage in the graph
to that spinning, while a released-size SmolVLA's vision tower (products of 10^8-10^9) gained 30%
from the second thread (docs/graph.md, "BLAS threads"). `split_product` is called before each
product the kernels hand to BLAS; `limit_threads` sets the limit (the graph's compute.blas_threads).

Products of many rows (`product`: a vision tower's) and attention's heads are split by `run_split`
instead: into shares that the calling thread and helper threads take as they come free
(kernels/cpu/shares.py), every product in a share on the thread that runs it, so no BLAS worker is
left spinning. A worker spinning after attention took a core from the numba
kernel that came next: on a 2-core AMD EPYC (Zen 3) a 3072 x 768 -> 768 int16 product right after
SmolVLM's vision attention (3 cameras) took 48-51 ms instead of 30-31; the attention itself took
129-147 ms on OpenBLAS's two threads against 108-117 ms as two single-threaded shares, whose
softmax passes then run on both cores too. A SigLIP layer of released-size SmolVLA (3 cameras of
1024 tokens, float32 weights) took 361-368 ms with its products and attention as shares against
377-436 ms on OpenBLAS's threads (alternating processes; BENCHMARKS.md blas_shares_amd_zen3).
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from embodied_ros.kernels.cpu.shares import share_count

SPLIT_MIN_MACS = 1 << 24  # about 0.4 ms of one core's float32 product
# Products of at least this many rows split their columns into shares (`product`); fewer rows stay on
# BLAS's threads, whose split is better there: 241 x 960 -> 2560 took 14.9 ms as two shares against
# 11.5 on OpenBLAS's two threads, 50 x 960 -> 2560 5.6 against 3.6, while 3072 x 768 -> 3072 took
# 107 against 121 ms and 3072 x 3072 -> 768 95 against 94 (Zen 3, alternating).
SHARE_MIN_ROWS = 1024
SHARE_MIN_COLUMNS = 16  # shares of b's columns are multiples of this


class _BlasThreads:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._setters = None  # one per loaded BLAS library: threads -> None
        self.limit = 0  # most threads a product gets; 0 until known
        self.current = 0  # threads the libraries are set to now

    def setters(self):
        if self._setters is None:
            with self._lock:
                if self._setters is None:
                    from threadpoolctl import ThreadpoolController

                    controllers = ThreadpoolController().select(user_api="blas").lib_controllers
                    self.limit = self.current = max([c.num_threads for c in controllers], default=1)
                    self._setters = [_setter(c) for c in controllers]
        return self._setters

    def set(self, threads: int) -> None:
        for setter in self.setters():
            setter(threads)
        self.current = threads


def _setter(controller):
    """OpenBLAS's own `openblas_set_num_threads` (under its build's prefix and suffix): threadpoolctl
    lets only the first Python thread that set OpenBLAS's threads set them again, and the stages
    compute on threads of their own. Other libraries through threadpoolctl."""
    if controller.internal_api == "openblas":
        for prefix in ("", "scipy_"):
            for suffix in ("", "64_", "_64"):
                function = getattr(controller.dynlib, f"{prefix}openblas_set_num_threads{suffix}", None)
                if function is not None:
                    function.argtypes, function.restype = [ctypes.c_int], None
                    return function
    return controller.set_num_threads


_THREADS = _BlasThreads()


def limit_threads(limit: int) -> None:
    """At most `limit` threads for any product from now on in this process."""
    _THREADS.setters()
    _THREADS.limit = limit
    _THREADS.set(min(limit, _THREADS.current))


def product_threads(macs: int) -> int:
    """The threads work of `macs` multiply-adds gets: the limit where it is large enough to split, else 1."""
    _THREADS.setters()
    return _THREADS.limit if macs >= SPLIT_MIN_MACS else 1


def split_product(macs: int) -> None:
    """Set the threads of a product of `macs` multiply-adds about to go to BLAS."""
    threads = product_threads(macs)
    if threads != _THREADS.current:
        _THREADS.set(threads)


def before_kernel_region() -> None:
    """Call before a parallel numba kernel: BLAS back to one thread. Its worker, not woken again,
    spins on no core while the kernel computes, and the next attention runs as shares
    (`run_split`): left at the limit, every attention of a SigLIP tower on int16 products ran on
    BLAS's threads, whose worker then spun on a core through the products after it."""
    split_product(0)


class _Helpers:
    """Threads that run the shares of `run_split` beside the calling thread, made when first needed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._size = 0

    def pool(self, size: int) -> ThreadPoolExecutor:
        with self._lock:
            if self._size < size:
                if self._pool is not None:
                    self._pool.shutdown(wait=False)
                self._pool, self._size = ThreadPoolExecutor(size, thread_name_prefix="embodied_ros_share"), size
            return self._pool


_HELPERS = _Helpers()


def product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b, float32 [M, K] @ [K, N], through BLAS: with at least SHARE_MIN_ROWS rows and large enough to
    split, as shares of b's columns on threads of their own (`run_split`), else on BLAS's threads."""
    macs = a.shape[0] * a.shape[1] * b.shape[1]
    threads = min(product_threads(macs), b.shape[1] // SHARE_MIN_COLUMNS)
    if threads <= 1 or a.shape[0] < SHARE_MIN_ROWS:
        split_product(macs)
        return a @ b
    out = np.empty((a.shape[0], b.shape[1]), np.result_type(a, b))
    shares = share_count(threads, b.shape[1] // SHARE_MIN_COLUMNS, macs)
    bounds = [b.shape[1] * i // shares // SHARE_MIN_COLUMNS * SHARE_MIN_COLUMNS for i in range(shares)]
    bounds.append(b.shape[1])
    run_split([functools.partial(np.matmul, a, b[:, lo:hi], out=out[:, lo:hi]) for lo, hi in zip(bounds, bounds[1:])],
              threads)
    return out


def run_split(shares: Sequence[Callable[[], None]], threads: int) -> None:
    """Run `shares` on `threads` threads at once, the calling thread and helpers, BLAS set to one
    thread (module doc): each thread takes the next share not yet taken as it comes free, so a
    thread the cores' other work holds up takes fewer (kernels/cpu/shares.py). Returns when every
    share has run; the first error is raised then."""
    split_product(0)
    unclaimed = iter(shares)  # one next() at a time under the GIL: each share runs once

    def work() -> None:
        for share in unclaimed:
            share()

    threads = min(threads, len(shares))
    pending = [_HELPERS.pool(threads - 1).submit(work) for _ in range(threads - 1)] if threads > 1 else []
    try:
        work()
    finally:
        errors = [future.exception() for future in pending]
    for error in errors:
        if error is not None:
            raise error


def current_threads() -> int:
    """The threads the next product runs on unless `split_product` changes them."""
    _THREADS.setters()
    return _THREADS.current
