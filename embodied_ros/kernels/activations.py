"""Activations: GELU with the tanh approximation, alone (SigLIP MLP) and fused with the Gemma gate.

gelu_tanh(x)          = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
gelu_tanh_mul(g, u)   = gelu_tanh(g) * u      (Gemma MLP: down(gelu(gate(h)) * up(h)))

The numba kernels fuse the whole expression into one vectorized pass over memory, with the tanh of
`_vector_math` (within 1.2e-7 of the exact value).
"""

from __future__ import annotations

import math

import numpy as np

from embodied_ros.kernels._jit import jit
from embodied_ros.kernels._vector_math import tanh_f32
from embodied_ros.kernels.registry import kernel, reference

_SQRT_2_OVER_PI = np.float32(math.sqrt(2.0 / math.pi))
_CUBIC = np.float32(0.044715)


def _examples(rng: np.random.Generator) -> list[tuple]:
    shapes = ((1, 5), (13, 33), (50, 768), (3, 1000))
    return [(rng.standard_normal(shape, dtype=np.float32) * 4.0,) for shape in shapes]


def _mul_examples(rng: np.random.Generator) -> list[tuple]:
    return [(x, rng.standard_normal(x.shape, dtype=np.float32)) for (x,) in _examples(rng)]


@reference("gelu_tanh", examples=_examples, rtol=1e-5, atol=1e-6)
def gelu_tanh(x: np.ndarray) -> np.ndarray:
    inner = _SQRT_2_OVER_PI * (x + _CUBIC * (x * x * x))
    return np.float32(0.5) * x * (np.float32(1.0) + np.tanh(inner))


@reference("gelu_tanh_mul", examples=_mul_examples, rtol=1e-5, atol=1e-6)
def gelu_tanh_mul(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    return gelu_tanh(gate) * up


@jit(inline="always")
def _gelu_scalar(x):  # pragma: no cover - compiled
    inner = np.float32(0.7978845608028654) * (x + np.float32(0.044715) * (x * x * x))
    return np.float32(0.5) * x * (np.float32(1.0) + tanh_f32(inner))


@jit()
def _gelu_flat(x, out):  # pragma: no cover - compiled
    for i in range(x.size):
        out[i] = _gelu_scalar(x[i])


@jit()
def _gelu_mul_flat(gate, up, out):  # pragma: no cover - compiled
    for i in range(gate.size):
        out[i] = _gelu_scalar(gate[i]) * up[i]


@kernel("gelu_tanh", "numba")
def gelu_tanh_numba(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x)
    out = np.empty_like(x)
    _gelu_flat(x.reshape(-1), out.reshape(-1))
    return out


@kernel("gelu_tanh_mul", "numba")
def gelu_tanh_mul_numba(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    if gate.shape != up.shape:
        raise ValueError(f"gelu_tanh_mul: gate {gate.shape} and up {up.shape} differ in shape")
    gate, up = np.ascontiguousarray(gate), np.ascontiguousarray(up)
    out = np.empty_like(gate)
    _gelu_mul_flat(gate.reshape(-1), up.reshape(-1), out.reshape(-1))
    return out
