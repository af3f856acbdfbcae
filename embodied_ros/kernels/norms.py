"""Normalizations over the last axis of a [rows, width] float32 array.

rms_norm      Gemma:     x * rsqrt(mean(x^2) + eps) * (1 + w)
ada_rms_norm  pi0.5 expert (adaptive RMSNorm): x * rsqrt(mean(x^2) + eps) * (1 + scale) + shift,
              scale and shift computed from the time conditioning
layer_norm    SigLIP:    (x - mean) * rsqrt(var + eps) * w + b  (biased variance)

The numba kernels make one pass per row, release the GIL, and accumulate in float32 like the
PyTorch reference; `fastmath` is limited to reassociation and contraction (sums vectorize) so no
approximate math functions slip in.
"""

from __future__ import annotations

import numpy as np

from embodied_ros.kernels.cpu.jit import jit
from embodied_ros.kernels.registry import kernel, reference

_FAST = {"reassoc", "contract"}


def _row_examples(rng: np.random.Generator) -> list[tuple[np.ndarray, int]]:
    shapes = ((1, 7), (13, 33), (50, 96), (3, 257))
    return [(rng.standard_normal(shape, dtype=np.float32) * 3.0, shape[1]) for shape in shapes]


def _rms_examples(rng: np.random.Generator) -> list[tuple]:
    return [(x, rng.standard_normal(width, dtype=np.float32) * 0.1, 1e-6) for x, width in _row_examples(rng)]


def _ada_examples(rng: np.random.Generator) -> list[tuple]:
    return [
        (x, rng.standard_normal(width, dtype=np.float32) * 0.1, rng.standard_normal(width, dtype=np.float32), 1e-6)
        for x, width in _row_examples(rng)
    ]


def _layer_norm_examples(rng: np.random.Generator) -> list[tuple]:
    return [
        (x + 2.0, 1.0 + rng.standard_normal(width, dtype=np.float32) * 0.1,
         rng.standard_normal(width, dtype=np.float32) * 0.1, 1e-6)
        for x, width in _row_examples(rng)
    ]


def _inverse_rms(x: np.ndarray, eps: float) -> np.ndarray:
    # x: [N, D] -> [N, 1]
    return 1.0 / np.sqrt(np.mean(np.square(x), axis=-1, keepdims=True) + np.float32(eps))


@reference("rms_norm", examples=_rms_examples)
def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    # x: [N, D], weight: [D] -> [N, D]
    return (x * _inverse_rms(x, eps)) * (np.float32(1.0) + weight)


@reference("ada_rms_norm", examples=_ada_examples)
def ada_rms_norm(x: np.ndarray, scale: np.ndarray, shift: np.ndarray, eps: float) -> np.ndarray:
    # x: [N, D], scale, shift: [D] -> [N, D]
    return (x * _inverse_rms(x, eps)) * (np.float32(1.0) + scale) + shift


@reference("layer_norm", examples=_layer_norm_examples)
def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    # x: [N, D], weight, bias: [D] -> [N, D]
    centered = x - np.mean(x, axis=-1, keepdims=True)
    variance = np.mean(np.square(centered), axis=-1, keepdims=True)
    return centered / np.sqrt(variance + np.float32(eps)) * weight + bias


@jit(fastmath=_FAST)
def _rms_norm_affine(x, scale, shift, eps):  # pragma: no cover - compiled
    rows, width = x.shape
    out = np.empty_like(x)
    for r in range(rows):
        total = np.float32(0.0)
        for c in range(width):
            total += x[r, c] * x[r, c]
        inv = np.float32(1.0) / np.sqrt(total / np.float32(width) + np.float32(eps))
        for c in range(width):
            out[r, c] = (x[r, c] * inv) * (np.float32(1.0) + scale[c]) + shift[c]
    return out


@kernel("rms_norm", "numba")
def rms_norm_numba(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return _rms_norm_affine(x, weight, np.zeros_like(weight), eps)


@kernel("ada_rms_norm", "numba")
def ada_rms_norm_numba(x: np.ndarray, scale: np.ndarray, shift: np.ndarray, eps: float) -> np.ndarray:
    return _rms_norm_affine(x, scale, shift, eps)


@jit(fastmath=_FAST)
def _layer_norm(x, weight, bias, eps):  # pragma: no cover - compiled
    rows, width = x.shape
    out = np.empty_like(x)
    for r in range(rows):
        total = np.float32(0.0)
        for c in range(width):
            total += x[r, c]
        mean = total / np.float32(width)
        squares = np.float32(0.0)
        for c in range(width):
            d = x[r, c] - mean
            squares += d * d
        inv = np.float32(1.0) / np.sqrt(squares / np.float32(width) + np.float32(eps))
        for c in range(width):
            out[r, c] = (x[r, c] - mean) * inv * weight[c] + bias[c]
    return out


@kernel("layer_norm", "numba")
def layer_norm_numba(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    return _layer_norm(x, weight, bias, eps)
