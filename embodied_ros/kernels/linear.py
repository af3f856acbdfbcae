"""Linear layers: y = x @ W^T + b, with W stored (out_features, in_features) as in the checkpoints.

`linear(x, w, b)` is the one entry point for every weight type a bundle hands out:
  float32 ndarray      a float32 matrix
  PackedWeight         a float32 matrix packed once into the panels the CPU product reads, PANEL rows
                       each (`pack_weight`; this module exports both for code that slices weights)
                       (`pack_for_products`; pi0.5 packs its weights at start-up)
  Bf16Weight           bf16 pairs packed into panels (`pack_for_products` makes them from BF16
                       weights where the CPU has AVX512-BF16): bf16 products, float32 sums
                       (kernels/linear_bf16.py)
  I16Weight            BF16 weights requantized to int16 per output feature (`pack_for_products`,
                       where the CPU has AVX2 and no AVX-512): x quantized per 128-block, int16
                       products (kernels/linear_int16.py), at any number of rows
  Q8Weight             Q8_0 blocks repacked for int8 dot products (`pack_for_products`, where the
                       CPU has AVX512-VNNI, AVX-VNNI or AVX2): x quantized per 32-block
                       (kernels/linear_int8.py), at any number of rows
  float16 ndarray      decoded as packed by the vector product (elsewhere upcast on every call)
  QuantTensor          q8_0 / q4_k / bf16 blocks, dequantized inside the kernel
x may have any leading dimensions: [..., in] -> [..., out].

The numba implementation, where the CPU has 16-lane vectors (AVX-512; `VECTOR_GEMM`), runs every
weight type through one blocked product on those vectors (`gemm.py`): 2-3x numpy's OpenBLAS when
OpenBLAS runs its 8-lane kernels (OPENBLAS_CORETYPE=Haswell on an AVX-512 CPU), and quantized
blocks decoded into a packed block in cache, read once per product. Elsewhere:
  - float32: numpy matmul (BLAS);
  - quantized, N <= FUSED_MAX_ROWS rows (q8_0, q4_k): a fused kernel, parallel over output
    features from FUSED_PARALLEL_MIN_MACS on (serial below), that dequantizes each weight once into
    a buffer in cache and multiplies it into every row;
  - quantized, more rows (and bf16): up to 256 MiB of weight rows at a time dequantized into a
    per-thread float32 scratch buffer, multiplied by BLAS.
"""

from __future__ import annotations

import threading

import numba
import numpy as np

from embodied_ros.kernels.cpu import gemm
from embodied_ros.kernels.cpu.blas import product
from embodied_ros.kernels.cpu.bf16_gemm import Bf16Weight, pack_bf16
from embodied_ros.kernels.cpu.gemm import PANEL, PackedWeight, pack_weight  # noqa: F401 (PANEL: for slicing)
from embodied_ros.kernels.cpu.int16_gemm import I16Weight, pack_i16
from embodied_ros.kernels.cpu.int8_gemm import Q8Weight, pack_q8_0
from embodied_ros.kernels.cpu.jit import jit, vector_units_available
from embodied_ros.kernels.quant import (F16_TO_F32, QuantTensor, dequantize, dequantize_rows_into,
                                        q4_k_decode_row, q8_0_decode_row, random_quant_tensor)
from embodied_ros.kernels.linear_bf16 import BF16_PRODUCTS, linear_bf16_numba
from embodied_ros.kernels.linear_int16 import INT16_PRODUCTS, linear_int16_numba
from embodied_ros.kernels.linear_int8 import INT8_PRODUCTS, linear_int8_numba
from embodied_ros.kernels.registry import kernel, reference

VECTOR_GEMM = vector_units_available()  # the blocked vector product serves every weight type
FUSED_MAX_ROWS = 64  # above this, chunked dequantize + BLAS is faster (measured on dim 3072 x 14336)
# Below this many multiply-adds a fused product runs on the calling thread: two threads gained
# nothing up to ~1e8 (50 x 256 -> 1536: 285 us on two, 280 on one) and lose to waking the pool.
FUSED_PARALLEL_MIN_MACS = 1 << 26
_TILE = 4  # output features per fused task, and rows of x per register block
_CHUNK_BYTES = 256 << 20  # float32 bytes of weight rows dequantized at a time. Every matrix of
                          # pi0.5 and Wan fits in one chunk: one parallel region and one BLAS call per
                          # product (alternating numba and BLAS thread pools costs more than memory).
_local = threading.local()
_FAST = {"reassoc", "contract", "nnan", "ninf", "nsz"}


def _examples(rng: np.random.Generator) -> list[tuple]:
    cases = []
    for rows, n_in, n_out in ((1, 7, 5), (13, 33, 17), (50, 64, 96)):
        x = rng.standard_normal((rows, n_in), dtype=np.float32)
        w = rng.standard_normal((n_out, n_in), dtype=np.float32)
        b = rng.standard_normal(n_out, dtype=np.float32)
        cases.append((x, w, b))
        cases.append((x, w, None))
    cases.append((rng.standard_normal((2, 3, 7), dtype=np.float32),
                  rng.standard_normal((5, 7)).astype(np.float16), None))
    for qtype, rows, n_in, n_out in (("q8_0", 1, 64, 7), ("q8_0", 37, 96, 13), ("q4_k", 3, 512, 9),
                                     ("q4_k", 9, 256, 33), ("q4_k", 70, 256, 5), ("bf16", 4, 13, 6),
                                     ("q8_0", 64, 1024, 1024), ("q4_k", 64, 1024, 1024)):  # parallel kernels
        x = rng.standard_normal((rows, n_in), dtype=np.float32)
        b = rng.standard_normal(n_out, dtype=np.float32)
        cases.append((x, random_quant_tensor(rng, qtype, (n_out, n_in)), b))
    cases.append((rng.standard_normal(256, dtype=np.float32), random_quant_tensor(rng, "q4_k", (3, 256)), None))
    for rows, n_in, n_out in ((3, 19, 40), (23, 64, 96)):  # packed: a partial last panel, several row tiles
        x = rng.standard_normal((rows, n_in), dtype=np.float32)
        cases.append((x, pack_weight(rng.standard_normal((n_out, n_in), dtype=np.float32)),
                      rng.standard_normal(n_out, dtype=np.float32)))
    read_only = [rng.standard_normal((9, 64), dtype=np.float32), random_quant_tensor(rng, "q8_0", (9, 64)),
                 random_quant_tensor(rng, "q4_k", (9, 256))]  # as a memory-mapped bundle hands them out
    for weight in read_only:
        (weight.data if isinstance(weight, QuantTensor) else weight).flags.writeable = False
        cases.append((rng.standard_normal((5, weight.shape[1]), dtype=np.float32), weight, None))
    x_t = rng.standard_normal((96, 11), dtype=np.float32)  # x as a transposed (non-contiguous) view
    cases.append((x_t.T, rng.standard_normal((40, 96), dtype=np.float32), None))
    cases.append((x_t.T, random_quant_tensor(rng, "q8_0", (7, 96)), rng.standard_normal(7, dtype=np.float32)))
    return cases


def _check_shapes(x: np.ndarray, weight) -> None:
    if len(weight.shape) != 2 or x.shape[-1:] != weight.shape[1:]:
        raise ValueError(f"linear: input with {x.shape[-1] if x.ndim else 0} features (shape {x.shape}) does not "
                         f"fit a weight of shape {tuple(weight.shape)} (out_features, in_features)")


Weight = np.ndarray | PackedWeight | Bf16Weight | I16Weight | Q8Weight | QuantTensor


def pack_for_products(weight: Weight) -> Weight:
    """The form of a weight the numba product reads fastest, to be kept instead of the stored one:
    float32 matrices packed into panels where the vector product runs, BF16 matrices into bf16 pair
    panels where the CPU multiplies bf16 (`BF16_PRODUCTS`; same size as stored), Q8_0 into int8
    panels where it has int8 dot products (`INT8_PRODUCTS`: AVX512-VNNI, AVX-VNNI or AVX2; 40 bytes per 32
    weights instead of 34), BF16 matrices into int16 panels where the CPU has AVX2 and no AVX-512
    (`INT16_PRODUCTS`: at the action expert's 50 rows 1.5-1.9x faster than decoding them for BLAS
    on Zen 3, kernels/cpu/int16_gemm.py), anything else unchanged. F16 stays F16, decoded to
    float32 as it is packed: rounding it to bf16 would cost the precision F16 was chosen for (pi05_small: action error
    0.013 instead of 1e-3)."""
    if weight.ndim != 2:
        return weight
    if INT8_PRODUCTS and isinstance(weight, QuantTensor) and weight.qtype == "q8_0":
        return pack_q8_0(weight.data, weight.shape)
    if INT16_PRODUCTS and isinstance(weight, QuantTensor) and weight.qtype == "bf16":
        return pack_i16(weight.data.view(np.uint16).reshape(weight.shape))
    if not VECTOR_GEMM:
        return weight
    if isinstance(weight, np.ndarray) and weight.dtype == np.float32:
        return pack_weight(weight)
    if BF16_PRODUCTS and isinstance(weight, QuantTensor) and weight.qtype == "bf16":
        return pack_bf16(weight.data.view(np.uint16).reshape(weight.shape))
    return weight



@reference("linear", examples=_examples, rtol=1e-4, atol=1e-4)
def linear(x: np.ndarray, weight: Weight, bias: np.ndarray | None = None) -> np.ndarray:
    # x: [..., in], weight: [out, in] -> [..., out]
    _check_shapes(x, weight)
    if isinstance(weight, QuantTensor):
        weight = dequantize(weight)
    elif isinstance(weight, Q8Weight):
        q_w, d_w = weight.blocks()
        weight = (q_w.reshape(*d_w.shape, -1) * d_w[:, :, None]).reshape(weight.shape)
    elif isinstance(weight, (PackedWeight, Bf16Weight, I16Weight)):
        weight = weight.dense()
    elif weight.dtype != np.float32:
        weight = weight.astype(np.float32)
    y = product(x.reshape(-1, weight.shape[1]), weight.T).reshape(*x.shape[:-1], weight.shape[0])
    if bias is not None:
        y += bias
    return y


@kernel("linear", "numba")
def linear_numba(x: np.ndarray, weight: Weight, bias: np.ndarray | None = None) -> np.ndarray:
    _check_shapes(x, weight)
    if type(weight) is PackedWeight:  # the most frequent: every float32 matrix where the vector product runs
        if x.ndim == 2:
            return gemm.matmul(x, weight, bias)
        return gemm.matmul(x.reshape(-1, weight.shape[1]), weight, bias).reshape(*x.shape[:-1], weight.shape[0])
    if isinstance(weight, Bf16Weight):
        return linear_bf16_numba(x, weight, bias)
    if isinstance(weight, I16Weight):
        return linear_int16_numba(x, weight, bias)
    if isinstance(weight, Q8Weight):
        return linear_int8_numba(x, weight, bias)
    rows = x.reshape(-1, weight.shape[1])
    if VECTOR_GEMM or isinstance(weight, PackedWeight):
        y = gemm.matmul(rows, _gemm_weight(weight), bias)
    elif not isinstance(weight, QuantTensor):
        return linear(x, weight, bias)
    else:
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        y = _fused_linear(rows, weight) if _fused(rows, weight) else _chunked_linear(rows, weight)
        if bias is not None:
            y += bias
    return y.reshape(*x.shape[:-1], weight.shape[0])


def _gemm_weight(weight: Weight) -> Weight:
    if isinstance(weight, np.ndarray) and weight.dtype not in (np.float32, np.float16):
        return weight.astype(np.float32)
    return weight


def _fused(rows: np.ndarray, weight: QuantTensor) -> bool:
    return rows.shape[0] <= FUSED_MAX_ROWS and weight.qtype in ("q8_0", "q4_k")


def _fused_linear(rows: np.ndarray, weight: QuantTensor) -> np.ndarray:
    # rows: [N, in] -> [N, out]; the kernels write it as [out, N], transposed at the end
    n_rows = rows.shape[0]
    padded = np.zeros((-(-n_rows // _TILE) * _TILE, rows.shape[1]), np.float32)  # rows taken by fours
    padded[:n_rows] = rows
    y_t = np.empty((weight.shape[0], padded.shape[0]), np.float32)  # [out, N]: each task writes whole rows
    parallel = n_rows * weight.shape[0] * weight.shape[1] >= FUSED_PARALLEL_MIN_MACS
    kernels = {"q8_0": (_q8_0_matmul_serial, _q8_0_matmul), "q4_k": (_q4_k_matmul_serial, _q4_k_matmul)}
    kernel = kernels[weight.qtype][parallel]
    # tiles of _TILE features are dealt round-robin to one task per thread, so that each task
    # allocates its weight buffer once (one per tile would page-fault on every allocation)
    workers = max(1, min(numba.get_num_threads(), -(-weight.shape[0] // _TILE))) if parallel else 1
    kernel(padded, weight.data, F16_TO_F32, workers, y_t)
    return np.ascontiguousarray(y_t[:, :n_rows].T)


def _chunked_linear(rows: np.ndarray, weight: QuantTensor) -> np.ndarray:
    # rows: [N, in] -> [N, out]
    n_out, n_in = weight.shape
    chunk = min(n_out, max(16, _CHUNK_BYTES // (4 * n_in)))
    scratch = _scratch(chunk * n_in).reshape(chunk, n_in)
    if chunk == n_out:
        dequantize_rows_into(weight, 0, n_out, scratch)
        return product(rows, scratch.T)
    y = np.empty((rows.shape[0], n_out), np.float32)
    for start in range(0, n_out, chunk):
        stop = min(start + chunk, n_out)
        block = scratch[:stop - start]
        dequantize_rows_into(weight, start, stop, block)
        y[:, start:stop] = product(rows, block.T)
    return y


def _scratch(size: int) -> np.ndarray:
    """A float32 buffer of at least `size` items, kept per thread: no page faults on every call."""
    buffer = getattr(_local, "scratch", None)
    if buffer is None or buffer.size < size:
        buffer = _local.scratch = np.empty(size, np.float32)
    return buffer[:size]


# The fused kernels: tasks of four output features. Their rows are dequantized once into a
# small buffer that stays in cache, then every row of x is multiplied by them, four rows of x by
# four features at a time in registers (16 accumulators: each weight and x value loaded once per
# tile, one horizontal sum per output at the end).

@jit(parallel=True, fastmath=_FAST)
def _q8_0_matmul(x, data, f16_to_f32, workers, y_t):
    # x: [N, in] f32, N % 4 == 0; data: [out, in/32 * 34] u8 -> y_t: [out, N]
    buffers = np.zeros((workers, _TILE, x.shape[1]), np.float32)
    for worker in numba.prange(workers):
        _q8_0_tiles(x, data, f16_to_f32, buffers[worker], worker, workers, y_t)


@jit(fastmath=_FAST)
def _q8_0_matmul_serial(x, data, f16_to_f32, workers, y_t):
    _q8_0_tiles(x, data, f16_to_f32, np.zeros((_TILE, x.shape[1]), np.float32), 0, 1, y_t)


@jit(inline="always", fastmath=_FAST)
def _q8_0_tiles(x, data, f16_to_f32, w, worker, workers, y_t):
    # tiles worker, worker + workers, ...: four rows decoded into w [4, in], then multiplied
    for tile in range(worker, (data.shape[0] + _TILE - 1) // _TILE, workers):
        first, last = _TILE * tile, min(_TILE * tile + _TILE, data.shape[0])
        for i in range(last - first):
            q8_0_decode_row(data[first + i], f16_to_f32, w[i])
        _multiply_tile(x, w, first, last, y_t)


@jit(parallel=True, fastmath=_FAST)
def _q4_k_matmul(x, data, f16_to_f32, workers, y_t):
    # x: [N, in] f32, N % 4 == 0; data: [out, in/256 * 144] u8 -> y_t: [out, N]
    buffers = np.zeros((workers, _TILE, x.shape[1]), np.float32)
    for worker in numba.prange(workers):
        _q4_k_tiles(x, data, f16_to_f32, buffers[worker], worker, workers, y_t)


@jit(fastmath=_FAST)
def _q4_k_matmul_serial(x, data, f16_to_f32, workers, y_t):
    _q4_k_tiles(x, data, f16_to_f32, np.zeros((_TILE, x.shape[1]), np.float32), 0, 1, y_t)


@jit(inline="always", fastmath=_FAST)
def _q4_k_tiles(x, data, f16_to_f32, w, worker, workers, y_t):
    for tile in range(worker, (data.shape[0] + _TILE - 1) // _TILE, workers):
        first, last = _TILE * tile, min(_TILE * tile + _TILE, data.shape[0])
        for i in range(last - first):
            q4_k_decode_row(data[first + i], f16_to_f32, w[i])
        _multiply_tile(x, w, first, last, y_t)


@jit(inline="always", fastmath=_FAST)
def _multiply_tile(x, w, first, last, y_t):
    # x: [N, in], N % 4 == 0; w: [4, in] (rows past `last - first` unused) -> y_t[first:last, :]
    out = np.empty((_TILE, _TILE), np.float32)  # [feature, row]
    for n in range(0, x.shape[0], _TILE):
        a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = np.float32(0.0)
        c0 = c1 = c2 = c3 = d0 = d1 = d2 = d3 = np.float32(0.0)
        for k in range(x.shape[1]):
            w0, w1, w2, w3 = w[0, k], w[1, k], w[2, k], w[3, k]
            xa, xb, xc, xd = x[n, k], x[n + 1, k], x[n + 2, k], x[n + 3, k]
            a0 += w0 * xa
            a1 += w1 * xa
            a2 += w2 * xa
            a3 += w3 * xa
            b0 += w0 * xb
            b1 += w1 * xb
            b2 += w2 * xb
            b3 += w3 * xb
            c0 += w0 * xc
            c1 += w1 * xc
            c2 += w2 * xc
            c3 += w3 * xc
            d0 += w0 * xd
            d1 += w1 * xd
            d2 += w2 * xd
            d3 += w3 * xd
        out[0, 0], out[1, 0], out[2, 0], out[3, 0] = a0, a1, a2, a3
        out[0, 1], out[1, 1], out[2, 1], out[3, 1] = b0, b1, b2, b3
        out[0, 2], out[1, 2], out[2, 2], out[3, 2] = c0, c1, c2, c3
        out[0, 3], out[1, 3], out[2, 3], out[3, 3] = d0, d1, d2, d3
        for i in range(last - first):
            for j in range(_TILE):
                y_t[first + i, n + j] = out[i, j]
