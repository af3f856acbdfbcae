"""The one way kernels here are compiled with numba.

Every kernel: compiled once and cached on disk (`cache=True`, warmed at start-up by
`KernelSet.compile`), releases the GIL (`nogil`: inference runs in a thread beside the command
stream), and uses numpy's error model so float division carries no zero check, which would stop
LLVM from vectorizing the loop.

Prefer single-threaded kernels for the short, memory-bound work between matrix products (norms,
RoPE, activations): one vectorized pass on one core is usually the fastest form, and where BLAS
runs the products (CPUs without AVX-512, below) a parallel region started while BLAS's threads
still busy-wait waits for the cores they hold (a parallel RMS norm between two products took 40x
longer than the serial one on the 2-core development machine). Measure before `parallel=True`.

The parallel kernels (matrix products, attention, quantized products, dequantization, large
modulations) run on numba's OpenMP pool. How its threads wait between regions depends on the CPU:

- With 16-lane vectors (AVX-512, `vector_units_available`) every matrix product of a control step
  runs on this pool (kernels/cpu/gemm.py), so nothing else needs the cores between two regions, and a
  woken thread costs more than the region: on the 2-core development machine (a VM, whose idle
  virtual CPU is halted) a sleeping thread took ~80 us to wake, as long as a whole 50 x 192 x 1536
  product. So the threads spin for a while after each region, then sleep: GOMP_SPINCOUNT=10000,
  about 0.4 ms here, which covers the gaps between the products of a step and frees the core soon
  after a step ends.
- Elsewhere numpy's BLAS runs the float32 products on its own threads, which stay busy-waiting
  after each call; a spinning thread of one pool holds the core the other pool needs next. A q8_0
  product of 50 x 192 -> 1536 followed by a small BLAS product took 1.2 ms instead of 0.4, and a
  pi05_small chunk with Q8_0 weights 620 ms instead of 52. So the OpenMP threads sleep as soon as
  a region ends (OMP_WAIT_POLICY=passive).

Both are read when the pool starts at the first parallel kernel; a setting of either variable in
the environment wins. A node in a process of its own shares the cores with the other node
processes, so its threads sleep at once as on CPUs without AVX-512 (`share_cores_with_other_processes`).
"""

from __future__ import annotations

import functools
import os

import numba
from llvmlite import binding as llvm_binding

SPIN_COUNT = "10000"


def vector_units_available() -> bool:
    """True where numba compiles 16-lane float vectors to single instructions (AVX-512)."""
    return bool(llvm_binding.get_host_cpu_features().get("avx512f", False))


# Products of fewer multiply-adds run on the calling thread. A parallel region costs its threads'
# wake-up and barrier, 10-50 us alone and far more in a busy graph where a worker waits for a core:
# pi05_small's action stage (600 small products a chunk) took 19.7 ms alone with 1 << 17 here and
# 16.4 ms with 1 << 22, and 64 -> 42 ms inside the composed graph.
PARALLEL_MIN_MACS = 1 << 22
# Element-wise passes (norms, rotations, activation rounding) over fewer elements run on the
# calling thread.
PARALLEL_MIN_ELEMENTS = 1 << 16

# Marks the wait setting as this package's default, not the user's: processes a graph starts
# inherit it and may choose their own (`share_cores_with_other_processes`).
DEFAULT_MARK = "EMBODIED_ROS_OMP_WAIT_DEFAULT"
WAIT_SET_BY_ENVIRONMENT = (("OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ)
                           and DEFAULT_MARK not in os.environ)
if not WAIT_SET_BY_ENVIRONMENT:
    os.environ[DEFAULT_MARK] = "1"
    if vector_units_available():
        os.environ.pop("OMP_WAIT_POLICY", None)
        os.environ["GOMP_SPINCOUNT"] = SPIN_COUNT
    else:
        os.environ.pop("GOMP_SPINCOUNT", None)
        os.environ["OMP_WAIT_POLICY"] = "passive"


def share_cores_with_other_processes() -> None:
    """Threads sleep as soon as a parallel region ends, whatever the CPU: for a process that is one
    of several computing on the same cores (one node per process). A spinning team holds cores the
    other processes' regions need next: LingBot-VA's world stage took 750 ms a run with the node
    processes' teams spinning, 177 ms with them sleeping, on the 2-core machine. Takes effect only
    before the first parallel kernel runs; a setting in the environment still wins."""
    if not WAIT_SET_BY_ENVIRONMENT:
        os.environ.pop("GOMP_SPINCOUNT", None)
        os.environ["OMP_WAIT_POLICY"] = "passive"

jit = functools.partial(numba.njit, cache=True, nogil=True, error_model="numpy")
