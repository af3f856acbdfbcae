"""Large kernel outputs come from buffers no array refers to any more, never from one still in use."""

import numpy as np

from embodied_ros.kernels.cpu import allocator


def test_a_buffer_is_reused_only_once_every_view_of_it_is_gone():
    shape = (1100, 1024)  # 4.3 MiB of float32
    first = allocator.recycled_empty(shape, np.float32)
    first[:] = 1
    address = first.ctypes.data
    view = first[10:20].reshape(-1)  # a view of a view: still refers to the buffer
    del first
    second = allocator.recycled_empty(shape, np.float32)
    assert second.ctypes.data != address
    second[:] = 2
    assert (view == 1).all()  # untouched while it lives
    del view
    third = allocator.recycled_empty(shape, np.float32)
    assert third.ctypes.data == address and third.ctypes.data % allocator.ALIGN == 0
    assert third.shape == shape and third.dtype == np.float32


def test_small_requests_and_much_smaller_ones_get_their_own_memory():
    small = allocator.recycled_empty((100, 100), np.float32)
    assert small.base is not None and small.nbytes == 40_000
    big = allocator.recycled_empty((4 << 20,), np.float32)  # 16 MiB
    address = big.ctypes.data
    del big
    assert allocator.recycled_empty((1 << 20,), np.float32).ctypes.data != address  # 4 MiB: too small for it
    assert allocator.recycled_empty((3 << 20,), np.float32).ctypes.data == address


def test_free_buffers_beyond_the_cap_are_dropped(monkeypatch):
    monkeypatch.setattr(allocator, "RECYCLE_MAX_BYTES", 20 << 20)
    monkeypatch.setattr(allocator, "_recycled", [])
    held = [allocator.recycled_empty((6 << 20,), np.uint8) for _ in range(4)]
    assert len(allocator._recycled) == 4  # all in use: none is dropped
    del held
    kept = allocator.recycled_empty((13 << 20,), np.uint8)  # a new buffer: 37 MiB in all, 24 of them free
    assert kept.nbytes == 13 << 20
    assert sum(owner.nbytes for owner in allocator._recycled) <= (20 << 20) + 64
    assert len(allocator._recycled) == 2
