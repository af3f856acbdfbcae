"""linear_ternary on the GPU (kernels/cpu/ternary_gemm.py has the op's rules): each row of x quantized
to int8 by its absmax, integer dot products with the ternary weight, then the two scales. A first,
plain version: one thread per row to quantize, one per output value to sum; the ternary weight is
uploaded once per weight as -1/0/1 float values (exact), not in its 2-bit packing."""

from __future__ import annotations

import math
import weakref

import numpy as np

from embodied_ros.kernels.cpu.ternary_gemm import ACT_EPS, TernaryWeight
from embodied_ros.kernels.cuda.compiler import cuda, cuda_kernel
from embodied_ros.kernels.cuda.runtime import blocks_for, gpu, nothing, on_device, returned
from embodied_ros.kernels.registry import kernel

THREADS = 128
_WEIGHTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # TernaryWeight -> (values, 1 / s_w) on the GPU


@cuda_kernel("void(float32[:, ::1], float32[:, ::1], float32[::1])", threads=THREADS)
def quantize_rows(x, q, inverse_scales):  # pragma: no cover - device code
    # x, q: [N, K]; q = clip(round_half_even(x * 127 / max|x_row|), -128, 127); inverse_scales: [N] = 1 / scale
    for r in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
        peak = ACT_EPS
        for k in range(x.shape[1]):
            magnitude = x[r, k] if x[r, k] >= 0 else -x[r, k]
            if magnitude > peak:
                peak = magnitude
        scale = np.float32(127.0) / peak
        for k in range(x.shape[1]):
            v = x[r, k] * scale
            f = np.float32(math.floor(v))
            d = v - f
            if d > np.float32(0.5) or (d == np.float32(0.5) and math.floor(f * np.float32(0.5)) * 2 != f):
                f += np.float32(1.0)
            if f < np.float32(-128.0):
                f = np.float32(-128.0)
            if f > np.float32(127.0):
                f = np.float32(127.0)
            q[r, k] = f
        inverse_scales[r] = np.float32(1.0) / scale


@cuda_kernel("void(float32[:, ::1], float32[::1], float32[:, ::1], float32[::1], float32[::1], float32[:, ::1])",
             threads=THREADS)
def ternary_product(q, inverse_x, w, inverse_w, bias, y):  # pragma: no cover - device code
    # q: [N, K] int8 values, w: [M, K] of -1/0/1 -> y: [N, M] = (sum * 1/s_x) * 1/s_w (+ bias)
    n_out = w.shape[0]
    for i in range(cuda.grid(1), q.shape[0] * n_out, cuda.gridsize(1)):
        r = i // n_out
        o = i - r * n_out
        total = 0
        for k in range(q.shape[1]):
            total += int(q[r, k]) * int(w[o, k])
        value = (np.float32(total) * inverse_x[r]) * inverse_w[o]
        if bias.shape[0]:
            value += bias[o]
        y[r, o] = value


def _weight_on_device(weight: TernaryWeight):
    if weight not in _WEIGHTS:
        _WEIGHTS[weight] = (on_device(weight.ternary().astype(np.float32), "weight"),
                            on_device((np.float32(1.0) / weight.scales).astype(np.float32), "weight scales"))
    return _WEIGHTS[weight]


@kernel("linear_ternary", "cuda")
def linear_ternary_cuda(x, weight: TernaryWeight, bias=None):
    # x: [..., in] -> [..., out]
    n_out, n_in = weight.shape
    if x.shape[-1] != n_in:
        raise ValueError(f"linear_ternary: input with {x.shape[-1]} features does not fit a weight of shape {weight.shape}")
    rows = on_device(x, "x").reshape(-1, n_in)
    n_rows = rows.shape[0]
    y = gpu().empty((n_rows, n_out), np.float32)
    if y.size:
        q = gpu().empty((n_rows, n_in), np.float32)
        inverse_x = gpu().empty((n_rows,), np.float32)
        gpu().launch(quantize_rows, (blocks_for(n_rows, THREADS),), (THREADS,), (rows, q, inverse_x))
        values, inverse_w = _weight_on_device(weight)
        bias_d = nothing() if bias is None else on_device(bias, "bias")
        gpu().launch(ternary_product, (blocks_for(n_rows * n_out, THREADS),), (THREADS,),
                     (q, inverse_x, values, inverse_w, bias_d, y))
    return returned(y.reshape(*x.shape[:-1], n_out), x)
