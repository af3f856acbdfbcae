"""Device functions shared by the cuda kernels: block reductions and half-float decoding.

Device code avoids the builtins min and max: numba lowers them through a generic device function
that it compiles for "the current device", which needs numba's own driver. Reductions go through
shared memory with __syncthreads only (no warp shuffles), so every kernel also
runs in numba's CUDA simulator, where the tests execute them. They need blockDim.x to be a power of
two and every thread of the block to call them.
"""

from __future__ import annotations

import numpy as np

from embodied_ros.kernels.cuda.compiler import cuda, cuda_simulator_enabled, device_function

if cuda is not None:
    from numba.cuda import libdevice

_TWO_TO_MINUS_24 = np.float32(2.0 ** -24)
_INF = np.float32(np.inf)
_NAN = np.float32(np.nan)
MAX_THREADS = 256  # the largest block any kernel here is launched with (shared buffers are this long)


@device_function
def block_sum(buffer, value):  # pragma: no cover - device code
    """Sum of `value` over the block; buffer: shared float32 [>= blockDim.x], free again on return."""
    t = cuda.threadIdx.x
    buffer[t] = value
    cuda.syncthreads()
    stride = cuda.blockDim.x // 2
    while stride > 0:
        if t < stride:
            buffer[t] += buffer[t + stride]
        cuda.syncthreads()
        stride //= 2
    total = buffer[0]
    cuda.syncthreads()
    return total


@device_function
def block_max(buffer, value):  # pragma: no cover - device code
    """Maximum of `value` over the block; buffer as for block_sum."""
    t = cuda.threadIdx.x
    buffer[t] = value
    cuda.syncthreads()
    stride = cuda.blockDim.x // 2
    while stride > 0:
        if t < stride:
            other = buffer[t + stride]
            if other > buffer[t]:
                buffer[t] = other
        cuda.syncthreads()
        stride //= 2
    top = buffer[0]
    cuda.syncthreads()
    return top


@device_function
def block_sum_rows(partial, rows):  # pragma: no cover - device code
    """partial: shared float32 [R, blockDim.x]; leaves the sum over threads of rows 0..rows-1 in column 0."""
    t = cuda.threadIdx.x
    cuda.syncthreads()
    stride = cuda.blockDim.x // 2
    while stride > 0:
        if t < stride:
            for r in range(rows):
                partial[r, t] += partial[r, t + stride]
        cuda.syncthreads()
        stride //= 2


@device_function
def half_to_float(low, high):  # pragma: no cover - device code
    """IEEE half stored as two little-endian bytes -> float32 (exact)."""
    bits = np.int32(low) | (np.int32(high) << np.int32(8))
    exponent = (bits >> np.int32(10)) & np.int32(31)
    mantissa = bits & np.int32(1023)
    # every product below is of powers of two and integers below 2^11: exact in float32
    if exponent == 0:
        value = np.float32(mantissa) * _TWO_TO_MINUS_24
    elif exponent == 31:
        value = _INF if mantissa == 0 else _NAN
    else:
        power = np.float32(np.int32(1) << (exponent - np.int32(1)))  # 2^(exponent - 1)
        value = np.float32(mantissa + np.int32(1024)) * power * _TWO_TO_MINUS_24
    return -value if bits & np.int32(32768) else value


@device_function
def signed_byte(byte):  # pragma: no cover - device code
    """A uint8 read as int8 (two's complement), as float32."""
    value = np.int32(byte)
    return np.float32(value - np.int32(256) if value >= 128 else value)


def _rounded_product_on_gpu(a, b):  # pragma: no cover - device code
    return libdevice.fmul_rn(a, b)


def _rounded_product_simulated(a, b):
    return a * b  # numpy float32 arithmetic: always rounded


# a * b rounded to float32 on its own: ptxas may fuse a plain product with a following add or
# subtraction into one FMA (one rounding instead of two); mul.rn it leaves alone. Where the result
# must equal numpy's bit for bit (dequantization) products go through this. libdevice has no
# simulator version, so the simulator runs plain float32 arithmetic, which rounds the same way.
rounded_product = device_function(_rounded_product_simulated if cuda_simulator_enabled()
                                  else _rounded_product_on_gpu)
