"""Softmax attention with bf16 products, for layers whose weights are stored in bf16 (as PyTorch runs
a bfloat16 model): q, k and v rounded to bf16 (nearest even), scores summed in float32 and softmaxed
in float32, the softmax's numerators rounded to bf16 for the product with v, each row's sum kept in
float32. Shapes and masking as `attention` (attention.py).

The numba kernel stacks the query heads of each kv head into one matrix, as attention.py's BLAS
path does, and runs every kv head in one compiled call: the head's keys, and its values transposed,
packed into bf16 pair panels as the weights of two products, the scores softmaxed in place and
their numerators rounded into the second product's rows. The products run on the unit the linear
layers use (`BF16_UNIT`): the AMX tiles (amx_gemm.py, `_attend_row_blocks`) or AVX512-BF16's
register tiles (bf16_gemm.py, `_attend_row_blocks_vdpbf16`). Without either, the same rounded values
multiply in float32 (a product of two bf16 values is exact in float32) through BLAS: the same math,
for machines where layers are not sent here. `BF16_ATTENTION` and `attention_for` say where they
are: where one of the units makes it faster than float32 attention.
"""

from __future__ import annotations

import numba
import numpy as np

from embodied_ros.kernels.attention import _cached_examples, _check_heads, _examples, _float32
from embodied_ros.kernels.cpu.allocator import aligned_empty
from embodied_ros.kernels.cpu.blas import split_product
from embodied_ros.kernels.cpu.amx_gemm import BLOCK_ROWS, TILE, block_against_panels, round_into_tile_row
from embodied_ros.kernels.cpu.bf16_gemm import (MAX_ROWS, Bf16Weight, bf16_bits, bf16_bits_of, padded_pairs,
                                                round_into_pairs)
from embodied_ros.kernels.cpu.bf16_gemm import _panels as pairs_against_panels
from embodied_ros.kernels.cpu.jit import jit
from embodied_ros.kernels.cpu.vector_ir import PANEL
from embodied_ros.kernels.cpu.vector_attention import softmax_numerators
from embodied_ros.kernels.cpu.vector_math import exp_f32, exp_into_bf16, max_of_chunks
from embodied_ros.kernels.linear_bf16 import BF16_UNIT
from embodied_ros.kernels.registry import kernel, reference

VECTOR_BLOCK_TILES = 4  # query rows per work item on AVX512-BF16: 4 register tiles of MAX_ROWS
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


@jit(inline="always")
def _numerators_into_steps(row, scale, bias, bias_row, key_bias, steps):  # pragma: no cover - compiled
    """A row of raw scores -> its softmax numerators rounded to bf16 into steps [n, 32] uint16 (a row of
    consecutive A tiles, or a row of bf16 pairs), zero past the row's end; returns 1 / the sum of the
    float32 numerators. bias [Tq, Tk] and key_bias [Tk] may be empty; the row is changed in place where
    a bias is added."""
    factor = scale
    if bias.shape[0]:
        for j in range(row.shape[0]):
            row[j] = row[j] * scale + bias[bias_row, j]
        factor = np.float32(1.0)
    elif key_bias.shape[0]:
        for j in range(row.shape[0]):
            row[j] = row[j] * scale + key_bias[j]
        factor = np.float32(1.0)
    n_keys = row.shape[0]
    full = n_keys // (2 * TILE)
    top = max_of_chunks(row.ctypes.data, full) if full else row[0]
    for k in range(2 * TILE * full, n_keys):
        top = max(top, row[k])
    total = exp_into_bf16(row.ctypes.data, full, top, factor, steps.ctypes.data, steps.strides[0])
    for step in range(full, steps.shape[0]):
        out = steps[step]
        for i in range(2 * TILE):
            k = 2 * TILE * step + i
            e = exp_f32((row[k] - top) * factor) if k < n_keys else np.float32(0.0)
            total += e
            out[i] = np.uint16(bf16_bits_of(e))
    return np.float32(1.0) / total


@jit(inline="always")
def _query_tiles(q, g, group, first, tiles):  # pragma: no cover - compiled
    """Rows first..first + 31 of kv head g's stacked queries (row R: query R // group, head
    g * group + R % group of q [Tq, Hq, d]) rounded to bf16 into A tiles [2, steps, 16, 32], zero past
    the queries and past d."""
    n_rows = q.shape[0] * group
    for r in range(BLOCK_ROWS):
        row = first + r
        if row >= n_rows:
            tiles[r // TILE, :, r % TILE, :] = 0
        else:
            round_into_tile_row(q[row // group, g * group + row % group], tiles[r // TILE], r % TILE)


@jit(inline="always")
def _scaled_into_heads(attended, inv_totals, first, valid, g, group, out):  # pragma: no cover - compiled
    """Stacked rows first..first + valid - 1 of kv head g, each times 1 / its numerators' sum, into
    out [Tq, Hq, d] (row R: query R // group, head g * group + R % group)."""
    for r in range(valid):
        row = first + r
        target = out[row // group, g * group + row % group]
        for c in range(out.shape[2]):
            target[c] = attended[r, c] * inv_totals[r]


@jit(parallel=True)
def _pack_heads(keys, values, key_panels, value_panels):  # pragma: no cover - compiled
    for g in numba.prange(keys.shape[1]):
        _pack_keys(keys, g, key_panels[g])
        _pack_values(values, g, value_panels[g])


@jit(parallel=True, fastmath={"reassoc", "contract"})
def _attend_row_blocks(q, key_panels, value_panels, n_keys, bias, key_bias, scale, q_tiles, scores, score_tiles,
                       attended, inv_totals, out):  # pragma: no cover - compiled
    """out [Tq, Hq, d] for every (kv head g, block of 32 of its stacked query rows), the work items
    split evenly between the workers (the buffers' first axis): the block's scores [32, keys] on the
    tiles (block_against_panels), their softmax numerators rounded into A tiles, times the head's
    value panels, each row scaled by 1 / its sum."""
    n_queries, n_heads, width = q.shape
    n_kv = key_panels.shape[0]
    group = n_heads // n_kv
    rows = n_queries * group
    row_blocks = -(-rows // BLOCK_ROWS)
    workers = q_tiles.shape[0]
    items = n_kv * row_blocks
    for worker in numba.prange(workers):
        q_w, s_w, p_w, a_w, inv = (q_tiles[worker], scores[worker], score_tiles[worker], attended[worker],
                                   inv_totals[worker])
        for item in range(worker * items // workers, (worker + 1) * items // workers):
            g, first = item // row_blocks, (item % row_blocks) * BLOCK_ROWS
            valid = min(BLOCK_ROWS, rows - first)
            _query_tiles(q, g, group, first, q_w)
            block_against_panels(q_w.ctypes.data, q_w.strides[0], key_panels[g].ctypes.data,
                                 key_panels.strides[1], key_panels.shape[1], s_w.ctypes.data, s_w.strides[0],
                                 q_w.shape[1])
            for r in range(BLOCK_ROWS):
                if r < valid:
                    inv[r] = _numerators_into_steps(s_w[r, :n_keys], scale, bias, (first + r) // group, key_bias,
                                                    p_w[r // TILE, :, r % TILE])
                else:
                    p_w[r // TILE, :, r % TILE, :] = 0
            block_against_panels(p_w.ctypes.data, p_w.strides[0], value_panels[g].ctypes.data,
                                 value_panels.strides[1], value_panels.shape[1], a_w.ctypes.data, a_w.strides[0],
                                 p_w.shape[1])
            _scaled_into_heads(a_w, inv, first, valid, g, group, out)


@jit(parallel=True, fastmath={"reassoc", "contract"})
def _attend_row_blocks_vdpbf16(q, key_panels, value_panels, n_keys, bias, key_bias, scale, q_pairs, scores,
                               numerator_steps, numerator_pairs, attended, inv_totals, zeros,
                               out):  # pragma: no cover - compiled
    """_attend_row_blocks with AVX512-BF16's register tiles (bf16_gemm.py) instead of the AMX tiles:
    the same panels, the block's rows held as bf16 pair rows ([workers, block, pairs] uint32; the
    numerators written as [workers, block, pairs / 16, 32] uint16, the same memory)."""
    n_queries, n_heads, width = q.shape
    n_kv = key_panels.shape[0]
    group = n_heads // n_kv
    rows = n_queries * group
    block = q_pairs.shape[1]
    row_blocks = -(-rows // block)
    workers = q_pairs.shape[0]
    items = n_kv * row_blocks
    for worker in numba.prange(workers):
        q_w, s_w, n_w, p_w, a_w, inv = (q_pairs[worker], scores[worker], numerator_steps[worker],
                                        numerator_pairs[worker], attended[worker], inv_totals[worker])
        for item in range(worker * items // workers, (worker + 1) * items // workers):
            g, first = item // row_blocks, (item % row_blocks) * block
            valid = min(block, rows - first)
            for r in range(valid):
                row = first + r
                round_into_pairs(q[row // group, g * group + row % group], width, q_w[r])
            pairs_against_panels(q_w[:valid], key_panels[g], zeros, s_w[:valid], 0, key_panels.shape[1])
            for r in range(valid):
                inv[r] = _numerators_into_steps(s_w[r, :n_keys], scale, bias, (first + r) // group, key_bias, n_w[r])
            pairs_against_panels(p_w[:valid], value_panels[g], zeros, a_w[:valid], 0, value_panels.shape[1])
            _scaled_into_heads(a_w, inv, first, valid, g, group, out)


def _on_vector_units(q: np.ndarray, k: np.ndarray, v: np.ndarray, bias: np.ndarray, key_bias: np.ndarray) -> np.ndarray:
    n_queries, n_heads, width = q.shape
    n_keys, n_kv = k.shape[0], k.shape[1]
    width_pairs, key_pairs = -(-width // 2), padded_pairs(n_keys)  # the numerators are written 32 at a time
    key_panels = aligned_empty((n_kv, -(-n_keys // PANEL), width_pairs, PANEL), np.uint32)
    value_panels = aligned_empty((n_kv, -(-width // PANEL), key_pairs, PANEL), np.uint32)
    _pack_heads(k, v, key_panels, value_panels)
    block = VECTOR_BLOCK_TILES * MAX_ROWS
    workers = max(1, min(numba.get_num_threads(), n_kv * -(-n_queries * (n_heads // n_kv) // block)))
    q_pairs = aligned_empty((workers, block, width_pairs), np.uint32)
    scores = aligned_empty((workers, block, key_panels.shape[1] * PANEL), np.float32)
    numerator_steps = aligned_empty((workers, block, key_pairs // TILE, 2 * TILE), np.uint16)
    numerator_pairs = numerator_steps.view(np.uint32).reshape(workers, block, key_pairs)
    attended = aligned_empty((workers, block, value_panels.shape[1] * PANEL), np.float32)
    zeros = np.zeros(PANEL * max(key_panels.shape[1], value_panels.shape[1]), np.float32)
    out = np.empty(q.shape, np.float32)
    _attend_row_blocks_vdpbf16(q, key_panels, value_panels, n_keys, bias, key_bias, np.float32(width ** -0.5),
                               q_pairs, scores, numerator_steps, numerator_pairs, attended, np.empty((workers, block), np.float32),
                               zeros, out)
    return out


def _on_tiles(q: np.ndarray, k: np.ndarray, v: np.ndarray, bias: np.ndarray, key_bias: np.ndarray) -> np.ndarray:
    n_queries, n_heads, width = q.shape
    n_keys, n_kv = k.shape[0], k.shape[1]
    width_pairs, key_pairs = padded_pairs(width), padded_pairs(n_keys)
    key_panels = aligned_empty((n_kv, -(-n_keys // PANEL), width_pairs, PANEL), np.uint32)
    value_panels = aligned_empty((n_kv, -(-width // PANEL), key_pairs, PANEL), np.uint32)
    _pack_heads(k, v, key_panels, value_panels)
    workers = max(1, min(numba.get_num_threads(), n_kv * -(-n_queries * (n_heads // n_kv) // BLOCK_ROWS)))
    q_tiles = aligned_empty((workers, 2, width_pairs // TILE, TILE, 2 * TILE), np.uint16)
    scores = aligned_empty((workers, BLOCK_ROWS, key_panels.shape[1] * PANEL), np.float32)
    score_tiles = aligned_empty((workers, 2, key_pairs // TILE, TILE, 2 * TILE), np.uint16)
    attended = aligned_empty((workers, BLOCK_ROWS, value_panels.shape[1] * PANEL), np.float32)
    out = np.empty(q.shape, np.float32)
    _attend_row_blocks(q, key_panels, value_panels, n_keys, bias, key_bias, np.float32(width ** -0.5), q_tiles, scores,
                       score_tiles, attended, np.empty((workers, BLOCK_ROWS), np.float32), out)
    return out


_ON_UNIT = {"amx": _on_tiles, "avx512_bf16": _on_vector_units}
BF16_ATTENTION = BF16_UNIT in _ON_UNIT


def _rounded_in_float32(q: np.ndarray, k: np.ndarray, v: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """The same math without tiles: bf16-rounded values multiplied in float32 through BLAS."""
    n_queries, n_heads, width = q.shape
    n_kv = k.shape[1]
    group = n_heads // n_kv
    q_groups = q.reshape(n_queries, n_kv, group, width).transpose(1, 0, 2, 3).reshape(n_kv, n_queries * group, width)
    out = np.empty((n_kv, n_queries * group, width), np.float32)
    inv_totals = np.empty(n_queries * group, np.float32)
    split_product(q_groups.shape[1] * width * k.shape[0])
    for g in range(n_kv):
        scores = np.ascontiguousarray(to_bf16_values(q_groups[g]) @ to_bf16_values(k[:, g]).T)
        _numerators(scores, scores.shape[0], k.shape[0], np.float32(width ** -0.5), bias, group, inv_totals)
        out[g] = (to_bf16_values(scores) @ to_bf16_values(v[:, g])) * inv_totals[:, None]
    heads_last = out.reshape(n_kv, n_queries, group, width).transpose(1, 0, 2, 3)
    return np.ascontiguousarray(heads_last).reshape(n_queries, n_heads, width)


@kernel("attention_bf16", "numba")
def attention_bf16_numba(q: np.ndarray, k: np.ndarray, v: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    _check_heads("attention_bf16", q, k, v)
    n_queries, n_keys = q.shape[0], k.shape[0]
    bias = _NO_BIAS if bias is None else np.ascontiguousarray(np.broadcast_to(bias, (n_queries, n_keys)), np.float32)
    q, k, v = _float32(q), _float32(k), _float32(v)  # views of a stacked projection stay views
    if BF16_ATTENTION:
        return _ON_UNIT[BF16_UNIT](q, k, v, bias, _NO_KEY_BIAS)
    return _rounded_in_float32(q, k, v, bias)


def _joined(k_cache: np.ndarray, k_new: np.ndarray) -> np.ndarray:
    return np.concatenate([np.asarray(k_cache, np.float32), np.asarray(k_new, np.float32)])


@reference("cached_attention_bf16", examples=_cached_examples, rtol=2e-3, atol=2e-3)
def cached_attention_bf16(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, cache_bias: np.ndarray | None,
                          k_new: np.ndarray, v_new: np.ndarray) -> np.ndarray:
    """cached_attention (attention.py) with the products of attention_bf16: the new tokens read
    [cache ; themselves], cache rows masked by cache_bias [N]."""
    keys, values = _joined(k_cache, k_new), _joined(v_cache, v_new)
    bias = None
    if cache_bias is not None:
        row = np.concatenate([cache_bias, np.zeros(k_new.shape[0], np.float32)])
        bias = np.broadcast_to(row, (q.shape[0], row.size))
    return attention_bf16(q, keys, values, bias)


@kernel("cached_attention_bf16", "numba")
def cached_attention_bf16_numba(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, cache_bias: np.ndarray | None,
                                k_new: np.ndarray, v_new: np.ndarray) -> np.ndarray:
    _check_heads("cached_attention_bf16", q, k_new, v_new)
    _check_heads("cached_attention_bf16", q, k_cache, v_cache)
    keys, values = _joined(k_cache, k_new), _joined(v_cache, v_new)
    key_bias = _NO_KEY_BIAS if cache_bias is None else _joined(cache_bias, np.zeros(k_new.shape[0], np.float32))
    if BF16_ATTENTION:
        return _ON_UNIT[BF16_UNIT](_float32(q), keys, values, _NO_BIAS, key_bias)
    bias = _NO_BIAS if cache_bias is None else np.ascontiguousarray(np.broadcast_to(key_bias, (q.shape[0], key_bias.size)))
    return _rounded_in_float32(_float32(q), keys, values, bias)


def attention_for(ks, weight) -> callable:
    """The attention of a layer whose projection weight is `weight`: bf16 products where the layer is
    stored in bf16 and the CPU has a bf16 unit, else float32 attention. On the 2-core Xeon the tiles
    took 7 against 15 ms for SmolVLM's vision, 1024 tokens x 12 heads of 64; 1.4 against 3.7 for
    pi0.5's SigLIP, 256 x 16 of 72; 7 against 31 for Gemma's 968 x 8 of 256. On a 2-core AMD EPYC
    (Zen 4) `vdpbf16ps` took 12 against 20, 1.4 against 2.0 and 21 against 37 ms."""
    if BF16_ATTENTION and isinstance(weight, Bf16Weight):
        return ks.attention_bf16
    return ks.attention


def cached_attention_for(ks, weight) -> callable:
    """cached_attention for a layer whose projection weight is `weight`, as attention_for chooses (the
    pi0.5 expert's 50 queries over 968 + 50 keys, 8 heads of 256: 1.8 against 4.5 ms on the Xeon's
    tiles, 1.4 against 4.6 ms on the AMD EPYC's `vdpbf16ps`)."""
    if BF16_ATTENTION and isinstance(weight, Bf16Weight):
        return ks.cached_attention_bf16
    return ks.cached_attention


__all__ = ["BF16_ATTENTION", "attention_bf16", "attention_for", "cached_attention_bf16", "cached_attention_for",
           "to_bf16_values"]
