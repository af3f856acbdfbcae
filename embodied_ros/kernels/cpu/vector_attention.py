"""Softmax attention on the register tiles of `cpu/gemm.py`: scores, softmax and weighted sum of a
few query rows at a time, in one parallel region, without BLAS.

Rows: the query heads that share one kv head, (query i, head g of the group) in that order, so
that with a single kv head (Gemma, the pi0.5 expert) every query head is one row of one product.
Per kv head, its keys are packed as K^T panels [keys / 32, d, 32] and its values as panels
[d / 32, keys, 32]; per tile of up to 10 rows:

    scores [rows, keys] = q_rows @ K^T           (register tiles over the key panels)
    p = exp(scores * d^-0.5 + bias - max)        (in place; 1 / sum kept per row)
    out [rows, d] = (p @ V) / sum                (register tiles over the value panels)

so a tile's scores stay in L1 and never go to memory. Keys and values may come in two parts, the
cached ones and the new ones, read in that order without being concatenated. The threads share
the kv heads when there are enough of them (Wan: 24), else the rows of the one head (each thread
packs that head's keys and values itself: no barrier inside the region).
"""

from __future__ import annotations

import math
import threading

import numba
import numpy as np

from embodied_ros.kernels.cpu.gemm import MAX_ROWS, ZERO_BIAS, tile_rows
from embodied_ros.kernels.cpu.jit import PARALLEL_MIN_MACS, jit
from embodied_ros.kernels.cpu.vector_ir import LANES, PANEL, address, floats_at, transpose16
from embodied_ros.kernels.cpu.vector_math import exp_f32

_local = threading.local()
_FAST = {"reassoc", "contract"}  # inlined kernels compile with their caller's flags: set on the callers


@jit(fastmath=_FAST)
def row_max(row):  # pragma: no cover - compiled
    """max of a float32 row; eight running maxima, as LLVM does not vectorize one max chain."""
    m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = row[0]
    n = row.shape[0]
    j = 0
    while j + 8 <= n:
        m0 = row[j] if row[j] > m0 else m0
        m1 = row[j + 1] if row[j + 1] > m1 else m1
        m2 = row[j + 2] if row[j + 2] > m2 else m2
        m3 = row[j + 3] if row[j + 3] > m3 else m3
        m4 = row[j + 4] if row[j + 4] > m4 else m4
        m5 = row[j + 5] if row[j + 5] > m5 else m5
        m6 = row[j + 6] if row[j + 6] > m6 else m6
        m7 = row[j + 7] if row[j + 7] > m7 else m7
        j += 8
    for k in range(j, n):
        m0 = row[k] if row[k] > m0 else m0
    return max(max(max(m0, m1), max(m2, m3)), max(max(m4, m5), max(m6, m7)))


@jit(inline="always")
def _key_address(parts, which, j, head):  # pragma: no cover - compiled
    """Address of key (which = 0) or value (which = 2) j of a kv head, from the two parts' layouts
    parts[which], parts[which + 1] = (address, rows, row stride, head stride), strides in floats."""
    if j >= parts[which, 1]:
        j, which = j - parts[which, 1], which + 1
    return parts[which, 0] + (j * parts[which, 2] + head * parts[which, 3]) * 4


@jit(inline="always")
def _pack_head(parts, head, width, key_panels, value_panels):  # pragma: no cover - compiled
    # keys: key_panels[p, c, j] = k[32 p + j, c]; values: value_panels[p, j, c] = v[j, 32 p + c]
    n_keys = parts[0, 1] + parts[1, 1]
    for p in range((n_keys + PANEL - 1) // PANEL):
        first, last = PANEL * p, min(PANEL * p + PANEL, n_keys)
        one_part = last <= parts[0, 1] or first >= parts[0, 1]
        if last - first == PANEL and one_part and width % LANES == 0:  # rows at one stride: vector transposes
            which = 0 if last <= parts[0, 1] else 1
            for half in range(2):
                rows = _key_address(parts, 0, first + LANES * half, head)
                for c in range(0, width, LANES):
                    transpose16(rows + 4 * c, parts[which, 2], key_panels[p, c:, LANES * half:].ctypes.data, PANEL)
            continue
        for j in range(PANEL):
            key = floats_at(_key_address(parts, 0, min(first + j, n_keys - 1), head), 1, width, width)[0]
            for c in range(width):
                key_panels[p, c, j] = key[c] if first + j < last else np.float32(0.0)
    for j in range(n_keys):
        value = floats_at(_key_address(parts, 2, j, head), 1, width, width)[0]
        for p in range((width + PANEL - 1) // PANEL):
            for c in range(PANEL):
                value_panels[p, j, c] = value[PANEL * p + c] if PANEL * p + c < width else np.float32(0.0)


@jit(inline="always")
def softmax_numerators(row, scale, bias, bias_row, key_bias):  # pragma: no cover - compiled
    """row of raw dot products -> exp(s * scale + bias[bias_row] + key_bias - max) in place; returns
    1 / their sum (the caller scales the weighted sum instead of the longer row). bias [Tq, Tk] and
    key_bias [Tk] may be empty. Without a bias the scale moves into the exponent: max(s * scale) =
    max(s) * scale for scale > 0, which saves a pass over the row."""
    factor = scale
    if bias.shape[0] or key_bias.shape[0]:
        for j in range(row.shape[0]):
            s = row[j] * scale
            if bias.shape[0]:
                s += bias[bias_row, j]
            if key_bias.shape[0]:
                s += key_bias[j]
            row[j] = s
        factor = np.float32(1.0)
    top = row_max(row)
    total = np.float32(0.0)
    for j in range(row.shape[0]):
        e = exp_f32((row[j] - top) * factor)
        row[j] = e
        total += e
    return np.float32(1.0) / total


@jit(inline="always")
def _softmax_rows(scores, rows, n_keys, scale, bias, key_bias, first_row, group, inv_totals):  # pragma: no cover
    # scores[:rows, :n_keys] -> softmax numerators in place; 1 / sum into inv_totals[:rows]
    for r in range(rows):
        inv_totals[r] = softmax_numerators(scores[r, :n_keys], scale, bias, (first_row + r) // group, key_bias)


@jit(inline="always")
def _rows_of_head(q, out, head, r0, r1, width, n_keys, scale, bias, key_bias, group, key_panels, value_panels,
                  scores, inv_totals, scratch):  # pragma: no cover - compiled
    """Rows r0..r1 of kv head `head`. q, out: (address, head stride, row stride) in floats, features
    contiguous."""
    key_blocks, value_blocks = (n_keys + PANEL - 1) // PANEL, (width + PANEL - 1) // PANEL
    lds, zero = scores.shape[1], ZERO_BIAS.ctypes.data
    tiles = (r1 - r0 + MAX_ROWS - 1) // MAX_ROWS
    base, extra = (r1 - r0) // tiles, (r1 - r0) % tiles
    row = r0
    for t in range(tiles):
        rows = base + 1 if t < extra else base
        q_rows = q[0] + (head * q[1] + row * q[2]) * 4
        for p in range(key_blocks):
            tile_rows(rows, q_rows, q[2], key_panels[p].ctypes.data, scores[:, PANEL * p:].ctypes.data, lds, width,
                       False, zero)
        _softmax_rows(scores, rows, n_keys, scale, bias, key_bias, row, group, inv_totals)
        out_rows = floats_at(out[0] + (head * out[1] + row * out[2]) * 4, rows, out[2], width)
        for p in range(value_blocks):
            columns = min(PANEL, width - PANEL * p)
            target = out_rows[:, PANEL * p:].ctypes.data if columns == PANEL else scratch.ctypes.data
            tile_rows(rows, scores.ctypes.data, lds, value_panels[p].ctypes.data, target,
                       out[2] if columns == PANEL else PANEL, n_keys, False, zero)
            for i in range(rows):
                inv = inv_totals[i]
                for c in range(columns):
                    value = out_rows[i, PANEL * p + c] if columns == PANEL else scratch[i, c]
                    out_rows[i, PANEL * p + c] = value * inv
        row += rows


@jit(inline="always", fastmath=_FAST)
def _attention_worker(worker, workers, q, out, n_kv, n_rows, width, parts, bias_layout, key_bias_addr, scale, group,
                      key_panels, value_panels, scores, inv_totals, scratch):  # pragma: no cover - compiled
    """Rows r of each kv head are query r // group. q, out: (address, head stride, row stride);
    parts: [4, 4] layouts of keys (two parts) then values (two parts), see _key_address;
    bias_layout: (address, rows, row stride) of a [Tq, keys] bias or address 0; key_bias_addr: a
    [keys] bias or 0. Buffers per worker; strides in floats. Worker `worker` of `workers` takes
    whole kv heads, or with fewer heads than workers its share of each head's rows."""
    n_keys = parts[0, 1] + parts[1, 1]
    bias = floats_at(bias_layout[0], bias_layout[1], bias_layout[2], n_keys if bias_layout[0] else 0)
    key_bias = floats_at(key_bias_addr, 1, n_keys if key_bias_addr else 0, n_keys if key_bias_addr else 0)[0]
    if n_kv >= workers:
        heads, first_row, last_row = range(worker, n_kv, workers), 0, n_rows
    else:
        heads, first_row, last_row = range(n_kv), worker * n_rows // workers, (worker + 1) * n_rows // workers
    for head in heads:
        if last_row > first_row:
            _pack_head(parts, head, width, key_panels[worker], value_panels[worker])
            _rows_of_head(q, out, head, first_row, last_row, width, n_keys, scale, bias, key_bias, group,
                          key_panels[worker], value_panels[worker], scores[worker], inv_totals[worker],
                          scratch[worker])


@jit(parallel=True, fastmath=_FAST)
def _attention(q, out, n_kv, n_rows, width, parts, bias_layout, key_bias_addr, scale, group, key_panels,
               value_panels, scores, inv_totals, scratch):  # pragma: no cover - compiled
    workers = key_panels.shape[0]
    for worker in numba.prange(workers):
        _attention_worker(worker, workers, q, out, n_kv, n_rows, width, parts, bias_layout, key_bias_addr, scale,
                          group, key_panels, value_panels, scores, inv_totals, scratch)


@jit(fastmath=_FAST)
def _attention_serial(q, out, n_kv, n_rows, width, parts, bias_layout, key_bias_addr, scale, group, key_panels,
                      value_panels, scores, inv_totals, scratch):  # pragma: no cover - compiled
    _attention_worker(0, 1, q, out, n_kv, n_rows, width, parts, bias_layout, key_bias_addr, scale, group,
                      key_panels, value_panels, scores, inv_totals, scratch)


def _buffers(workers: int, n_keys: int, width: int) -> tuple[np.ndarray, ...]:
    """Per-worker packed keys, packed values, one tile's scores, its 1/sums and a partial-panel tile;
    the same views again for the same sizes (every step of a solve), new views on storage kept
    between calls while it is large enough."""
    sizes = (workers, n_keys, width)
    cached = getattr(_local, "buffers", None)
    if cached is not None and cached[0] == sizes:
        return cached[1]
    key_blocks, value_blocks = -(-n_keys // PANEL), -(-width // PANEL)
    shapes = ((workers, key_blocks, width, PANEL), (workers, value_blocks, n_keys, PANEL),
              (workers, MAX_ROWS, key_blocks * PANEL), (workers, MAX_ROWS), (workers, MAX_ROWS, PANEL))
    storage = cached[2] if cached is not None else ()
    if len(storage) != len(shapes) or any(b.size < math.prod(s) for b, s in zip(storage, shapes)):
        storage = tuple(np.zeros(2 * math.prod(s), np.float32) for s in shapes)
    views = tuple(b[:math.prod(s)].reshape(s) for b, s in zip(storage, shapes))
    _local.buffers = (sizes, views, storage)
    return views


def attend(q: np.ndarray, keys: tuple[np.ndarray, np.ndarray], values: tuple[np.ndarray, np.ndarray],
           bias: np.ndarray, key_bias: np.ndarray, workers: int) -> np.ndarray:
    """q [Tq, Hq, d]; keys, values: two parts, each [T, Hkv, d] (features contiguous); bias [Tq, Tk]
    or [0, 0]; key_bias [Tk] or [0] -> [Tq, Hq, d]."""
    n_queries, n_heads, width = q.shape
    n_kv = keys[0].shape[1]
    group = n_heads // n_kv
    if n_kv == 1 or group == 1:  # the rows of each kv head at one stride: views, no copies
        q_rows = q.reshape(n_queries * n_heads, width)[None] if n_kv == 1 else q.transpose(1, 0, 2)
        out = np.empty((n_queries, n_heads, width), np.float32)
        out_rows = out.reshape(n_queries * n_heads, width)[None] if n_kv == 1 else out.transpose(1, 0, 2)
    else:
        q_rows = np.ascontiguousarray(
            q.reshape(n_queries, n_kv, group, width).transpose(1, 0, 2, 3)).reshape(n_kv, -1, width)
        out_rows = np.empty_like(q_rows)
    n_keys = keys[0].shape[0] + keys[1].shape[0]
    workers = max(1, min(workers, max(n_kv, q_rows.shape[1] // MAX_ROWS)))
    if 2 * n_kv * q_rows.shape[1] * n_keys * width < PARALLEL_MIN_MACS:  # scores and weighted sum
        workers = 1
    parts = np.array([_part_layout(part) for part in (*keys, *values)], np.int64)
    bias_layout = np.array([address(bias), bias.shape[0], bias.strides[0] // 4] if bias.size else [0, 0, 0],
                           np.int64)
    run = _attention if workers > 1 else _attention_serial
    run(_rows_layout(q_rows), _rows_layout(out_rows), n_kv, q_rows.shape[1], width, parts, bias_layout,
        address(key_bias) if key_bias.size else 0, np.float32(width ** -0.5), group, *_buffers(workers, n_keys, width))
    if n_kv == 1 or group == 1:
        return out
    return out_rows.reshape(n_kv, n_queries, group, width).transpose(1, 0, 2, 3).reshape(n_queries, n_heads, width)


def _rows_layout(a: np.ndarray) -> np.ndarray:
    """[heads, rows, d] float32, features contiguous -> (address, head stride, row stride) in floats."""
    return np.array([address(a), a.strides[0] // 4, a.strides[1] // 4], np.int64)


def _part_layout(a: np.ndarray) -> tuple[int, int, int, int]:
    """[rows, heads, d] float32, features contiguous -> (address, rows, row stride, head stride)."""
    return address(a), a.shape[0], a.strides[0] // 4, a.strides[1] // 4
