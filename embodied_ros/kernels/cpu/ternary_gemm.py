"""y = x @ W^T for ternary weights (BitNet b1.58's BitLinear) on the integer units.

A BitLinear layer multiplies two quantized operands, as BitVLA's reference computes them:

    weights      per tensor (or, stacked, per output row):  s_w = 1 / max(mean|W|, 1e-5),
                 q = clamp(round(W * s_w), -1, 1)                          (`ternarize`)
    activations  per token (row of x):  s_x = 127 / max(max|x|, 1e-5),
                 x_q = clamp(round(x * s_x), -128, 127)                    (`quantize_tokens`)
    product      y = (x_q / s_x) @ (q / s_w)^T + b

Here the sum over k is done on integers: acc = x_q . q exactly (int32), then y = acc / s_x / s_w + b.
The reference sums float32 products of the two quotients, so the two differ only by float rounding
(a few ulp of y). `fake_quantize_tokens` and `TernaryWeight.dense()` give the reference's own
float32 operands, for the float path that reproduces its arithmetic.

The product runs on AVX512-VNNI's `vpdpbusd` (4 unsigned x signed byte products into each int32
lane per instruction). The weights stay 2 bits each in memory and are widened in registers: the
unsigned operand is q + 1 in {0, 1, 2} and the signed one is x_q, so each row's sum comes out as
x_q . q + sum(x_q), and sum(x_q) (kept per row when x is quantized) is subtracted.

Packed layout (`TernaryWeight.packed`, uint8 [panels, groups, 2, 64]): a panel is 32 output
features (two halves of 16, one 64-byte vector each), a group 16 consecutive inputs k = 16 g + 4 t + i
(t = 0..3 steps of i = 0..3). Byte 4 l + i of half h holds, in bits 2t..2t+1, q + 1 of feature
32 p + 16 h + l at that k. A step is decoded with one 16-bit shift and one mask, and the four bytes of
feature l then sit in int32 lane l, as `vpdpbusd` reads them. Rows past `out` and inputs past `in`
are padding (weight 0; x is zero-padded too). The register tile takes up to 6 rows of x: 12 int32
sums, over depth blocks of DEPTH_GROUPS groups (the panel's 8 KiB stay in L1 across the row tiles).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from embodied_ros.kernels.cpu.int8_gemm import int8_products_available
from embodied_ros.kernels.cpu.jit import PARALLEL_MIN_ELEMENTS, PARALLEL_MIN_MACS, jit, vector_units_available
from embodied_ros.kernels.cpu.vector_ir import LANES, PANEL
from embodied_ros.kernels.registry import kernel, reference

GROUP = 16  # inputs per packed group (4 steps of the 4 bytes vpdpbusd sums)
MAX_ROWS = 6
DEPTH_GROUPS = 64  # 1024 inputs a pass: 8 KiB of one panel's weights
WEIGHT_EPS = np.float32(1e-5)
ACT_EPS = np.float32(1e-5)

# EMBODIED_ROS_TERNARY_PRODUCTS=0 keeps the numpy integer reference (same integers, slower)
TERNARY_PRODUCTS = (vector_units_available() and int8_products_available()
                    and os.environ.get("EMBODIED_ROS_TERNARY_PRODUCTS", "1") != "0")


# ---- the quantizers of the reference ---------------------------------------------------------------

def ternarize(weight: np.ndarray) -> tuple[np.ndarray, np.float32]:
    """A full-precision weight [out, in] -> (q int8 in {-1, 0, 1}, s_w float32), the reference's
    per-tensor rule: s_w = 1 / max(mean|W|, 1e-5), q = clamp(round(W * s_w), -1, 1). The mean is
    summed in float64 and rounded once (the float32 mean of the reference, to the last bit or so)."""
    weight = np.asarray(weight, dtype=np.float32)
    mean = np.float32(np.abs(weight, dtype=np.float64).mean()) if weight.size else np.float32(0.0)
    scale = np.float32(1.0) / max(mean, WEIGHT_EPS)
    return np.clip(np.round(weight * scale), -1, 1).astype(np.int8), np.float32(scale)


def quantize_tokens(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x [N, K] -> (x_q int8 [N, K], s_x float32 [N]): per-token absmax to int8, the reference's rule."""
    x = np.asarray(x, dtype=np.float32)
    scale = np.float32(127.0) / np.maximum(np.abs(x).max(axis=-1), ACT_EPS)
    q = np.clip(np.round(x * scale[..., None]), -128, 127).astype(np.int8)
    return q, scale.astype(np.float32)


def fake_quantize_tokens(x: np.ndarray) -> np.ndarray:
    """x_q / s_x in float32: the activation the reference's float product reads."""
    q, scale = quantize_tokens(x)
    return (q.astype(np.float32) / scale[..., None]).astype(np.float32)


# ---- the packed weight -------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class TernaryWeight:
    """Ternary q [out, in] with its scale(s) s_w, packed 2 bits a weight for the integer product."""

    packed: np.ndarray  # uint8 [panels, groups, 2, 64] (module doc)
    scales: np.ndarray  # float32 [out]: s_w of each output row (w = q / s_w)
    shape: tuple[int, int]

    @property
    def ndim(self) -> int:
        return 2

    @property
    def nbytes(self) -> int:
        return int(self.packed.nbytes + self.scales.nbytes)

    def ternary(self) -> np.ndarray:
        """q int8 [out, in] as packed."""
        n_out, n_in = self.shape
        panels, groups = self.packed.shape[:2]
        codes = self.packed.reshape(panels, groups, 2, 16, 4)  # p g h l i
        steps = np.stack([(codes >> np.uint8(2 * t)) & np.uint8(3) for t in range(4)], axis=-1)  # p g h l i t
        values = steps.transpose(0, 2, 3, 1, 5, 4).reshape(panels * PANEL, groups * GROUP)  # p h l | g t i
        return (values[:n_out, :n_in].astype(np.int8) - np.int8(1)).astype(np.int8)

    def dense(self) -> np.ndarray:
        """The reference's float32 weight q / s_w [out, in]."""
        return (self.ternary().astype(np.float32) / self.scales[:, None]).astype(np.float32)


def pack_ternary(q: np.ndarray, scales) -> TernaryWeight:
    """q int8 [out, in] in {-1, 0, 1} and s_w (one per tensor, or [out]) -> TernaryWeight."""
    q = np.asarray(q)
    if q.ndim != 2 or (q.size and (q.min() < -1 or q.max() > 1)):
        raise ValueError(f"pack_ternary: expected a [out, in] matrix of -1, 0, 1, got shape {q.shape}")
    n_out, n_in = q.shape
    scales = np.broadcast_to(np.asarray(scales, dtype=np.float32), (n_out,)).copy()
    panels, groups = -(-n_out // PANEL), -(-n_in // GROUP)
    codes = np.ones((panels * PANEL, groups * GROUP), np.uint8)  # padding: q = 0
    codes[:n_out, :n_in] = q.astype(np.int16) + 1
    codes = codes.reshape(panels, 2, 16, groups, 4, 4).transpose(0, 3, 1, 2, 5, 4)  # p g h l i t
    packed = codes[..., 0] | (codes[..., 1] << 2) | (codes[..., 2] << 4) | (codes[..., 3] << 6)
    return TernaryWeight(np.ascontiguousarray(packed.reshape(panels, groups, 2, 64)), scales, (n_out, n_in))


def stack_ternary(weights: list[TernaryWeight]) -> TernaryWeight:
    """Several ternary weights with the same inputs as one [sum of outs, in] weight (each row keeps its scale)."""
    if len({w.shape[1] for w in weights}) != 1:
        raise ValueError(f"stack_ternary: input widths differ: {[w.shape for w in weights]}")
    if all(w.shape[0] % PANEL == 0 for w in weights):
        return TernaryWeight(np.concatenate([w.packed for w in weights]), np.concatenate([w.scales for w in weights]),
                             (sum(w.shape[0] for w in weights), weights[0].shape[1]))
    return pack_ternary(np.concatenate([w.ternary() for w in weights]), np.concatenate([w.scales for w in weights]))


# ---- the product: numpy reference --------------------------------------------------------------------

def _examples(rng: np.random.Generator) -> list[tuple]:
    cases = []
    for rows, n_in, n_out in ((1, 16, 5), (7, 64, 40), (13, 100, 33), (6, 1040, 64), (64, 512, 96),
                              (300, 256, 64), (40, 2048, 512)):  # odd widths, two depth blocks, parallel
        x = rng.standard_normal((rows, n_in), dtype=np.float32) * rng.uniform(0.1, 10.0, (rows, 1)).astype(np.float32)
        q, scale = ternarize(rng.standard_normal((n_out, n_in), dtype=np.float32))
        weight = pack_ternary(q, scale)
        cases.append((x, weight, rng.standard_normal(n_out, dtype=np.float32)))
        cases.append((x, weight, None))
    x = np.zeros((3, 32), np.float32)  # an all-zero row: scale from the 1e-5 floor, output = bias
    x[1, 5] = 2.0
    q, _ = ternarize(rng.standard_normal((48, 32), dtype=np.float32))
    cases.append((x.reshape(1, 3, 32), pack_ternary(q, rng.uniform(0.5, 2.0, 48).astype(np.float32)), None))
    return cases


@reference("linear_ternary", examples=_examples, rtol=1e-5, atol=1e-5)
def linear_ternary(x: np.ndarray, weight: TernaryWeight, bias: np.ndarray | None = None) -> np.ndarray:
    # x: [..., in] -> [..., out]; exact integer sums (int64), then the two scales
    n_out, n_in = weight.shape
    if x.shape[-1] != n_in:
        raise ValueError(f"linear_ternary: input with {x.shape[-1]} features does not fit a weight of shape {weight.shape}")
    rows = x.reshape(-1, n_in)
    q_x, s_x = quantize_tokens(rows)
    acc = q_x.astype(np.int64) @ weight.ternary().astype(np.int64).T
    y = (acc.astype(np.float32) * (np.float32(1.0) / s_x)[:, None]) * (np.float32(1.0) / weight.scales)[None, :]
    if bias is not None:
        y = y + bias
    return y.astype(np.float32).reshape(*x.shape[:-1], n_out)


# ---- the product: VNNI kernel ------------------------------------------------------------------------

@intrinsic
def tile_ternary(typingctx, rows, xq_addr, ldq, w_addr, c_addr, ldc, groups, accumulate):
    """c[rows, 32] (int32) = (c if accumulate else 0) + sum over `groups` groups of
    (q + 1) . x_q, with the panel's packed groups at w_addr ([groups, 2, 64] bytes), x_q int8 rows at
    xq_addr + r * ldq bytes, c rows at c_addr + r * ldc int32 elements."""
    if not isinstance(rows, types.IntegerLiteral):
        return None
    n_rows = rows.literal_value
    signature = types.void(rows, types.uintp, types.intp, types.uintp, types.uintp, types.intp, types.intp,
                           types.boolean)

    def codegen(context, builder, sig, args):
        _, xq_addr, ldq, w_addr, c_addr, ldc, n_groups, accumulate = args
        i8, i16, i32, i64 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
        ints, words, octets = ir.VectorType(i32, LANES), ir.VectorType(i16, 2 * LANES), ir.VectorType(i8, 4 * LANES)
        xq, w = (builder.inttoptr(v, i8.as_pointer()) for v in (xq_addr, w_addr))
        c = builder.inttoptr(c_addr, i32.as_pointer())
        dot = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ints, [ints] * 3),
                                             "llvm.x86.avx512.vpdpbusd.512")
        zero = ir.Constant(ints, [0] * LANES)
        splat = ir.Constant(ints, [0] * LANES)
        undef = ir.Constant(ints, ir.Undefined)
        low_bits = ir.Constant(octets, [3] * (4 * LANES))
        acc = [[cgutils.alloca_once_value(builder, zero) for _ in range(2)] for _ in range(n_rows)]

        def load(base, byte_offset, kind):
            pointer = builder.gep(base, [byte_offset])
            return builder.load(builder.bitcast(pointer, kind.as_pointer()), align=1)

        with cgutils.for_range(builder, n_groups) as loop:
            g = loop.index
            packed = [load(w, builder.add(builder.mul(g, ir.Constant(i64, 128)), ir.Constant(i64, 64 * h)), words)
                      for h in range(2)]
            sums = [[builder.load(acc[r][h]) for h in range(2)] for r in range(n_rows)]
            for step in range(4):
                shift = ir.Constant(words, [2 * step] * (2 * LANES))
                weights = [builder.bitcast(builder.and_(builder.bitcast(builder.lshr(packed[h], shift), octets),
                                                        low_bits), ints) for h in range(2)]
                for r in range(n_rows):
                    offset = builder.add(builder.add(builder.mul(ldq, ir.Constant(i64, r)),
                                                     builder.mul(g, ir.Constant(i64, GROUP))),
                                         ir.Constant(i64, 4 * step))
                    quad = load(xq, offset, i32)
                    x = builder.shuffle_vector(builder.insert_element(undef, quad, ir.Constant(i32, 0)), undef, splat)
                    for h in range(2):
                        sums[r][h] = builder.call(dot, [sums[r][h], weights[h], x])
            for r in range(n_rows):
                for h in range(2):
                    builder.store(sums[r][h], acc[r][h])
        for r in range(n_rows):
            row = builder.mul(ldc, ir.Constant(i64, r))
            for h in range(2):
                target = builder.bitcast(builder.gep(c, [builder.add(row, ir.Constant(i64, LANES * h))]),
                                         ints.as_pointer())
                start = builder.select(accumulate, builder.load(target, align=4), zero)
                builder.store(builder.add(start, builder.load(acc[r][h])), target, align=4)
        return context.get_dummy_value()

    return signature, codegen


@jit(inline="always")
def _tile_rows(rows, xq, ldq, w, c, ldc, groups, accumulate):  # pragma: no cover - compiled
    if rows == 6:
        tile_ternary(6, xq, ldq, w, c, ldc, groups, accumulate)
    elif rows == 5:
        tile_ternary(5, xq, ldq, w, c, ldc, groups, accumulate)
    elif rows == 4:
        tile_ternary(4, xq, ldq, w, c, ldc, groups, accumulate)
    elif rows == 3:
        tile_ternary(3, xq, ldq, w, c, ldc, groups, accumulate)
    elif rows == 2:
        tile_ternary(2, xq, ldq, w, c, ldc, groups, accumulate)
    else:
        tile_ternary(1, xq, ldq, w, c, ldc, groups, accumulate)


@jit(inline="always")
def _panels(xq, packed, c, first, last):  # pragma: no cover - compiled
    """Panels first..last of c = (q + 1) . x_q: xq [N, 16 G] int8, packed [P, G, 2, 64], c [N, 32 P] int32."""
    n_rows = xq.shape[0]
    n_groups = packed.shape[1]
    tiles = (n_rows + MAX_ROWS - 1) // MAX_ROWS
    base, extra = n_rows // tiles, n_rows % tiles
    ldq, ldc = xq.strides[0], c.strides[0] // 4
    for p in range(first, last):
        for g0 in range(0, n_groups, DEPTH_GROUPS):
            g1 = min(g0 + DEPTH_GROUPS, n_groups)
            row = 0
            for t in range(tiles):
                rows = base + 1 if t < extra else base
                _tile_rows(rows, xq.ctypes.data + row * ldq + g0 * GROUP, ldq, packed[p, g0:].ctypes.data,
                           c.ctypes.data + (row * ldc + PANEL * p) * 4, ldc, g1 - g0, g0 > 0)
                row += rows


@jit(parallel=True)
def _product_parallel(xq, packed, c, workers):  # pragma: no cover - compiled
    n_panels = packed.shape[0]
    for worker in numba.prange(workers):
        _panels(xq, packed, c, worker * n_panels // workers, (worker + 1) * n_panels // workers)


@jit()
def _product_serial(xq, packed, c):  # pragma: no cover - compiled
    _panels(xq, packed, c, 0, packed.shape[0])


@jit(inline="always")
def _quantize_row(x, xq, scales, sums, r):  # pragma: no cover - compiled
    amax = np.float32(0.0)
    for k in range(x.shape[1]):
        amax = max(amax, abs(x[r, k]))
    scale = np.float32(127.0) / max(amax, ACT_EPS)
    scales[r] = scale
    total = 0
    for k in range(x.shape[1]):
        q = min(max(np.rint(x[r, k] * scale), np.float32(-128.0)), np.float32(127.0))
        xq[r, k] = np.int8(q)
        total += np.int32(q)
    sums[r] = total


@jit()
def _quantize_serial(x, xq, scales, sums):  # pragma: no cover - compiled
    for r in range(x.shape[0]):
        _quantize_row(x, xq, scales, sums, r)


@jit(parallel=True)
def _quantize_parallel(x, xq, scales, sums):  # pragma: no cover - compiled
    for r in numba.prange(x.shape[0]):
        _quantize_row(x, xq, scales, sums, r)


@jit(inline="always")
def _rescale_row(c, sums, x_scales, inverse_w, bias, y, r):  # pragma: no cover - compiled
    inverse_x = np.float32(1.0) / x_scales[r]
    for o in range(y.shape[1]):
        y[r, o] = np.float32(c[r, o] - sums[r]) * inverse_x * inverse_w[o] + bias[o]


@jit()
def _rescale_serial(c, sums, x_scales, inverse_w, bias, y):  # pragma: no cover - compiled
    for r in range(y.shape[0]):
        _rescale_row(c, sums, x_scales, inverse_w, bias, y, r)


@jit(parallel=True)
def _rescale_parallel(c, sums, x_scales, inverse_w, bias, y):  # pragma: no cover - compiled
    for r in numba.prange(y.shape[0]):
        _rescale_row(c, sums, x_scales, inverse_w, bias, y, r)


def matmul_ternary(x: np.ndarray, weight: TernaryWeight, bias: np.ndarray | None = None) -> np.ndarray:
    """x [N, in] float32 @ W^T + bias -> [N, out]: x quantized per token, integer sums on VNNI."""
    n_out, n_in = weight.shape
    panels, groups = weight.packed.shape[:2]
    rows = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, n_in)
    n = rows.shape[0]
    if groups * GROUP != n_in:
        padded = np.zeros((n, groups * GROUP), np.float32)
        padded[:, :n_in] = rows
        rows = padded
    xq = np.empty((n, groups * GROUP), np.int8)
    x_scales = np.empty(n, np.float32)
    sums = np.empty(n, np.int32)
    c = np.empty((n, panels * PANEL), np.int32)
    y = np.empty((n, n_out), np.float32)
    bias = np.zeros(n_out, np.float32) if bias is None else np.ascontiguousarray(bias, dtype=np.float32)
    inverse_w = (np.float32(1.0) / weight.scales).astype(np.float32)
    if n == 0:
        return y
    workers = min(numba.get_num_threads(), panels)
    big = rows.size >= PARALLEL_MIN_ELEMENTS
    (_quantize_parallel if workers > 1 and big else _quantize_serial)(rows, xq, x_scales, sums)
    if workers > 1 and n * n_in * n_out >= PARALLEL_MIN_MACS:
        _product_parallel(xq, weight.packed, c, workers)
    else:
        _product_serial(xq, weight.packed, c)
    (_rescale_parallel if workers > 1 and n * n_out >= PARALLEL_MIN_ELEMENTS else _rescale_serial)(
        c, sums, x_scales, inverse_w, bias, y)
    return y


@kernel("linear_ternary", "numba")
def linear_ternary_numba(x: np.ndarray, weight: TernaryWeight, bias: np.ndarray | None = None) -> np.ndarray:
    if not TERNARY_PRODUCTS:
        return linear_ternary(x, weight, bias)
    if x.shape[-1] != weight.shape[1]:
        raise ValueError(f"linear_ternary: input with {x.shape[-1]} features does not fit a weight of shape "
                         f"{weight.shape}")
    return matmul_ternary(x, weight, bias).reshape(*x.shape[:-1], weight.shape[0])


# ---- TQ2_0: the bundle's ternary blocks ------------------------------------------------------------
# ggml's TQ2_0: 256 weights in 66 bytes, 64 bytes of 2-bit codes (q + 1) then an f16 scale d (w = d * q).
# Byte 32 c + l holds, in bits 2 n, weight 128 c + 32 n + l of the block.

TQ2_0_BLOCK = 256
TQ2_0_BYTES = 66


def tq2_0_encode(q: np.ndarray, d: float) -> np.ndarray:
    """q int8 [rows, in] (in % 256 == 0) in {-1, 0, 1}, one block scale d for all -> uint8 [rows, in / 256 * 66]."""
    rows, n_in = q.shape
    if n_in % TQ2_0_BLOCK:
        raise ValueError(f"tq2_0: the input width {n_in} is not a multiple of {TQ2_0_BLOCK}")
    codes = (q.astype(np.int16) + 1).astype(np.uint8).reshape(rows, -1, 2, 4, 32)  # [rows, blocks, c, n, l]
    qs = codes[:, :, :, 0] | (codes[:, :, :, 1] << 2) | (codes[:, :, :, 2] << 4) | (codes[:, :, :, 3] << 6)
    blocks = np.empty((rows, n_in // TQ2_0_BLOCK, TQ2_0_BYTES), np.uint8)
    blocks[:, :, :64] = qs.reshape(rows, -1, 64)
    blocks[:, :, 64:] = np.full((rows, n_in // TQ2_0_BLOCK, 1), d, np.float16).view(np.uint8)
    return blocks.reshape(rows, -1)


def tq2_0_codes(data: np.ndarray, n_in: int) -> np.ndarray:
    """uint8 [rows, in / 256 * 66] -> q int8 [rows, in]."""
    rows = data.shape[0]
    qs = data.reshape(rows, -1, TQ2_0_BYTES)[:, :, :64].reshape(rows, -1, 2, 1, 32)
    codes = (qs >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 1, 4, 1)) & np.uint8(3)
    return (codes.reshape(rows, n_in).astype(np.int8) - np.int8(1)).astype(np.int8)
