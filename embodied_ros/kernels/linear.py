"""Linear layers: y = x @ W^T + b, with W stored (out_features, in_features) as in the checkpoints.

`linear(x, w, b)` is the one entry point for every weight type a bundle hands out:
  float32 ndarray      numpy matmul (BLAS)
  float16 ndarray      upcast on every call, then BLAS (slow path; `Bundle.weight` upcasts F16
                       and BF16 once at load, so model code normally never sends these)
  QuantTensor          q8_0 / q4_k / bf16 blocks, dequantized inside the kernel:
                       - numpy reference: dequantize the whole matrix, then BLAS;
                       - numba, few rows (N <= FUSED_MAX_ROWS): a fused kernel, parallel over
                         output features, that decodes each block once and uses it for every row;
                       - numba, more rows: output features in chunks that fit in cache, each
                         dequantized by numba and multiplied by BLAS (the dequantization is a
                         small fraction of the product once N reaches tens of rows).
x may have any leading dimensions: [..., in] -> [..., out].
"""

from __future__ import annotations

import threading

import numba
import numpy as np

from embodied_ros.kernels._jit import jit
from embodied_ros.kernels.quant import (F16_TO_F32, QuantTensor, dequantize, dequantize_rows_into, f16_at,
                                        q4_k_scale_min, random_quant_tensor)
from embodied_ros.kernels.registry import kernel, reference

FUSED_MAX_ROWS = 8  # above this, chunked dequantize + BLAS is faster (measured on dim 3072 x 14336)
_CHUNK_BYTES = 64 << 20  # float32 bytes of weight rows dequantized at a time: few, large chunks, since
                         # each is one parallel region, and those cost a scheduler tick on a busy machine
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
                                     ("q4_k", 9, 256, 33), ("q4_k", 70, 256, 5), ("bf16", 4, 13, 6)):
        x = rng.standard_normal((rows, n_in), dtype=np.float32)
        b = rng.standard_normal(n_out, dtype=np.float32)
        cases.append((x, random_quant_tensor(rng, qtype, (n_out, n_in)), b))
    cases.append((rng.standard_normal(256, dtype=np.float32), random_quant_tensor(rng, "q4_k", (3, 256)), None))
    return cases


def _check_shapes(x: np.ndarray, weight) -> None:
    if len(weight.shape) != 2 or x.shape[-1:] != weight.shape[1:]:
        raise ValueError(f"linear: input with {x.shape[-1] if x.ndim else 0} features (shape {x.shape}) does not "
                         f"fit a weight of shape {tuple(weight.shape)} (out_features, in_features)")


@reference("linear", examples=_examples, rtol=1e-4, atol=1e-4)
def linear(x: np.ndarray, weight: np.ndarray | QuantTensor, bias: np.ndarray | None = None) -> np.ndarray:
    # x: [..., in], weight: [out, in] -> [..., out]
    _check_shapes(x, weight)
    if isinstance(weight, QuantTensor):
        weight = dequantize(weight)
    elif weight.dtype != np.float32:
        weight = weight.astype(np.float32)
    y = x @ weight.T
    if bias is not None:
        y += bias
    return y


@kernel("linear", "numba")
def linear_numba(x: np.ndarray, weight: np.ndarray | QuantTensor, bias: np.ndarray | None = None) -> np.ndarray:
    if not isinstance(weight, QuantTensor):
        return linear(x, weight, bias)
    _check_shapes(x, weight)
    rows = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, weight.shape[1])
    if rows.shape[0] <= FUSED_MAX_ROWS and weight.qtype in ("q8_0", "q4_k"):
        y = _fused_linear(rows, weight)
    else:
        y = _chunked_linear(rows, weight)
    if bias is not None:
        y += bias
    return y.reshape(*x.shape[:-1], weight.shape[0])


def _fused_linear(rows: np.ndarray, weight: QuantTensor) -> np.ndarray:
    # rows: [N, in] -> [N, out]
    n_rows = rows.shape[0]
    padded = np.zeros((-(-n_rows // 4) * 4, rows.shape[1]), np.float32)  # the kernels take rows by fours
    padded[:n_rows] = rows
    y_t = np.empty((weight.shape[0], padded.shape[0]), np.float32)  # [out, N]: each task writes whole rows
    if weight.qtype == "q8_0":
        _q8_0_matmul(padded, weight.data, F16_TO_F32, y_t)
    else:
        sub_block_sums = padded.reshape(padded.shape[0], -1, 32).sum(axis=2)  # [N, in/32]
        _q4_k_matmul(padded, sub_block_sums, weight.data, F16_TO_F32, y_t)
    return np.ascontiguousarray(y_t[:, :n_rows].T)


def _chunked_linear(rows: np.ndarray, weight: QuantTensor) -> np.ndarray:
    # rows: [N, in] -> [N, out]
    n_out, n_in = weight.shape
    chunk = min(n_out, max(16, _CHUNK_BYTES // (4 * n_in)))
    scratch = _scratch(chunk * n_in).reshape(chunk, n_in)
    if chunk == n_out:
        dequantize_rows_into(weight, 0, n_out, scratch)
        return rows @ scratch.T
    y = np.empty((rows.shape[0], n_out), np.float32)
    for start in range(0, n_out, chunk):
        stop = min(start + chunk, n_out)
        block = scratch[:stop - start]
        dequantize_rows_into(weight, start, stop, block)
        y[:, start:stop] = rows @ block.T
    return y


def _scratch(size: int) -> np.ndarray:
    """A float32 buffer of at least `size` items, kept per thread: no page faults on every call."""
    buffer = getattr(_local, "scratch", None)
    if buffer is None or buffer.size < size:
        buffer = _local.scratch = np.empty(size, np.float32)
    return buffer[:size]


# The fused kernels: one task per output feature; each block's scales are decoded once and its
# weights multiplied into four rows of x at a time. The 4-bit/8-bit weights are unpacked in
# registers inside the dot product: cheaper than storing them to a buffer and reloading (measured).

@jit(parallel=True, fastmath=_FAST)
def _q8_0_matmul(x, data, f16_to_f32, y_t):
    # x: [N, in] f32, N % 4 == 0; data: [out, in/32 * 34] u8 -> y_t: [out, N]
    n_rows, n_blocks = x.shape[0], x.shape[1] // 32
    for o in numba.prange(data.shape[0]):
        acc = np.zeros(n_rows, np.float32)
        row = data[o]
        for b in range(n_blocks):
            d = f16_at(row, 34 * b, f16_to_f32)
            for n in range(0, n_rows, 4):
                p0 = p1 = p2 = p3 = np.float32(0.0)
                for k in range(32):
                    q = np.float32(np.int8(row[34 * b + 2 + k]))
                    col = 32 * b + k
                    p0 += q * x[n, col]
                    p1 += q * x[n + 1, col]
                    p2 += q * x[n + 2, col]
                    p3 += q * x[n + 3, col]
                acc[n] += d * p0
                acc[n + 1] += d * p1
                acc[n + 2] += d * p2
                acc[n + 3] += d * p3
        y_t[o] = acc


@jit(parallel=True, fastmath=_FAST)
def _q4_k_matmul(x, sub_block_sums, data, f16_to_f32, y_t):
    # x: [N, in] f32, N % 4 == 0; sub_block_sums: [N, in/32]; data: [out, in/256 * 144] u8 -> y_t: [out, N]
    # sub-block s contributes scale_s * (q . x) - offset_s * sum(x) to each row
    n_rows, n_blocks = x.shape[0], x.shape[1] // 256
    for o in numba.prange(data.shape[0]):
        acc = np.zeros(n_rows, np.float32)
        row = data[o]
        for b in range(n_blocks):
            base = 144 * b
            d, dmin = f16_at(row, base, f16_to_f32), f16_at(row, base + 2, f16_to_f32)
            for c in range(4):  # sub-blocks 2c (low nibbles) and 2c + 1 (high nibbles)
                sc_low, m_low = q4_k_scale_min(row, base + 4, 2 * c)
                sc_high, m_high = q4_k_scale_min(row, base + 4, 2 * c + 1)
                scale_low, offset_low = d * np.float32(sc_low), dmin * np.float32(m_low)
                scale_high, offset_high = d * np.float32(sc_high), dmin * np.float32(m_high)
                col, s = 256 * b + 64 * c, 8 * b + 2 * c
                for n in range(0, n_rows, 4):
                    lo0 = lo1 = lo2 = lo3 = hi0 = hi1 = hi2 = hi3 = np.float32(0.0)
                    for lane in range(32):
                        byte = row[base + 16 + 32 * c + lane]
                        low, high = np.float32(byte & 15), np.float32(byte >> 4)
                        lo0 += low * x[n, col + lane]
                        hi0 += high * x[n, col + 32 + lane]
                        lo1 += low * x[n + 1, col + lane]
                        hi1 += high * x[n + 1, col + 32 + lane]
                        lo2 += low * x[n + 2, col + lane]
                        hi2 += high * x[n + 2, col + 32 + lane]
                        lo3 += low * x[n + 3, col + lane]
                        hi3 += high * x[n + 3, col + 32 + lane]
                    sums = sub_block_sums
                    acc[n] += scale_low * lo0 + scale_high * hi0 - offset_low * sums[n, s] - offset_high * sums[n, s + 1]
                    acc[n + 1] += (scale_low * lo1 + scale_high * hi1
                                   - offset_low * sums[n + 1, s] - offset_high * sums[n + 1, s + 1])
                    acc[n + 2] += (scale_low * lo2 + scale_high * hi2
                                   - offset_low * sums[n + 2, s] - offset_high * sums[n + 2, s + 1])
                    acc[n + 3] += (scale_low * lo3 + scale_high * hi3
                                   - offset_low * sums[n + 3, s] - offset_high * sums[n + 3, s + 1])
        y_t[o] = acc
