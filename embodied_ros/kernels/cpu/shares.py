"""Work a parallel region's threads take as they come free.

A region cut into one equal part per thread ends when its slowest thread does. In the graph the
cores are shared: the robot's driver, the controller and the node's other threads take one core for
a few ms at a time, the thread on it falls behind, and the other core idles at the end of every
region. Kernels here cut their work into more shares than threads (`share_count`), and each
thread claims the next unclaimed share (an atomic counter, `claim`) until none is left, so a
thread that was held up takes fewer. A share that its thread holds while held up still ends late,
so shares are small, down to SHARE_MIN_MACS. On a 2-core AMD EPYC (Zen 3), with a process busy a
third of one core beside it, a released-size SmolVLA BF16 chunk took 1.36x its time alone in equal
parts; in shares it runs 1.08-1.11x as fast as in equal parts under that load, and 1.08x alone
(BENCHMARKS.md path_pairs_shares_*).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from embodied_ros.kernels.cpu.jit import jit

SHARES_PER_THREAD = 8
SHARE_MIN_MACS = 1 << 25  # about 0.6 ms of one core's int16 or float32 product


def share_count(threads: int, parts: int, macs: int) -> int:
    """Shares of a region of `parts` indivisible parts (panels, rows) and `macs` multiply-adds on
    `threads` threads: one a thread at least, more down to SHARE_MIN_MACS each, at most
    SHARES_PER_THREAD a thread."""
    return max(1, min(parts, threads * SHARES_PER_THREAD, max(threads, macs // SHARE_MIN_MACS)))


def counter() -> np.ndarray:
    """A fresh claim counter for one region: no share claimed yet."""
    return np.zeros(1, np.int64)


@intrinsic
def _fetch_add_one(typingctx, addr):
    """The int64 at addr, incremented in the same atomic step."""
    signature = types.int64(types.uintp)

    def codegen(context, builder, sig, args):
        i64 = ir.IntType(64)
        pointer = builder.inttoptr(args[0], i64.as_pointer())
        return builder.atomic_rmw("add", pointer, ir.Constant(i64, 1), "monotonic")

    return signature, codegen


@jit(inline="always")
def claim(claimed):  # pragma: no cover - compiled
    """The next share no thread has claimed yet (>= the share count once all are): claimed is the
    region's `counter()`."""
    return _fetch_add_one(claimed.ctypes.data)


@jit(inline="always")
def share_bounds(share, shares, parts):  # pragma: no cover - compiled
    """Parts first..last of share `share` of `shares`."""
    return share * parts // shares, (share + 1) * parts // shares
