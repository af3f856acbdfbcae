"""kernels/cpu/blas.py: a product gets up to the process's BLAS threads only when it is large enough
to split; the library is really set so."""

import threading
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from embodied_ros.kernels.cpu import blas


def _library_threads() -> int:
    """The threads of numpy's BLAS: numba loads scipy's too when it compiles, which the kernels never call."""
    libraries = [info for info in threadpool_info() if info["user_api"] == "blas"]
    numpys = [info for info in libraries if "numpy" in Path(info["filepath"]).parent.name] or libraries
    return max(info["num_threads"] for info in numpys)


def _splits():
    blas.limit_threads(3)
    blas.split_product(blas.SPLIT_MIN_MACS)
    assert blas.current_threads() == _library_threads() == 3
    blas.split_product(16 * 128 * 256)  # LingBot-VA small's: OpenBLAS would split it over every thread
    assert blas.current_threads() == _library_threads() == 1
    blas.limit_threads(1)  # the separate layout's, lock-step's
    blas.split_product(1 << 30)
    assert blas.current_threads() == _library_threads() == 1


@pytest.mark.parametrize("thread", ["main", "another"])
def test_small_products_run_on_one_thread_large_ones_on_the_limit(thread):
    original = blas.current_threads()
    threadpool_limits(original, user_api="blas")  # threadpoolctl's controlling thread is now this one
    try:
        if thread == "main":
            _splits()
        else:  # a stage's thread: threadpoolctl would ignore it, OpenBLAS must not
            failures = []
            worker = threading.Thread(target=lambda: _catch(_splits, failures))
            worker.start()
            worker.join()
            assert not failures, failures
    finally:
        blas.limit_threads(original)
        blas.split_product(blas.SPLIT_MIN_MACS)


def _catch(function, failures):
    try:
        function()
    except AssertionError as error:
        failures.append(error)


def test_linear_and_attention_set_the_threads_of_their_products():
    from embodied_ros.kernels.attention import VECTOR_ATTENTION, attention_numba
    from embodied_ros.kernels.linear import VECTOR_GEMM, linear_numba
    original = blas.current_threads()
    rng = np.random.default_rng(0)
    try:
        blas.limit_threads(2)
        x, w = rng.standard_normal((8, 64), np.float32), rng.standard_normal((64, 64), np.float32)
        blas.split_product(1 << 30)
        linear_numba(x, w)  # 32K multiply-adds
        assert blas.current_threads() == (2 if VECTOR_GEMM else 1)  # the vector product never calls BLAS
        q = rng.standard_normal((1024, 2, 64), np.float32)
        blas.split_product(0)
        attention_numba(q, q, q)  # 1024 x 64 x 1024 per head
        assert blas.current_threads() == (1 if VECTOR_ATTENTION else 2)  # the vector attention never calls BLAS
    finally:
        blas.limit_threads(original)
        blas.split_product(blas.SPLIT_MIN_MACS)
