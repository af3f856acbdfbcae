"""y = x @ W^T for Q8_0 weights with int8 dot products on AVX512-VNNI (`vpdpbusd`).

As llama.cpp's CPU backend does for Q8_0, x is quantized per 32-wide block too (d_x = max|x| / 127,
q_x = round(x / d_x)), so a block's contribution is d_w * d_x * sum(q_w * q_x), the sum exact in
int32. `vpdpbusd` multiplies unsigned by signed bytes, so x goes in as q_x + 128 and each block of
each output feature carries 128 * sum(q_w), subtracted before the sum is scaled.

The weight is repacked once (`Q8Weight`, about its stored size: 32 int8 + a float32 scale + an
int32 sum per block instead of 34 bytes) into panels of 32 output features: per block, 8 steps of
[32 features, 4 consecutive k] int8, so one 64-byte vector holds 16 features' 4 weights and one
instruction adds 4 products into each feature's int32 sum. The register tile takes up to 6 rows
of x: 12 int32 block sums and 12 float32 sums. Where the CPU has AMX tiles the same panels are their
B tiles (amx_q8.py).

On CPUs with AVX2 and no AVX-512 (`INT8_UNIT` "avx2") the same panels are read 8 features a vector:
without `vpdpbusd`, a step's 4 products per feature are `vpmaddubsw` of |q_w| and q_x signed by q_w
(pairs summed in int16, at most 2 * 127 * 127, no saturation) then `vpmaddwd` by ones into int32;
x is stored as q_x itself (`X_OFFSET` 0), so no correction. The tile takes up to 4 rows by
half a panel (2 vectors), its float32 sums in y itself, updated once a block. At the action expert's
50 rows a pi0.5 expert layer runs at about float32's speed, 1.8x faster than decoding Q8_0 to float32
for each product (BENCHMARKS.md, pi05_matrix_units_avx2_only). On one Zen 3 core the tile adds 54-59
products a ns (the instruction sequence's peak is 94, float32 FMA's 50: benchmarks/unit_peaks.py;
OpenBLAS's float32 product 43-44), 39-48 while x was stored with the offset and flipped back per row.
It runs at any number of rows: timed apart from a model, two cores' products of 1024-3072 rows ran
at 0.8-1.05x OpenBLAS's, but in whole chunks decoding the panels for OpenBLAS above 64 rows was the
slower (released-size SmolVLA's Q8_0 prefix 0.78-0.85x F32 decoded, 1.12-1.26x on the tile;
benchmarks/path_pairs.py, BENCHMARKS.md path_pairs_q8_0_*_amd_zen3).

AVX2 CPUs with AVX-VNNI (Intel's client parts; `INT8_UNIT` "avx_vnni") have `vpdpbusd` on 256-bit
vectors: the same tile, 6 rows by half a panel, one instruction per row and vector a step, x stored
unsigned with the correction as on AVX512-VNNI. It adds 32 products an instruction where float32
FMA adds 8, so its products are not decoded at any row count; the tile is written as inline
assembly, as int16_gemm's `vpdpwssd` is. On CPUs without it the tests compile the tile for such a CPU
and run it with the instruction replaced by its definition (test/tile_by_definition.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
from llvmlite import binding as llvm_binding
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from embodied_ros.kernels.cpu.allocator import aligned_empty
from embodied_ros.kernels.cpu.blas import before_kernel_region
from embodied_ros.kernels.cpu.jit import PARALLEL_MIN_ELEMENTS, PARALLEL_MIN_MACS, jit
from embodied_ros.kernels.cpu.shares import claim, counter, share_bounds, share_count
from embodied_ros.kernels.cpu.vector_ir import LANES, PANEL

BLOCK = 32
DEPTH_BLOCKS = 16  # 32-blocks per pass over a panel: 16 x 1.25 KiB = 20 KiB, in L1
_BLOCK_BYTES = 8 * PANEL * 4  # int8 weights of one block of a panel


def int8_products_available() -> bool:
    """True where the CPU adds 4 byte products per int32 lane in one instruction (AVX512-VNNI)."""
    features = llvm_binding.get_host_cpu_features()
    return bool(features.get("avx512f", False) and features.get("avx512vnni", False))


def int8_unit() -> str | None:
    """The instructions Q8_0 products run on here: "avx512_vnni", "avx_vnni" (`vpdpbusd` on 256-bit
    vectors, an AVX2 CPU without AVX-512), "avx2" (neither) or None."""
    if int8_products_available():
        return "avx512_vnni"
    features = llvm_binding.get_host_cpu_features()
    if features.get("avx2", False) and features.get("fma", False) and not features.get("avx512f", False):
        return "avx_vnni" if features.get("avxvnni", False) else "avx2"
    return None


INT8_UNIT = int8_unit()
if INT8_UNIT == "avx_vnni":
    llvm_binding.initialize_native_asmparser()  # numba's LLVM reads the tile's inline assembly with it
MAX_ROWS = 4 if INT8_UNIT == "avx2" else 6
X_OFFSET_OF = {"avx512_vnni": 128, "avx_vnni": 128, "avx2": 0}  # added to q_x as stored: vpdpbusd reads x unsigned
X_OFFSET = X_OFFSET_OF.get(INT8_UNIT, 128)


@intrinsic
def tile_q8(typingctx, rows, xq_addr, ldq, xd_addr, ldd, wq_addr, ws_addr, wsum_addr, c_addr, ldc, blocks,
            accumulate, bias_addr):
    """y[rows, 32] = (y if accumulate else bias) + sum over `blocks` 32-blocks of
    d_w * d_x * (sum((q_x + 128) * q_w) - 128 * sum(q_w)).

    xq: uint8 rows (q_x + X_OFFSET) at xq_addr + r * ldq bytes; xd: float32 block scales at
    xd_addr + r * ldd (elements); wq: the panel's int8 blocks [blocks, 8, 32, 4]; ws: float32
    [blocks, 32]; wsum: int32 [blocks, 32]; y: float32 rows at c_addr + r * ldc elements.
    """
    if not isinstance(rows, types.IntegerLiteral):
        return None
    n_rows = rows.literal_value
    signature = types.void(rows, types.uintp, types.intp, types.uintp, types.intp, types.uintp, types.uintp,
                           types.uintp, types.uintp, types.intp, types.intp, types.boolean, types.uintp)

    def codegen(context, builder, sig, args):
        (_, xq_addr, ldq, xd_addr, ldd, wq_addr, ws_addr, wsum_addr, c_addr, ldc, blocks, accumulate,
         bias_addr) = args
        if INT8_UNIT in ("avx2", "avx_vnni"):
            emit_ymm_tile(builder, INT8_UNIT, n_rows, xq_addr, ldq, xd_addr, ldd, wq_addr, ws_addr, wsum_addr,
                          c_addr, ldc, blocks, accumulate, bias_addr)
            return context.get_dummy_value()
        f32, i8, i32, i64 = ir.FloatType(), ir.IntType(8), ir.IntType(32), ir.IntType(64)
        floats, ints = ir.VectorType(f32, LANES), ir.VectorType(i32, LANES)
        xq, wq = (builder.inttoptr(v, i8.as_pointer()) for v in (xq_addr, wq_addr))
        xd, ws, c, bias = (builder.inttoptr(v, f32.as_pointer()) for v in (xd_addr, ws_addr, c_addr, bias_addr))
        wsum = builder.inttoptr(wsum_addr, i32.as_pointer())
        dot = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ints, [ints] * 3),
                                             "llvm.x86.avx512.vpdpbusd.512")
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(floats, [floats] * 3), "llvm.fma.v16f32")
        zero_f, zero_i = ir.Constant(floats, [0.0] * LANES), ir.Constant(ints, [0] * LANES)
        undef_i, undef_f = ir.Constant(ints, ir.Undefined), ir.Constant(floats, ir.Undefined)
        splat = ir.Constant(ints, [0] * LANES)
        offset = ir.Constant(ints, [X_OFFSET] * LANES)
        acc = [[cgutils.alloca_once_value(builder, zero_f) for _ in range(2)] for _ in range(n_rows)]

        def load(base, byte_offset, kind):
            pointer = builder.gep(builder.bitcast(base, i8.as_pointer()), [byte_offset])
            return builder.load(builder.bitcast(pointer, kind.as_pointer()), align=1)

        with cgutils.for_range(builder, blocks) as loop:
            b = loop.index
            sums = [[zero_i, zero_i] for _ in range(n_rows)]
            for step in range(8):
                w_start = builder.add(builder.mul(b, ir.Constant(i64, _BLOCK_BYTES)),
                                      ir.Constant(i64, step * PANEL * 4))
                w = [load(wq, builder.add(w_start, ir.Constant(i64, 64 * h)), ints) for h in range(2)]
                for r in range(n_rows):
                    k = builder.add(builder.mul(b, ir.Constant(i64, BLOCK)), ir.Constant(i64, 4 * step))
                    x_offset = builder.add(builder.mul(ldq, ir.Constant(i64, r)), k)
                    quad = load(xq, x_offset, i32)
                    x = builder.shuffle_vector(builder.insert_element(undef_i, quad, ir.Constant(i32, 0)), undef_i,
                                               splat)
                    for h in range(2):
                        sums[r][h] = builder.call(dot, [sums[r][h], x, w[h]])
            for h in range(2):
                column = builder.add(builder.mul(b, ir.Constant(i64, PANEL * 4)), ir.Constant(i64, 64 * h))
                correction = builder.mul(load(wsum, column, ints), offset)
                scale = load(ws, column, floats)
                for r in range(n_rows):
                    index = builder.add(builder.mul(ldd, ir.Constant(i64, r)), b)
                    dx = builder.load(builder.gep(xd, [index]))
                    dx = builder.shuffle_vector(builder.insert_element(undef_f, dx, ir.Constant(i32, 0)), undef_f,
                                                splat)
                    exact = builder.sitofp(builder.sub(sums[r][h], correction), floats)
                    builder.store(builder.call(fma, [exact, builder.fmul(scale, dx), builder.load(acc[r][h])]),
                                  acc[r][h])
        for r in range(n_rows):
            row = builder.mul(ldc, ir.Constant(i64, r))
            for h in range(2):
                target = builder.bitcast(builder.gep(c, [builder.add(row, ir.Constant(i64, LANES * h))]),
                                         floats.as_pointer())
                start_bias = builder.bitcast(builder.gep(bias, [ir.Constant(i64, LANES * h)]), floats.as_pointer())
                start = builder.select(accumulate, builder.load(target, align=4), builder.load(start_bias, align=4))
                builder.store(builder.fadd(start, builder.load(acc[r][h])), target, align=4)
        return context.get_dummy_value()

    return signature, codegen


def emit_ymm_tile(builder, unit, n_rows, xq_addr, ldq, xd_addr, ldd, wq_addr, ws_addr, wsum_addr, c_addr, ldc,
                  blocks, accumulate, bias_addr) -> None:
    """tile_q8's LLVM IR for 256-bit vectors (module doc), `unit` "avx2" or "avx_vnni": vectors of 8
    features, y updated once a block."""
    lanes = LANES // 2
    f32, i1, i8, i16, i32, i64 = (ir.FloatType(), ir.IntType(1), ir.IntType(8), ir.IntType(16), ir.IntType(32),
                                  ir.IntType(64))
    floats, ints = ir.VectorType(f32, lanes), ir.VectorType(i32, lanes)
    shorts, octets = ir.VectorType(i16, 2 * lanes), ir.VectorType(i8, 4 * lanes)
    xq, wq = (builder.inttoptr(v, i8.as_pointer()) for v in (xq_addr, wq_addr))
    xd, ws, c, bias = (builder.inttoptr(v, f32.as_pointer()) for v in (xd_addr, ws_addr, c_addr, bias_addr))
    wsum = builder.inttoptr(wsum_addr, i32.as_pointer())

    def declare(name, result, operands):
        return cgutils.get_or_insert_function(builder.module, ir.FunctionType(result, operands), name)

    if unit == "avx_vnni":
        # As inline assembly, as int16_gemm's `vpdpwssd`; x (q_x + 128) is the unsigned operand.
        fused = ir.InlineAsm(ir.FunctionType(ints, [ints, ints, ints]), "{vex} vpdpbusd $2, $1, $0", "=x,x,x,0")

        def add_quads(total, w, w_abs, x):
            return builder.call(fused, [x, builder.bitcast(w, ints), total])
    else:
        sign = declare("llvm.x86.avx2.psign.b", octets, [octets, octets])
        pairs = declare("llvm.x86.avx2.pmadd.ub.sw", shorts, [octets, octets])
        quads = declare("llvm.x86.avx2.pmadd.wd", ints, [shorts, shorts])

        def add_quads(total, w, w_abs, x):
            products = builder.call(pairs, [w_abs, builder.call(sign, [builder.bitcast(x, octets), w])])
            return builder.add(total, builder.call(quads, [products, ones]))
    magnitude = declare("llvm.abs.v32i8", octets, [octets, i1])
    fma = declare("llvm.fma.v8f32", floats, [floats] * 3)
    zero, ones = ir.Constant(ints, [0] * lanes), ir.Constant(shorts, [1] * 2 * lanes)
    undef_i, undef_f = ir.Constant(ints, ir.Undefined), ir.Constant(floats, ir.Undefined)
    splat = ir.Constant(ints, [0] * lanes)
    vectors = PANEL // lanes

    def load(base, byte_offset, kind):
        pointer = builder.gep(builder.bitcast(base, i8.as_pointer()), [byte_offset])
        return builder.load(builder.bitcast(pointer, kind.as_pointer()), align=1)

    def y_at(base, r, v):
        offset = builder.add(builder.mul(ldc, ir.Constant(i64, r)), ir.Constant(i64, lanes * v))
        return builder.bitcast(builder.gep(base, [offset]), floats.as_pointer())

    for r in range(n_rows):
        for v in range(vectors):
            start = builder.select(accumulate, builder.load(y_at(c, r, v), align=4),
                                   builder.load(y_at(bias, 0, v), align=4))
            builder.store(start, y_at(c, r, v), align=4)
    # Half a panel at a time: 2 vectors' block sums for each row, q_w (and on AVX2 |q_w|) held for
    # the rows, within AVX2's 16 registers.
    for half in (range(0, 2), range(2, 4)):
        sums = {(r, v): cgutils.alloca_once_value(builder, zero) for r in range(n_rows) for v in half}
        with cgutils.for_range(builder, blocks) as loop:
            b = loop.index
            for total in sums.values():
                builder.store(zero, total)
            with cgutils.for_range(builder, ir.Constant(i64, 8)) as steps:
                w_start = builder.add(builder.mul(b, ir.Constant(i64, _BLOCK_BYTES)),
                                      builder.mul(steps.index, ir.Constant(i64, PANEL * 4)))
                w = {v: load(wq, builder.add(w_start, ir.Constant(i64, 32 * v)), octets) for v in half}
                w_abs = ({v: builder.call(magnitude, [w[v], ir.Constant(i1, 0)]) for v in half} if unit == "avx2"
                         else dict.fromkeys(half))
                k = builder.add(builder.mul(b, ir.Constant(i64, BLOCK)), builder.mul(steps.index, ir.Constant(i64, 4)))
                for r in range(n_rows):
                    quad = load(xq, builder.add(builder.mul(ldq, ir.Constant(i64, r)), k), i32)
                    x = builder.shuffle_vector(builder.insert_element(undef_i, quad, ir.Constant(i32, 0)), undef_i,
                                               splat)
                    for v in half:
                        builder.store(add_quads(builder.load(sums[r, v]), w[v], w_abs[v], x), sums[r, v])
            for v in half:
                column = builder.add(builder.mul(b, ir.Constant(i64, PANEL * 4)), ir.Constant(i64, 32 * v))
                scale = load(ws, column, floats)
                correction = builder.mul(load(wsum, column, ints), ir.Constant(ints, [X_OFFSET_OF[unit]] * lanes))
                for r in range(n_rows):
                    dx = builder.load(builder.gep(xd, [builder.add(builder.mul(ldd, ir.Constant(i64, r)), b)]))
                    dx = builder.shuffle_vector(builder.insert_element(undef_f, dx, ir.Constant(i32, 0)), undef_f,
                                                splat)
                    target = y_at(c, r, v)
                    exact = builder.sub(builder.load(sums[r, v]), correction)
                    total = builder.call(fma, [builder.sitofp(exact, floats), builder.fmul(scale, dx),
                                               builder.load(target, align=4)])
                    builder.store(total, target, align=4)


@jit(inline="always")
def _tile_rows(rows, xq, ldq, xd, ldd, wq, ws, wsum, c, ldc, blocks, accumulate, bias):  # pragma: no cover
    if rows == 6:
        tile_q8(6, xq, ldq, xd, ldd, wq, ws, wsum, c, ldc, blocks, accumulate, bias)
    elif rows == 5:
        tile_q8(5, xq, ldq, xd, ldd, wq, ws, wsum, c, ldc, blocks, accumulate, bias)
    elif rows == 4:
        tile_q8(4, xq, ldq, xd, ldd, wq, ws, wsum, c, ldc, blocks, accumulate, bias)
    elif rows == 3:
        tile_q8(3, xq, ldq, xd, ldd, wq, ws, wsum, c, ldc, blocks, accumulate, bias)
    elif rows == 2:
        tile_q8(2, xq, ldq, xd, ldd, wq, ws, wsum, c, ldc, blocks, accumulate, bias)
    else:
        tile_q8(1, xq, ldq, xd, ldd, wq, ws, wsum, c, ldc, blocks, accumulate, bias)


@jit(inline="always")
def _panels(xq, xd, wq, ws, wsum, bias, y, first, last):  # pragma: no cover - compiled
    """Panels first..last of y = bias + x @ W^T. xq [N, k] uint8, xd [N, k / 32] float32, wq
    [P, k / 32, 8, 32, 4] int8, ws / wsum [P, k / 32, 32], bias [32 P], y [N, 32 P]."""
    n_rows, n_blocks = xd.shape
    tiles = (n_rows + MAX_ROWS - 1) // MAX_ROWS
    base, extra = n_rows // tiles, n_rows % tiles
    ldq, ldd, ldc = xq.strides[0], xd.strides[0] // 4, y.strides[0] // 4
    for p in range(first, last):
        for b0 in range(0, n_blocks, DEPTH_BLOCKS):
            b1 = min(b0 + DEPTH_BLOCKS, n_blocks)
            row = 0
            for t in range(tiles):
                rows = base + 1 if t < extra else base
                _tile_rows(rows, xq.ctypes.data + row * ldq + b0 * BLOCK, ldq, xd.ctypes.data + (row * ldd + b0) * 4,
                           ldd, wq[p, b0:].ctypes.data, ws[p, b0:].ctypes.data, wsum[p, b0:].ctypes.data,
                           y.ctypes.data + (row * ldc + PANEL * p) * 4, ldc, b1 - b0, b0 > 0,
                           bias[PANEL * p:].ctypes.data)
                row += rows


@jit(parallel=True)
def _product_parallel(xq, xd, wq, ws, wsum, bias, y, workers, shares, claimed):  # pragma: no cover - compiled
    for worker in numba.prange(workers):
        share = claim(claimed)
        while share < shares:
            first, last = share_bounds(share, shares, wq.shape[0])
            _panels(xq, xd, wq, ws, wsum, bias, y, first, last)
            share = claim(claimed)


@jit()
def _product_serial(xq, xd, wq, ws, wsum, bias, y):  # pragma: no cover - compiled
    _panels(xq, xd, wq, ws, wsum, bias, y, 0, wq.shape[0])


@jit(inline="always")
def _quantize_row(x, xq, xd, r, offset):  # pragma: no cover - compiled
    for b in range(xd.shape[1]):
        amax = np.float32(0.0)
        for i in range(BLOCK):
            amax = max(amax, abs(x[r, BLOCK * b + i]))
        d = amax / np.float32(127.0)
        inverse = np.float32(1.0) / d if d > 0 else np.float32(0.0)
        xd[r, b] = d
        for i in range(BLOCK):
            q = np.round(x[r, BLOCK * b + i] * inverse)
            xq[r, BLOCK * b + i] = np.uint8((np.int32(q) + offset) & 255)


@jit()
def quantize_rows(x, xq, xd, offset):  # pragma: no cover - compiled
    """x [N, k] float32 -> xq [N, k] uint8 (q + offset: X_OFFSET, or 0 for q itself as int8), xd [N, k / 32]
    float32, per 32-block."""
    for r in range(x.shape[0]):
        _quantize_row(x, xq, xd, r, offset)


@jit(parallel=True)
def quantize_parallel(x, xq, xd, offset):  # pragma: no cover - compiled
    for r in numba.prange(x.shape[0]):
        _quantize_row(x, xq, xd, r, offset)


def quantize_activations(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """numpy form of `quantize_rows`: (q_x int8 [N, k], d_x float32 [N, k / 32])."""
    blocks = x.reshape(x.shape[0], -1, BLOCK).astype(np.float32)
    d = np.abs(blocks).max(axis=2) / np.float32(127.0)
    inverse = np.divide(np.float32(1.0), d, out=np.zeros_like(d), where=d > 0)
    q = np.round(blocks * inverse[:, :, None]).astype(np.int8)
    return q.reshape(x.shape), d.astype(np.float32)


@dataclass(frozen=True, eq=False)
class Q8Weight:
    """A Q8_0 weight [out, in] repacked once for the int8 product (see the module doc)."""

    quants: np.ndarray  # int8 [P, in / 32, 8, 32, 4]
    scales: np.ndarray  # float32 [P, in / 32, 32]
    sums: np.ndarray  # int32 [P, in / 32, 32]: sum of each block's q_w
    shape: tuple[int, int]

    @property
    def ndim(self) -> int:
        return 2

    @property
    def nbytes(self) -> int:
        return int(self.quants.nbytes + self.scales.nbytes + self.sums.nbytes)

    def blocks(self) -> tuple[np.ndarray, np.ndarray]:
        """(q_w int8 [out, in], d_w float32 [out, in / 32]) as stored."""
        n_out, n_in = self.shape
        q = self.quants.transpose(0, 3, 1, 2, 4).reshape(-1, n_in)[:n_out]
        d = self.scales.transpose(0, 2, 1).reshape(-1, n_in // BLOCK)[:n_out]
        return q, d


def pack_q8_0(data: np.ndarray, shape: tuple[int, int]) -> Q8Weight:
    """Q8_0 blocks uint8 [out, in / 32 * 34] -> Q8Weight, a panel at a time."""
    n_out, n_in = shape
    n_blocks, n_panels = n_in // BLOCK, -(-n_out // PANEL)
    quants = aligned_empty((n_panels, n_blocks, 8, PANEL, 4), np.int8)  # 64-byte lines: AMX's B tiles
    quants[:] = 0
    scales = np.zeros((n_panels, n_blocks, PANEL), np.float32)
    sums = np.zeros((n_panels, n_blocks, PANEL), np.int32)
    for p in range(n_panels):
        rows = data[PANEL * p:PANEL * p + PANEL].reshape(-1, n_blocks, 34)  # [r, blocks, 34]
        count = rows.shape[0]
        q = rows[:, :, 2:].view(np.int8)  # [r, blocks, 32]
        scales[p, :, :count] = np.ascontiguousarray(rows[:, :, :2]).view(np.float16)[:, :, 0].astype(np.float32).T
        sums[p, :, :count] = q.astype(np.int32).sum(axis=2).T
        quants[p, :, :, :count] = q.reshape(count, n_blocks, 8, 4).transpose(1, 2, 0, 3)
    return Q8Weight(quants, scales, sums, (n_out, n_in))


def matmul_q8(x: np.ndarray, weight: Q8Weight, bias: np.ndarray | None = None) -> np.ndarray:
    """x [N, in] float32 @ weight^T + bias -> [N, out], x quantized per 32-block, int8 products."""
    n_out, n_in = weight.shape
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, n_in)
    n_panels = weight.quants.shape[0]
    padded_bias = np.zeros(n_panels * PANEL, np.float32)
    if bias is not None:
        padded_bias[:n_out] = bias
    y = np.empty((x.shape[0], n_panels * PANEL), np.float32)
    if x.shape[0] == 0:
        y[:] = padded_bias
        return np.ascontiguousarray(y[:, :n_out])
    xq = np.empty((x.shape[0], n_in), np.uint8)
    xd = np.empty((x.shape[0], n_in // BLOCK), np.float32)
    workers = min(numba.get_num_threads(), n_panels)
    (quantize_parallel if workers > 1 and x.size >= PARALLEL_MIN_ELEMENTS else quantize_rows)(x, xq, xd, X_OFFSET)
    macs = x.shape[0] * n_in * n_out
    if workers > 1 and macs >= PARALLEL_MIN_MACS:
        before_kernel_region()
        _product_parallel(xq, xd, weight.quants, weight.scales, weight.sums, padded_bias, y, workers,
                          share_count(workers, n_panels, macs), counter())
    else:
        _product_serial(xq, xd, weight.quants, weight.scales, weight.sums, padded_bias, y)
    return y if n_out == y.shape[1] else np.ascontiguousarray(y[:, :n_out])
