"""GELU in its exact form, 0.5 * x * (1 + erf(x / sqrt(2))) (the Qwen3-VL patch mergers)."""

from __future__ import annotations

import math

import numpy as np

from embodied_ros.kernels.cpu.jit import jit
from embodied_ros.kernels.registry import kernel, reference

_ERF = np.vectorize(math.erf, otypes=[np.float64])


def _examples(rng: np.random.Generator) -> list[tuple]:
    return [(rng.standard_normal(shape, dtype=np.float32) * 4.0,) for shape in ((1, 5), (13, 33), (6, 512))]


@reference("gelu_erf", examples=_examples, rtol=1e-5, atol=1e-6)
def gelu_erf(x: np.ndarray) -> np.ndarray:
    exact = 0.5 * x.astype(np.float64) * (1.0 + _ERF(x.astype(np.float64) / math.sqrt(2.0)))
    return exact.astype(np.float32)


@jit()
def _gelu_erf_flat(x, out):  # pragma: no cover - compiled
    for i in range(x.size):
        value = np.float64(x[i])
        out[i] = np.float32(0.5 * value * (1.0 + math.erf(value * 0.7071067811865476)))


@kernel("gelu_erf", "numba")
def gelu_erf_numba(x: np.ndarray) -> np.ndarray:
    flat = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    out = np.empty(flat.size, np.float32)
    _gelu_erf_flat(flat, out)
    return out.reshape(x.shape)
