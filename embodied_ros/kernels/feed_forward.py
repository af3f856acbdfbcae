"""A layer's feed-forward block as one op: y = down(act(up(x) + up_bias)) + down_bias.

    activation      up weight                          layers
    gelu_tanh       [hidden, in]                       SigLIP, Wan blocks, GR00T's DiT
    gelu_tanh_glu   [2 hidden, in], rows [gate | up]   Gemma
    silu_glu        [2 hidden, in], rows [gate | up]   Llama / SmolLM2

Where both weights are Bf16Weight and their products run on the AMX tiles (kernels/cpu/amx_gemm.py),
each 32 x 32 block of the up product (with its gate block for the GLUs) is activated while it is
in L1 and rounded straight into the down product's A tiles: the [rows, hidden] float32 middle is
never written, read back by the activation, written again and read to be rounded (for SmolVLA's
vision MLP over three cameras, 37 MiB four times a layer): 25 -> 19 ms there, Gemma's 968 tokens
126 -> 104 ms (2-core Xeon). On AVX512-BF16 without tiles, a large middle (`FUSED_MIN_MIDDLE`) is
made one panel of 32 hidden features at a time, every row's up sums for that panel (and its gate's)
in a per-thread [rows, 64] float32 block in L2, activated and rounded from there into the down
product's bf16 pair rows. The math is that of the three ops one after another (the same block
sums, activation formula and rounding; a contracted multiply-add may round a middle value the other
way). Elsewhere it is that sequence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numba
import numpy as np

from embodied_ros.kernels.activations import (_gelu_scalar, gelu_tanh, gelu_tanh_glu, gelu_tanh_glu_numba,  # noqa: PLC2701
                                              gelu_tanh_numba)
from embodied_ros.kernels.cpu.allocator import aligned_empty, recycled_empty
from embodied_ros.kernels.cpu.amx_gemm import (BLOCK_ROWS, BLOCKING, TILE, _block, _check_tile_weight,  # noqa: PLC2701
                                               a_tiles, padded_bias, tile_product)
from embodied_ros.kernels.cpu.bf16_gemm import Bf16Weight, bf16_bits_of, pairs_product, panel_product, rounded_pairs
from embodied_ros.kernels.cpu.jit import jit
from embodied_ros.kernels.cpu.vector_ir import PANEL
from embodied_ros.kernels.linear import linear, linear_numba
from embodied_ros.kernels.linear_bf16 import BF16_UNIT, linear_bf16, to_bf16_weight
from embodied_ros.kernels.registry import kernel, reference
from embodied_ros.kernels.silu import _silu_scalar, silu_glu, silu_glu_numba  # noqa: PLC2701


@dataclass(frozen=True)
class Activation:
    kind: int            # the fused kernel's switch (_activated)
    glu: bool            # up is [gate | up] stacked, 2 x hidden rows
    reference: Callable  # the activation op's numpy reference
    numba: Callable      # and its numba kernel


ACTIVATIONS = {"gelu_tanh": Activation(0, False, gelu_tanh, gelu_tanh_numba),
               "gelu_tanh_glu": Activation(1, True, gelu_tanh_glu, gelu_tanh_glu_numba),
               "silu_glu": Activation(2, True, silu_glu, silu_glu_numba)}


def _examples(rng: np.random.Generator) -> list[tuple]:
    cases = []
    for activation, rows, n_in, hidden, n_out in (("gelu_tanh", 5, 24, 40, 7), ("gelu_tanh", 70, 96, 128, 33),
                                                  ("gelu_tanh_glu", 37, 64, 64, 20), ("silu_glu", 50, 40, 96, 48),
                                                  ("silu_glu", 3, 16, 10, 5)):
        n_up = 2 * hidden if ACTIVATIONS[activation].glu else hidden
        x = rng.standard_normal((rows, n_in), dtype=np.float32)
        up = rng.standard_normal((n_up, n_in), dtype=np.float32) * np.float32(n_in ** -0.5)
        down = rng.standard_normal((n_out, hidden), dtype=np.float32) * np.float32(hidden ** -0.5)
        up_bias = rng.standard_normal(n_up, dtype=np.float32) if activation == "gelu_tanh" else None
        down_bias = rng.standard_normal(n_out, dtype=np.float32) if activation == "gelu_tanh" else None
        cases.append((x, up, up_bias, down, down_bias, activation))
        cases.append((x, to_bf16_weight(up), up_bias, to_bf16_weight(down), down_bias, activation))
    return cases


def _product(x: np.ndarray, weight, bias: np.ndarray | None) -> np.ndarray:
    return (linear_bf16 if isinstance(weight, Bf16Weight) else linear)(x, weight, bias)


def check_feed_forward(x: np.ndarray, up, down, activation: str) -> None:
    if activation not in ACTIVATIONS:
        raise ValueError(f"feed_forward: unknown activation {activation!r}; expected one of {tuple(ACTIVATIONS)}")
    glu = ACTIVATIONS[activation].glu
    hidden = up.shape[0] // 2 if glu else up.shape[0]
    if x.shape[-1] != up.shape[1] or down.shape[1] != hidden or (glu and up.shape[0] % 2):
        raise ValueError(f"feed_forward ({activation}): input {x.shape}, up {tuple(up.shape)} and down "
                         f"{tuple(down.shape)} do not chain")


@reference("feed_forward", examples=_examples, rtol=2e-3, atol=2e-3)
def feed_forward(x: np.ndarray, up, up_bias: np.ndarray | None, down, down_bias: np.ndarray | None,
                 activation: str) -> np.ndarray:
    check_feed_forward(x, up, down, activation)
    return _product(ACTIVATIONS[activation].reference(_product(x, up, up_bias)), down, down_bias)


@jit(inline="always")
def _activated(kind, gate, up):  # pragma: no cover - compiled
    if kind == 0:
        return _gelu_scalar(gate)
    if kind == 1:
        return _gelu_scalar(gate) * up
    return _silu_scalar(gate) * up


@jit(parallel=True, fastmath={"reassoc", "contract"})
def _up_into_tiles(a, a_stride, row_blocks, steps, panels, panel_bytes, bias, kind, up_offset, scratch,
                   hidden_tiles, rows_per_pass):  # pragma: no cover - compiled
    """hidden_tiles[:, p] = bf16(act(block p of x @ up^T + bias)) for every hidden panel p (GLU: with
    panel p + up_offset as the up half), the panels split between the workers (scratch's first
    axis, [workers, 32 * rows_per_pass, 64] float32 each), rows_per_pass blocks of 32 rows at a time."""
    workers = scratch.shape[0]
    n_hidden_panels = hidden_tiles.shape[1]
    for worker in numba.prange(workers):
        block = scratch[worker]
        for m0 in range(0, row_blocks, rows_per_pass):
            blocks = min(rows_per_pass, row_blocks - m0)
            a_pass = a + m0 * 2 * a_stride
            for p in range(worker * n_hidden_panels // workers, (worker + 1) * n_hidden_panels // workers):
                _block(a_pass, a_stride, panels + p * panel_bytes, block.ctypes.data, block.strides[0],
                       bias + p * PANEL * 4, 0, 0, blocks, steps)
                if kind != 0:
                    q = p + up_offset
                    _block(a_pass, a_stride, panels + q * panel_bytes, block.ctypes.data + PANEL * 4,
                           block.strides[0], bias + q * PANEL * 4, 0, 0, blocks, steps)
                for r in range(blocks * BLOCK_ROWS):
                    row = m0 * BLOCK_ROWS + r
                    target = hidden_tiles[row // TILE, p, row % TILE]
                    for i in range(PANEL):
                        target[i] = np.uint16(bf16_bits_of(_activated(kind, block[r, i], block[r, PANEL + i])))


def _fused_on_tiles(up, down, activation: str) -> bool:
    """Whether this product pair takes the fused path: both on the tiles, the up product in one pass of
    depth (BLOCKING) and, for a GLU, its up half starting on a panel."""
    if BF16_UNIT != "amx" or not (isinstance(up, Bf16Weight) and isinstance(down, Bf16Weight)):
        return False
    hidden = down.shape[1]
    return up.panels.shape[1] // TILE <= BLOCKING[0] and (not ACTIVATIONS[activation].glu or hidden % PANEL == 0)


def _feed_forward_on_tiles(x: np.ndarray, up: Bf16Weight, up_bias, down: Bf16Weight, down_bias,
                           activation: str) -> np.ndarray:
    _check_tile_weight(up)
    _check_tile_weight(down)
    rows, hidden = x.shape[0], down.shape[1]
    steps = up.panels.shape[1] // TILE
    tiles = a_tiles(x, steps)
    row_blocks = -(-rows // BLOCK_ROWS)
    hidden_panels = down.panels.shape[1] // TILE  # = ceil(hidden / 32): a hidden panel is a down tile step
    hidden_tiles = recycled_empty((2 * row_blocks, hidden_panels, TILE, 2 * TILE), np.uint16)
    workers = max(1, min(numba.get_num_threads(), hidden_panels))
    rows_per_pass = BLOCKING[1]
    scratch = aligned_empty((workers, rows_per_pass * BLOCK_ROWS, 2 * PANEL), np.float32)
    bias_row = padded_bias(up, up_bias)
    _up_into_tiles(tiles.ctypes.data, tiles.strides[0], row_blocks, steps, up.panels.ctypes.data,
                   up.panels.strides[0], bias_row.ctypes.data, ACTIVATIONS[activation].kind, hidden // PANEL,
                   scratch, hidden_tiles, rows_per_pass)
    return tile_product(hidden_tiles, rows, down, down_bias)[:rows, :down.shape[0]]


# On a 2-core AMD EPYC (Zen 4) fusing paid from a [rows, hidden] middle of about 8 M values: Gemma's
# 816 x 16384 426 -> 397 ms, SmolVLM's vision 3072 x 3072 89 -> 86 ms; SigLIP's 768 x 4304 and
# smaller ones were no faster (the pi0.5 expert's 50 x 4096 3.4 -> 3.5 ms).
FUSED_MIN_MIDDLE = 1 << 23


@jit(parallel=True, fastmath={"reassoc", "contract"})
def _up_into_pairs(x, panels, bias, kind, up_offset, scratch, hidden, workers):  # pragma: no cover - compiled
    """AVX512-BF16's fused up product: hidden[:, 16 p:16 p + 16] = the bf16 pairs of act(x @ panel p
    (+ bias), x @ panel p + up_offset) for each hidden panel p (up_offset 0: no GLU), the panel's 32
    columns of every row summed in scratch[worker] [N, 64] float32 (in L2) and activated from there."""
    n_rows = x.shape[0]
    n_panels = hidden.shape[1] // (PANEL // 2)
    for worker in numba.prange(workers):
        block = scratch[worker]
        for p in range(worker * n_panels // workers, (worker + 1) * n_panels // workers):
            for half in range(2 if up_offset else 1):
                q = p + half * up_offset
                panel_product(x, panels[q], bias[PANEL * q:].ctypes.data, block.ctypes.data + half * PANEL * 4,
                              2 * PANEL)
            for r in range(n_rows):
                for i in range(PANEL // 2):
                    low = _activated(kind, block[r, 2 * i], block[r, PANEL + 2 * i])
                    high = _activated(kind, block[r, 2 * i + 1], block[r, PANEL + 2 * i + 1])
                    hidden[r, PANEL // 2 * p + i] = bf16_bits_of(low) | (bf16_bits_of(high) << np.uint32(16))


def _fused_on_vector_units(rows: int, up, down, activation: str) -> bool:
    """Whether this product pair takes AVX512-BF16's fused path: both weights bf16 panels, a middle of
    at least FUSED_MIN_MIDDLE values and, for a GLU, its up half starting on a panel."""
    if BF16_UNIT != "avx512_bf16" or not (isinstance(up, Bf16Weight) and isinstance(down, Bf16Weight)):
        return False
    return rows * down.shape[1] >= FUSED_MIN_MIDDLE and (not ACTIVATIONS[activation].glu or down.shape[1] % PANEL == 0)


def _feed_forward_on_vector_units(x: np.ndarray, up: Bf16Weight, up_bias, down: Bf16Weight, down_bias,
                                  activation: str) -> np.ndarray:
    rows, hidden = x.shape[0], down.shape[1]
    glu = ACTIVATIONS[activation].glu
    workers = max(1, min(numba.get_num_threads(), down.panels.shape[0]))
    hidden_pairs = recycled_empty((rows, down.panels.shape[1]), np.uint32)
    scratch = aligned_empty((workers, rows, 2 * PANEL), np.float32)
    _up_into_pairs(rounded_pairs(x, up.panels.shape[1]), up.panels, padded_bias(up, up_bias),
                   ACTIVATIONS[activation].kind, hidden // PANEL if glu else 0, scratch, hidden_pairs, workers)
    return pairs_product(hidden_pairs, down, down_bias, hidden)


@kernel("feed_forward", "numba")
def feed_forward_numba(x: np.ndarray, up, up_bias: np.ndarray | None, down, down_bias: np.ndarray | None,
                       activation: str) -> np.ndarray:
    check_feed_forward(x, up, down, activation)
    fused = (_feed_forward_on_tiles if _fused_on_tiles(up, down, activation) else
             _feed_forward_on_vector_units if _fused_on_vector_units(x.size // x.shape[-1], up, down, activation) else
             None)
    if fused is not None:
        rows = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, x.shape[-1])
        y = fused(rows, up, up_bias, down, down_bias, activation)
        return np.ascontiguousarray(y).reshape(*x.shape[:-1], down.shape[0])
    return linear_numba(ACTIVATIONS[activation].numba(linear_numba(x, up, up_bias)), down, down_bias)
