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
    from embodied_ros.kernels.attention import _grouped  # noqa: PLC2701 - the BLAS attention, on any CPU
    from embodied_ros.kernels.linear import VECTOR_GEMM, linear_numba
    original = blas.current_threads()
    rng = np.random.default_rng(0)
    try:
        blas.limit_threads(2)
        x, w = rng.standard_normal((8, 64), np.float32), rng.standard_normal((64, 64), np.float32)
        blas.split_product(1 << 30)
        linear_numba(x, w)  # 32K multiply-adds
        assert blas.current_threads() == (2 if VECTOR_GEMM else 1)  # the vector product never calls BLAS
        q = rng.standard_normal((1024, 2, 64), np.float32)  # 1024 x 64 x 1024 per head
        blas.split_product(1 << 30)
        no_bias = (np.zeros((0, 0), np.float32), np.zeros(0, np.float32))
        _grouped(q, q, q, *no_bias)  # right after a product on BLAS's threads: on them
        assert blas.current_threads() == 2
        blas.split_product(0)
        _grouped(q, q, q, *no_bias)  # after products elsewhere: shares on threads of its own, one BLAS thread each
        assert blas.current_threads() == 1
    finally:
        blas.limit_threads(original)
        blas.split_product(blas.SPLIT_MIN_MACS)


def test_products_of_many_rows_split_their_columns_over_threads_of_their_own():
    original = blas.current_threads()
    rng = np.random.default_rng(1)
    try:
        blas.limit_threads(2)
        b = rng.standard_normal((128, 250), np.float32)  # over 2^24 multiply-adds: worth two threads
        for rows, shares in ((blas.SHARE_MIN_ROWS, True), (blas.SHARE_MIN_ROWS - 1, False)):
            a = rng.standard_normal((rows, 128), np.float32)
            blas.split_product(1 << 30)
            np.testing.assert_allclose(blas.product(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
            assert blas.current_threads() == (1 if shares else 2)  # shares call BLAS on one thread each
    finally:
        blas.limit_threads(original)
        blas.split_product(blas.SPLIT_MIN_MACS)


def test_split_work_runs_its_shares_on_threads_of_their_own_with_one_blas_thread_each():
    original = blas.current_threads()
    try:
        blas.limit_threads(2)
        blas.split_product(1 << 30)
        seen, started = [], threading.Barrier(3, timeout=10)

        def share(index):
            started.wait()  # all three run at once, or this times out
            seen.append((index, threading.get_ident(), _library_threads()))

        blas.run_split([lambda i=i: share(i) for i in range(3)], 3)
        assert sorted(index for index, _, _ in seen) == [0, 1, 2]
        assert len({thread for _, thread, _ in seen}) == 3
        assert threading.get_ident() in {thread for _, thread, _ in seen}  # one share on the calling thread
        assert {threads for _, _, threads in seen} == {1}
    finally:
        blas.limit_threads(original)
        blas.split_product(blas.SPLIT_MIN_MACS)


def test_split_work_waits_for_every_share_before_raising():
    finished = []

    def slow():
        threading.Event().wait(0.2)
        finished.append("slow")

    def failing():
        raise ValueError("share failed")

    with pytest.raises(ValueError, match="share failed"):
        blas.run_split([failing, slow], 2)
    assert finished == ["slow"]


def test_a_held_up_thread_takes_fewer_shares():
    ran_on = {}

    def share(index):
        if index == 0:
            threading.Event().wait(0.3)  # as a thread whose core the robot's driver took
        ran_on[index] = threading.get_ident()

    blas.run_split([lambda i=i: share(i) for i in range(8)], 2)
    assert sorted(ran_on) == list(range(8))
    assert list(ran_on.values()).count(ran_on[0]) == 1  # the other thread ran the other seven


def test_after_a_parallel_int16_product_blas_is_at_one_thread_and_attention_runs_as_shares(monkeypatch):
    import numba

    from embodied_ros.kernels import attention
    from embodied_ros.kernels.cpu.int16_gemm import matmul_i16, pack_i16

    if numba.get_num_threads() < 2:
        pytest.skip("one numba thread: no parallel region to hand the cores to")
    original = blas.current_threads()
    rng = np.random.default_rng(0)
    try:
        blas.limit_threads(2)
        blas.split_product(1 << 30)  # as after a large float32 product: BLAS's threads awake
        assert blas.current_threads() == 2
        matmul_i16(rng.standard_normal((96, 512), dtype=np.float32),
                   pack_i16(rng.standard_normal((256, 512), dtype=np.float32)))  # 12.6M multiply-adds: parallel
        assert blas.current_threads() == _library_threads() == 1
        ways = []
        real_split = attention.run_split
        monkeypatch.setattr(attention, "run_split", lambda shares, threads: ways.append(len(shares)) or
                            real_split(shares, threads))
        q, k, v = (rng.standard_normal((1024, 2, 64), dtype=np.float32) for _ in range(3))
        grouped = attention._grouped(q, k, v, attention._NO_BIAS_2D, attention._NO_BIAS_1D)  # BLAS's attention
        np.testing.assert_allclose(grouped, attention.attention(q, k, v), rtol=1e-4, atol=1e-5)
        assert ways and ways[0] > 2  # as shares, more than one a thread, not on BLAS's threads
    finally:
        blas.limit_threads(original)
        blas.split_product(blas.SPLIT_MIN_MACS)
