"""Adaptive (timestep-modulated) LayerNorm and gated residuals, as used by Wan/DiT blocks.

Each numba kernel is compiled twice, parallel over tokens and serial, and picks one by size.

Axes: S tokens, D width. `shift`, `scale` and `gate` are either per token [S, D] or shared by all
tokens [1, D]; both forms occur (Wan2.2 TI2V-5B modulates per token, Wan2.1 once per sequence).
"""

from __future__ import annotations

import numba
import numpy as np

from embodied_ros.kernels.cpu.jit import PARALLEL_MIN_ELEMENTS, jit
from embodied_ros.kernels.registry import kernel, reference

_FAST = {"reassoc", "contract"}
# Below this many elements a kernel runs on the calling thread: waking the thread pool costs more
# than the work (tens of microseconds idle, milliseconds when the cores are shared).


def _check_rows(op: str, x: np.ndarray, **per_row: np.ndarray) -> None:
    """Every named array must be [S, D] (per token) or [1, D] (shared) for x of shape [S, D]."""
    tokens, width = x.shape
    for name, array in per_row.items():
        if array.ndim != 2 or array.shape[1] != width or array.shape[0] not in (1, tokens):
            raise ValueError(f"{op}: {name} has shape {array.shape}; expected ({tokens}, {width}) or (1, {width})")


def _modulation_examples(rng: np.random.Generator) -> list[tuple]:
    cases = []
    for tokens, width, per_token in ((1, 8, False), (7, 33, True), (13, 64, False), (32, 96, True),
                                     (520, 130, True), (600, 128, False)):  # the last two run in parallel
        x = rng.standard_normal((tokens, width), dtype=np.float32) * 3 + 1
        rows = tokens if per_token else 1
        shift = rng.standard_normal((rows, width), dtype=np.float32)
        scale = rng.standard_normal((rows, width), dtype=np.float32) * 0.5
        cases.append((x, shift, scale, 1e-6))
    return cases


@reference("modulated_layer_norm", examples=_modulation_examples, rtol=1e-4, atol=1e-4)
def modulated_layer_norm(x: np.ndarray, shift: np.ndarray, scale: np.ndarray, eps: float) -> np.ndarray:
    """LayerNorm without affine parameters, then `* (1 + scale) + shift`."""
    # x: [S, D]; shift, scale: [S, D] or [1, D]
    mean = x.mean(axis=-1, keepdims=True)
    centered = x - mean
    variance = (centered * centered).mean(axis=-1, keepdims=True)
    normed = centered / np.sqrt(variance + np.float32(eps))
    return (normed * (np.float32(1.0) + scale) + shift).astype(np.float32)


@kernel("modulated_layer_norm", "numba")
def modulated_layer_norm_numba(x: np.ndarray, shift: np.ndarray, scale: np.ndarray, eps: float) -> np.ndarray:
    _check_rows("modulated_layer_norm", x, shift=shift, scale=scale)
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty_like(x)
    run = _modulated_layer_norm_parallel if x.size >= PARALLEL_MIN_ELEMENTS else _modulated_layer_norm_serial
    run(x, np.ascontiguousarray(shift, dtype=np.float32), np.ascontiguousarray(scale, dtype=np.float32),
        np.float32(eps), out)
    return out


@jit(inline="always")
def _modulated_layer_norm_row(x, shift, scale, eps, out, s):  # pragma: no cover - compiled
    width = x.shape[1]
    row = np.int64(s) if shift.shape[0] != 1 else np.int64(0)  # per-token rows or one shared row
    total = np.float32(0.0)
    for d in range(width):
        total += x[s, d]
    mean = total / width
    squares = np.float32(0.0)
    for d in range(width):
        centered = x[s, d] - mean
        squares += centered * centered
    inv_std = np.float32(1.0) / np.sqrt(squares / width + eps)
    for d in range(width):
        out[s, d] = (x[s, d] - mean) * inv_std * (np.float32(1.0) + scale[row, d]) + shift[row, d]


@jit(parallel=True, fastmath=_FAST)
def _modulated_layer_norm_parallel(x, shift, scale, eps, out):  # pragma: no cover - compiled
    for s in numba.prange(x.shape[0]):
        _modulated_layer_norm_row(x, shift, scale, eps, out, s)


@jit(fastmath=_FAST)
def _modulated_layer_norm_serial(x, shift, scale, eps, out):  # pragma: no cover - compiled
    for s in range(x.shape[0]):
        _modulated_layer_norm_row(x, shift, scale, eps, out, s)


def _gate_examples(rng: np.random.Generator) -> list[tuple]:
    cases = []
    for tokens, width, per_token in ((1, 8, False), (7, 33, True), (32, 96, False), (520, 130, True)):
        x = rng.standard_normal((tokens, width), dtype=np.float32)
        update = rng.standard_normal((tokens, width), dtype=np.float32)
        gate = rng.standard_normal((tokens if per_token else 1, width), dtype=np.float32)
        cases.append((x, update, gate))
        transposed = rng.standard_normal((width, tokens), dtype=np.float32).T  # a non-contiguous update
        cases.append((x, transposed, gate))
    return cases


@reference("gated_residual", examples=_gate_examples, rtol=1e-5, atol=1e-5)
def gated_residual(x: np.ndarray, update: np.ndarray, gate: np.ndarray) -> np.ndarray:
    """x + update * gate: the residual add of a modulated branch."""
    # x, update: [S, D]; gate: [S, D] or [1, D]
    return (x + update * gate).astype(np.float32)


@kernel("gated_residual", "numba")
def gated_residual_numba(x: np.ndarray, update: np.ndarray, gate: np.ndarray) -> np.ndarray:
    _check_rows("gated_residual", x, gate=gate)
    if update.shape != x.shape:
        raise ValueError(f"gated_residual: update {update.shape} differs from x {x.shape}")
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty_like(x)
    run = _gated_residual_parallel if x.size >= PARALLEL_MIN_ELEMENTS else _gated_residual_serial
    run(x, np.ascontiguousarray(update, dtype=np.float32), np.ascontiguousarray(gate, dtype=np.float32), out)
    return out


@jit(inline="always")
def _gated_residual_row(x, update, gate, out, s):  # pragma: no cover - compiled
    row = np.int64(s) if gate.shape[0] != 1 else np.int64(0)
    for d in range(x.shape[1]):
        out[s, d] = x[s, d] + update[s, d] * gate[row, d]


@jit(parallel=True, fastmath=_FAST)
def _gated_residual_parallel(x, update, gate, out):  # pragma: no cover - compiled
    for s in numba.prange(x.shape[0]):
        _gated_residual_row(x, update, gate, out, s)


@jit(fastmath=_FAST)
def _gated_residual_serial(x, update, gate, out):  # pragma: no cover - compiled
    for s in range(x.shape[0]):
        _gated_residual_row(x, update, gate, out, s)
