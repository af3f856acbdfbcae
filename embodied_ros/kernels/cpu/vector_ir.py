"""LLVM IR the CPU matrix product is built from (numba intrinsics): the register tile, 16 x 16
transposes, the q4_k block decoder that writes panel order, prefetch, and array views of raw
addresses. LANES and PANEL fix the vector width (16 floats, AVX-512) and the panel width (two
vectors); `cpu/gemm.py` says how they are put together.
"""

from __future__ import annotations

import numba
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from embodied_ros.kernels.cpu.jit import jit

LANES = 16
PANEL = 2 * LANES  # output features per panel


@intrinsic
def tile(typingctx, rows, a_addr, lda, b_addr, c_addr, ldc, depth, accumulate, bias_addr):
    """y[rows, 32] = (y if accumulate else bias[32]) + x[rows, depth] @ panel[depth, 32].

    Addresses of float32 data: x rows at a_addr + r * lda (elements), the panel contiguous at
    b_addr, y rows at c_addr + r * ldc. `rows` must be a compile-time constant (1..MAX_ROWS).
    """
    if not isinstance(rows, types.IntegerLiteral):
        return None
    n_rows = rows.literal_value
    signature = types.void(rows, types.uintp, types.intp, types.uintp, types.uintp, types.intp, types.intp,
                           types.boolean, types.uintp)

    def codegen(context, builder, sig, args):
        _, a_addr, lda, b_addr, c_addr, ldc, depth, accumulate, bias_addr = args
        f32, i32, i64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
        vector = ir.VectorType(f32, LANES)
        a, b, c, bias = (builder.inttoptr(v, f32.as_pointer()) for v in (a_addr, b_addr, c_addr, bias_addr))
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vector, [vector] * 3),
                                             "llvm.fma.v16f32")
        zero = ir.Constant(vector, [0.0] * LANES)
        undef = ir.Constant(vector, ir.Undefined)
        splat = ir.Constant(ir.VectorType(i32, LANES), [0] * LANES)
        acc = [[cgutils.alloca_once_value(builder, zero) for _ in range(2)] for _ in range(n_rows)]
        row_starts = [builder.mul(lda, ir.Constant(i64, r)) for r in range(n_rows)]

        def vector_at(base, offset):
            return builder.bitcast(builder.gep(base, [offset]), vector.as_pointer())

        with cgutils.for_range(builder, depth) as loop:
            k = loop.index
            panel_row = builder.mul(k, ir.Constant(i64, PANEL))
            w = [builder.load(vector_at(b, builder.add(panel_row, ir.Constant(i64, LANES * h))), align=4)
                 for h in range(2)]
            for r in range(n_rows):
                scalar = builder.load(builder.gep(a, [builder.add(row_starts[r], k)]))
                x = builder.shuffle_vector(builder.insert_element(undef, scalar, ir.Constant(i32, 0)), undef, splat)
                for h in range(2):
                    builder.store(builder.call(fma, [x, w[h], builder.load(acc[r][h])]), acc[r][h])
        for r in range(n_rows):
            row = builder.mul(ldc, ir.Constant(i64, r))
            for h in range(2):
                target = vector_at(c, builder.add(row, ir.Constant(i64, LANES * h)))
                start = builder.select(accumulate, builder.load(target, align=4),
                                       builder.load(vector_at(bias, ir.Constant(i64, LANES * h)), align=4))
                builder.store(builder.fadd(start, builder.load(acc[r][h])), target, align=4)
        return context.get_dummy_value()

    return signature, codegen


def _transpose_vectors(builder, rows):
    """Transpose 16 vectors of 16 floats (LLVM IR values) with four rounds of two-vector shuffles."""
    rows = list(rows)
    step = LANES // 2
    while step:
        masks = [ir.Constant(ir.VectorType(ir.IntType(32), LANES), mask) for mask in (
            [c if not c & step else LANES + c - step for c in range(LANES)],
            [c + step if not c & step else LANES + c for c in range(LANES)])]
        for r in range(LANES):
            if not r & step:
                a, b = rows[r], rows[r + step]
                rows[r], rows[r + step] = (builder.shuffle_vector(a, b, mask) for mask in masks)
        step //= 2
    return rows


@intrinsic
def transpose16(typingctx, src_addr, src_stride, dst_addr, dst_stride):
    """dst[c, r] = src[r, c] for a 16 x 16 block of float32: rows of src at src_addr + r * src_stride,
    rows of dst at dst_addr + c * dst_stride (elements). Four rounds of two-vector shuffles, each
    swapping the off-diagonal blocks of size 8, 4, 2, 1: a few instructions per vector where a
    scalar loop spends two cycles per element."""
    signature = types.void(types.uintp, types.intp, types.uintp, types.intp)

    def codegen(context, builder, sig, args):
        src_addr, src_stride, dst_addr, dst_stride = args
        f32, i64 = ir.FloatType(), ir.IntType(64)
        vector = ir.VectorType(f32, LANES)
        src, dst = (builder.inttoptr(v, f32.as_pointer()) for v in (src_addr, dst_addr))

        def row_pointer(base, stride, r):
            offset = builder.mul(stride, ir.Constant(i64, r))
            return builder.bitcast(builder.gep(base, [offset]), vector.as_pointer())

        rows = _transpose_vectors(builder, [builder.load(row_pointer(src, src_stride, r), align=4)
                                            for r in range(LANES)])
        for c in range(LANES):
            builder.store(rows[c], row_pointer(dst, dst_stride, c), align=4)
        return context.get_dummy_value()

    return signature, codegen


@intrinsic
def q4_k_block_to_panel(typingctx, qs_addr, row_stride, scales_addr, dst_addr):
    """One q4_k block (256 weights) of 16 rows, decoded straight into a panel's 16 columns:
    dst[k, j] = scales[j, s] * q[j, k] - scales[16 + j, s] for k in 0..255, s = k // 32.

    qs_addr: the 128 nibble bytes of row 0's block, row j at qs_addr + j * row_stride (bytes);
    scales: float32 [32, 8], the rows' d * sc then their dmin * m per sub-block; dst: float32,
    panel rows 32 floats apart. Each 16 nibble bytes of a row become two vectors (low and high
    nibbles: weights 64c + l and 64c + 32 + l), and 16 rows' vectors are transposed in registers,
    so the decoded weights are written once, in panel order (decode then transpose through memory
    cost twice as much)."""
    signature = types.void(types.uintp, types.intp, types.uintp, types.uintp)

    def codegen(context, builder, sig, args):
        qs_addr, row_stride, scales_addr, dst_addr = args
        f32, i8, i32, i64 = ir.FloatType(), ir.IntType(8), ir.IntType(32), ir.IntType(64)
        vector, bytes16, ints16 = ir.VectorType(f32, LANES), ir.VectorType(i8, LANES), ir.VectorType(i32, LANES)
        qs = builder.inttoptr(qs_addr, i8.as_pointer())
        scales, dst = (builder.inttoptr(v, f32.as_pointer()) for v in (scales_addr, dst_addr))
        undef = ir.Constant(vector, ir.Undefined)
        splat_mask = ir.Constant(ints16, [0] * LANES)

        def splat(index):
            value = builder.load(builder.gep(scales, [ir.Constant(i64, index)]))
            return builder.shuffle_vector(builder.insert_element(undef, value, ir.Constant(i32, 0)), undef, splat_mask)

        for chunk in range(4):  # sub-blocks 2 chunk (low nibbles) and 2 chunk + 1 (high nibbles)
            for lane0 in (0, LANES):
                low, high = [], []
                for j in range(LANES):
                    offset = builder.add(builder.mul(row_stride, ir.Constant(i64, j)),
                                         ir.Constant(i64, 32 * chunk + lane0))
                    packed = builder.load(builder.bitcast(builder.gep(qs, [offset]), bytes16.as_pointer()), align=1)
                    wide = builder.zext(packed, ints16)
                    for nibbles, half, sub in ((builder.and_(wide, ir.Constant(ints16, [15] * LANES)), low, 2 * chunk),
                                               (builder.lshr(wide, ir.Constant(ints16, [4] * LANES)), high,
                                                2 * chunk + 1)):
                        q = builder.uitofp(nibbles, vector)
                        half.append(builder.fsub(builder.fmul(splat(8 * j + sub), q), splat(8 * (LANES + j) + sub)))
                for first_k, vectors in ((64 * chunk + lane0, low), (64 * chunk + 32 + lane0, high)):
                    for i, column in enumerate(_transpose_vectors(builder, vectors)):
                        target = builder.gep(dst, [ir.Constant(i64, (first_k + i) * PANEL)])
                        builder.store(column, builder.bitcast(target, vector.as_pointer()), align=4)
        return context.get_dummy_value()

    return signature, codegen


@intrinsic
def prefetch(typingctx, addr):
    """Ask for the cache line at addr into every level down to L1 (a hint: never faults). Per panel
    it is 32 rows x 5 lines of q4_k: L1 holds them; prefetching into L2 only was 5-10% slower."""
    signature = types.void(types.uintp)

    def codegen(context, builder, sig, args):
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        prefetch = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                                  "llvm.prefetch.p0")
        builder.call(prefetch, [builder.inttoptr(args[0], i8p), ir.Constant(i32, 0), ir.Constant(i32, 3),
                                ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return signature, codegen


@intrinsic
def _float_pointer(typingctx, addr):
    """The address as a float32 pointer (for numba.carray)."""
    return types.CPointer(types.float32)(types.uintp), lambda c, b, sig, args: b.inttoptr(
        args[0], c.get_value_type(sig.return_type))


@intrinsic
def _byte_pointer(typingctx, addr):
    """The address as a uint8 pointer (for numba.carray)."""
    return types.CPointer(types.uint8)(types.uintp), lambda c, b, sig, args: b.inttoptr(
        args[0], c.get_value_type(sig.return_type))


@jit(inline="always")
def floats_at(addr, rows, stride, cols):  # pragma: no cover - compiled
    """float32 [rows, cols] at addr with rows `stride` elements apart, as an array view. Kernels take
    addresses, not arrays: every layout, stride and read-only flag an array can have would be a
    type of its own, compiled apart (seconds each, possibly inside a control step)."""
    return numba.carray(_float_pointer(addr), (rows, stride))[:, :cols]


@jit()
def address(a):  # pragma: no cover - compiled
    """An array's data address, read from Python: 0.2 us, where `a.ctypes.data` takes 1.2 (a small
    attention reads eight). Compiled once per array type, at warm-up for the types a model hands over."""
    return a.ctypes.data


@jit(inline="always")
def bytes_at(addr, rows, stride):  # pragma: no cover - compiled
    """uint8 [rows, stride] at addr, as an array view."""
    return numba.carray(_byte_pointer(addr), (rows, stride))
