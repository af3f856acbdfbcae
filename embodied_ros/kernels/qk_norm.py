"""RMS normalization of query/key projections across all heads together (Wan "rms_norm_across_heads").

    out = x * rsqrt(mean(x^2) + eps) * weight     (mean over all D = H*Dh channels of a token)

Unlike Gemma's RMSNorm (`norms.rms_norm`, which scales by 1 + weight) the weight multiplies
directly, and the statistic spans every head of the token rather than one head. Over a token's hidden state it is
Llama's RMSNorm (backbone/llama.py).
"""

from __future__ import annotations

import numba
import numpy as np

from embodied_ros.kernels.cpu.jit import jit
from embodied_ros.kernels.cpu.jit import PARALLEL_MIN_ELEMENTS
from embodied_ros.kernels.registry import kernel, reference

_FAST = {"reassoc", "contract"}


def _examples(rng: np.random.Generator) -> list[tuple]:
    cases = []
    for tokens, width in ((1, 6), (13, 64), (40, 96), (3, 384), (300, 256)):  # the last runs in parallel
        x = rng.standard_normal((tokens, width), dtype=np.float32) * 2.0
        weight = 1.0 + 0.2 * rng.standard_normal(width, dtype=np.float32)
        cases.append((x, weight, 1e-6))
    return cases


@reference("rms_norm_across_heads", examples=_examples)
def rms_norm_across_heads(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    # x: [S, D], weight: [D] -> [S, D]
    inverse_rms = 1.0 / np.sqrt(np.mean(np.square(x), axis=-1, keepdims=True) + np.float32(eps))
    return (x * inverse_rms * weight).astype(np.float32)


@kernel("rms_norm_across_heads", "numba")
def rms_norm_across_heads_numba(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    if x.ndim != 2 or weight.shape != x.shape[1:]:
        raise ValueError(f"rms_norm_across_heads: x {x.shape} and weight {weight.shape} do not fit")
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty_like(x)
    run = _rms_norm_parallel if x.size >= PARALLEL_MIN_ELEMENTS else _rms_norm_serial
    run(x, np.ascontiguousarray(weight, dtype=np.float32), np.float32(eps), out)
    return out


@jit(inline="always")
def _rms_norm_row(x, weight, eps, out, s):  # pragma: no cover - compiled
    width = x.shape[1]
    total = np.float32(0.0)
    for d in range(width):
        total += x[s, d] * x[s, d]
    inverse_rms = np.float32(1.0) / np.sqrt(total / np.float32(width) + eps)
    for d in range(width):
        out[s, d] = x[s, d] * inverse_rms * weight[d]


@jit(parallel=True, fastmath=_FAST)
def _rms_norm_parallel(x, weight, eps, out):  # pragma: no cover - compiled
    for s in numba.prange(x.shape[0]):
        _rms_norm_row(x, weight, eps, out, s)


@jit(fastmath=_FAST)
def _rms_norm_serial(x, weight, eps, out):  # pragma: no cover - compiled
    for s in range(x.shape[0]):
        _rms_norm_row(x, weight, eps, out, s)
