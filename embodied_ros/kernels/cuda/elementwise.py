"""Element-wise ops on the GPU: gelu_tanh, gelu_tanh_mul, gelu_tanh_glu (activations.py), silu, silu_glu
(silu.py), gelu_erf (gelu_erf.py) and gated_residual (modulation.py). Each is one pass over memory, a
grid-stride loop over the elements."""

from __future__ import annotations

import math

import numpy as np

from embodied_ros.kernels.cuda.compiler import cuda, cuda_kernel, device_function
from embodied_ros.kernels.cuda.runtime import blocks_for, gpu, on_device, returned
from embodied_ros.kernels.registry import kernel

THREADS = 256
_SQRT_2_OVER_PI = np.float32(math.sqrt(2.0 / math.pi))
_CUBIC = np.float32(0.044715)
_INV_SQRT_2 = np.float32(1.0 / math.sqrt(2.0))


@device_function
def gelu_tanh_value(x):  # pragma: no cover - device code
    inner = _SQRT_2_OVER_PI * (x + _CUBIC * (x * x * x))
    return np.float32(0.5) * x * (np.float32(1.0) + np.float32(math.tanh(inner)))


@cuda_kernel("void(float32[::1], float32[::1])", threads=THREADS)
def gelu(x, out):  # pragma: no cover - device code
    # x, out: [n]
    for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
        out[i] = gelu_tanh_value(x[i])


@cuda_kernel("void(float32[::1], float32[::1], float32[::1])", threads=THREADS)
def gelu_mul(gate, up, out):  # pragma: no cover - device code
    # gate, up, out: [n]
    for i in range(cuda.grid(1), gate.shape[0], cuda.gridsize(1)):
        out[i] = gelu_tanh_value(gate[i]) * up[i]


@cuda_kernel("void(float32[:, ::1], float32[:, ::1])", threads=THREADS)
def gelu_glu(gate_up, out):  # pragma: no cover - device code
    # gate_up: [n, 2F] = [gate | up] -> out: [n, F]
    width = out.shape[1]
    for i in range(cuda.grid(1), out.shape[0] * width, cuda.gridsize(1)):
        r = i // width
        c = i - r * width
        out[r, c] = gelu_tanh_value(gate_up[r, c]) * gate_up[r, width + c]


@device_function
def silu_value(x):  # pragma: no cover - device code
    return x / (np.float32(1.0) + np.float32(math.exp(-x)))


@cuda_kernel("void(float32[::1], float32[::1])", threads=THREADS)
def silu(x, out):  # pragma: no cover - device code
    # x, out: [n]
    for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
        out[i] = silu_value(x[i])


@cuda_kernel("void(float32[:, ::1], float32[:, ::1])", threads=THREADS)
def silu_glu(gate_up, out):  # pragma: no cover - device code
    # gate_up: [n, 2F] = [gate | up] -> out: [n, F]
    width = out.shape[1]
    for i in range(cuda.grid(1), out.shape[0] * width, cuda.gridsize(1)):
        r = i // width
        c = i - r * width
        out[r, c] = silu_value(gate_up[r, c]) * gate_up[r, width + c]


@cuda_kernel("void(float32[::1], float32[::1])", threads=THREADS)
def gelu_erf(x, out):  # pragma: no cover - device code
    # x, out: [n]; 1 + erf(z) written as erfc(-z), which keeps its relative precision for x << 0
    for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
        out[i] = np.float32(0.5) * x[i] * np.float32(math.erfc(-x[i] * _INV_SQRT_2))


@cuda_kernel("void(float32[:, ::1], float32[:, ::1], float32[:, ::1], float32[:, ::1])", threads=THREADS)
def gated_add(x, update, gate, out):  # pragma: no cover - device code
    # x, update, out: [S, D]; gate: [S, D] or [1, D]
    width = x.shape[1]
    shared_gate = gate.shape[0] == 1
    for i in range(cuda.grid(1), x.shape[0] * width, cuda.gridsize(1)):
        s = i // width
        d = i - s * width
        g = gate[0, d] if shared_gate else gate[s, d]
        out[s, d] = x[s, d] + update[s, d] * g


def _flat(value, name: str):
    return on_device(value, name).reshape(-1)


def _launch_flat(fn, size: int, *args) -> None:
    if size:
        gpu().launch(fn, (blocks_for(size, THREADS),), (THREADS,), args)


@kernel("gelu_tanh", "cuda")
def gelu_tanh_cuda(x):
    out = gpu().empty(tuple(x.shape), np.float32)
    _launch_flat(gelu, out.size, _flat(x, "x"), out.reshape(-1))
    return returned(out, x)


@kernel("gelu_tanh_mul", "cuda")
def gelu_tanh_mul_cuda(gate, up):
    if tuple(gate.shape) != tuple(up.shape):
        raise ValueError(f"gelu_tanh_mul: gate {tuple(gate.shape)} and up {tuple(up.shape)} differ in shape")
    out = gpu().empty(tuple(gate.shape), np.float32)
    _launch_flat(gelu_mul, out.size, _flat(gate, "gate"), _flat(up, "up"), out.reshape(-1))
    return returned(out, gate)


def _glu_cuda(op: str, fn, gate_up):
    # gate_up: [..., 2F] -> [..., F]
    if not len(gate_up.shape) or gate_up.shape[-1] % 2:
        raise ValueError(f"{op}: the last axis holds [gate | up] and must be even, got {tuple(gate_up.shape)}")
    width = gate_up.shape[-1] // 2
    out = gpu().empty((*gate_up.shape[:-1], width), np.float32)
    _launch_flat(fn, out.size, on_device(gate_up, "gate_up").reshape(-1, 2 * width), out.reshape(-1, width))
    return returned(out, gate_up)


@kernel("gelu_tanh_glu", "cuda")
def gelu_tanh_glu_cuda(gate_up):
    return _glu_cuda("gelu_tanh_glu", gelu_glu, gate_up)


@kernel("silu", "cuda")
def silu_cuda(x):
    out = gpu().empty(tuple(x.shape), np.float32)
    _launch_flat(silu, out.size, _flat(x, "x"), out.reshape(-1))
    return returned(out, x)


@kernel("silu_glu", "cuda")
def silu_glu_cuda(gate_up):
    return _glu_cuda("silu_glu", silu_glu, gate_up)


@kernel("gelu_erf", "cuda")
def gelu_erf_cuda(x):
    out = gpu().empty(tuple(x.shape), np.float32)
    _launch_flat(gelu_erf, out.size, _flat(x, "x"), out.reshape(-1))
    return returned(out, x)


@kernel("gated_residual", "cuda")
def gated_residual_cuda(x, update, gate):
    if len(x.shape) != 2 or tuple(update.shape) != tuple(x.shape):
        raise ValueError(f"gated_residual: x {tuple(x.shape)} and update {tuple(update.shape)} must be equal [S, D]")
    tokens, width = x.shape
    if len(gate.shape) != 2 or gate.shape[1] != width or gate.shape[0] not in (1, tokens):
        raise ValueError(f"gated_residual: gate has shape {tuple(gate.shape)}; expected ({tokens}, {width}) "
                         f"or (1, {width})")
    out = gpu().empty((tokens, width), np.float32)
    _launch_flat(gated_add, out.size, on_device(x, "x"), on_device(update, "update"), on_device(gate, "gate"), out)
    return returned(out, x)
