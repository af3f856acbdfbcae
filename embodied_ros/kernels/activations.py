"""Activations: GELU with the tanh approximation, alone (SigLIP MLP) and fused with the Gemma gate.

gelu_tanh(x)          = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
gelu_tanh_mul(g, u)   = gelu_tanh(g) * u      (Gemma MLP: down(gelu(gate(h)) * up(h)))
gelu_tanh_glu(gu)     = gelu_tanh_mul(gu[:, :F], gu[:, F:]) for gu = [gate | up] of one stacked
                        product [n, 2F]; reading the stacked array keeps the numba loop on
                        contiguous rows (strided halves would not vectorize: 50x slower)

The numba kernels fuse the whole expression into one vectorized pass over memory, in the
equivalent form x / (1 + exp(-2 sqrt(2/pi) (x + 0.044715 x^3))) with the vectorizable exp of
`cpu/vector_math.py`.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from embodied_ros.kernels.cpu.allocator import recycled_empty
from embodied_ros.kernels.cpu.jit import PARALLEL_MIN_ELEMENTS, jit
from embodied_ros.kernels.cpu.vector_math import exp_f32
from embodied_ros.kernels.registry import kernel, reference

_SQRT_2_OVER_PI = np.float32(math.sqrt(2.0 / math.pi))
_CUBIC = np.float32(0.044715)
# The reference form (PyTorch's too) loses relative accuracy for large negative inputs, where
# 1 + tanh cancels to a few float32 ulps of 1; the kernels' form does not. They differ by up to
# |x * up| * 6e-8 there, a few 1e-6 on the examples.
_ATOL = 5e-6


def _examples(rng: np.random.Generator) -> list[tuple]:
    shapes = ((1, 5), (13, 33), (50, 768), (3, 1000), (97, 700))  # the last one runs in parallel
    return [(rng.standard_normal(shape, dtype=np.float32) * 4.0,) for shape in shapes]


def _mul_examples(rng: np.random.Generator) -> list[tuple]:
    cases = [(x, rng.standard_normal(x.shape, dtype=np.float32)) for (x,) in _examples(rng)]
    gate_up = rng.standard_normal((13, 66), dtype=np.float32) * 4.0
    cases.append((gate_up[:, :33], gate_up[:, 33:]))  # the halves of one stacked product (strided views)
    return cases


@reference("gelu_tanh", examples=_examples, rtol=1e-5, atol=_ATOL)
def gelu_tanh(x: np.ndarray) -> np.ndarray:
    inner = _SQRT_2_OVER_PI * (x + _CUBIC * (x * x * x))
    return np.float32(0.5) * x * (np.float32(1.0) + np.tanh(inner))


@reference("gelu_tanh_mul", examples=_mul_examples, rtol=1e-5, atol=_ATOL)
def gelu_tanh_mul(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    return gelu_tanh(gate) * up


def _glu_examples(rng: np.random.Generator) -> list[tuple]:
    return [(rng.standard_normal((rows, 2 * width), dtype=np.float32) * 4.0,)
            for rows, width in ((1, 3), (13, 33), (50, 768), (97, 700))]  # the last one runs in parallel


@reference("gelu_tanh_glu", examples=_glu_examples, rtol=1e-5, atol=_ATOL)
def gelu_tanh_glu(gate_up: np.ndarray) -> np.ndarray:
    # gate_up: [n, 2F] -> [n, F]
    half = gate_up.shape[-1] // 2
    return gelu_tanh_mul(gate_up[..., :half], gate_up[..., half:])


@jit(inline="always")
def _gelu_scalar(x):  # pragma: no cover - compiled
    # 0.5 * (1 + tanh(y)) = 1 / (1 + exp(-2y)): the same value without the cancellation of 1 + tanh(y)
    # near -1, so large negative inputs keep their (tiny) relative accuracy
    inner = np.float32(0.7978845608028654) * (x + np.float32(0.044715) * (x * x * x))
    return x / (np.float32(1.0) + exp_f32(np.float32(-2.0) * inner))


@jit()
def _gelu_rows(x, out):  # pragma: no cover - compiled
    rows, cols = x.shape
    for r in range(rows):
        for c in range(cols):
            out[r, c] = _gelu_scalar(x[r, c])


@jit(parallel=True)
def _gelu_rows_parallel(x, out):  # pragma: no cover - compiled
    rows, cols = x.shape
    for r in numba.prange(rows):
        for c in range(cols):
            out[r, c] = _gelu_scalar(x[r, c])


@jit()
def _gelu_mul_rows(gate, up, out):  # pragma: no cover - compiled
    rows, cols = gate.shape
    for r in range(rows):
        for c in range(cols):
            out[r, c] = _gelu_scalar(gate[r, c]) * up[r, c]


@jit(inline="always")
def _gelu_glu_row(gate_up, out, r):  # pragma: no cover - compiled
    cols = out.shape[1]
    for c in range(cols):
        out[r, c] = _gelu_scalar(gate_up[r, c]) * gate_up[r, cols + c]


@jit()
def _gelu_glu_rows(gate_up, out):  # pragma: no cover - compiled
    for r in range(out.shape[0]):
        _gelu_glu_row(gate_up, out, r)


@jit(parallel=True)
def _gelu_glu_rows_parallel(gate_up, out):  # pragma: no cover - compiled
    for r in numba.prange(out.shape[0]):
        _gelu_glu_row(gate_up, out, r)


def _as_rows(x: np.ndarray) -> np.ndarray:
    """[..., n] -> [rows, n] without copying when the last axis is contiguous."""
    return x.reshape(-1, x.shape[-1]) if x.ndim != 2 else x


@kernel("gelu_tanh", "numba")
def gelu_tanh_numba(x: np.ndarray) -> np.ndarray:
    out = recycled_empty(x.shape, np.float32)
    rows = _as_rows(x)
    (_gelu_rows_parallel if x.size >= PARALLEL_MIN_ELEMENTS and rows.shape[0] > 1 else _gelu_rows)(rows, _as_rows(out))
    return out


@kernel("gelu_tanh_mul", "numba")
def gelu_tanh_mul_numba(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """gate and up may be strided views (e.g. the two halves of one [n, 2F] product)."""
    if gate.shape != up.shape:
        raise ValueError(f"gelu_tanh_mul: gate {gate.shape} and up {up.shape} differ in shape")
    out = np.empty(gate.shape, np.float32)
    if gate.flags.c_contiguous and up.flags.c_contiguous:  # contiguous: one long row
        _gelu_mul_rows(gate.reshape(1, -1), up.reshape(1, -1), out.reshape(1, -1))
    else:
        _gelu_mul_rows(_as_rows(gate), _as_rows(up), _as_rows(out))
    return out


@kernel("gelu_tanh_glu", "numba")
def gelu_tanh_glu_numba(gate_up: np.ndarray) -> np.ndarray:
    if gate_up.shape[-1] % 2:
        raise ValueError(f"gelu_tanh_glu: the last axis holds [gate | up] and must be even, got {gate_up.shape}")
    gate_up = np.ascontiguousarray(gate_up, dtype=np.float32)
    out = recycled_empty((*gate_up.shape[:-1], gate_up.shape[-1] // 2), np.float32)
    rows = _as_rows(out)
    (_gelu_glu_rows_parallel if out.size >= PARALLEL_MIN_ELEMENTS and rows.shape[0] > 1 else _gelu_glu_rows)(
        _as_rows(gate_up), rows)
    return out

