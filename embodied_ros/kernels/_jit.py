"""The one way kernels here are compiled with numba.

Every kernel: compiled once and cached on disk (`cache=True`, warmed at start-up by
`KernelSet.compile`), releases the GIL (`nogil`: inference runs in a thread beside the command
stream), and uses numpy's error model so float division carries no zero check, which would stop
LLVM from vectorizing the loop. `parallel=True` where a kernel has enough rows to share.
"""

from __future__ import annotations

import functools

import numba

jit = functools.partial(numba.njit, cache=True, nogil=True, error_model="numpy")
