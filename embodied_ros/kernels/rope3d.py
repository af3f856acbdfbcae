"""3-axis rotary position embedding over (frames, height, width), as in Wan video transformers.

Axes: S tokens, H heads, Dh head width. Each head's channels are split into [t | h | w] parts of
sizes [Dh - 4*(Dh//6), 2*(Dh//6), 2*(Dh//6)]; inside a part of size d, the channel pair (2j, 2j+1)
rotates by pos * theta^(-2j/d), where pos is the token's frame, row or column index. Pairs are
adjacent channels (not the rotate-half layout of Gemma RoPE).

Tables are [S, Dh] float32 with every value repeated for both channels of its pair, computed in
float64 and rounded once, which reproduces diffusers' `WanRotaryPosEmbed` bit for bit. Tokens are
ordered s = (f*h + r)*w + c (row-major over frames, rows, columns).
"""

from __future__ import annotations

import numba
import numpy as np

from embodied_ros.kernels.cpu.jit import jit
from embodied_ros.kernels.cpu.jit import PARALLEL_MIN_ELEMENTS
from embodied_ros.kernels.registry import kernel, reference

_FAST = {"reassoc", "contract"}


def rope3d_split(head_dim: int) -> tuple[int, int, int]:
    """Channels of a head given to the (frame, row, column) axes."""
    if head_dim % 2 or head_dim < 6:
        raise ValueError(f"3-axis RoPE needs an even head width of at least 6, got {head_dim}")
    spatial = 2 * (head_dim // 6)
    return head_dim - 2 * spatial, spatial, spatial


def rope3d_tables(grid_fhw: tuple[int, int, int], head_dim: int, theta: float = 10000.0,
                  frame_start: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin tables [f*h*w, head_dim] for a latent grid; frames are numbered from `frame_start`."""
    frames, rows, cols = (int(n) for n in grid_fhw)
    if min(frames, rows, cols) < 1 or frame_start < 0:
        raise ValueError(f"RoPE grid must be positive with frame_start >= 0, got {grid_fhw}, {frame_start}")
    positions = (np.arange(frame_start, frame_start + frames), np.arange(rows), np.arange(cols))
    cos_parts, sin_parts = [], []
    for axis, (width, pos) in enumerate(zip(rope3d_split(head_dim), positions)):
        inv_freq = 1.0 / (theta ** (np.arange(0, width, 2, dtype=np.float64) / width))  # [width/2]
        angles = np.outer(pos.astype(np.float64), inv_freq)  # [n, width/2]
        shape = [1, 1, 1, width]
        shape[axis] = len(pos)
        for parts, fn in ((cos_parts, np.cos), (sin_parts, np.sin)):
            table = np.repeat(fn(angles), 2, axis=1).astype(np.float32).reshape(shape)
            parts.append(np.broadcast_to(table, (frames, rows, cols, width)))
    tokens = frames * rows * cols
    cos = np.concatenate(cos_parts, axis=-1).reshape(tokens, head_dim)
    sin = np.concatenate(sin_parts, axis=-1).reshape(tokens, head_dim)
    return np.ascontiguousarray(cos), np.ascontiguousarray(sin)


def _rope_examples(rng: np.random.Generator) -> list[tuple]:
    cases = []
    for grid, heads, head_dim in (((1, 1, 3), 1, 6), ((2, 3, 2), 3, 16), ((3, 2, 5), 2, 34),
                                  ((2, 8, 10), 4, 64)):  # the last runs in parallel
        cos, sin = rope3d_tables(grid, head_dim)
        x = rng.standard_normal((cos.shape[0], heads, head_dim), dtype=np.float32)
        cases.append((x, cos, sin))
    return cases


@reference("rope_pairs", examples=_rope_examples, rtol=1e-5, atol=1e-5)
def rope_pairs(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate adjacent channel pairs (x[2j], x[2j+1]) of every head by the token's angles."""
    # x: [S, H, Dh]; cos, sin: [S, Dh] (each value repeated for both channels of its pair)
    first, second = x[..., 0::2], x[..., 1::2]
    c = cos[:, None, 0::2]
    s = sin[:, None, 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = first * c - second * s
    out[..., 1::2] = first * s + second * c
    return out


@kernel("rope_pairs", "numba")
def rope_pairs_numba(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    expected = (x.shape[0], x.shape[2])
    if cos.shape != expected or sin.shape != expected:
        raise ValueError(f"rope_pairs: tables {cos.shape}/{sin.shape} do not fit x {x.shape}; expected {expected}")
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty_like(x)
    run = _rope_pairs_parallel if x.size >= PARALLEL_MIN_ELEMENTS else _rope_pairs_serial
    run(x, np.ascontiguousarray(cos, dtype=np.float32), np.ascontiguousarray(sin, dtype=np.float32), out)
    return out


@jit(inline="always")
def _rope_pairs_token(x, cos, sin, out, s):  # pragma: no cover - compiled
    for h in range(x.shape[1]):
        for j in range(0, x.shape[2], 2):
            a = x[s, h, j]
            b = x[s, h, j + 1]
            out[s, h, j] = a * cos[s, j] - b * sin[s, j + 1]
            out[s, h, j + 1] = a * sin[s, j + 1] + b * cos[s, j]


@jit(parallel=True, fastmath=_FAST)
def _rope_pairs_parallel(x, cos, sin, out):  # pragma: no cover - compiled
    for s in numba.prange(x.shape[0]):
        _rope_pairs_token(x, cos, sin, out, s)


@jit(fastmath=_FAST)
def _rope_pairs_serial(x, cos, sin, out):  # pragma: no cover - compiled
    for s in range(x.shape[0]):
        _rope_pairs_token(x, cos, sin, out, s)
