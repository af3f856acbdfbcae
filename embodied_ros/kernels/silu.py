"""SiLU, alone (small time/action MLPs) and fused with the Llama MLP gate (SwiGLU).

silu(x)          = x / (1 + exp(-x))
silu_glu(gu)     = silu(gu[:, :F]) * gu[:, F:] for gu = [gate | up] of one stacked product [n, 2F]
                   (Llama / SmolLM2 MLP: down(silu(gate(h)) * up(h)))

The numba kernels make one vectorized pass over contiguous rows with the vectorizable exp of
`cpu/vector_math.py`, as the GELU kernels of activations.py do.
"""

from __future__ import annotations

import numpy as np

from embodied_ros.kernels.cpu.jit import jit
from embodied_ros.kernels.cpu.vector_math import exp_f32
from embodied_ros.kernels.registry import kernel, reference


def _examples(rng: np.random.Generator) -> list[tuple]:
    return [(rng.standard_normal(shape, dtype=np.float32) * 4.0,) for shape in ((1, 5), (13, 33), (50, 256))]


def _glu_examples(rng: np.random.Generator) -> list[tuple]:
    return [(rng.standard_normal((rows, 2 * width), dtype=np.float32) * 4.0,)
            for rows, width in ((1, 3), (13, 33), (50, 768))]


@reference("silu", examples=_examples, rtol=1e-5, atol=1e-6)
def silu(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # exp(-x) overflows below x = -88: x / inf is the limit, -0
        return (x / (np.float32(1.0) + np.exp(-x))).astype(np.float32)


@reference("silu_glu", examples=_glu_examples, rtol=1e-5, atol=1e-6)
def silu_glu(gate_up: np.ndarray) -> np.ndarray:
    # gate_up: [n, 2F] -> [n, F]
    half = gate_up.shape[-1] // 2
    return silu(gate_up[..., :half]) * gate_up[..., half:]


@jit(inline="always")
def _silu_scalar(x):  # pragma: no cover - compiled
    return x / (np.float32(1.0) + exp_f32(-x))


@jit()
def _silu_rows(x, out):  # pragma: no cover - compiled
    rows, cols = x.shape
    for r in range(rows):
        for c in range(cols):
            out[r, c] = _silu_scalar(x[r, c])


@jit()
def _silu_glu_rows(gate_up, out):  # pragma: no cover - compiled
    rows, cols = out.shape
    for r in range(rows):
        for c in range(cols):
            out[r, c] = _silu_scalar(gate_up[r, c]) * gate_up[r, cols + c]


def _as_rows(x: np.ndarray) -> np.ndarray:
    return x.reshape(-1, x.shape[-1]) if x.ndim != 2 else x


@kernel("silu", "numba")
def silu_numba(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty(x.shape, np.float32)
    _silu_rows(_as_rows(x), _as_rows(out))
    return out


@kernel("silu_glu", "numba")
def silu_glu_numba(gate_up: np.ndarray) -> np.ndarray:
    if gate_up.shape[-1] % 2:
        raise ValueError(f"silu_glu: the last axis holds [gate | up] and must be even, got {gate_up.shape}")
    gate_up = np.ascontiguousarray(gate_up, dtype=np.float32)
    out = np.empty((*gate_up.shape[:-1], gate_up.shape[-1] // 2), np.float32)
    _silu_glu_rows(_as_rows(gate_up), _as_rows(out))
    return out
