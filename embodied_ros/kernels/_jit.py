"""The one way kernels here are compiled with numba.

Every kernel: compiled once and cached on disk (`cache=True`, warmed at start-up by
`KernelSet.compile`), releases the GIL (`nogil`: inference runs in a thread beside the command
stream), and uses numpy's error model so float division carries no zero check, which would stop
LLVM from vectorizing the loop.

Prefer single-threaded kernels: the matrix products around them already run on every core
through BLAS, whose threads stay busy-waiting for a while after each call. A numba parallel
region started in that window waits for cores BLAS holds; on the 2-core development machine a
parallel RMS norm between two matrix products took 40x longer than the serial one. The work left
to numba (norms, RoPE, activations, softmax) is mostly memory-bound and short, so one vectorized
pass on one core is usually the fastest form; measure before adding `parallel=True`.

The parallel kernels that remain (quantized products, dequantization, large modulations) run on
numba's OpenMP pool. Its threads spin after each region by default, just as BLAS's worker does
after each product: on two cores a spinning thread of one pool holds the core the other pool
needs next, for up to milliseconds. A q8_0 product of 50 x 192 -> 1536 followed by a small BLAS
product took 1.2 ms instead of 0.4, and a pi05_small chunk with Q8_0 weights 620 ms instead of
52. So the OpenMP threads sleep as soon as a region ends (OMP_WAIT_POLICY=passive, read when
the pool starts at the first parallel kernel; an explicit setting in the environment wins).
"""

from __future__ import annotations

import functools
import os

import numba

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

jit = functools.partial(numba.njit, cache=True, nogil=True, error_model="numpy")
