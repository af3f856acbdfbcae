"""The BLAS library's threads, chosen per product: up to the process's limit where a product is
large enough to split, one below that.

OpenBLAS splits every product above 2^18 multiply-adds over all its threads, and its worker then
spins on a core until the next job comes or about 0.1 s pass. On two cores the small products of
LingBot-VA's small world stage (16 x 128 x 256, about 10 us each) lost 10% of the stage in the graph
to that spinning, while a released-size SmolVLA's vision tower (products of 10^8-10^9) gained 30%
from the second thread (docs/graph.md, "BLAS threads"). `split_product` is called before each
product the kernels hand to BLAS; `limit_threads` sets the limit (the graph's compute.blas_threads).
"""

from __future__ import annotations

import ctypes
import threading

SPLIT_MIN_MACS = 1 << 24  # about 0.4 ms of one core's float32 product


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


def split_product(macs: int) -> None:
    """Set the threads of a product of `macs` multiply-adds about to go to BLAS."""
    _THREADS.setters()
    threads = _THREADS.limit if macs >= SPLIT_MIN_MACS else 1
    if threads != _THREADS.current:
        _THREADS.set(threads)


def current_threads() -> int:
    """The threads the next product runs on unless `split_product` changes them."""
    _THREADS.setters()
    return _THREADS.current
