"""Row normalizations on the GPU: one kernel for rms_norm, ada_rms_norm, layer_norm,
rms_norm_across_heads and modulated_layer_norm (see norms.py, qk_norm.py and modulation.py for the
math and the numpy references).

Every one of them is, per row r of x [R, D]:
    out = (x - mean) * rsqrt(mean((x - mean)^2) + eps) * (one + scale[r']) + shift[r']
with mean = 0 for the RMS forms, one = 1 where the reference scales by (1 + w) and 0 where by w, and
scale/shift either one row shared by all rows ([1, D]) or one per row ([R, D]); r' = r or 0. One block
per row; the row's statistics are block reductions in shared memory.
"""

from __future__ import annotations

import math

import numpy as np

from embodied_ros.kernels.cuda.compiler import cuda, cuda_kernel
from embodied_ros.kernels.cuda.device import MAX_THREADS, block_sum
from embodied_ros.kernels.cuda.runtime import gpu, nothing, on_device, returned
from embodied_ros.kernels.registry import kernel

_ROW = "float32[:, ::1]"


@cuda_kernel(f"void({_ROW}, {_ROW}, {_ROW}, float32, int32, float32, {_ROW})", threads=MAX_THREADS)
def normalize_rows(x, scale, shift, one, centered, eps, out):  # pragma: no cover - device code
    # x: [R, D]; scale: [R or 1, D]; shift: [R or 1, D] or [0, D] (none) -> out: [R, D]; grid (R,)
    buffer = cuda.shared.array(MAX_THREADS, np.float32)
    r = cuda.blockIdx.x
    t = cuda.threadIdx.x
    threads = cuda.blockDim.x
    width = x.shape[1]
    mean = np.float32(0.0)
    if centered != 0:
        part = np.float32(0.0)
        for c in range(t, width, threads):
            part += x[r, c]
        mean = block_sum(buffer, part) / np.float32(width)
    part = np.float32(0.0)
    for c in range(t, width, threads):
        d = x[r, c] - mean
        part += d * d
    inverse = np.float32(1.0) / math.sqrt(block_sum(buffer, part) / np.float32(width) + eps)
    scale_row = r if scale.shape[0] != 1 else 0
    shift_row = r if shift.shape[0] != 1 else 0
    for c in range(t, width, threads):
        value = ((x[r, c] - mean) * inverse) * (one + scale[scale_row, c])
        if shift.shape[0] != 0:
            value += shift[shift_row, c]
        out[r, c] = value


def _threads_for(width: int) -> int:
    threads = 32
    while threads < min(width, MAX_THREADS):
        threads *= 2
    return threads


def _check(op: str, x, **per_row) -> None:
    if len(x.shape) != 2:
        raise ValueError(f"{op}: expected x of shape [rows, width], got {tuple(x.shape)}")
    rows, width = x.shape
    for name, value in per_row.items():
        shape = tuple(value.shape)
        if shape not in ((width,), (1, width), (rows, width)):
            raise ValueError(f"{op}: {name} has shape {shape}; expected ({width},), (1, {width}) or ({rows}, {width})")


def _as_rows(value, width: int):
    tensor = on_device(value, "scale/shift")
    return tensor.reshape(1, width) if tensor.ndim == 1 else tensor


def _normalize(x, scale, shift, one: float, centered: bool, eps: float):
    rows, width = x.shape
    x_d = on_device(x, "x")
    out = gpu().empty((rows, width), np.float32)
    if rows:
        shift_d = nothing(width, ndim=2) if shift is None else _as_rows(shift, width)
        gpu().launch(normalize_rows, (rows,), (_threads_for(width),),
                     (x_d, _as_rows(scale, width), shift_d, np.float32(one), np.int32(centered), np.float32(eps),
                      out))
    return returned(out, x)


@kernel("rms_norm", "cuda")
def rms_norm_cuda(x, weight, eps: float):
    _check("rms_norm", x, weight=weight)
    return _normalize(x, weight, None, 1.0, False, eps)


@kernel("ada_rms_norm", "cuda")
def ada_rms_norm_cuda(x, scale, shift, eps: float):
    _check("ada_rms_norm", x, scale=scale, shift=shift)
    return _normalize(x, scale, shift, 1.0, False, eps)


@kernel("layer_norm", "cuda")
def layer_norm_cuda(x, weight, bias, eps: float):
    _check("layer_norm", x, weight=weight, bias=bias)
    return _normalize(x, weight, bias, 0.0, True, eps)


@kernel("rms_norm_across_heads", "cuda")
def rms_norm_across_heads_cuda(x, weight, eps: float):
    _check("rms_norm_across_heads", x, weight=weight)
    return _normalize(x, weight, None, 0.0, False, eps)


@kernel("modulated_layer_norm", "cuda")
def modulated_layer_norm_cuda(x, shift, scale, eps: float):
    _check("modulated_layer_norm", x, shift=shift, scale=scale)
    return _normalize(x, scale, shift, 1.0, True, eps)
