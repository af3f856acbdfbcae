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
"""

from __future__ import annotations

import functools

import numba

jit = functools.partial(numba.njit, cache=True, nogil=True, error_model="numpy")
