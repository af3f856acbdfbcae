"""Rotary position embedding, rotate-half form (Gemma / transformers).

For a head vector x = [x1, x2] (halves of head_dim) at position p:
    rope(x) = x * cos + [-x2, x1] * sin,   cos/sin = cos/sin(p * [f, f]),  f_i = theta^(-2i/head_dim)
Tables are built in float32 exactly as transformers does (inv_freq in float32, one float32 product
per entry), so angles at long positions match the reference bit for bit before cos/sin.
"""

from __future__ import annotations

import numpy as np

from embodied_ros.kernels.cpu.jit import jit
from embodied_ros.kernels.registry import kernel, reference


def rope_tables(positions: np.ndarray, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin tables for integer positions: [T] -> ([T, head_dim], [T, head_dim]) float32."""
    if head_dim % 2:
        raise ValueError(f"rotary embedding needs an even head_dim, got {head_dim}")
    exponents = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
    inv_freq = (np.float32(1.0) / np.power(np.float32(theta), exponents)).astype(np.float32)
    angles = np.asarray(positions, dtype=np.float32)[:, None] * inv_freq[None, :]  # [T, head_dim/2]
    angles = np.concatenate([angles, angles], axis=-1)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def _examples(rng: np.random.Generator) -> list[tuple]:
    cases = []
    for tokens, heads, head_dim in ((1, 1, 2), (7, 3, 16), (50, 8, 48), (13, 1, 256)):
        x = rng.standard_normal((tokens, heads, head_dim), dtype=np.float32)
        cos, sin = rope_tables(rng.integers(0, 1000, tokens), head_dim, 10000.0)
        cases.append((x, cos, sin))
    return cases


@reference("rope", examples=_examples)
def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    # x: [T, H, d], cos, sin: [T, d] -> [T, H, d]
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


@jit()
def _rope(x, cos, sin):  # pragma: no cover - compiled
    tokens, heads, head_dim = x.shape
    half = head_dim // 2
    out = np.empty_like(x)
    for t in range(tokens):
        for h in range(heads):
            for i in range(half):
                a = x[t, h, i]
                b = x[t, h, i + half]
                out[t, h, i] = a * cos[t, i] - b * sin[t, i]
                out[t, h, i + half] = b * cos[t, i + half] + a * sin[t, i + half]
    return out


@kernel("rope", "numba")
def rope_numba(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    # a strided x (heads cut from a stacked q/k/v product) would keep the loop from vectorizing
    return _rope(np.ascontiguousarray(x, dtype=np.float32), cos, sin)
