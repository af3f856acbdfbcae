"""exp for numba loops that the compiler can vectorize.

numba calls libm's scalar expf for `np.exp` (no vector math library here), which keeps loops over
softmax scores or GELU inputs scalar. This one is plain arithmetic plus one bit cast, so LLVM
vectorizes it. Accuracy: within 2 float32 ulps over its whole range (Cody-Waite range reduction,
degree-7 Taylor polynomial on |r| <= ln2/2, whose truncation error is below 1e-8 relative).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from embodied_ros.kernels.cpu.jit import jit

_LOG2E = np.float32(1.4426950408889634)
_LN2_HI = np.float32(0.693145751953125)  # ln 2 split so that k * _LN2_HI is exact for |k| < 2^8
_LN2_LO = np.float32(1.4286068203094172e-06)
_EXP_MAX = np.float32(88.37)  # exp(88.37) < float32 max
_EXP_MIN = np.float32(-87.33)  # exp(-87.33) > smallest normal float32


@intrinsic
def _float32_from_bits(typingctx, bits):
    """Reinterpret an int32 as a float32 (no conversion)."""
    signature = types.float32(types.int32)

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.FloatType())

    return signature, codegen


@jit(inline="always")
def exp_f32(x):  # pragma: no cover - compiled
    """exp of a float32; inputs below exp's normal range give 0, above it the float32 maximum."""
    below = x < _EXP_MIN
    x = min(max(x, _EXP_MIN), _EXP_MAX)
    k = np.float32(np.floor(x * _LOG2E + np.float32(0.5)))
    r = (x - k * _LN2_HI) - k * _LN2_LO
    p = np.float32(1.0 / 5040.0)
    p = p * r + np.float32(1.0 / 720.0)
    p = p * r + np.float32(1.0 / 120.0)
    p = p * r + np.float32(1.0 / 24.0)
    p = p * r + np.float32(1.0 / 6.0)
    p = p * r + np.float32(0.5)
    p = p * r + np.float32(1.0)
    p = p * r + np.float32(1.0)
    scale = _float32_from_bits(np.int32((np.int32(k) + np.int32(127)) << np.int32(23)))
    return np.float32(0.0) if below else p * scale


_LANES = 16  # 512-bit vectors: LLVM itself prefers 256 bits on these CPUs and halves the rate


def _splat(value: ir.Value, vector: ir.VectorType, builder: ir.IRBuilder) -> ir.Value:
    undef = ir.Constant(vector, ir.Undefined)
    single = builder.insert_element(undef, value, ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(single, undef, ir.Constant(ir.VectorType(ir.IntType(32), _LANES), [0] * _LANES))


def _exp_vector(builder: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """exp over 16 lanes for x <= 0 (softmax numerators), to about 3e-6 relative: exp_f32's reduction
    with a degree-5 polynomial; below exp's normal range the smallest normal float32 instead of 0
    (for a softmax of float32 scores, nothing)."""
    f32, i32 = ir.FloatType(), ir.IntType(32)
    vf, vi = ir.VectorType(f32, _LANES), ir.VectorType(i32, _LANES)
    module = builder.module
    fma = cgutils.get_or_insert_function(module, ir.FunctionType(vf, [vf] * 3), "llvm.fma.v16f32")
    floor = cgutils.get_or_insert_function(module, ir.FunctionType(vf, [vf]), "llvm.floor.v16f32")
    maximum = cgutils.get_or_insert_function(module, ir.FunctionType(vf, [vf] * 2), "llvm.maxnum.v16f32")

    def const(value):
        return ir.Constant(vf, [float(np.float32(value))] * _LANES)

    x = builder.call(maximum, [x, const(_EXP_MIN)])
    k = builder.call(floor, [builder.call(fma, [x, const(_LOG2E), const(0.5)])])
    r = builder.call(fma, [k, const(-_LN2_HI), x])
    r = builder.call(fma, [k, const(-_LN2_LO), r])
    p = const(1.0 / 120.0)
    for coefficient in (1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0):
        p = builder.call(fma, [p, r, const(coefficient)])
    exponent = builder.add(builder.fptosi(k, vi), ir.Constant(vi, [127] * _LANES))
    return builder.fmul(p, builder.bitcast(builder.shl(exponent, ir.Constant(vi, [23] * _LANES)), vf))


@intrinsic
def max_of_chunks(typingctx, src_addr, chunks):
    """The largest of `chunks` chunks of 32 float32 at src_addr (chunks >= 1), on 512-bit vectors."""
    signature = types.float32(types.uintp, types.intp)

    def codegen(context, builder, sig, args):
        src_addr, chunks = args
        f32, i32 = ir.FloatType(), ir.IntType(32)
        vf = ir.VectorType(f32, _LANES)
        maximum = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vf, [vf] * 2), "llvm.maxnum.v16f32")
        src = builder.bitcast(builder.inttoptr(src_addr, f32.as_pointer()), vf.as_pointer())
        first = builder.load(src, align=4)
        tops = [cgutils.alloca_once_value(builder, first) for _ in range(2)]
        with cgutils.for_range(builder, chunks) as loop:
            for half in range(2):
                at = builder.add(builder.mul(loop.index, ir.Constant(loop.index.type, 2)),
                                 ir.Constant(loop.index.type, half))
                value = builder.load(builder.gep(src, [at]), align=4)
                builder.store(builder.call(maximum, [builder.load(tops[half]), value]), tops[half])
        both = builder.call(maximum, [builder.load(tops[0]), builder.load(tops[1])])
        result = builder.extract_element(both, ir.Constant(i32, 0))
        for lane in range(1, _LANES):
            lane_value = builder.extract_element(both, ir.Constant(i32, lane))
            result = builder.select(builder.fcmp_ordered(">", lane_value, result), lane_value, result)
        return result

    return signature, codegen


@intrinsic
def exp_into_bf16(typingctx, src_addr, chunks, top, factor, dst_addr, dst_stride):
    """e = exp((src - top) * factor) (src <= top, factor > 0: `_exp_vector`) for `chunks` chunks of
    32 float32 at src_addr; chunk c's 32 values
    rounded to bf16 (nearest even) into the 64 bytes at dst_addr + c * dst_stride (bytes: a row of
    consecutive A tiles). Returns the float32 sum of the unrounded e: a softmax's numerators and
    their total, in one pass."""
    signature = types.float32(types.uintp, types.intp, types.float32, types.float32, types.uintp, types.intp)

    def codegen(context, builder, sig, args):
        src_addr, chunks, top, factor, dst_addr, dst_stride = args
        f32, i16, i32 = ir.FloatType(), ir.IntType(16), ir.IntType(32)
        vf, vi, vh = (ir.VectorType(t, _LANES) for t in (f32, i32, i16))
        src = builder.inttoptr(src_addr, f32.as_pointer())
        dst = builder.inttoptr(dst_addr, ir.IntType(8).as_pointer())
        factor_v = _splat(factor, vf, builder)
        shift_v = _splat(builder.fmul(builder.fneg(top), factor), vf, builder)
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vf, [vf] * 3), "llvm.fma.v16f32")
        total = cgutils.alloca_once_value(builder, ir.Constant(vf, [0.0] * _LANES))

        def ints(value):
            return ir.Constant(vi, [value] * _LANES)

        with cgutils.for_range(builder, chunks) as loop:
            for half in range(2):
                offset = builder.add(builder.mul(loop.index, ir.Constant(loop.index.type, 2 * _LANES)),
                                     ir.Constant(loop.index.type, _LANES * half))
                x = builder.load(builder.bitcast(builder.gep(src, [offset]), vf.as_pointer()), align=4)
                e = _exp_vector(builder, builder.call(fma, [x, factor_v, shift_v]))
                builder.store(builder.fadd(builder.load(total), e), total)
                bits = builder.bitcast(e, vi)
                odd = builder.and_(builder.lshr(bits, ints(16)), ints(1))
                rounded = builder.trunc(builder.lshr(builder.add(builder.add(bits, ints(0x7FFF)), odd), ints(16)), vh)
                at = builder.add(builder.mul(loop.index, dst_stride), ir.Constant(dst_stride.type, 2 * _LANES * half))
                builder.store(rounded, builder.bitcast(builder.gep(dst, [at]), vh.as_pointer()), align=2)
        sums = builder.load(total)
        result = builder.extract_element(sums, ir.Constant(i32, 0))
        for lane in range(1, _LANES):
            result = builder.fadd(result, builder.extract_element(sums, ir.Constant(i32, lane)))
        return result

    return signature, codegen
