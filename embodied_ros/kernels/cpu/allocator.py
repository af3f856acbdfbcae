"""Keep freed array memory in the process for the next control step (glibc malloc settings), and hand
back the resident pages of mapped weights once they are copied (`release_pages`).

numpy takes every array from malloc. By default glibc maps each block above 128 KiB (a threshold
it raises as blocks are freed) straight from the kernel and unmaps it when freed, and returns the
free top of its heap past 128 KiB. Inference frees and re-creates the same arrays at every
step, so each step then faults its pages in again, and each unmap interrupts the other core,
where BLAS's worker thread is waiting. On the 2-core development machine this made the pi0.5
expert's 400 x 273 attention scores product take 160 us instead of 45, and a whole pi05_small
chunk 6% slower. With blocks up to 32 MiB kept in the heap and the heap trimmed only past
256 MiB of free space, the memory of one step is reused by the next.
"""

from __future__ import annotations

import ctypes
import sys
import threading
import mmap

import numpy as np

_M_TRIM_THRESHOLD = -1  # mallopt parameters (malloc.h)
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's largest allowed value on 64-bit systems
TRIM_THRESHOLD = 256 << 20
_applied = False
_MADV_DONTNEED = 4  # madvise advice (sys/mman.h)
ALIGN = 64  # bytes of a cache line


def reuse_freed_memory() -> bool:
    """Apply the settings once per process; False where the C library is not glibc (no mallopt)."""
    global _applied
    if _applied:
        return True
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    _applied = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _applied


def release_pages(array: np.ndarray) -> None:
    """Drop this process's resident pages of a memory-mapped, read-only array (its copy lives elsewhere
    now): the file's pages stay in the page cache and are read back if the array is touched again.
    Arrays that are not views of a file mapping are left alone."""
    base = array
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    if not isinstance(base, mmap.mmap) or array.flags.writeable or not array.size:
        return
    start = array.__array_interface__["data"][0]
    first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE  # whole pages inside the array only
    last = (start + array.nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
    if last > first:
        ctypes.CDLL(None, use_errno=True).madvise(ctypes.c_void_p(first), ctypes.c_size_t(last - first),
                                                  _MADV_DONTNEED)


def aligned_empty(shape: tuple[int, ...], dtype) -> np.ndarray:
    """An array whose first byte is on a 64-byte line (what tile loads need at full speed)."""
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.empty(nbytes + ALIGN, np.uint8)
    start = -raw.ctypes.data % ALIGN
    return raw[start:start + nbytes].view(dtype).reshape(shape)


RECYCLE_MIN_BYTES = 4 << 20  # smaller arrays come from malloc's heap, which keeps them (reuse_freed_memory)
RECYCLE_MAX_BYTES = 2 << 30  # free buffers kept beyond this are dropped, largest first
_recycled: list[np.ndarray] = []  # raw uint8 buffers, each handed out as views
_recycled_lock = threading.Lock()


def recycled_empty(shape: tuple[int, ...], dtype) -> np.ndarray:
    """`aligned_empty` for arrays of 4 MiB or more, from buffers no array refers to any more.

    malloc maps every block above 32 MiB (glibc's largest threshold) straight from the kernel and
    unmaps it when freed, so a large product output made at every control step pays for the
    kernel's page faults and zeroing each time: 15 ms for 127 MiB (Gemma's 968 x 32768 gate/up
    product), about a tenth of that product. A buffer here is reused once the last view of it is
    gone (its reference count says so), for a request no more than twice smaller."""
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    if nbytes < RECYCLE_MIN_BYTES:
        return aligned_empty(shape, dtype)
    with _recycled_lock:
        chosen = None
        for owner in _recycled:
            # referents when free: the list, this loop's name and getrefcount's argument (views refer
            # to the array that owns the memory, whatever they were made from)
            if nbytes <= owner.nbytes - ALIGN <= 2 * nbytes and sys.getrefcount(owner) == 3 and (
                    chosen is None or owner.nbytes < chosen.nbytes):
                chosen = owner
        if chosen is None:
            chosen = np.empty(nbytes + ALIGN, np.uint8)
            _recycled.append(chosen)
            _drop_free_buffers()
        start = -chosen.ctypes.data % ALIGN
        return chosen[start:start + nbytes].view(dtype).reshape(shape)


def _drop_free_buffers() -> None:
    """Keep the free buffers within RECYCLE_MAX_BYTES (the caller holds the lock)."""
    free = sorted((owner for owner in _recycled if sys.getrefcount(owner) == 3), key=lambda owner: -owner.nbytes)
    kept = sum(b.nbytes for b in _recycled)
    for buffer in free:
        if kept <= RECYCLE_MAX_BYTES:
            break
        kept -= buffer.nbytes
        _recycled.remove(buffer)
