"""Softmax attention with bf16 products, for layers whose weights are stored in bf16 (as PyTorch runs
a bfloat16 model): q, k and v rounded to bf16 (nearest even), scores summed in float32 and softmaxed
in float32, the softmax's numerators rounded to bf16 for the product with v, each row's sum kept in
float32. Shapes and masking as `attention` (attention.py).

The numba kernel stacks the query heads of each kv head into one matrix, as attention.py's BLAS
path does, and runs every kv head in one compiled call (`_tile_heads`): the head's keys, and its
values transposed, packed into bf16 pair panels as the weights of two products on the AMX tiles
(amx_gemm.py), the scores softmaxed in place in the first product's padded output. Without tiles
the same rounded values multiply in float32 (a product of two bf16 values is exact in float32)
through BLAS: the same math, for machines where layers are not sent here.
`BF16_ATTENTION` and `attention_for` say where they are: only where the tiles make it faster than
float32 attention.
"""

from __future__ import annotations

import numba
import numpy as np

from embodied_ros.kernels.attention import _check_heads, _examples
from embodied_ros.kernels.cpu.allocator import aligned_empty, recycled_empty
from embodied_ros.kernels.cpu.amx_gemm import (BLOCK_ROWS, BLOCKING, TILE, _product_parallel,  # noqa: PLC2701
                                               _to_tiles_parallel)
from embodied_ros.kernels.cpu.bf16_gemm import Bf16Weight, bf16_bits, bf16_bits_of, padded_pairs
from embodied_ros.kernels.cpu.jit import jit
from embodied_ros.kernels.cpu.vector_ir import PANEL
from embodied_ros.kernels.cpu.vector_attention import softmax_numerators
from embodied_ros.kernels.linear_bf16 import BF16_UNIT
from embodied_ros.kernels.registry import kernel, reference

BF16_ATTENTION = BF16_UNIT == "amx"
_NO_KEY_BIAS = np.zeros(0, np.float32)
_NO_BIAS = np.zeros((0, 0), np.float32)


def to_bf16_values(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bf16 (even on ties), as float32."""
    return (bf16_bits(x).astype(np.uint32) << np.uint32(16)).view(np.float32).reshape(np.shape(x))


@reference("attention_bf16", examples=_examples, rtol=2e-3, atol=2e-3)
def attention_bf16(q: np.ndarray, k: np.ndarray, v: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    _check_heads("attention_bf16", q, k, v)
    group = q.shape[1] // k.shape[1]
    q_heads = to_bf16_values(q).transpose(1, 0, 2).astype(np.float64)  # [Hq, Tq, d]
    k_heads = np.repeat(to_bf16_values(k).transpose(1, 0, 2), group, axis=0).astype(np.float64)
    v_heads = np.repeat(to_bf16_values(v).transpose(1, 0, 2), group, axis=0).astype(np.float64)
    scores = ((q_heads @ k_heads.transpose(0, 2, 1)) * q.shape[2] ** -0.5).astype(np.float32)  # [Hq, Tq, Tk]
    if bias is not None:
        scores = scores + bias
    numerators = np.exp(scores - scores.max(axis=-1, keepdims=True))
    totals = numerators.astype(np.float64).sum(axis=-1, keepdims=True)
    out = (to_bf16_values(numerators).astype(np.float64) @ v_heads) / totals
    return out.transpose(1, 0, 2).astype(np.float32)


@jit(parallel=True, fastmath={"reassoc", "contract"})
def _numerators(scores, rows, n_keys, scale, bias, group, inv_totals):  # pragma: no cover - compiled
    """The first `rows` rows of raw scores (their first n_keys columns) -> softmax numerators in place,
    the columns past n_keys zeroed; row r (query r // group) reads bias row r // group ([Tq, Tk], or
    [0, 0])."""
    for r in numba.prange(rows):
        inv_totals[r] = softmax_numerators(scores[r, :n_keys], scale, bias, r // group, _NO_KEY_BIAS)
        scores[r, n_keys:] = 0


@jit()
def _pack_keys(keys, head, panels):  # pragma: no cover - compiled
    """Keys [Tk, Hkv, d] (C order) of one head as the weight [Tk, d] of a product: bf16 pair panels
    [ceil(Tk / 32), pairs, 32] uint32, zero past Tk and past d."""
    n_keys, width = keys.shape[0], keys.shape[2]
    for p in range(panels.shape[0]):
        for i in range(PANEL):
            r = PANEL * p + i
            if r >= n_keys:
                panels[p, :, i] = 0
                continue
            row = keys[r, head]
            for j in range(panels.shape[1]):
                lo = bf16_bits_of(row[2 * j]) if 2 * j < width else np.uint32(0)
                hi = bf16_bits_of(row[2 * j + 1]) if 2 * j + 1 < width else np.uint32(0)
                panels[p, j, i] = lo | (hi << np.uint32(16))


@jit()
def _pack_values(values, head, panels):  # pragma: no cover - compiled
    """Values [Tk, Hkv, d] (C order) of one head as the weight [d, Tk] of a product (transposed)."""
    n_keys, width = values.shape[0], values.shape[2]
    for j in range(panels.shape[1]):
        if 2 * j >= n_keys:
            panels[:, j, :] = 0
            continue
        even = values[2 * j, head]
        odd = values[2 * j + 1, head] if 2 * j + 1 < n_keys else even
        for p in range(panels.shape[0]):
            for i in range(PANEL):
                c = PANEL * p + i
                if c >= width:
                    panels[p, j, i] = 0
                else:
                    hi = bf16_bits_of(odd[c]) if 2 * j + 1 < n_keys else np.uint32(0)
                    panels[p, j, i] = bf16_bits_of(even[c]) | (hi << np.uint32(16))


@jit()
def _tile_heads(q_groups, keys, values, bias, scale, group, q_tiles, key_panels, zeros, scores, score_tiles,
                value_panels, attended, inv_totals, out, blocking, workers):  # pragma: no cover - compiled
    """Every kv head g: out[g] = softmax(q_groups[g] k_g^T * scale + bias) v_g on the tiles. The
    buffers are 64-byte aligned and sized by attention_bf16_numba; rows of scores past the queries
    are scratch."""
    rows, n_keys = q_groups.shape[1], keys.shape[0]
    row_blocks = scores.shape[0] // BLOCK_ROWS
    width = out.shape[2]
    for g in range(keys.shape[1]):
        _pack_keys(keys, g, key_panels)
        _to_tiles_parallel(q_groups[g], q_tiles)
        _product_parallel(q_tiles.ctypes.data, q_tiles.strides[0], row_blocks, q_tiles.shape[1],
                          key_panels.ctypes.data, key_panels.shape[0], key_panels.strides[0], zeros.ctypes.data,
                          scores.ctypes.data, scores.strides[0], blocking, min(workers, key_panels.shape[0]))
        _numerators(scores, rows, n_keys, scale, bias, group, inv_totals)
        _to_tiles_parallel(scores, score_tiles)
        _pack_values(values, g, value_panels)
        _product_parallel(score_tiles.ctypes.data, score_tiles.strides[0], row_blocks, score_tiles.shape[1],
                          value_panels.ctypes.data, value_panels.shape[0], value_panels.strides[0],
                          zeros.ctypes.data, attended.ctypes.data, attended.strides[0], blocking,
                          min(workers, value_panels.shape[0]))
        for r in range(rows):
            for c in range(width):
                out[g, r, c] = attended[r, c] * inv_totals[r]


def _on_tiles(q_groups: np.ndarray, k: np.ndarray, v: np.ndarray, bias: np.ndarray, group: int) -> np.ndarray:
    n_kv, rows, width = q_groups.shape
    n_keys = k.shape[0]
    row_blocks = -(-rows // BLOCK_ROWS)
    width_pairs, key_pairs = padded_pairs(width), padded_pairs(n_keys)
    key_panels = aligned_empty((-(-n_keys // PANEL), width_pairs, PANEL), np.uint32)
    value_panels = aligned_empty((-(-width // PANEL), key_pairs, PANEL), np.uint32)
    zeros = aligned_empty((max(key_panels.shape[0], value_panels.shape[0]) * PANEL,), np.float32)
    zeros[:] = 0
    q_tiles = recycled_empty((2 * row_blocks, width_pairs // TILE, TILE, 2 * TILE), np.uint16)
    scores = recycled_empty((row_blocks * BLOCK_ROWS, key_panels.shape[0] * PANEL), np.float32)
    score_tiles = recycled_empty((2 * row_blocks, key_pairs // TILE, TILE, 2 * TILE), np.uint16)
    attended = recycled_empty((row_blocks * BLOCK_ROWS, value_panels.shape[0] * PANEL), np.float32)
    out = np.empty((n_kv, rows, width), np.float32)
    _tile_heads(q_groups, k, v, bias, np.float32(width ** -0.5), group, q_tiles, key_panels, zeros, scores,
                score_tiles, value_panels, attended, np.empty(rows, np.float32), out, BLOCKING,
                numba.get_num_threads())
    return out


def _rounded_in_float32(q_groups: np.ndarray, k: np.ndarray, v: np.ndarray, bias: np.ndarray, group: int) -> np.ndarray:
    """The same math without tiles: bf16-rounded values multiplied in float32 through BLAS."""
    n_kv, rows, width = q_groups.shape
    out = np.empty((n_kv, rows, width), np.float32)
    inv_totals = np.empty(rows, np.float32)
    for g in range(n_kv):
        scores = np.ascontiguousarray(to_bf16_values(q_groups[g]) @ to_bf16_values(k[:, g]).T)
        _numerators(scores, rows, k.shape[0], np.float32(width ** -0.5), bias, group, inv_totals)
        out[g] = (to_bf16_values(scores) @ to_bf16_values(v[:, g])) * inv_totals[:, None]
    return out


@kernel("attention_bf16", "numba")
def attention_bf16_numba(q: np.ndarray, k: np.ndarray, v: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    _check_heads("attention_bf16", q, k, v)
    n_queries, n_heads, width = q.shape
    n_keys, n_kv = k.shape[0], k.shape[1]
    group = n_heads // n_kv
    bias = _NO_BIAS if bias is None else np.ascontiguousarray(np.broadcast_to(bias, (n_queries, n_keys)), np.float32)
    q_groups = np.ascontiguousarray(q.reshape(n_queries, n_kv, group, width).transpose(1, 0, 2, 3),
                                    np.float32).reshape(n_kv, n_queries * group, width)
    k, v = np.ascontiguousarray(k, np.float32), np.ascontiguousarray(v, np.float32)
    out = (_on_tiles if BF16_ATTENTION else _rounded_in_float32)(q_groups, k, v, bias, group)
    return out.reshape(n_kv, n_queries, group, width).transpose(1, 0, 2, 3).reshape(n_queries, n_heads, width)


TILE_HEAD_WIDTH = 128  # narrower heads attend in float32 (see attention_for)


def attention_for(ks, weight, head_width: int) -> callable:
    """The attention of a layer whose projection weight is `weight`: bf16 products where the layer is
    stored in bf16, the tiles make them faster and heads are at least TILE_HEAD_WIDTH wide, else
    float32 attention. The score product's depth is the head width: at 64-72 (two tile steps) the
    accumulators go to memory after every other instruction, and on the 2-core Xeon the tiles gained
    nothing there (SmolVLM vision, 1024 tokens x 12 heads of 64: 15.2 ms either way; pi0.5's SigLIP,
    256 x 16 of 72: 2.1 against 1.8 in float32), while Gemma's 968 tokens x 8 heads of 256 took 14
    against 29 ms."""
    if BF16_ATTENTION and head_width >= TILE_HEAD_WIDTH and isinstance(weight, Bf16Weight):
        return ks.attention_bf16
    return ks.attention


__all__ = ["BF16_ATTENTION", "attention_bf16", "attention_for", "to_bf16_values"]
